"""Configuration files an agent can write, attacked through the command line.

A workspace's ``.ringfence/`` is the agent's to write (a ``write_file``, a shell command, a
writable MCP server): whatever ringfence reads from there must be bounded in time and memory
and refused with one line naming the file and the bound, never read whole.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import (  # isolated: autouse
    isolated,  # noqa: F401
    ringfence_process,
)


def rf(*args: str, cwd: Path, home: Path, env: dict[str, str] | None = None):
    """``ringfence *args`` as a real process, its own home, no terminal."""
    return ringfence_process(
        *args,
        cwd=cwd,
        env={"RINGFENCE_HOME": str(home), **(env or {})},
        unset=(
            "RINGFENCE_WORKSPACE_ROOTS",
            *(() if env and "RINGFENCE_POSTURE" in env else ("RINGFENCE_POSTURE",)),
        ),
        stdin="",
    )


def _events(log: Path, kind: str) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [e for e in lines if e.get("kind") == kind]


def test_a_sparse_huge_workspace_manifest_is_refused_by_its_size_not_read(
    tmp_path: Path,
) -> None:
    """``truncate -s 3G .ringfence/mcp.toml`` in the workspace: `mcp list --workspace` (and
    every session that reads the manifests) read the whole file, 6 GB of memory for a 3 GB
    sparse file, before the TOML parser said "Invalid statement". Now at most one byte past
    1 MiB is read and the refusal names the file and the bound."""
    home, work = tmp_path / "home", tmp_path / "work"
    (work / ".ringfence").mkdir(parents=True)
    home.mkdir()
    manifest = work / ".ringfence" / "mcp.toml"
    with open(manifest, "wb") as f:
        f.truncate(64 * 1024 * 1024)  # sparse: costs no disk, 64 MiB to whoever reads it
    for argv in (("mcp", "list", "--workspace", str(work)),
                 ("mcp", "list", "--workspace", str(work), "--json")):  # fmt: skip
        proc = rf(*argv, cwd=work, home=home)
        assert proc.returncode == 2, proc.stderr
        said = proc.stdout + proc.stderr  # --json says it on stdout
        assert "Traceback" not in said
        assert "mcp.toml" in said and "1,048,576 bytes" in said, said
    assert os.path.getsize(manifest) == 64 * 1024 * 1024  # left as it was
    assert not (home / "mcp.toml").exists()


def test_a_posture_the_environment_loosened_is_shown_and_recorded(tmp_path: Path) -> None:
    """``RINGFENCE_POSTURE=allow-all`` (or ``unrestricted``: a project's ``.envrc`` can set
    either) made every later ``ringfence`` session run writes and commands unasked, with no
    word on the terminal and no ``weaker_confinement`` record: nothing on the command line
    said so. Now the posture is shown with where it came from and recorded, as a ``host``
    backend from ``$RINGFENCE_EXECUTION_BACKEND`` is."""
    home = tmp_path / "home"
    for value in ("allow-all", "unrestricted", "allow-reversible"):
        work = tmp_path / value
        work.mkdir()
        log = tmp_path / f"{value}.jsonl"
        proc = rf("call", "--workspace", str(work), "--events", str(log), "write_file",
                  "--args", json.dumps({"path": "x", "content": "y"}),
                  cwd=work, home=home, env={"RINGFENCE_POSTURE": value})  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert f"($RINGFENCE_POSTURE={value})" in proc.stderr, proc.stderr
        assert f"posture {value}" in proc.stderr
        (weaker,) = _events(log, "weaker_confinement")
        assert weaker["choices"] == [
            {
                "setting": "posture",
                "value": value,
                "source": f"$RINGFENCE_POSTURE={value}",
                "means": weaker["choices"][0]["means"],  # type: ignore[index]
            }
        ]
    # chosen on the command line, a looser posture is visible where it was typed; unrestricted
    # (which runs unasked even what every other posture asks about) is shown all the same
    work = tmp_path / "flag"
    work.mkdir()
    log = tmp_path / "flag.jsonl"
    proc = rf("call", "--workspace", str(work), "--posture", "allow-all", "--events", str(log),
              "write_file", "--args", json.dumps({"path": "x", "content": "y"}),
              cwd=work, home=home)  # fmt: skip
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr
    assert _events(log, "weaker_confinement") == []
    log = tmp_path / "flag-u.jsonl"
    proc = rf("call", "--workspace", str(work), "--posture", "unrestricted", "--events",
              str(log), "write_file", "--args", json.dumps({"path": "x", "content": "z"}),
              cwd=work, home=home)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "(--posture unrestricted)" in proc.stderr
    (weaker,) = _events(log, "weaker_confinement")
    assert weaker["choices"][0]["source"] == "--posture unrestricted"  # type: ignore[index]


def test_a_retention_variable_no_store_can_hold_is_refused_by_name(tmp_path: Path) -> None:
    """``RINGFENCE_CHECKPOINTS_KEEP=inf`` (or ``1e400``) passed the positive-number check and
    failed the first write with ``unexpected error: OverflowError``, naming no variable;
    ``0.5`` kept ``int(0.5) == 0`` change sets. Each is refused before the session opens,
    naming the variable, and the write never happens."""
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    cases = {
        "RINGFENCE_CHECKPOINTS_KEEP": ("inf", "1e400", "0.5", "-inf"),
        "RINGFENCE_CHECKPOINTS_MIB": ("inf", "1e999"),
        "RINGFENCE_CHECKPOINTS_DAYS": ("inf",),
    }
    for name, values in cases.items():
        for value in values:
            proc = ringfence_process(
                "call", "--workspace", str(work), "--approve", "yes", "write_file",
                "--args", json.dumps({"path": "x", "content": "y"}),
                cwd=work, env={"RINGFENCE_HOME": str(home), name: value},
                unset=("RINGFENCE_WORKSPACE_ROOTS", "RINGFENCE_POSTURE"), stdin="",
            )  # fmt: skip
            assert proc.returncode == 2, (name, value, proc.stderr)
            assert proc.stderr.startswith(f"ringfence: invalid_arguments: ${name} must be")
            assert "Traceback" not in proc.stderr and "unexpected" not in proc.stderr
            assert not (work / "x").exists()


def _bounded(*argv: str, cwd: Path, home: Path, seconds: float) -> subprocess.CompletedProcess[str]:
    """``ringfence *argv``, killed after ``seconds`` (the attack is a hang: the test fails)."""
    env = {**os.environ, "RINGFENCE_HOME": str(home)}
    env.pop("RINGFENCE_WORKSPACE_ROOTS", None)
    env.pop("RINGFENCE_POSTURE", None)
    try:
        return subprocess.run(
            [sys.executable, "-m", "ringfence", *argv],
            cwd=cwd, env=env, capture_output=True, text=True, timeout=seconds, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"ringfence {' '.join(argv)} still ran after {seconds} s")


def test_toml_that_costs_the_parser_its_time_or_stack_is_refused_by_line(tmp_path: Path) -> None:
    """A workspace's `.ringfence/policy.toml` and `mcp.toml` are the agent's. A dotted key of
    100,000 parts (`a.a.…b = 1`, 200 KB, under the 1 MiB bound) took tomllib's quadratic path:
    `policy show` and every session start did not come back in minutes. Arrays nested 5,000
    deep and a 100,000-digit integer ended in `unexpected error: RecursionError`/`ValueError`.
    Each is refused now, as bad TOML, naming the file (and the line and bound)."""
    home, work = tmp_path / "home", tmp_path / "work"
    (work / ".ringfence").mkdir(parents=True)
    home.mkdir()
    policy = work / ".ringfence" / "policy.toml"
    texts = {
        "a dotted key of more than 64 parts": "a." * 100_000 + "b = 1\n",
        "more than 64 parts": '"a" . ' * 50_000 + "b = 1\n",  # quoted parts, spaces
        "nested more than 64 deep": "deny = " + "[" * 5_000 + "]" * 5_000 + "\n",
        "nested more than 64 deep ": "x = " + "{a = " * 3_000 + "1" + "}" * 3_000 + "\n",
        "4300 digits": "x = " + "9" * 100_000 + "\n",
    }
    for said, text in texts.items():
        policy.write_text(text)
        proc = _bounded("policy", "show", "--workspace", str(work), cwd=work, home=home,
                        seconds=30)  # fmt: skip
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(f"ringfence: invalid_arguments: {policy}")
        assert said.strip() in proc.stderr and "unexpected" not in proc.stderr, proc.stderr
        assert policy.read_text() == text
    policy.unlink()
    manifest = work / ".ringfence" / "mcp.toml"
    manifest.write_text("a." * 100_000 + "b = 1\n")
    proc = _bounded("mcp", "list", "--workspace", str(work), cwd=work, home=home, seconds=30)
    assert proc.returncode == 2 and "more than 64 parts" in proc.stderr, proc.stderr
    # what a real file says still loads: dots in strings and comments are not a key's
    policy.write_text(
        'deny = ["read_file(path=' + ".".join("abcdefgh" * 12) + ')"]  # '
        + ".".join("x" * 100) + '\nask = ["""run_shell(rm *.txt)""", 1.5e3]\n'
    )  # fmt: skip
    proc = _bounded("policy", "show", "--workspace", str(work), "--json", cwd=work, home=home,
                    seconds=30)  # fmt: skip
    assert proc.returncode == 2 and "ask" in proc.stdout + proc.stderr  # 1.5e3 is not a rule
    policy.write_text(
        'deny = ["read_file(path=' + ".".join("abcdefgh" * 12) + ')"]  # '
        + ".".join("x" * 100) + '\nask = ["""run_shell(rm *.txt)"""]\n'
    )  # fmt: skip
    proc = _bounded("policy", "show", "--workspace", str(work), "--json", cwd=work, home=home,
                    seconds=30)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rules = [r["rule"] for r in json.loads(proc.stdout)["result"]["rules"]]
    assert "run_shell(rm *.txt)" in rules and len(rules) == 2


def test_a_kept_policy_version_of_many_rules_does_not_hold_the_next_session(
    tmp_path: Path,
) -> None:
    """A project file's deny and ask rules are kept after the agent removes them. Each kept
    rule was compared with every other one kept: 8,000 deny rules loaded once, then any
    edit of the file, and `policy show` (and every session start) took minutes (20,000:
    hours). The rules are still kept, in seconds."""
    home, work = tmp_path / "home", tmp_path / "work"
    (work / ".ringfence").mkdir(parents=True)
    home.mkdir()
    policy = work / ".ringfence" / "policy.toml"
    many = [f"run_shell(tool{i} *)" for i in range(8_000)]
    policy.write_text("deny = [" + ", ".join(json.dumps(r) for r in many) + "]\n")
    first = _bounded("policy", "show", "--workspace", str(work), "--json", cwd=work, home=home,
                     seconds=60)  # fmt: skip
    assert first.returncode == 0, first.stderr
    policy.write_text('deny = ["write_file(path=x)"]\n')  # the agent's edit
    then = _bounded("policy", "show", "--workspace", str(work), "--json", cwd=work, home=home,
                    seconds=40)  # fmt: skip
    assert then.returncode == 0, then.stderr
    rules = json.loads(then.stdout)["result"]["rules"]
    assert {r["rule"] for r in rules} == {*many, "write_file(path=x)"}


def test_a_path_pattern_that_backtracks_does_not_hold_the_kernel(tmp_path: Path) -> None:
    """A project's policy is the workspace's text, and its deny rules bind untrusted. Its path
    globs were Python regexes: `read_file(path=**/**/**/**/**/**/**/**/**/**/**/**/z)` took
    13 s per call on an 8-`**` rule and a 30-component path (12 of them: hours), each call
    of the tool judged on the kernel's thread. Matched by RE2 now, linear in the path; the
    rule still denies what it names."""
    home, work = tmp_path / "home", tmp_path / "work"
    deep = work.joinpath(*["d"] * 30)
    deep.mkdir(parents=True)
    (deep / "f.txt").write_text("fine\n")
    (deep / "z").write_text("secret\n")
    (work / ".ringfence").mkdir()
    stars = "/".join(["**"] * 14)
    (work / ".ringfence" / "policy.toml").write_text(
        f'deny = ["read_file(path={stars}/z)", "read_file(path=*a*a*a*a*a*a*a*a*a*a*b)"]\n'
    )
    rel = "/".join(["d"] * 30)
    proc = _bounded("call", "--workspace", str(work), "read_file", "--args",
                    json.dumps({"path": f"{rel}/f.txt"}), cwd=work, home=home,
                    seconds=30)  # fmt: skip
    assert proc.returncode == 0 and "fine" in proc.stdout, proc.stderr
    proc = _bounded("call", "--workspace", str(work), "read_file", "--args",
                    json.dumps({"path": "a" * 80}), cwd=work, home=home,
                    seconds=30)  # fmt: skip
    assert proc.returncode == 1 and "not_found" in proc.stderr, proc.stderr
    proc = _bounded("call", "--workspace", str(work), "read_file", "--args",
                    json.dumps({"path": f"{rel}/z"}), cwd=work, home=home,
                    seconds=30)  # fmt: skip
    assert proc.returncode == 3 and "secret" not in proc.stdout, proc.stderr


def test_mcp_import_of_a_hostile_project_file_is_refused_by_name(tmp_path: Path) -> None:
    """`ringfence mcp import .mcp.json` reads a project's file, the agent's to write: a FIFO
    there hung the import, a link to /dev/zero took 6 GB in 10 s, and JSON nested 100,000
    deep ended in `unexpected error: RecursionError`. Each is refused naming the file, and
    nothing is written to the home."""
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    os.mkfifo(work / "fifo.json")
    (work / "zero.json").symlink_to("/dev/zero")
    (work / "deep.json").write_text('{"servers": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with open(work / "sparse.json", "wb") as f:
        f.truncate(512 * 1024 * 1024)
    for name, said in (("fifo.json", "not a regular file"), ("zero.json", "not a regular file"),
                       ("deep.json", "not JSON"), ("sparse.json", "1,048,576 bytes")):  # fmt: skip
        proc = _bounded("mcp", "import", name, cwd=work, home=home, seconds=30)
        assert proc.returncode == 2, (name, proc.stderr)
        assert proc.stderr.startswith(f"ringfence: invalid_arguments: {name}"), proc.stderr
        assert said in proc.stderr and "unexpected" not in proc.stderr, proc.stderr
    assert not (home / "mcp.toml").exists()


def test_a_script_or_arguments_file_that_never_ends_is_refused_by_its_size(
    tmp_path: Path,
) -> None:
    """`run-script s.py` and `call --args @FILE` read the file whole: a project's `s.py` made
        a link to /dev/zero read until memory ran out. At most one byte past the bound is read now
    (64 MiB; a script's own, about 1 MiB),
        and the refusal names the file and the bound (the child runs under a 2 GiB address-space
        limit, so the old reading fails instead of taking the machine's memory)."""
    import resource

    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    (work / "s.py").symlink_to("/dev/zero")
    env = {**os.environ, "RINGFENCE_HOME": str(home)}
    env.pop("RINGFENCE_WORKSPACE_ROOTS", None)

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    from ringfence.cli._output import MAX_INPUT_BYTES
    from ringfence.cli._run_script import MAX_SCRIPT_FILE_BYTES

    for argv, subject, bound in (
        (["run-script", "s.py"], "the script s.py", MAX_SCRIPT_FILE_BYTES),
        (["call", "read_file", "--args", "@s.py"], "--args: s.py", MAX_INPUT_BYTES),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "ringfence", *argv, "--workspace", str(work)],
            cwd=work, env=env, capture_output=True, text=True, timeout=60, check=False,
            preexec_fn=limited,
        )  # fmt: skip
        assert proc.returncode == 2, proc.stderr
        assert subject in proc.stderr and f"is larger than {bound:,} bytes" in proc.stderr, (
            proc.stderr
        )


def test_a_regex_re2_refuses_reaches_the_terminal_only_escaped(tmp_path: Path) -> None:
    """RE2 logged a pattern it refused to the process's stderr itself, raw, past the
    terminal guard: a project policy's `command~(\\u001b[2J…` cleared the operator's screen
    and could print a fake line at `policy show` and every session start. Now the only
    word of it is ringfence's refusal, escaped."""
    home, work = tmp_path / "home", tmp_path / "work"
    (work / ".ringfence").mkdir(parents=True)
    (work / ".ringfence" / "policy.toml").write_text(
        'deny = ["run_shell(command~(\\u001b[2J\\u001b[31mringfence: finished)",'
        ' "read_file(path=[[:alpha:]]\\u001b[2J)"]\n'
    )
    for argv in (["policy", "show"], ["call", "read_file", "--args", '{"path": "x"}']):
        proc = _bounded(*argv, "--workspace", str(work), cwd=work, home=home, seconds=30)
        assert proc.returncode == 2, proc.stderr
        assert "\x1b" not in proc.stderr and "\x1b" not in proc.stdout, repr(proc.stderr)
        assert proc.stderr.count("\n") == 1 and "RE2" in proc.stderr, proc.stderr

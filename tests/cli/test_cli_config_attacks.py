"""Configuration files an agent can write, attacked through the command line.

A workspace's ``.ringfence/`` is the agent's to write (a ``write_file``, a shell command, a
writable MCP server): whatever ringfence reads from there must be bounded in time and memory
and refused with one line naming the file and the bound, never read whole.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

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

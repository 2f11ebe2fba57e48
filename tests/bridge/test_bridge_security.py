"""Attacks on the bridge and from inside the sandbox: each is refused and nothing happens.

The OS-layer attacks run with ``mode="plain"`` (unrestricted Python inside the
sandbox) so RestrictedPython is not what stops them; a few controls run the
same attack with ``sandbox="none"`` to show the attack itself works.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
import trio
from bridge_helpers import WRONG, Ledger, RawClient, kinds, register_tools, run, runner_processes

from ringfence.bridge import ScriptConfig, ScriptLimits
from ringfence.bridge._channel import BridgeListener
from ringfence.bridge._session import ScriptSession
from ringfence.bridge._wire import ProtocolError
from ringfence.runtime import CallContext, Consequence, Kernel, Posture, ToolError, ToolSpec

CALL = {"type": "call", "id": 1, "tool": "launch", "arguments": {"x": "pwned"}}


def _refusals(kernel: Kernel) -> list[str]:
    return [e["reason"] for e in kinds(kernel, "bridge_refused")]


async def test_connections_without_the_secret_are_refused_and_call_nothing(ledger: Ledger) -> None:
    async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
        register_tools(kernel, ledger)
        listener = await BridgeListener.open("tcp")
        config = ScriptConfig(
            handshake_seconds=2.0
        )  # the child's handshake in time on a loaded machine
        run_ = ScriptSession(
            kernel, config, lambda k, **d: kernel.events.emit(k, "t", **d), "t", "p", lambda: None
        )
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run_.admission.accept_loop, listener, nursery)
                # 1. straight to a call, no handshake
                c1 = await RawClient.connect(listener.address)
                await c1.send(CALL)
                assert await c1.recv() is None
                # 2. a handshake with the wrong secret, then a call anyway
                c2 = await RawClient.connect(listener.address)
                assert await c2.handshake(WRONG) is None
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await c2.send(CALL)
                assert await c2.recv() is None
                # 3. a connection that never speaks is dropped at the handshake deadline
                c3 = await RawClient.connect(listener.address)
                assert await c3.recv() is None
                # the child, which has the secret, gets in ...
                child = await RawClient.connect(listener.address)
                assert (await child.handshake(run_.admission.secret))["type"] == "welcome"
                # ... and from then on every connection is refused, even with the secret
                c4 = await RawClient.connect(listener.address)
                assert await c4.recv() is None
                nursery.cancel_scope.cancel()
            for c in (c1, c2, c3, child, c4):
                await c.stream.aclose()
            run_.admission.channel.close()
        finally:
            listener.aclose_sync()
    assert ledger.runs == []
    assert _refusals(kernel) == [
        "handshake_unexpected",
        "handshake_bad_proof",
        "handshake_failed",
        "second_connection",
    ]


async def test_a_replayed_call_is_refused_and_runs_once(ledger: Ledger) -> None:
    async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
        register_tools(kernel, ledger)
        listener = await BridgeListener.open("tcp")
        run_ = ScriptSession(kernel, ScriptConfig(), lambda k, **d: None, "t", "p", lambda: None)
        errors: list[BaseException] = []

        async def serve() -> None:
            try:
                await run_.serve("pass")
            except ProtocolError as exc:
                errors.append(exc)

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run_.admission.accept_loop, listener, nursery)
                nursery.start_soon(serve)
                child = await RawClient.connect(listener.address)
                await child.handshake(run_.admission.secret)
                await child.send({"type": "sandboxed", "report": {}})
                assert (await child.recv())["type"] == "script"
                frame = await child.send({"type": "call", "id": 1, "tool": "peek", "arguments": {}})
                assert (await child.recv())["ok"] is True
                await child.stream.send_all(frame)  # the same bytes again
                while not errors:
                    await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
            await child.stream.aclose()
            run_.admission.channel.close()
        finally:
            listener.aclose_sync()
    assert errors[0].reason == "out_of_order"
    assert ledger.names() == ["peek"]


async def test_a_second_connection_during_a_real_run_is_refused_and_logged(ledger: Ledger) -> None:
    entered, release = trio.Event(), trio.Event()

    async def hold(args: dict, ctx: CallContext) -> str:
        entered.set()
        await release.wait()
        return "released"

    async with Kernel(posture=Posture.ASK) as kernel:
        register_tools(kernel, ledger)
        kernel.register(
            ToolSpec("hold", "waits", {"type": "object"}, hold, consequence=Consequence.READ)
        )
        results = []

        async def script() -> None:
            results.append(await run(kernel, 'result = call_tool("hold")\ncall_tool("peek")'))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(script)
            await entered.wait()
            address = kinds(kernel, "script_started")[0]["address"]
            for secret in (WRONG, None):
                attacker = await RawClient.connect(address)
                if secret is None:
                    # Over a Unix socket the host's close may beat the send (broken pipe).
                    with contextlib.suppress(trio.BrokenResourceError):
                        await attacker.send(CALL)
                    assert await attacker.recv() is None
                else:
                    # no challenge: closed at once (over a Unix socket, maybe before the hello)
                    with pytest.raises((AssertionError, trio.BrokenResourceError)):
                        await attacker.handshake(secret)
                await attacker.stream.aclose()
            release.set()
    assert results[0].status == "ok"
    assert results[0].result == "released"
    assert ledger.names() == ["peek"]
    assert _refusals(kernel) == ["second_connection", "second_connection"]


async def test_forged_bridge_frames_from_the_child_stop_the_run(ledger: Ledger) -> None:
    """Code that escaped into the child can write to the bridge socket, but not past its tags."""
    script = textwrap.dedent(
        """
        import os, socket, stat
        fd = next(fd for fd in range(3, 64) if _is_sock(fd))
        s = socket.socket(fileno=fd)
        body = b'{"type":"call","seq":3,"id":1,"tool":"launch","arguments":{}}'
        s.sendall((32 + len(body)).to_bytes(4, "big") + bytes(32) + body)
        call_tool("peek")
        """
    )
    helper = "import os, stat\ndef _is_sock(fd):\n    try:\n        return stat.S_ISSOCK(os.fstat(fd).st_mode)\n    except OSError:\n        return False\n"
    async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
        register_tools(kernel, ledger)
        with pytest.raises(ToolError, match="refused a message"):
            await run(kernel, helper + script, mode="plain")
    assert ledger.runs == []
    assert _refusals(kernel) == ["protocol_bad_tag"]


# -- the OS sandbox, attacked from unrestricted Python ------------------------------------

LIBC = (
    "import ctypes, os, struct\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "def check(rc):\n"
    "    if rc == -1:\n"
    "        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))\n"
)
ATTACKS = {
    "read /etc/passwd": ('open("/etc/passwd").read()', "PermissionError"),
    "read via /proc/self/root": ('open("/proc/self/root/etc/passwd").read()', "PermissionError"),
    "read via os.open": (
        'import os\nos.read(os.open("/etc/passwd", os.O_RDONLY), 10)',
        "PermissionError",
    ),
    "read via ctypes": (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nfd = libc.open(b'/etc/passwd', 0)\n"
        "if fd < 0:\n    raise PermissionError(ctypes.get_errno(), 'ctypes open refused')",
        "PermissionError",
    ),
    "list /": ('import os\nos.listdir("/")', "PermissionError"),
    "read the environment file": ('open("/proc/self/environ").read()', "PermissionError"),
    "udp socket": (
        "import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM)",
        "PermissionError",
    ),
    "unix socket": ("import socket\nsocket.socket(socket.AF_UNIX)", "PermissionError"),
    "fork": ("import os\nos.fork()", "PermissionError"),
    "fork bomb": ("import os\nwhile True:\n    os.fork()", "PermissionError"),
    "thread": ("import _thread\n_thread.start_new_thread(print, ())", "RuntimeError"),
    "spawn": ('import os\nos.posix_spawn("/bin/true", ["true"], {})', "PermissionError"),
    "exec": ('import os\nos.execv("/bin/sh", ["sh", "-c", "true"])', "PermissionError"),
    "kill the host": (
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
        "PermissionError",
    ),
    # A descriptor's owner gets SIGIO (or the signal F_SETSIG names, SIGKILL included) when
    # it becomes ready: a signal no kill() sends, to any process (group) of the same uid,
    # which Landlock scopes only from ABI 6 (Linux 6.12). Through ctypes (loaded already):
    # the sandbox's uid cannot read a fresh extension module such as fcntl.
    "own a descriptor's signals (F_SETOWN)": (
        LIBC + "check(libc.fcntl(1, 8, os.getppid()))",  # F_SETOWN
        "PermissionError",
    ),
    "own a descriptor's signals (F_SETOWN_EX)": (
        LIBC + "owner = ctypes.create_string_buffer(struct.pack('ii', 1, os.getppid()))\n"
        "check(libc.fcntl(1, 15, owner))",  # F_SETOWN_EX, F_OWNER_PID
        "PermissionError",
    ),
    "choose a descriptor's signal (F_SETSIG)": (
        LIBC + "check(libc.fcntl(1, 10, 9))",  # F_SETSIG, SIGKILL
        "PermissionError",
    ),
    "own the bridge socket's signals (ioctl)": (
        LIBC + "import stat\n"
        "def is_socket(fd):\n"
        "    try:\n"
        "        return stat.S_ISSOCK(os.fstat(fd).st_mode)\n"
        "    except OSError:\n"
        "        return False\n"
        "sock = [fd for fd in range(64) if is_socket(fd)][0]\n"
        "owner = ctypes.c_int(-os.getpgid(0))\n"
        "for request in (0x8901, 0x8902):  # FIOSETOWN, SIOCSPGRP\n"
        "    try:\n"
        "        check(libc.ioctl(sock, request, ctypes.byref(owner)))\n"
        "    except PermissionError:\n"
        "        continue\n"
        "    raise AssertionError(f'ioctl {request:#x} was let through')\n"
        "raise PermissionError('both refused')",
        "PermissionError",
    ),
    "become root again": ("import os\nos.setuid(0)", "PermissionError"),
    "raise a limit": (
        "import resource\nresource.setrlimit(resource.RLIMIT_CPU, (10**6, 10**6))",
        "ValueError",
    ),
    "allocate 4 GiB": ("x = bytearray(4 * 1024**3)", "MemoryError"),
}


@pytest.mark.parametrize("name", list(ATTACKS))
async def test_os_sandbox_refuses(name: str, ledger: Ledger) -> None:
    source, expected = ATTACKS[name]
    host_pid = os.getpid()
    async with Kernel() as kernel:
        result = await run(kernel, source, mode="plain", timeout=20)
    assert result.status == "error", (name, result)
    assert result.error["type"] == expected, result.error["traceback"]
    assert result.sandbox["missing"] == {}
    assert psutil.pid_exists(host_pid)


@pytest.fixture
def open_dir(tmp_path):
    """A directory anyone may write to, so only the sandbox can stop a write."""
    target = tmp_path / "open"
    target.mkdir()
    target.chmod(0o777)
    return target


@pytest.mark.parametrize(
    "how",
    [
        'open(TARGET + "/f", "w").write("x")',
        'import os\nos.close(os.open(TARGET + "/f", os.O_CREAT | os.O_WRONLY))',
        'import os\nos.mkdir(TARGET + "/d")',
        'import os\nos.symlink("/etc/passwd", TARGET + "/l")',
        'import os\nos.mkfifo(TARGET + "/p")',
    ],
)
async def test_nothing_can_be_written(how: str, open_dir) -> None:
    source = f"TARGET = {str(open_dir)!r}\n{how}"
    async with Kernel() as kernel:
        result = await run(kernel, source, mode="plain")
    assert result.status == "error"
    assert result.error["type"] == "PermissionError", result.error["traceback"]
    assert list(open_dir.iterdir()) == []


async def test_controls_the_same_attacks_work_without_the_sandbox(open_dir) -> None:
    """Without the OS layers the file read and write succeed: the tests above can fail."""
    source = (
        f'print(open("/etc/passwd").read()[:4])\nopen({str(open_dir)!r} + "/f", "w").write("x")'
    )
    async with Kernel() as kernel:
        result = await run(kernel, source, mode="plain", sandbox="none")
    assert result.status == "ok", result.error
    assert result.output == "root\n"
    assert [p.name for p in open_dir.iterdir()] == ["f"]
    assert set(result.sandbox["missing"]) >= {"landlock", "seccomp", "drop_privileges"}
    assert kinds(kernel, "script_sandbox_level")[0]["level"] == "none"
    assert kinds(kernel, "script_sandbox")[0]["weakened"] is True


async def test_no_network_except_the_bridge() -> None:
    """A TCP connect to a listener that would accept fails, and the listener sees nothing."""
    accepted = []
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    port = listener.getsockname()[1]

    async def accept() -> None:
        accepted.append(await listener.accept())

    # A numeric address: no lazy codec import (idna) in front of the connect being tested.
    source = (
        f"import socket\ns = socket.socket()\ns.settimeout(2)\ns.connect(('127.0.0.1', {port}))"
    )
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(accept)
            async with Kernel() as kernel:
                result = await run(kernel, source, mode="plain")
                control = await run(kernel, source, mode="plain", sandbox="none")
            with trio.move_on_after(5):  # the control's connection is in the backlog
                while not accepted:
                    await trio.sleep(0.01)
            await trio.sleep(0.05)  # and nothing else arrives
            nursery.cancel_scope.cancel()
    finally:
        listener.close()
        for conn, _ in accepted:
            conn.close()
    assert result.status == "error" and result.error["type"] == "PermissionError"
    assert control.status == "ok"  # without the sandbox the connect works
    assert len(accepted) == 1  # the control's, and only it


async def test_no_environment_secrets(monkeypatch) -> None:
    monkeypatch.setenv("RINGFENCE_TEST_API_KEY", "sk-live-not-for-scripts")
    monkeypatch.setenv("TZ", "UTC")
    source = "import os\nprint(sorted(os.environ))"
    async with Kernel() as kernel:
        result = await run(kernel, source, mode="plain")
    assert result.output == "['LANG', 'LC_ALL', 'PATH', 'TZ']\n"
    assert "sk-live" not in json.dumps(result.to_dict())


async def test_the_cpu_limit_stops_a_busy_loop() -> None:
    started = time.monotonic()
    async with Kernel() as kernel:
        result = await run(
            kernel,
            'print("spinning")\nwhile True:\n    pass',
            timeout=30,
            limits=ScriptLimits(cpu_seconds=1),
        )
    assert result.status == "killed"
    assert result.error["signal"] == "SIGXCPU"
    assert "CPU-time limit (1 s)" in result.error["message"]
    assert result.output == "spinning\n"
    assert time.monotonic() - started < 15


async def test_strict_fails_closed_when_a_layer_cannot_be_applied(ledger: Ledger) -> None:
    """uid -1 means "unchanged" to setresuid: the drop does not take, and strict refuses to run."""
    from ringfence.runtime import Unavailable

    async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
        register_tools(kernel, ledger)
        with pytest.raises(Unavailable) as info:
            await run(kernel, 'call_tool("peek")', uid=-1, gid=-1)
        weak = await run(kernel, 'call_tool("peek")', uid=-1, gid=-1, sandbox="best-effort")
    assert "drop_privileges" in info.value.message
    assert info.value.details["layer"] == "drop_privileges"
    assert ledger.names() == ["peek"]  # only the best-effort run's call
    assert weak.status == "ok"
    assert "drop_privileges" in weak.sandbox["missing"]
    recorded = kinds(kernel, "script_sandbox")
    assert recorded[-1]["weakened"] is True and "drop_privileges" in recorded[-1]["missing"]


# -- the host dies: no orphan ---------------------------------------------------------------

HOST = textwrap.dedent(
    """
    import sys, trio
    from ringfence.bridge._host import run_script
    from ringfence.bridge._launch import LocalLauncher
    from ringfence.runtime import FileSink, Kernel

    async def main():
        launcher = LocalLauncher(wrapper=sys.argv[2:], track_parent=not sys.argv[2:])
        async with Kernel(events_sink=FileSink(sys.argv[1])) as kernel:
            await run_script(kernel, "while True:\\n    pass", timeout=60, trace_id="t", launcher=launcher)

    trio.run(main)
    """
)


def _kill_host_mid_run(tmp_path, under_tmp, wrapper: list[str]) -> list[psutil.Process]:
    events = tmp_path / "events.jsonl"
    host_file = tmp_path / "host.py"
    host_file.write_text(HOST)
    # The killed host cannot remove its bridge directory: under_tmp is removed after the
    # test, and short enough for the socket's address (107 bytes).
    env = {**os.environ, "TMPDIR": str(under_tmp)}
    host = subprocess.Popen([sys.executable, str(host_file), str(events), *wrapper], env=env)
    try:
        deadline = time.monotonic() + 20
        pid = None
        while time.monotonic() < deadline:
            lines = events.read_text().splitlines() if events.exists() else []
            records = [json.loads(line) for line in lines]
            if any(r["kind"] == "script_sandbox" for r in records):
                pid = next(r["pid"] for r in records if r["kind"] == "script_started")
                break
            assert host.poll() is None, "the host exited early"
            time.sleep(0.05)
        assert pid is not None, "the script never started"
        runners = runner_processes()
        assert runners, "no runner is running"
        host.send_signal(signal.SIGKILL)
        host.wait(5)
        gone, alive = psutil.wait_procs(runners, timeout=5)
        assert alive == [], f"orphaned runners: {[p.pid for p in alive]}"
        assert pid in {p.pid for p in gone}
        return gone
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()


def test_killing_the_host_mid_run_leaves_no_orphan(tmp_path, under_tmp) -> None:
    """PR_SET_PDEATHSIG: the runner dies with the host."""
    assert len(_kill_host_mid_run(tmp_path, under_tmp, [])) == 1


def test_the_bridge_watchdog_alone_ends_the_runner(tmp_path, under_tmp) -> None:
    """With a parent in between (as in a container), the closed bridge ends the runner."""
    gone = _kill_host_mid_run(tmp_path, under_tmp, ["/bin/sh", "-c", '"$@" & wait', "sh"])
    assert len(gone) == 2  # the shell in between and the runner it started


def _session_cgroup_prefix() -> str:
    """Where this process's runners' cgroups are, as ``/proc/self/cgroup`` shows them."""
    from ringfence import _proc
    from ringfence._confine.cgroup import cgroup2_mount

    how, mount = _proc.tracking(), cgroup2_mount()
    if how.method != "cgroup" or how.base is None or mount is None:
        pytest.skip(f"no writable cgroup v2 here: {how.detail}")
    return "/" + os.path.relpath(how.base, mount) + "/cmd-"


async def test_a_cold_runner_is_in_its_cgroup_before_the_script_runs() -> None:
    """The runner starts before it is moved into its cgroup (the move overlaps its
    start-up); the script, its first line included, runs inside. (The memory and fork
    limits on the same cold path: test_os_sandbox_refuses, "allocate 4 GiB", "fork bomb".)"""
    prefix = _session_cgroup_prefix()
    source = 'print(open("/proc/self/cgroup").read())'
    async with Kernel() as kernel:
        result = await run(kernel, source, mode="plain", sandbox="none")  # a fresh runner
    assert result.status == "ok", result.error
    (line,) = [x for x in result.output.splitlines() if x.startswith("0::")]
    assert line[3:].startswith(prefix), (line, prefix)


async def test_a_runner_not_in_its_cgroup_runs_nothing(ledger: Ledger) -> None:
    """The activation names the cgroup the runner must be in; a runner elsewhere (a move
    that did not take) stops before it connects: the run fails naming why, no call runs."""
    from ringfence.bridge._launch import LocalLauncher

    _session_cgroup_prefix()

    class Elsewhere(LocalLauncher):
        def _activation(self, process, secret, run_config):  # type: ignore[no-untyped-def]
            return secret + json.dumps({**run_config, "cgroup": "/not/the/runners"}).encode()

    for launcher in (Elsewhere(), Elsewhere(warm=1)):  # a fresh runner, then a spare
        try:
            async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
                register_tools(kernel, ledger)
                if launcher.warm:
                    launcher._want_refill()
                    with trio.fail_after(30):
                        while launcher.ready < 1:
                            await trio.sleep(0.02)
                with pytest.raises(ToolError, match="not in its cgroup '/not/the/runners'"):
                    await run(kernel, 'call_tool("launch", x="pwned")', launcher=launcher)
                assert kinds(kernel, "script_sandbox") == []  # it never got that far
        finally:
            await launcher.aclose()
    assert ledger.runs == []

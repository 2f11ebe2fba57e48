"""Attacks on the file tools' confinement, replayed through the CLI (``ringfence call``).

Each test performs the attack the way an agent would (a tool call) and asserts
refusal *and* no effect: no byte from outside the roots in the result, the
output or the event stream, and the workspace unchanged.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio
from cli_helpers import isolated, ringfence_json
from workspace_helpers import snapshot

from ringfence.cli._main import main
from ringfence.runtime import HeadlessDenyApprover, Kernel, MemorySink, Posture
from ringfence.workspace import Workspace, register_file_tools
from ringfence.workspace._resolver import PSEUDO_FILESYSTEMS, pseudo_filesystem

__all__ = ["isolated"]  # the CLI fixture (autouse): no managed policy or roots from outside

# An environment variable only the attacked process holds: its value in any output
# means /proc/<that process>/environ was read.
MARKER_NAME = "RINGFENCE_ATTACK_MARKER"
MARKER = "kernel-environ-secret-5f1d"
# A pattern that matches the marker without spelling it (the event stream records arguments).
MARKER_PATTERN = "kernel-environ-secre[t]-5f1d"


def _call(root: Path, events: Path, tool: str, args: dict[str, object]) -> tuple[int, object, str]:
    return ringfence_json(
        "call",
        tool,
        "--args",
        json.dumps(args),
        "--json",
        "--workspace",
        str(root),
        "--events",
        str(events),
        "--posture",
        "allow-all",
        env={MARKER_NAME: MARKER},
    )


def _no_marker(*texts: str) -> None:
    for text in texts:
        assert MARKER not in text


def test_a_root_on_proc_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    """``--workspace /proc``: read_file ``self/environ`` read the kernel's own environment
    (every API key it was started with). A root on a kernel-state file system is refused."""
    events = tmp_path / "events.jsonl"
    for tool, args in [
        ("read_file", {"path": "self/status"}),  # text: read whole before the fix
        ("read_file", {"path": "self/environ"}),
        ("grep_files", {"pattern": MARKER_PATTERN, "path": "self"}),
        ("list_directory", {"path": "self"}),
    ]:
        code, body, err = _call(Path("/proc"), events, tool, args)
        assert code != 0, body
        assert isinstance(body, dict) and body["error"]["code"] == "invalid_arguments", body
        assert body["error"]["field"] == "roots"
        assert "proc" in body["error"]["message"]
        _no_marker(json.dumps(body), err, events.read_text() if events.exists() else "")
        assert "TracerPid" not in json.dumps(body)


def _unshare_works() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        return False
    probe = subprocess.run([unshare, "-m", "true"], capture_output=True, check=False)
    return probe.returncode == 0


@pytest.mark.skipif(not _unshare_works(), reason="needs root and unshare -m (a private mount)")
def test_proc_mounted_inside_a_root_is_not_read_listed_or_searched(tmp_path: Path) -> None:
    """A proc mounted inside a root (a chroot or build directory's ``proc``): the walk
    crossed into it and read_file read the kernel's environment through it."""
    root = tmp_path / "ws"
    (root / "chroot" / "proc").mkdir(parents=True)
    (root / "hello.txt").write_text("hello\n")
    events = tmp_path / "events.jsonl"
    before = snapshot(root)

    def call(tool: str, args: dict[str, object]) -> tuple[int, dict[str, object], str]:
        return _call_with_mount("/proc", root / "chroot" / "proc", root, events, tool, args)

    for path in ["chroot/proc/self/environ", "chroot/proc/self/cmdline"]:
        code, body, err = call("read_file", {"path": path})
        assert code != 0 and body["error"]["code"] == "invalid_arguments", (body, err)
        assert "proc" in body["error"]["message"]
    code, body, err = call("list_directory", {"path": "chroot/proc/self"})
    assert code != 0 and body["error"]["code"] == "invalid_arguments", (body, err)
    code, body, err = call("grep_files", {"pattern": MARKER_PATTERN})
    assert (code, body["result"]) == (0, []), (body, err)
    code, body, err = call("grep_files", {"pattern": MARKER_PATTERN, "path": "chroot/proc/self"})
    assert code != 0 and body["error"]["code"] == "invalid_arguments", (body, err)
    code, body, err = call("glob_files", {"pattern": "chroot/proc/*/environ"})
    assert (code, body["result"]) == (0, []), (body, err)
    code, body, err = call("glob_files", {"pattern": "**/hello.txt"})
    assert (code, body["result"]) == (0, ["hello.txt"]), (body, err)
    # edit_file read the file to look for "old": its errors were an oracle on its text.
    code, body, err = call(
        "edit_file", {"path": "chroot/proc/self/status", "old": "Nam", "new": "x"}
    )
    assert code != 0 and body["error"]["code"] == "invalid_arguments", (body, err)
    assert "proc" in body["error"]["message"]
    assert snapshot(root) == before


async def test_a_ranged_read_of_a_huge_sparse_file_ends_at_the_deadline(tmp_path: Path) -> None:
    """read_file with a large ``offset`` read and dropped every line before it, with no
    look at the deadline: a sparse file of gigabytes (text first, then a newline every
    8 MiB of holes) kept the call running for minutes past its 1 s deadline."""
    root = tmp_path / "ws"
    root.mkdir()
    big = root / "big.txt"
    fd = os.open(big, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"line\n" * 2000)  # text where read_file sniffs for NUL bytes
        step = 8 * 1024 * 1024
        for offset in range(step, 6 * 1024**3, step):
            os.pwrite(fd, b"\n", offset)
    finally:
        os.close(fd)
    ws = Workspace([root])
    kernel = Kernel(
        posture=Posture.ALLOW_REVERSIBLE, approver=HeadlessDenyApprover(), events_sink=MemorySink()
    )
    register_file_tools(kernel, ws, timeout_seconds=1.0)
    started = time.monotonic()
    try:
        out = await kernel.invoke("read_file", {"path": "big.txt", "offset": 10**9})
    finally:
        ws.close()
        big.unlink()
    assert out.error is not None and out.error.code == "timeout", out
    assert time.monotonic() - started < 15  # a loaded machine; reading on: minutes


def _mount_points() -> list[str]:
    """Every mount point this process sees (``/proc/self/mountinfo``, octal escapes undone)."""
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            raw = line.split()[4]
            points.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), raw))
    return points


@pytest.mark.skipif(shutil.which("stat") is None, reason="needs coreutils stat")
def test_kernel_state_file_systems_agree_with_statfs_and_are_refused_as_roots(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Differential: for every mount this machine has, ``stat -f`` (statfs(2), the kernel) is
    the oracle for "kernel-state file system"; each such mount is refused as a root through
    the CLI, and every other mount is not classified as one."""
    refused_types: dict[int, str] = {}
    for point in _mount_points():
        try:
            fd = os.open(point, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue  # hidden under another mount, or gone
        try:
            mine = pseudo_filesystem(fd)
        finally:
            os.close(fd)
        oracle = subprocess.run(
            ["stat", "-f", "-c", "%t", "--", point], capture_output=True, text=True, check=False
        )
        if oracle.returncode != 0:
            continue
        magic = int(oracle.stdout.strip(), 16)
        assert (mine is not None) == (magic in PSEUDO_FILESYSTEMS), (point, hex(magic), mine)
        if mine is not None and magic not in refused_types and os.path.isdir(point):
            refused_types[magic] = point
    assert 0x9FA0 in refused_types  # /proc, at least
    for point in refused_types.values():
        args = json.dumps({"path": "."})
        code = main(["call", "list_directory", "--args", args, "--json", "--workspace", point])
        out = capsys.readouterr()
        assert code != 0, point
        body = json.loads(out.out)
        assert body["error"]["code"] == "invalid_arguments" and body["error"]["field"] == "roots"
        assert '"name"' not in out.out  # no entry of it was listed


def _call_with_mount(
    source: str, point: Path, root: Path, events: Path, tool: str, args: dict[str, object]
) -> tuple[int, dict[str, object], str]:
    """``ringfence call`` with ``source`` bind-mounted on ``point`` in a private mount
    namespace that ends with the call; asserts the marker reached no output."""
    script = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
    proc = subprocess.run(
        [
            "unshare",
            "-m",
            "sh",
            "-c",
            script,
            "sh",
            source,
            str(point),
            sys.executable,
            "-m",
            "ringfence",
            "call",
            tool,
            "--args",
            json.dumps(args),
            "--json",
            "--workspace",
            str(root),
            "--events",
            str(events),
            "--posture",
            "allow-all",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, MARKER_NAME: MARKER},
        check=False,
    )
    _no_marker(proc.stdout, proc.stderr, events.read_text() if events.exists() else "")
    return proc.returncode, json.loads(proc.stdout), proc.stderr


@pytest.mark.skipif(not _unshare_works(), reason="needs root and unshare -m (a private mount)")
def _writable_cgroup() -> str | None:
    """A cgroup directory whose mode lets root make a child cgroup (mkdir), if any."""
    for candidate in ["/sys/fs/cgroup/pids/docker", "/sys/fs/cgroup/pids", "/sys/fs/cgroup"]:
        if os.path.isfile(f"{candidate}/cgroup.procs") and os.stat(candidate).st_mode & 0o200:
            return candidate
    return None


CGROUP = _writable_cgroup()


@pytest.mark.skipif(CGROUP is None, reason="needs a cgroup directory with write bits")
def test_no_write_makes_a_kernel_object_in_a_cgroup_mounted_inside_a_root(tmp_path: Path) -> None:
    """write_file's missing directories were made with mkdir: in a cgroup (or configfs,
    tracefs) mounted inside a root, that creates a kernel object. Refused before any."""
    root = tmp_path / "ws"
    (root / "cg").mkdir(parents=True)
    events = tmp_path / "events.jsonl"
    name = f"ringfence-attack-{os.getpid()}"
    assert CGROUP is not None
    host = Path(CGROUP) / name
    assert not host.exists()
    for tool, args in [
        ("write_file", {"path": f"cg/{name}/pids.max", "content": "1"}),
        ("write_file", {"path": "cg/pids.max", "content": "1"}),
        ("edit_file", {"path": "cg/pids.max", "old": "max", "new": "1"}),
    ]:
        code, body, err = _call_with_mount(CGROUP, root / "cg", root, events, tool, args)
        assert code != 0 and body["error"]["code"] == "invalid_arguments", (tool, body, err)
        assert "cgroup" in body["error"]["message"]
        assert not host.exists()
    assert sorted(p.name for p in root.rglob("*")) == ["cg"]


@pytest.mark.skipif(not _unshare_works(), reason="needs root and unshare -m (a private mount)")
@pytest.mark.skipif(shutil.which("rg") is None, reason="needs ripgrep")
@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm (another file system)")
def test_grep_still_finds_files_on_an_ordinary_mount_inside_a_root(tmp_path: Path) -> None:
    """ripgrep's prefilter stays on one file system (a proc inside a root was endless):
    a file on another, ordinary mount inside the root is still searched, without it."""
    root = tmp_path / "ws"
    (root / "mnt").mkdir(parents=True)
    (root / "here.txt").write_text("needle here\n")
    # Another file system (a bind of a directory on this one keeps its device).
    source = Path(f"/dev/shm/ringfence-attack-{os.getpid()}")
    source.mkdir()
    try:
        (source / "there.txt").write_text("needle there\n")
        events = tmp_path / "events.jsonl"
        code, body, err = _call_with_mount(
            str(source), root / "mnt", root, events, "grep_files", {"pattern": "needle"}
        )
    finally:
        shutil.rmtree(source)
    assert code == 0, (body, err)
    assert [m["path"] for m in body["result"]] == ["here.txt", "mnt/there.txt"]


async def test_a_file_swapped_after_the_size_probe_does_not_hold_the_event_loop(
    tmp_path: Path,
) -> None:
    """read_file probes the size (small: read on the trio thread) and then opens the path
    again: a link flipped between a small file and a large sparse one in between had the
    ranged read run on the event loop's thread to its end (or the call's deadline),
    stalling every other call. The inline try now hops to a worker after INLINE_SECONDS."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "small.txt").write_text("line\n" * 10)
    fd = os.open(root / "big.txt", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"line\n" * 2000)
        step = 8 * 1024 * 1024
        for offset in range(step, 256 * 1024 * 1024, step):
            os.pwrite(fd, b"\n", offset)
    finally:
        os.close(fd)
    os.symlink("small.txt", root / "f")
    # Another process flips the link as fast as it can (no GIL shared with the kernel).
    flip = (
        "import os, sys\n"
        "os.chdir(sys.argv[1])\n"
        "while True:\n"
        "    for t in ('big.txt', 'small.txt'):\n"
        "        os.symlink(t, 'f.new')\n"
        "        os.replace('f.new', 'f')\n"
    )
    flipper = subprocess.Popen([sys.executable, "-c", flip, str(root)])
    ws = Workspace([root])
    kernel = Kernel(
        posture=Posture.ALLOW_REVERSIBLE, approver=HeadlessDenyApprover(), events_sink=MemorySink()
    )
    register_file_tools(kernel, ws)
    worst = 0.0
    try:
        async with trio.open_nursery() as nursery:

            async def heartbeat() -> None:
                nonlocal worst
                last = time.monotonic()
                while True:
                    await trio.sleep(0.01)
                    now = time.monotonic()
                    worst = max(worst, now - last)
                    last = now

            nursery.start_soon(heartbeat)
            started = time.monotonic()
            while time.monotonic() - started < 15 and worst < 0.5:
                await kernel.invoke("read_file", {"path": "f", "offset": 10**9})
            nursery.cancel_scope.cancel()
    finally:
        flipper.kill()
        flipper.wait()
        ws.close()
        (root / "big.txt").unlink()
    assert worst < 0.5, f"the event loop was held for {worst:.2f} s"


def test_mcp_serve_with_a_root_on_proc_reads_nothing_of_it(tmp_path: Path) -> None:
    """``ringfence serve --workspace /proc``: an MCP client's read_file ``self/status`` got the
    server's own process state. The session is now refused, naming the root, and nothing of
    /proc reaches the client."""
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "attack", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "read_file", "arguments": {"path": "self/status"}},
        },
    ]
    events = tmp_path / "events.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ringfence",
            "serve",
            "--workspace",
            "/proc",
            "--events",
            str(events),
        ],
        input="".join(json.dumps(m) + "\n" for m in messages),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, MARKER_NAME: MARKER},
        check=False,
    )
    seen = proc.stdout + proc.stderr + (events.read_text() if events.exists() else "")
    assert "TracerPid" not in seen and MARKER not in seen
    assert "invalid_arguments" in proc.stderr and "'/proc' is on a proc file system" in proc.stderr

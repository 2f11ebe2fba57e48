"""``ringfence._proc.spawn``'s options for the script runner: stdin after the gate, exact env,
no gate for a program that holds itself.

Real children (``/bin/sh``), under each tracking method this machine offers
(the cgroup gate where cgroup v2 is writable, the run-id fallback always).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from ringfence import _proc
from ringfence._confine.cgroup import cgroup2_mount
from ringfence.runtime._errors import ToolError

RUN_ID_ONLY = _proc.Tracking("run-id", "forced by the test")


def _trackings() -> list[_proc.Tracking]:
    found = _proc.tracking()
    return [found, RUN_ID_ONLY] if found.method == "cgroup" else [RUN_ID_ONLY]


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


async def _run(argv: list[str], how: _proc.Tracking, stdin: bytes | None = None, **kw) -> bytes:
    proc = _proc.spawn(
        argv, cwd=Path("/"), env={"PATH": os.defpath}, stdin_pipe=stdin is not None, _tracking=how,
        **kw,
    )  # fmt: skip
    try:
        if stdin is not None:
            assert proc.stdin is not None
            os.write(proc.stdin, stdin)
            os.close(proc.stdin)
        out = await trio.to_thread.run_sync(_read_all, proc.stdout)
        await proc.wait_leader()
        assert proc.exit_code_when_done() == 0
        return out
    finally:
        os.close(proc.stdout)
        os.close(proc.stderr)
        proc.close()


@pytest.mark.parametrize("how", _trackings(), ids=lambda t: t.method)
async def test_stdin_pipe_hands_the_command_exactly_what_the_caller_writes(
    how: _proc.Tracking,
) -> None:
    # The gate's release newline is not part of it; a leading newline of ours is.
    data = b"\nsecret\x00bytes\nand more"
    assert await _run(["cat"], how, stdin=data) == data


@pytest.mark.parametrize("how", _trackings(), ids=lambda t: t.method)
async def test_without_stdin_pipe_the_command_reads_nothing(how: _proc.Tracking) -> None:
    assert await _run(["cat"], how) == b""


@pytest.mark.parametrize("how", _trackings(), ids=lambda t: t.method)
async def test_exact_env_is_exactly_the_environment_given(how: _proc.Tracking) -> None:
    exact = await _run(["env"], how, exact_env=True)
    assert exact.decode().splitlines() == [f"PATH={os.defpath}"]
    marked = dict(line.split("=", 1) for line in (await _run(["env"], how)).decode().splitlines())
    assert _proc.RUN_ID_VARIABLE in marked  # the default: the tree is findable by its run id


def _cgroup_of(text: str) -> str | None:
    return next((line[3:] for line in text.splitlines() if line.startswith("0::")), None)


@pytest.mark.skipif(_proc.tracking().method != "cgroup", reason="no writable cgroup v2 here")
async def test_holds_itself_is_in_its_cgroup_once_spawn_returns() -> None:
    """No gate: the child starts at once, but it is in its cgroup before spawn returns, so
    whatever its caller lets it do afterwards (here: read past one line) runs inside."""
    proc = _proc.spawn(
        ["sh", "-c", "read _; cat /proc/self/cgroup"], cwd=Path("/"), env={"PATH": os.defpath},
        stdin_pipe=True, holds_itself=True,
    )  # fmt: skip
    try:
        assert proc.stdin is not None and proc.cgroup is not None
        os.write(proc.stdin, b"go\n")
        os.close(proc.stdin)
        out = await trio.to_thread.run_sync(_read_all, proc.stdout)
        await proc.wait_leader()
        assert proc.exit_code_when_done() == 0
    finally:
        os.close(proc.stdout)
        os.close(proc.stderr)
        proc.close()
    mount = cgroup2_mount()
    assert mount is not None
    assert _cgroup_of(out.decode()) == "/" + proc.cgroup.relative_to(mount).as_posix()


def _sleepers(tag: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if tag.encode() in cmdline.split(b"\0"):
                found.append(int(entry))
    return found


async def test_holds_itself_fails_closed_when_the_move_fails(tmp_path: Path) -> None:
    """A cgroup whose ``cgroup.procs`` cannot be written (a plain directory): the child,
    already started, is killed and reaped, spawn raises, and nothing is left."""
    broken = _proc.Tracking("cgroup", "a plain directory", str(tmp_path), "cgroup.kill")
    tag = "31.4159"  # sleep's argument: this test's child, found by its command line
    with pytest.raises(ToolError, match="could not track"):
        _proc.spawn(
            ["sleep", tag], cwd=Path("/"), env={"PATH": os.defpath}, holds_itself=True,
            _tracking=broken,
        )  # fmt: skip
    assert _sleepers(tag) == []
    assert list(tmp_path.iterdir()) == []  # its cgroup directory removed too

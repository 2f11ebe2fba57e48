"""``ringfence._proc.spawn``'s options for the script runner: stdin after the gate, exact env.

Real children (``/bin/sh``), under each tracking method this machine offers
(the cgroup gate where cgroup v2 is writable, the run-id fallback always).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from ringfence import _proc

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

"""The local backend beyond the shared suite: its environment allowlist, exec failures, capture."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest
import trio

from ringfence.backends import SessionSpec
from ringfence.backends._host import start_host as start_local
from ringfence.backends._output import Capture
from ringfence.runtime import InvalidArguments


async def test_environment_is_the_allowlist_plus_what_is_named(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-never-leak")
    monkeypatch.setenv("PASSED_THROUGH", "yes")
    monkeypatch.setenv("NOT_PASSED", "no")
    session = await start_local(SessionSpec(roots=(tmp_path,), passthrough_env=("PASSED_THROUGH",)))
    r = await session.run("env", cwd=tmp_path, env={"GIVEN": "1"}, timeout=10, output_cap=10_000)
    seen = dict(line.split("=", 1) for line in r.stdout.splitlines())
    assert seen["PASSED_THROUGH"] == "yes" and seen["GIVEN"] == "1"
    assert seen["PATH"] == os.environ["PATH"] and seen["LANG"] == "C.UTF-8"
    assert "OPENAI_API_KEY" not in seen and "NOT_PASSED" not in seen
    assert "sk-should-never-leak" not in r.stdout
    assert set(session.environment({"GIVEN": "1"})) <= set(seen)


async def test_exec_failures_read_like_a_shell(tmp_path: Path) -> None:
    session = await start_local(SessionSpec(roots=(tmp_path,)))
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\necho hi\n")
    r = await session.run([str(script)], cwd=tmp_path, env={}, timeout=5, output_cap=100)
    assert r.exit_code == 126 and "permission denied" in r.stderr
    r = await session.run(["/no/such/binary"], cwd=tmp_path, env={}, timeout=5, output_cap=100)
    assert r.exit_code == 127 and "not found" in r.stderr
    with pytest.raises(InvalidArguments) as info:
        await session.run("true", cwd=tmp_path / "missing", env={}, timeout=5, output_cap=100)
    assert info.value.field == "cwd"


async def test_a_tree_that_keeps_forking_is_still_killed(tmp_path: Path) -> None:
    session = await start_local(SessionSpec(roots=(tmp_path,), kill_grace=0.2))
    tag = f"rf-forker-{os.getpid()}"
    # Every process spawns a replacement when it is terminated, and some leave the group.
    script = (
        f"spawn() {{ ( trap 'spawn' TERM; exec -a {tag} sleep 300 ) & }}; "
        f"for i in 1 2 3; do spawn; setsid sh -c 'exec -a {tag} sleep 300' & done; wait"
    )
    r = await session.run(["bash", "-c", script], cwd=tmp_path, env={}, timeout=0.5, output_cap=100)
    assert r.timed_out
    left = [p for p in psutil.process_iter(["cmdline"]) if tag in " ".join(p.info["cmdline"] or [])]
    assert left == []


async def test_cancelled_from_outside_nothing_is_left(tmp_path: Path) -> None:
    session = await start_local(SessionSpec(roots=(tmp_path,), kill_grace=0.2))
    tag = f"rf-cancel-{os.getpid()}"
    with trio.move_on_after(0.3):
        await session.run(
            ["bash", "-c", f"trap '' TERM; exec -a {tag} sleep 300"],
            cwd=tmp_path,
            env={},
            timeout=30,
            output_cap=100,
        )
    left = [p for p in psutil.process_iter(["cmdline"]) if tag in " ".join(p.info["cmdline"] or [])]
    assert left == []


def test_capture_keeps_head_and_tail_past_its_spool_limit(tmp_path: Path) -> None:
    chunks: list[str] = []
    capture = Capture(
        "stdout", lambda s, t: chunks.append(t), spool_limit=1000, tail_window=1000, cut_margin=12
    )
    data = b"".join(f"{i:05d}\n".encode() for i in range(2000))  # 12000 bytes
    for i in range(0, len(data), 333):
        capture.feed(data[i : i + 333])
    capture.flush()
    assert "".join(chunks) == data.decode()  # the callback saw everything
    out = capture.finish(1500, tmp_path, None)
    assert out.truncated and out.total_bytes == 12000
    spooled = Path(out.spool_path).read_text()
    assert spooled.startswith("00000\n") and spooled.endswith("01999\n")
    assert "dropped 10000 bytes" in spooled and "12 characters either side" in spooled
    assert data.decode()[: 1000 - 12] in spooled and data.decode()[-1000 + 12 :] in spooled
    assert out.text.startswith("00000\n") and out.text.endswith("01999\n")


def test_capture_decodes_multibyte_characters_split_across_chunks() -> None:
    chunks: list[str] = []
    capture = Capture("stdout", lambda s, t: chunks.append(t))
    raw = "日本語🙂".encode()
    for i in range(len(raw)):
        capture.feed(raw[i : i + 1])
    capture.flush()
    assert "".join(chunks) == "日本語🙂"
    assert capture.finish(100, None, None).text == "日本語🙂"

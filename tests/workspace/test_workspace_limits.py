"""The file tools' limits, attacked through a real Kernel and the CLI.

* ReDoS: a backtracking regex in grep_files (or a glob with many stars) froze the
  kernel; RE2 matches in linear time and other calls go on meanwhile.
* Deadlines: a walk, a search or a wait for ripgrep ends with ``timeout``; a
  cancelled call stops its worker.
* Names that are not UTF-8 are shown in the escaped form and taken back.
* Bounds: list_directory and glob_files cut long lists with a marker; write_file
  does not create paths grep_files and read_file could not reach (PATH_MAX).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import trio
from cli_helpers import ringfence_json
from workspace_helpers import Tree, snapshot

from ringfence.runtime import HeadlessDenyApprover, Kernel, MemorySink, Posture
from ringfence.workspace import Workspace, register_file_tools
from ringfence.workspace._writer import MAX_PATH_BYTES

REDOS = r"^(\w+\s?)*$"
TWELVE_WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu!"
RG = shutil.which("rg")
ENGINES = ["python", "ripgrep"] if RG else ["python"]


def make_kernel(tree: Tree, *, timeout_seconds: float = 60.0, ripgrep: str | None = None):
    ws = Workspace(tree.roots())
    ws.ripgrep = ripgrep
    sink = MemorySink()
    kernel = Kernel(
        posture=Posture.ALLOW_REVERSIBLE, approver=HeadlessDenyApprover(), events_sink=sink
    )
    register_file_tools(kernel, ws, timeout_seconds=timeout_seconds)
    return kernel, ws, sink


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str | None:
    return RG if request.param == "ripgrep" else None


def kinds(sink: MemorySink) -> list[str]:
    """The calls' record kinds, in order (the stream's own signed ``chain_checkpoint``
    records, which can follow a call's last record at any time, left out)."""
    return [r["kind"] for r in sink.records() if r["kind"] != "chain_checkpoint"]


# -- item 7: linear-time matching and deadlines --------------------------------------------


async def test_redos_grep_returns_quickly_while_another_call_completes(
    tree: Tree, engine: str | None
) -> None:
    (tree.ws / "words.txt").write_text(f"{TWELVE_WORDS}\nalpha beta gamma\n")
    kernel, ws, _ = make_kernel(tree, ripgrep=engine)
    got: dict[str, Any] = {}
    started = time.monotonic()

    async def attack() -> None:
        got["grep"] = await kernel.call("grep_files", {"pattern": REDOS})
        got["grep_done"] = time.monotonic() - started

    async def other() -> None:
        got["read"] = await kernel.call("read_file", {"path": "hello.txt"})
        got["read_done"] = time.monotonic() - started

    async with trio.open_nursery() as nursery:
        nursery.start_soon(attack)
        nursery.start_soon(other)
    ws.close()
    assert got["grep_done"] < 2 and got["read_done"] < 2
    assert got["read"] == "hello\n"
    # The backtracking line does not match ("!"), the plain one does; nothing else.
    assert {(m["path"], m["line"]) for m in got["grep"]} == {
        ("hello.txt", 1),
        ("sub/inner.txt", 1),
        ("words.txt", 2),
    }


async def test_redos_glob_returns_quickly(tree: Tree) -> None:
    (tree.ws / ("a" * 200)).write_text("x")
    kernel, ws, _ = make_kernel(tree)
    started = time.monotonic()
    got = await kernel.call("glob_files", {"pattern": "*a" * 14 + "*b"})
    ws.close()
    assert time.monotonic() - started < 15 and got == []  # backtracking: hours


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        (r"foo(?=bar)", "RE2"),
        (r"(?<!x)foo", "RE2"),
        (r"(a)\1", "RE2"),
        ("(?>a)", "RE2"),
        ("a*+", "RE2"),
        (r"\Afoo", "line by line"),
        ("(?-m)^x", "multi-line"),
    ],
)
async def test_grep_pattern_that_is_not_re2_is_a_clear_error(
    tree: Tree, pattern: str, words: str
) -> None:
    kernel, ws, sink = make_kernel(tree)
    out = await kernel.invoke("grep_files", {"pattern": pattern})
    ws.close()
    assert out.error is not None and out.error.code == "invalid_arguments"
    assert out.error.field == "pattern" and words in out.error.message
    assert kinds(sink)[-1] == "failed"


def big_tree(root: Path, dirs: int = 300) -> None:
    for i in range(dirs):
        d = root / f"d{i:03}" / "x"
        d.mkdir(parents=True)
        (d / "f.txt").write_text("needle\n")


@pytest.mark.parametrize("tool", ["grep_files", "glob_files"])
async def test_a_walk_past_its_deadline_ends_with_timeout(tree: Tree, tool: str) -> None:
    big_tree(tree.ws)
    args = {"pattern": "needle"} if tool == "grep_files" else {"pattern": "**/*.txt"}
    kernel, ws, sink = make_kernel(tree, timeout_seconds=1e-6)
    started = time.monotonic()
    out = await kernel.invoke(tool, args)
    assert time.monotonic() - started < 15
    assert out.error is not None and out.error.code == "timeout"
    assert "1e-06s" in out.error.message and kinds(sink)[-1] == "failed"
    ws.close()
    # The same call under the default deadline finishes.
    kernel, ws, _ = make_kernel(tree)
    expected = 302 if tool == "glob_files" else 300  # with hello.txt and sub/inner.txt
    assert len(await kernel.call(tool, {**args, "max_results": 1000})) == expected
    ws.close()


def slow_ripgrep(tmp_path: Path) -> tuple[str, Path]:
    """A stand-in for rg that never answers and writes down its pid."""
    pid_file = tmp_path / "rg.pid"
    script = tmp_path / "slow-rg"
    script.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 30\n")
    script.chmod(0o755)
    return str(script), pid_file


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_the_wait_for_ripgrep_honours_the_deadline(tree: Tree, tmp_path: Path) -> None:
    rg, pid_file = slow_ripgrep(tmp_path)
    kernel, ws, _ = make_kernel(tree, timeout_seconds=0.5, ripgrep=rg)
    started = time.monotonic()
    out = await kernel.invoke("grep_files", {"pattern": "hello"})
    ws.close()
    assert time.monotonic() - started < 15  # the stand-in sleeps 30 s
    assert out.error is not None and out.error.code == "timeout"
    assert gone(int(pid_file.read_text()))


async def test_a_cancelled_grep_stops_its_worker_and_ripgrep(tree: Tree, tmp_path: Path) -> None:
    rg, pid_file = slow_ripgrep(tmp_path)
    kernel, ws, _ = make_kernel(tree, ripgrep=rg)
    started = time.monotonic()
    with trio.move_on_after(0.3) as scope:
        await kernel.invoke("grep_files", {"pattern": "hello"})
    ws.close()
    assert scope.cancelled_caught and time.monotonic() - started < 15  # rg sleeps 30 s
    # The worker has stopped (waited for, shielded) and killed ripgrep before invoke returned.
    assert gone(int(pid_file.read_text()))


# -- item 10: names that are not UTF-8 -----------------------------------------------------

RAW = b"\xff\xfe.txt"
SHOWN = "\\xff\\xfe.txt"


@pytest.fixture
def odd_names(tree: Tree) -> Tree:
    base = os.fsencode(tree.ws)
    with open(os.path.join(base, RAW), "wb") as f:
        f.write(b"bytes name\n")
    os.mkdir(os.path.join(base, b"d\xe9"))
    with open(os.path.join(base, b"d\xe9", b"x.txt"), "wb") as f:
        f.write(b"in latin-1 dir\n")
    (tree.ws / "back\\slash.txt").write_text("backslash\n")
    return tree


async def test_undecodable_names_are_shown_escaped_and_taken_back(odd_names: Tree) -> None:
    tree = odd_names
    kernel, ws, sink = make_kernel(tree)
    listing = await kernel.call("list_directory", {"path": "."})
    names = [e["name"] for e in listing]
    assert SHOWN in names and "d\\xe9" in names and "back\\\\slash.txt" in names
    assert await kernel.call("read_file", {"path": SHOWN}) == "bytes name\n"
    assert await kernel.call("read_file", {"path": "d\\xe9/x.txt"}) == "in latin-1 dir\n"
    assert await kernel.call("read_file", {"path": "back\\\\slash.txt"}) == "backslash\n"
    assert await kernel.call("list_directory", {"path": "d\\xe9"}) == [
        {"name": "x.txt", "type": "file"}
    ]
    globbed = await kernel.call("glob_files", {"pattern": "**/*.txt"})
    assert {SHOWN, "d\\xe9/x.txt", "back\\\\slash.txt"} <= set(globbed)
    assert await kernel.call("glob_files", {"pattern": "\\xff*"}) == [SHOWN]
    assert await kernel.call("glob_files", {"pattern": "d?/*"}) == ["d\\xe9/x.txt"]
    grep = await kernel.call("grep_files", {"pattern": "name|latin"})
    assert [m["path"] for m in grep] == [SHOWN, "d\\xe9/x.txt"]
    written = await kernel.call("write_file", {"path": "d\\xe9/\\xfe.txt", "content": "new"})
    assert written["path"] == "d\\xe9/\\xfe.txt"
    assert Path(os.fsdecode(os.fsencode(tree.ws) + b"/d\xe9/\xfe.txt")).read_text() == "new"
    missing = await kernel.invoke("read_file", {"path": "\\xfa.txt"})
    assert missing.error is not None and missing.error.code == "not_found"
    assert "\\xfa.txt" in missing.error.message
    ws.close()
    # Every record of the stream is JSON without a lone surrogate.
    for line in sink.lines:
        line.encode("utf-8")


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("a\\qb.txt", "backslash"),
        ("\\x41.txt", "ASCII"),
        ("\\xc3\\xa9.txt", "valid UTF-8"),
    ],
)
async def test_a_path_not_in_the_escaped_form_is_refused(tree: Tree, path: str, words: str) -> None:
    before = snapshot(tree.ws)
    kernel, ws, _ = make_kernel(tree)
    out = await kernel.invoke("write_file", {"path": path, "content": "x"})
    ws.close()
    assert out.error is not None and out.error.code == "invalid_arguments"
    assert out.error.field == "path" and words in out.error.message
    assert snapshot(tree.ws) == before


def cli(tree: Tree, tool: str, args: dict[str, Any]) -> tuple[int, Any, str]:
    return ringfence_json(
        "call", tool, "--args", json.dumps(args), "--json", "--workspace", str(tree.ws)
    )


def test_the_cli_lists_and_reads_undecodable_names(odd_names: Tree) -> None:
    code, body, err = cli(odd_names, "list_directory", {"path": "."})
    assert code == 0 and "Traceback" not in err
    assert {"name": SHOWN, "type": "file"} in body["result"]
    code, body, _ = cli(odd_names, "read_file", {"path": SHOWN})
    assert code == 0 and body["result"] == "bytes name\n"


# -- bounds --------------------------------------------------------------------------------


async def test_list_directory_is_capped_with_a_marker(tree: Tree) -> None:
    many = tree.ws / "many"
    many.mkdir()
    for i in range(5003):
        os.close(os.open(many / f"f{i:05}", os.O_CREAT | os.O_WRONLY, 0o644))
    kernel, ws, _ = make_kernel(tree)
    got = await kernel.call("list_directory", {"path": "many"})
    assert len(got) == 5001 and got[-2]["name"] == "f04999"
    assert got[-1]["truncated"] is True and (got[-1]["shown"], got[-1]["total"]) == (5000, 5003)
    small = await kernel.call("list_directory", {"path": "many", "max_entries": 10})
    assert [e.get("name") for e in small[:10]] == [f"f{i:05}" for i in range(10)]
    assert small[-1]["total"] == 5003 and "max_entries" in small[-1]["message"]
    assert "truncated" not in (await kernel.call("list_directory", {"path": "."}))[-1]
    too_many = await kernel.invoke("list_directory", {"path": "many", "max_entries": 100_001})
    assert too_many.error is not None and too_many.error.field == "max_entries"
    ws.close()


async def test_glob_and_grep_mark_a_cut_list(tree: Tree) -> None:
    for i in range(30):
        (tree.ws / f"n{i:02}.txt").write_text("needle\n")
    kernel, ws, _ = make_kernel(tree)
    got = await kernel.call("glob_files", {"pattern": "n*.txt", "max_results": 10})
    assert got[:10] == [f"n{i:02}.txt" for i in range(10)]
    assert got[10]["truncated"] is True and (got[10]["shown"], got[10]["total"]) == (10, 30)
    assert len(await kernel.call("glob_files", {"pattern": "n*.txt"})) == 30
    grep = await kernel.call("grep_files", {"pattern": "needle", "max_results": 5})
    assert len(grep) == 6 and grep[-1]["truncated"] is True and grep[-1]["shown"] == 5
    assert "truncated" not in (await kernel.call("grep_files", {"pattern": "needle"}))[-1]
    ws.close()


async def test_write_file_refuses_a_path_grep_could_not_reach(
    tree: Tree, engine: str | None
) -> None:
    before = snapshot(tree.ws)
    kernel, ws, _ = make_kernel(tree, ripgrep=engine)
    deep = "/".join(["d" * 200] * 20)  # 4019 bytes of directories
    too_long = deep + "/" + "f" * (MAX_PATH_BYTES - len(deep))  # one byte over
    out = await kernel.invoke("write_file", {"path": too_long, "content": "needle\n"})
    assert out.error is not None and out.error.code == "invalid_arguments"
    assert str(MAX_PATH_BYTES) in out.error.message and out.error.field == "path"
    assert snapshot(tree.ws) == before  # the directories it made were removed again
    # The longest path it does write is found by grep_files and read by read_file.
    longest = too_long[:-1]
    assert (await kernel.call("write_file", {"path": longest, "content": "needle\n"}))["created"]
    assert await kernel.call("read_file", {"path": longest}) == "needle\n"
    found = await kernel.call("grep_files", {"pattern": "needle"})
    assert {"path": longest, "line": 1, "text": "needle"} in found
    assert longest in await kernel.call("glob_files", {"pattern": "**/f*"})
    ws.close()


@pytest.mark.skipif(RG is None, reason="ripgrep is not installed")
def test_ripgrep_is_not_asked_for_a_pattern_it_reads_more_narrowly(tree: Tree) -> None:
    # RE2's \b is ASCII: "é" is not a word character, so "éfoo" has a boundary before "foo";
    # ripgrep's Unicode \b has none there and would have skipped the file.
    (tree.ws / "u.txt").write_text("\u00e9foo\n")
    with Workspace(tree.roots()) as ws:
        ws.ripgrep = None
        python = ws.grep(r"\bfoo")
        ws.ripgrep = RG
        notices: list[str] = []
        assert (
            ws.grep(r"\bfoo", on_notice=notices.append)
            == python
            == [{"path": "u.txt", "line": 1, "text": "\u00e9foo"}]
        )
        assert notices == []


async def test_escaped_names_in_glob_filters_and_notices(odd_names: Tree, tmp_path: Path) -> None:
    kernel, ws, sink = make_kernel(odd_names)
    got = await kernel.call("grep_files", {"pattern": "name", "glob": "\\xff*"})
    assert [m["path"] for m in got] == [SHOWN]
    # Outside the roots (unrestricted posture) the notice names the directory escaped.
    outside = os.fsencode(tmp_path) + b"/out\xfd"
    os.mkdir(outside)
    kernel.set_posture(Posture.UNRESTRICTED)
    shown_dir = os.fsdecode(os.fsencode(tmp_path)) + "/out\\xfd"
    assert await kernel.call("list_directory", {"path": shown_dir}) == []
    ws.close()
    notices = [r for r in sink.records() if r["kind"] == "notice"]
    assert notices and "out\\xfd" in notices[-1]["message"]

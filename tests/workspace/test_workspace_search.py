"""glob_files and grep_files: never enter linked directories, same results with and without ripgrep."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from workspace_helpers import SECRET, Tree

from ringfence.runtime import InvalidArguments, OutsideWorkspace
from ringfence.workspace import Workspace

RG = shutil.which("rg")
needs_rg = pytest.mark.skipif(RG is None, reason="ripgrep is not installed (.ci/run installs it)")


def build_search_tree(t: Tree) -> None:
    ws = t.ws
    (ws / "src").mkdir()
    (ws / "src" / "a.py").write_text("import os\nneedle = 1\n# Needle\nx = needle  # again\n")
    (ws / "src" / "b.txt").write_bytes(b"first\r\nneedle\r\nlast\r\n")
    (ws / "src" / "unicode.txt").write_text("na\u00efve needle \u00fc\n\u00e9t\u00e9\n")
    (ws / "src" / "noeol.txt").write_text("top\nneedle at the end")
    (ws / "src" / "empty.txt").write_text("")
    (ws / "bin.dat").write_bytes(b"needle\x00binary")
    (ws / "latebin.txt").write_bytes(b"needle\n" + b"x" * 100_000 + b"\x00")
    (ws / ".hidden").mkdir()
    (ws / ".hidden" / "h.txt").write_text("hidden needle\n")
    (ws / ".gitignore").write_text("ignored.txt\n")
    (ws / "ignored.txt").write_text("ignored needle\n")
    (ws / ".ignore").write_text("*.py\n")
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("needle in git\n")
    (ws / "linkdir").symlink_to("src")
    (ws / "outlink").symlink_to(t.outside / "secret")
    (ws / "outdir").symlink_to(t.outside)
    (ws / "inlink").symlink_to("src/a.py")
    (ws / "dangling").symlink_to("nowhere")
    (ws / "long.txt").write_text("a" * 3000 + " needle\n")
    (ws / "many.txt").write_text("needle\n" * 300)
    (t.outside / "secret").write_bytes(SECRET + b"needle OUTSIDE\n")
    (t.outside / "deep.txt").write_text("needle OUTSIDE\n")
    (t.ws2 / "w2.txt").write_text("needle in ws2\n")


@pytest.fixture
def stree(tree: Tree) -> Tree:
    build_search_tree(tree)
    return tree


def both_engines(ws: Workspace, *args, **kwargs) -> list[dict]:
    saved = ws.ripgrep
    try:
        ws.ripgrep = None
        python = ws.grep(*args, **kwargs)
        if RG is not None:
            ws.ripgrep = RG
            assert ws.grep(*args, **kwargs) == python
        return python
    finally:
        ws.ripgrep = saved


# -- glob_files -------------------------------------------------------------------------------


def test_glob_patterns(ws: Workspace, stree: Tree) -> None:
    assert ws.glob("*.txt") == ["hello.txt", "ignored.txt", "latebin.txt", "long.txt", "many.txt"]
    assert ws.glob("src/*.py") == ["src/a.py"]
    assert ws.glob("*.py", "src") == ["src/a.py"]
    assert ws.glob("**/*.py") == ["src/a.py"]
    assert ws.glob("src/[ab].*") == ["src/a.py", "src/b.txt"]
    assert ws.glob("src/?.py") == ["src/a.py"]
    assert ws.glob("src/[!a].*") == ["src/b.txt"]
    assert ws.glob(".hidden/*") == [".hidden/h.txt"]
    assert ws.glob("./src/a.py") == ["src/a.py"]
    assert ws.glob("**", max_results=3) == sorted(ws.glob("**"))[:3]


def test_glob_directories_only_with_a_trailing_slash(ws: Workspace, stree: Tree) -> None:
    assert ws.glob("*/") == [".hidden/", "linkdir/", "src/", "sub/"]
    assert ws.glob("**/") == [".hidden/", "linkdir/", "src/", "sub/"]
    assert ws.glob("src/") == ["src/"]
    assert ws.glob("src/a.py/") == []


def test_glob_never_enters_linked_directories_and_leaves_out_links_elsewhere(
    ws: Workspace, stree: Tree
) -> None:
    everything = ws.glob("**")
    assert "inlink" in everything  # a link to a file inside the root
    assert "outlink" not in everything and "dangling" not in everything
    assert not any(p.startswith(("linkdir/", "outdir/", ".git/")) for p in everything)
    assert ws.glob("linkdir/*") == []
    assert ws.glob("outdir/*") == []
    assert "outdir/" not in ws.glob("*/")


@pytest.mark.parametrize(
    ("pattern", "field_words"),
    [
        ("/etc/*", "absolute"),
        ("../outside/*", "'..'"),
        ("src/../../outside/*", "'..'"),
        ("", "empty"),
        ("a\x00b", "NUL"),
    ],
)
def test_glob_refuses_patterns_that_could_leave(
    ws: Workspace, pattern: str, field_words: str
) -> None:
    with pytest.raises(InvalidArguments) as info:
        ws.glob(pattern)
    assert info.value.field == "pattern" and field_words in info.value.message


def test_glob_path_must_stay_inside(ws: Workspace, stree: Tree) -> None:
    with pytest.raises(OutsideWorkspace):
        ws.glob("*", str(stree.outside))
    with pytest.raises(OutsideWorkspace):
        ws.glob("*", "outdir")
    assert ws.glob("*", str(stree.ws2)) == [str(stree.ws2 / "two.txt"), str(stree.ws2 / "w2.txt")]
    assert ws.glob("*", "linkdir") == [
        "src/a.py",
        "src/b.txt",
        "src/empty.txt",
        "src/noeol.txt",
        "src/unicode.txt",
    ]


# -- grep_files -------------------------------------------------------------------------------


def test_grep_results(ws: Workspace, stree: Tree) -> None:
    got = both_engines(ws, "needle", max_results=1000)
    paths = {m["path"] for m in got}
    assert paths == {
        ".hidden/h.txt",
        "ignored.txt",
        "inlink",
        "long.txt",
        "many.txt",
        "src/a.py",
        "src/b.txt",
        "src/noeol.txt",
        "src/unicode.txt",
    }
    assert not any("OUTSIDE" in m["text"] for m in got)
    a = [m for m in got if m["path"] == "src/a.py"]
    assert a == [
        {"path": "src/a.py", "line": 2, "text": "needle = 1"},
        {"path": "src/a.py", "line": 4, "text": "x = needle  # again"},
    ]
    assert [m for m in got if m["path"] == "src/b.txt"] == [
        {"path": "src/b.txt", "line": 2, "text": "needle"}
    ]
    assert [m["line"] for m in got if m["path"] == "src/noeol.txt"] == [2]
    long = next(m for m in got if m["path"] == "long.txt")
    assert long["text"].endswith("more characters]") and len(long["text"]) < 1100
    assert got == sorted(got, key=lambda m: (m["path"], m["line"]))


@pytest.mark.parametrize(
    "pattern",
    [
        "needle",
        "^needle$",
        "(?i)NEEDLE",
        r"ne+dle\b",
        r"\d+",
        "\u00e9|\u00fc",
        r"needle\r?$",
        "x*",
        "^$",
        "[a-z]+",
        r"\bat\b",
        r"(needle|top)",
    ],
)
def test_ripgrep_and_python_agree(ws: Workspace, stree: Tree, pattern: str) -> None:
    both_engines(ws, pattern, max_results=10000)
    both_engines(ws, pattern, max_results=3)
    both_engines(ws, pattern, "src", glob="*.txt", max_results=10000)


def test_grep_max_results_and_glob_filter(ws: Workspace, stree: Tree) -> None:
    got = both_engines(ws, "needle", max_results=5)
    assert len(got) == 5 and got[0]["path"] == ".hidden/h.txt"
    only_py = both_engines(ws, "needle", glob="*.py", max_results=100)
    assert {m["path"] for m in only_py} == {"src/a.py"}
    by_path = both_engines(ws, "needle", glob="src/*.txt", max_results=100)
    assert {m["path"] for m in by_path} == {"src/b.txt", "src/noeol.txt", "src/unicode.txt"}
    in_ws2 = both_engines(ws, "needle", str(stree.ws2))
    assert in_ws2 == [{"path": str(stree.ws2 / "w2.txt"), "line": 1, "text": "needle in ws2"}]


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        ("(", "not a valid regular expression"),
        ("foo(?=bar)", "lookahead"),
        ("(?<!x)foo", "lookahead"),
        (r"(a)\1", "backreferences"),
        (r"\Afoo", r"\A"),
        (r"foo\Z", r"\Z"),
        ("a*+", "possessive"),
        ("(?>a)", "atomic"),
    ],
)
def test_grep_refuses_what_the_engines_disagree_on(ws: Workspace, pattern: str, words: str) -> None:
    with pytest.raises(InvalidArguments) as info:
        ws.grep(pattern)
    assert info.value.field == "pattern" and words in info.value.message


def test_grep_argument_errors(ws: Workspace, stree: Tree) -> None:
    with pytest.raises(InvalidArguments) as info:
        ws.grep("x", max_results=0)
    assert info.value.field == "max_results"
    with pytest.raises(InvalidArguments) as info:
        ws.grep("x", "src/a.py")
    assert "not a directory" in info.value.message
    with pytest.raises(OutsideWorkspace):
        ws.grep("needle", "outdir")
    with pytest.raises(InvalidArguments) as info:
        ws.grep("x", glob="/abs")
    assert info.value.field == "glob"


@needs_rg
def test_ripgrep_runs_without_its_config_file_and_without_following_links(
    ws: Workspace, stree: Tree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "preprocessor-ran"
    pre = tmp_path / "pre.sh"
    pre.write_text(f'#!/bin/sh\ntouch {marker}\ncat "$1"\n')
    pre.chmod(0o755)
    config = tmp_path / "ripgreprc"
    config.write_text(f"--follow\n--pre={pre}\n--no-ignore-vcs\n")
    monkeypatch.setenv("RIPGREP_CONFIG_PATH", str(config))

    # The attack is real: bare ripgrep with this config follows the link out and runs the preprocessor.
    bare = subprocess.run([RG, "needle", "."], cwd=stree.ws, capture_output=True, text=True)
    assert "OUTSIDE" in bare.stdout and marker.exists()
    marker.unlink()

    log = tmp_path / "rg.log"
    wrapper = tmp_path / "rg-wrapper"
    wrapper.write_text(
        f'#!/bin/sh\nprintf "config=%s\\n" "$RIPGREP_CONFIG_PATH" > {log}\n'
        f'printf "%s\\n" "$@" >> {log}\nexec {RG} "$@"\n'
    )
    wrapper.chmod(0o755)
    ws.ripgrep = str(wrapper)
    got = ws.grep("needle", max_results=1000)
    args = log.read_text().splitlines()
    assert args[0] == "config="
    assert {"--no-config", "--no-follow", "--no-pre", "--no-ignore", "--hidden"} <= set(args)
    assert not marker.exists()
    assert not any("OUTSIDE" in m["text"] for m in got)
    ws.ripgrep = None
    assert ws.grep("needle", max_results=1000) == got


@needs_rg
def test_ripgrep_rejecting_a_pattern_falls_back_to_python_with_a_notice(
    ws: Workspace, stree: Tree
) -> None:
    # Python accepts a bare "{" as a literal; Rust's regex syntax does not.
    notices: list[str] = []
    ws.ripgrep = RG
    got = ws.grep("x = {?needle", on_notice=notices.append, max_results=100)
    assert notices and "ripgrep" in notices[0]
    ws.ripgrep = None
    assert ws.grep("x = {?needle", max_results=100) == got


# -- a property: both engines agree on random trees and patterns ------------------------

WORDS = ["alpha", "beta", "Gamma", "d3lta", "eps ilon", "z\u00fc", "", "\r", "\t x"]
PATTERNS = st.sampled_from(
    [
        "alpha",
        "^beta",
        "a$",
        "(?i)gamma",
        r"\d",
        r"\w+ \w+",
        "[a-e]{2}",
        "\u00fc",
        "l.*a",
        "^$",
        r"\s",
        "ta\b",
    ]
)


@st.composite
def text_files(draw: st.DrawFn) -> dict[str, bytes]:
    files = {}
    for i in range(draw(st.integers(1, 6))):
        lines = draw(st.lists(st.sampled_from(WORDS), max_size=8))
        data = "\n".join(lines).encode()
        if draw(st.booleans()):
            data += b"\n"
        if draw(st.integers(0, 9)) == 0:
            data += b"\x00"
        folder = draw(st.sampled_from(["", "d/", "d/e/", ".h/"]))
        files[f"{folder}f{i}.txt"] = data
    return files


@needs_rg
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files=text_files(), pattern=PATTERNS, limit=st.integers(1, 20))
def test_property_engines_agree(files: dict[str, bytes], pattern: str, limit: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for rel, data in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
        with Workspace([root]) as w:
            w.ripgrep = None
            python = w.grep(pattern, max_results=limit)
            w.ripgrep = RG
            assert w.grep(pattern, max_results=limit) == python
            # And the Python engine agrees with a line-by-line reference.
            rx = re.compile(pattern)
            expected = []
            for rel in sorted(files):
                data = files[rel]
                if b"\x00" in data:
                    continue
                text = data.decode()
                lines = text.split("\n")
                if text.endswith("\n") or not text:
                    lines.pop()  # no line after the final newline, and none in an empty file
                for n, line in enumerate(lines, 1):
                    if rx.search(line):
                        expected.append({"path": rel, "line": n, "text": line.removesuffix("\r")})
            assert python == expected[:limit]


@needs_rg
def test_grep_never_runs_a_ripgrep_the_agent_wrote_into_a_root(tmp_path: Path) -> None:
    """An activated project venv puts ``<root>/.venv/bin`` first on PATH: the agent's own
    ``rg`` there ran on the host, unconfined, at the next ``grep_files`` (through the CLI).
    Such an entry is passed over; the search still answers (the system's rg, or Python)."""
    import json
    import os
    import sys

    ws, marker = tmp_path / "ws", tmp_path / "ran"
    (ws / ".venv" / "bin").mkdir(parents=True)
    (ws / "notes.txt").write_text("hello needle\n")
    planted = ws / ".venv" / "bin" / "rg"
    planted.write_text(f'#!/bin/sh\ntouch {marker}\nexec {RG} "$@"\n')
    planted.chmod(0o755)
    env = {**os.environ, "PATH": f"{planted.parent}{os.pathsep}{os.environ['PATH']}"}
    env["RINGFENCE_HOME"] = str(tmp_path / "home")
    done = subprocess.run(
        [sys.executable, "-m", "ringfence", "call", "grep_files", "--args",
         json.dumps({"pattern": "needle"}), "--workspace", str(ws), "--json"],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    body = json.loads(done.stdout)
    assert body["ok"], body
    assert "notes.txt" in json.dumps(body["result"])
    assert not marker.exists()

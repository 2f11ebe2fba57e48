"""Writers racing each other: a repository assembled by two writes each judged without the other.

Every writer judges the tree it would leave, then writes. Two writes of one
``parallel(...)`` batch (or of two ringfence processes) each judged the
directory without the other's name and then both wrote: ``d/HEAD`` and
``d/commondir`` made ``d`` a repository whose common directory's
``config`` (``core.pager``) the agent had written before. Real git's discovery
is the oracle.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import isolated  # noqa: F401 (an autouse fixture)
from tree_helpers import git_found

from ringfence.workspace._writelock import writing

PAIRS = 40

SCRIPT = f"""
def gen():
    for i in range({PAIRS}):
        yield tools.write_file(path="d%d/HEAD" % i, content="ref: refs/heads/main\\n")
        yield tools.write_file(path="d%d/commondir" % i, content="../c\\n")
res = parallel(gen(), return_exceptions=True)
result = [getattr(r, "code", "ok") for r in res]
"""


def _tree(base: Path) -> Path:
    """A root with a would-be common directory (its ``config`` names a pager) and empty dirs."""
    root = base / "ws"
    (root / "c" / "objects").mkdir(parents=True)
    (root / "c" / "refs").mkdir()
    (root / "c" / "config").write_text('[core]\n\tpager = "touch pwned; cat"\n')
    for i in range(PAIRS):
        (root / f"d{i}").mkdir()
    return root


def _repositories(root: Path, ceiling: Path) -> list[str]:
    return [f"d{i}" for i in range(PAIRS) if git_found(root / f"d{i}", ceiling) is not None]


@pytest.mark.skipif(sys.platform != "linux", reason="the workspace is Linux-only")
def test_a_parallel_batch_cannot_assemble_a_repository_from_two_writes(tmp_path: Path) -> None:
    """Before: 55 of 60 pairs made ``d<i>`` a repository (both writes succeeded); now in each
    pair one write is refused (``git_metadata``) and git finds no repository anywhere."""
    root = _tree(tmp_path)
    script = tmp_path / "race.py"
    script.write_text(SCRIPT)
    out = subprocess.run(
        [sys.executable, "-m", "ringfence", "run-script", str(script), "--workspace",
         str(root), "--approve", "yes", "--posture", "allow-all", "--json"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    body = json.loads(out.stdout)
    assert body["ok"], body
    codes = body["result"]["result"]
    assert len(codes) == 2 * PAIRS
    assert _repositories(root, tmp_path) == []
    for i in range(PAIRS):
        pair = codes[2 * i : 2 * i + 2]
        assert sorted(pair) == ["git_metadata", "ok"], (i, pair)
        assert len([p for p in ("HEAD", "commondir") if (root / f"d{i}" / p).exists()]) == 1
    assert not (root / "pwned").exists()


def _write_in_another_process(root: Path, name: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ringfence", "call", "write_file", "--args",
         json.dumps({"path": name, "content": "x"}), "--workspace", str(root),
         "--approve", "yes", "--posture", "allow-all", "--json"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.mark.parametrize("held", ["same", "outer", "inner"])
def test_two_processes_writing_take_turns(tmp_path: Path, held: str) -> None:
    """Another process's writer waits while this one holds the workspace's writer lock: on the
    same root, and when one session's root lies inside the other's (``outer``, ``inner``):
    before, each of those locked only its own root's file, so their writes were judged apart
    (the race above, across two sessions)."""
    from ringfence.workspace import Workspace

    outer = tmp_path / "ws"
    inner = outer / "sub"
    inner.mkdir(parents=True)
    mine, theirs = {"same": (outer, outer), "outer": (outer, inner), "inner": (inner, outer)}[held]
    ws = Workspace([mine])
    try:
        with writing(ws._resolver):
            proc = _write_in_another_process(theirs, "f")
            with pytest.raises(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            assert not (theirs / "f").exists()
        out, _ = proc.communicate(timeout=60)
    finally:
        ws.close()
    assert json.loads(out)["ok"], out
    assert (theirs / "f").read_text() == "x"


def test_sessions_on_sibling_roots_do_not_wait_for_each_other(tmp_path: Path) -> None:
    """The shared lock on a common ancestor does not make siblings take turns."""
    from ringfence.workspace import Workspace

    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    ws = Workspace([one])
    try:
        with writing(ws._resolver):
            out, _ = _write_in_another_process(two, "f").communicate(timeout=60)
            assert (two / "f").read_text() == "x"
    finally:
        ws.close()
    assert json.loads(out)["ok"], out


# A --no-change-sets command that waits for write_file's temporary file (the write judged
# already), then makes the rest of a repository and ends before the write's rename.
RACING_COMMAND = """touch ready
end=$(( $(date +%s) + 6 ))
i=0
while :; do
  for f in d/.ringfence-*.tmp; do
    if [ -e "$f" ]; then
      mkdir d/objects d/refs
      printf '[core]\\n\\tbare = true\\n\\tpager = "touch ../pwned; cat"\\n' > d/config
      echo planted
      exit 0
    fi
  done
  i=$((i + 1))
  if [ $((i % 500)) -eq 0 ] && [ "$(date +%s)" -ge "$end" ]; then echo waited; exit 0; fi
done
"""


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_a_command_writing_the_roots_takes_its_turn_among_writers(tmp_path: Path) -> None:
    """Before: ``write_file d/HEAD`` (12 MiB, so its write takes a while) judged ``d`` with no
    ``objects/``; a ``--no-change-sets`` command in another process then made ``objects/``,
    ``refs/`` and a ``config`` naming a pager, and its scan found no repository (no ``HEAD``
    yet); the write's rename made ``d`` one. Now the command holds the writers' turn from its
    scan to its check, so the write waits for it and judges what it left."""
    root = tmp_path / "ws"
    (root / "d").mkdir(parents=True)
    common = ["--workspace", str(root), "--approve", "yes", "--posture", "allow-all", "--json"]
    command = tmp_path / "command.json"
    command.write_text(json.dumps({"command": RACING_COMMAND}))
    head = tmp_path / "head.json"
    head.write_text(
        json.dumps({"path": "d/HEAD", "content": "ref: refs/heads/main\n" + "#" * (12 << 20)})
    )
    shell = subprocess.Popen(
        [sys.executable, "-m", "ringfence", "call", "run_shell", "--args", f"@{command}",
         "--no-change-sets", *common],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (root / "ready").exists():
            assert shell.poll() is None and time.monotonic() < deadline, "the command never ran"
            time.sleep(0.02)
        write = subprocess.run(
            [sys.executable, "-m", "ringfence", "call", "write_file", "--args", f"@{head}",
             *common],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        out, _ = shell.communicate(timeout=120)
    finally:
        if shell.poll() is None:
            shell.kill()
            shell.wait()
    assert git_found(root / "d", tmp_path) is None
    assert not (root / "d" / "objects").exists()
    assert not (tmp_path / "pwned").exists()
    ran = json.loads(out)
    assert ran["ok"], ran
    assert ran["result"]["stdout"] == "waited\n"  # it never saw the write under way
    assert json.loads(write.stdout)["ok"], write.stdout


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_a_command_waits_for_its_turn_no_longer_than_its_timeout(tmp_path: Path) -> None:
    """Another writer holding the workspace past the command's ``timeout_seconds``: the call
    ends with ``timeout`` and the command never ran."""
    root = tmp_path / "ws"
    root.mkdir()
    from ringfence.workspace import Workspace

    ws = Workspace([root])
    try:
        with writing(ws._resolver):
            out = subprocess.run(
                [sys.executable, "-m", "ringfence", "call", "run_shell", "--args",
                 json.dumps({"command": "touch ran", "timeout_seconds": 2}), "--no-change-sets",
                 "--workspace", str(root), "--approve", "yes", "--posture", "allow-all", "--json"],
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
    finally:
        ws.close()
    body = json.loads(out.stdout)
    assert not body["ok"], body
    assert body["error"]["code"] == "timeout", body
    assert "another writer" in body["error"]["message"]
    assert not (root / "ran").exists()

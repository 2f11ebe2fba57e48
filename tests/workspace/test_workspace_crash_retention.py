"""Crash safety against a second session: what one process's retention or recovery does to
another process's operation in flight. Real ``python -m ringfence`` processes, held at a chosen
system call by ``strace --inject`` and killed with SIGKILL; the tree compared byte for byte."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import isolated  # noqa: F401 (an autouse fixture)
from tree_helpers import exact_state

from ringfence.cli._main import main

needs_strace = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed"
)


def _cli(capsys: pytest.CaptureFixture[str], root: Path, *words: str) -> dict[str, Any]:
    main([*words, "--workspace", str(root), "--approve", "no", "--json",
          "--posture", "allow-reversible"])  # fmt: skip
    return json.loads(capsys.readouterr().out)


def _children(pid: int) -> list[int]:
    """The processes ``pid`` started (strace's tracee: the ringfence process itself)."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False)
    return [int(p) for p in out.stdout.split()]


@needs_strace
@needs_bwrap
def test_retention_in_another_session_never_drops_a_merge_in_flight(
    tmp_path: Path,
    ringfence_home: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Session 1 merges a shell command's set and is held after its third file. Session 2
    stages a dry run's set (newer), and a third start prunes with a retention of one set: it
    dropped the merge's manifest as the older set. Session 1 is then killed: the next start
    found its journal line and no manifest (``record: none``), rolled nothing back, and the
    workspace stayed half-merged for good. The set in flight is kept: rolled back whole."""
    root = tmp_path / "ws"
    root.mkdir()
    for i in range(1, 9):
        (root / f"f{i}").write_text("old\n")
    out = _cli(capsys, root, "call", "write_file", "--args",
               json.dumps({"path": "x", "content": "x"}))  # fmt: skip
    assert out["ok"], out  # the store exists
    [store] = (ringfence_home / "checkpoints").iterdir()
    before = exact_state(root)
    argv = [sys.executable, "-m", "ringfence", "call", "run_shell", "--args",
            json.dumps({"command": "for i in $(seq 1 8); do echo new > f$i; done"}),
            "--workspace", str(root), "--approve", "no", "--json",
            "--posture", "allow-reversible"]  # fmt: skip
    # Held 20 s as it enters its 4th rename into the root (three files merged).
    writer = subprocess.Popen(
        ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=renameat",
         "-e", "inject=renameat:delay_enter=20000000:when=4", "-P", str(root), *argv],
        env={**os.environ, "RINGFENCE_HOME": str(ringfence_home)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while (
            time.monotonic() < deadline
            and sum((root / f"f{i}").read_text() == "new\n" for i in range(1, 9)) < 3
        ):
            time.sleep(0.02)
        half = exact_state(root)
        assert half != before, "the merge never started"
        # Session 2: a dry run stages a newer set (no writer turn needed: nothing is written).
        out = _cli(capsys, root, "call", "run_shell", "--args",
                   json.dumps({"command": "echo y > y"}),
                   "--dry-run", str(tmp_path / "plan.json"))  # fmt: skip
        assert out["ok"] and out["result"]["changes"]["staged"], out
        # A third start, keeping one set: its prune runs beside the merge.
        monkeypatch.setenv("RINGFENCE_CHECKPOINTS_KEEP", "1")
        assert main(["checkpoints", "list", "--workspace", str(root), "--json"]) == 0
        capsys.readouterr()
        monkeypatch.delenv("RINGFENCE_CHECKPOINTS_KEEP")
        assert exact_state(root) == half  # nothing moved meanwhile: the merge is still held
        for pid in _children(writer.pid):
            os.kill(pid, signal.SIGKILL)
        writer.wait(timeout=60)
    finally:
        if writer.poll() is None:
            for pid in _children(writer.pid):
                os.kill(pid, signal.SIGKILL)
            writer.kill()
            writer.wait()
    assert exact_state(root) == half
    code = main(["recover", "--workspace", str(root), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    [done] = report["result"]["sets"]
    assert done["record"] == "staged" and done["undone"] == 3, report
    assert exact_state(root) == before  # rolled back whole, not left half-merged
    assert os.listdir(store / "journal") == []


@needs_bwrap
def test_a_read_only_tree_deleted_by_a_command_is_undone_whole(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A command deletes a read-only tree (``chmod -R u+w d; rm -rf d``, as ``go clean
    -modcache`` does). Its undo made ``d`` with its mode, ``0500``, and then refused ``d/f``
    ("its directory does not allow creating files"): the deletion merged and could never be
    undone. Now ``d`` gets its mode after its entries: the tree comes back byte for byte, modes
    included, and the undo itself is undone."""
    root = tmp_path / "ws"
    (root / "d" / "e").mkdir(parents=True)
    (root / "d" / "f").write_text("f\n")
    (root / "d" / "e" / "g").write_text("g\n")
    (root / "d" / "e").chmod(0o555)
    (root / "d").chmod(0o500)
    before = exact_state(root)
    out = _cli(capsys, root, "call", "run_shell", "--args",
               json.dumps({"command": "chmod -R u+w d && rm -rf d"}))  # fmt: skip
    assert out["ok"] and out["result"]["exit_code"] == 0, out
    assert exact_state(root) == {}
    out = _cli(capsys, root, "undo")
    assert out["ok"], out
    assert exact_state(root) == before
    [done] = out["result"]
    out = _cli(capsys, root, "undo", done["checkpoint"])  # the undo undone: deleted again
    assert out["ok"], out
    assert exact_state(root) == {}


@needs_strace
@needs_bwrap
@pytest.mark.parametrize("when", [1, 2, 3, 4])
def test_a_merge_deleting_a_read_only_tree_killed_anywhere_is_rolled_back(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str], when: int
) -> None:
    """The merge of a read-only tree's deletion (``d`` ``0500``, ``d/e`` ``0555``) is killed as
    it enters its ``when``-th ``unlinkat``. Its rollback had to put ``d/e/g`` back into
    ``d/e`` at mode ``0555``, which the writer refuses: every later start failed ("nothing
    else runs in this workspace") with the tree half-deleted. Now the directories the set
    names are opened for the writer while it writes and given their modes last: the tree
    comes back byte for byte, modes included."""
    root = tmp_path / "ws"
    (root / "d" / "e").mkdir(parents=True)
    (root / "d" / "f").write_text("f\n")
    (root / "d" / "e" / "g").write_text("g\n")
    (root / "d" / "e").chmod(0o555)
    (root / "d").chmod(0o500)
    before = exact_state(root)
    # The command removes with unlink(1)/rmdir(1) (unlink, rmdir: not the unlinkat counted).
    command = "chmod -R u+w d && unlink d/e/g && unlink d/f && rmdir d/e && rmdir d"
    argv = [sys.executable, "-m", "ringfence", "call", "run_shell", "--args",
            json.dumps({"command": command}), "--workspace", str(root), "--json",
            "--approve", "no", "--posture", "allow-reversible"]  # fmt: skip
    proc = subprocess.run(
        ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=unlinkat",
         "-e", f"inject=unlinkat:signal=KILL:when={when}", *argv],
        env={**os.environ, "RINGFENCE_HOME": str(ringfence_home)},
        capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode in (-9, 137), (proc.returncode, proc.stdout[-2000:])
    assert exact_state(root) != before  # killed midway: part of the deletion is merged
    code = main(["recover", "--workspace", str(root), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    [done] = report["result"]["sets"]
    assert done["record"] == "staged" and not done["left"], report
    assert exact_state(root) == before
    out = _cli(capsys, root, "call", "apply_changes", "--args", json.dumps({"id": done["id"]}))
    assert out["ok"], out  # merged whole this time, and undone whole
    assert exact_state(root) == {}
    out = _cli(capsys, root, "undo")
    assert out["ok"], out
    assert exact_state(root) == before


@needs_bwrap
def test_a_deletion_in_a_read_only_directory_the_set_does_not_name_is_refused(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``chmod u+w ro; rm ro/f; chmod u-w ro`` merged as the deletion of ``ro/f`` alone (``ro``
    keeps ``0555``), and its undo was refused for good: the writer never creates an entry in a
    directory that denies it. The deletion is refused as it would be merged, nothing changed,
    the command's changes kept staged; and a set in flight that deleted such a file (a journal
    left by an older version) is left and named by the rollback, never stopping every start."""
    from ringfence.workspace import Change, ChangeSet, CheckpointStore, Workspace
    from ringfence.workspace.changes._model import Image

    root = tmp_path / "ws"
    (root / "ro").mkdir(parents=True)
    (root / "ro" / "f").write_text("f\n")
    (root / "ro" / "g").write_text("g\n")
    (root / "ro").chmod(0o555)
    before = exact_state(root)
    out = _cli(capsys, root, "call", "run_shell", "--args",
               json.dumps({"command": "chmod u+w ro && rm ro/f && chmod u-w ro"}))  # fmt: skip
    assert not out["ok"] and out["error"]["code"] == "unwritable", out
    assert "ro/f cannot be deleted" in out["error"]["message"], out
    assert out["error"]["details"]["changes"]["staged"], out
    assert "half-written" not in out["error"]["message"], out
    assert exact_state(root) == before
    # A rollback that would have to put ro/g back: left, named, and the start goes on.
    (root / "ro").chmod(0o755)
    (root / "ro" / "g").unlink()
    (root / "ro").chmod(0o555)
    after = exact_state(root)
    with Workspace([root]) as ws:
        store = CheckpointStore(ws)
        image = Image("file", 0o644, store.put(b"g\n"), 2)
        cs = ChangeSet(store.new_id(), time.time(), "run_shell", (Change(0, "ro/g", image, None),))
        store.save(cs)
        journal = store.journal_fd_if_any(create=True)
        assert journal is not None
        fd = os.open("99999-00000000abcd.log", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=journal)
        os.write(fd, f"B {cs.id}\n".encode())
        os.close(fd)
        store.close()
    code = main(["recover", "--workspace", str(root), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    [done] = report["result"]["sets"]
    assert done["left"] == ["ro/g"] and done["refused"][0]["code"] == "unwritable", report
    assert exact_state(root) == after
    assert main(["checkpoints", "list", "--workspace", str(root), "--json"]) == 0


@needs_strace
@needs_bwrap
@pytest.mark.parametrize("when", range(2, 8))  # the 1st is the store's own "..": not a write
def test_an_undo_whose_store_fills_says_what_it_did(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str], when: int
) -> None:
    """The store's file system fills (``ENOSPC`` injected at the ``when``-th ``openat`` in its
    ``sets`` directory) during an ``undo``: whatever the point, the undo either happened and
    is recorded, or says nothing was changed and nothing was. Before, a full store as the undo
    saved its manifest's final form (after its merge) said "nothing was changed" beside a
    workspace holding the whole undo."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "f").write_text("f0\n")
    out = _cli(capsys, root, "call", "run_shell", "--args",
               json.dumps({"command": "echo f1 > f"}))  # fmt: skip
    assert out["ok"], out
    set_id = out["result"]["changes"]["id"]
    [store] = (ringfence_home / "checkpoints").iterdir()
    argv = [sys.executable, "-m", "ringfence", "undo", set_id, "--workspace", str(root),
            "--json", "--approve", "no", "--posture", "allow-reversible"]  # fmt: skip
    proc = subprocess.run(
        ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=openat",
         "-e", f"inject=openat:error=ENOSPC:when={when}", "-P", str(store / "sets"), *argv],
        env={**os.environ, "RINGFENCE_HOME": str(ringfence_home)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    result = json.loads(proc.stdout)
    assert main(["checkpoints", "list", "--workspace", str(root), "--json"]) == 0
    [mine] = [s for s in json.loads(capsys.readouterr().out)["result"] if s["id"] == set_id]
    if result["ok"]:
        assert exact_state(root) == {"f": ("file", 0o644, b"f0\n")}
        assert mine["undone_by"], mine
    else:
        assert "nothing was changed" in result["error"]["message"], result
        assert exact_state(root) == {"f": ("file", 0o644, b"f1\n")}, result
        assert not mine["undone_by"], mine


@needs_strace
@needs_bwrap
@pytest.mark.parametrize("when", range(2, 9))
def test_an_apply_whose_store_fills_says_what_it_did(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str], when: int
) -> None:
    """As above, for ``apply_changes`` of a set with a refused entry (a FIFO), whose manifest
    is saved again as what was applied: a full store then said "nothing was changed" beside a
    workspace holding the applied file, recorded as the whole set (its FIFO included, so its
    undo met a conflict). Now the merge is put back first: the message is true."""
    root = tmp_path / "ws"
    root.mkdir()
    out = _cli(capsys, root, "call", "run_shell", "--args",
               json.dumps({"command": "echo a > a; mkfifo p"}),
               "--dry-run", str(tmp_path / "plan.json"))  # fmt: skip
    set_id = out["error"]["details"]["changes"]["id"]  # refused at staging, kept
    [store] = (ringfence_home / "checkpoints").iterdir()
    argv = [sys.executable, "-m", "ringfence", "call", "apply_changes", "--args",
            json.dumps({"id": set_id}), "--workspace", str(root),
            "--json", "--approve", "no", "--posture", "allow-reversible"]  # fmt: skip
    proc = subprocess.run(
        ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=openat",
         "-e", f"inject=openat:error=ENOSPC:when={when}", "-P", str(store / "sets"), *argv],
        env={**os.environ, "RINGFENCE_HOME": str(ringfence_home)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    result = json.loads(proc.stdout)
    if result["ok"]:
        assert exact_state(root) == {"a": ("file", 0o644, b"a\n")}
        out = _cli(capsys, root, "undo", result["result"]["checkpoint"])
        assert out["ok"], out
        assert exact_state(root) == {}
    else:
        assert exact_state(root) == {}, result
        journal = store / "journal"
        assert not journal.exists() or not [n for n in os.listdir(journal) if n.endswith(".log")]


@needs_strace
@needs_bwrap
@pytest.mark.parametrize("when", range(2, 8))
def test_a_shell_merge_whose_store_fills_is_undoable_or_unmade(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str], when: int
) -> None:
    """A command's merge with a refused entry (a FIFO) saves its set again as what it applied;
    the store full at that save (``ENOSPC`` at the ``when``-th ``openat`` in ``sets``) said
    "nothing was changed" beside the merged file, whose set still named the FIFO: its undo
    met a conflict for good. Whatever the point: what the message says is what the tree
    holds, and a merged file is undone by ``undo``."""
    root = tmp_path / "ws"
    root.mkdir()
    out = _cli(capsys, root, "call", "write_file", "--args",
               json.dumps({"path": "x", "content": "x"}))  # fmt: skip
    assert out["ok"], out  # the store exists
    before = exact_state(root)
    [store] = (ringfence_home / "checkpoints").iterdir()
    argv = [sys.executable, "-m", "ringfence", "call", "run_shell", "--args",
            json.dumps({"command": "echo a > a; mkfifo p"}), "--workspace", str(root),
            "--json", "--approve", "no", "--posture", "allow-reversible"]  # fmt: skip
    proc = subprocess.run(
        ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=openat",
         "-e", f"inject=openat:error=ENOSPC:when={when}", "-P", str(store / "sets"), *argv],
        env={**os.environ, "RINGFENCE_HOME": str(ringfence_home)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    result = json.loads(proc.stdout)
    assert not result["ok"]  # the FIFO is refused, at least
    if "nothing was changed" in result["error"]["message"]:
        assert exact_state(root) == before, result
    assert main(["recover", "--workspace", str(root), "--json"]) == 0
    capsys.readouterr()
    if exact_state(root) != before:
        out = _cli(capsys, root, "undo")
        assert out["ok"], out
    assert exact_state(root) == before


@needs_strace
def test_retention_in_another_session_never_removes_a_blob_a_write_just_named(
    tmp_path: Path,
    ringfence_home: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``a`` holds ``v0``, whose blob was stored two hours ago by sets that are now the
    oldest. Session 1's ``write_file a`` finds its before-image (``v0``) stored already and
    is held before its manifest exists; another start prunes with a retention of one set,
    drops those sets and removed the blob as unreferenced and old. Session 1 then reported
    its checkpoint, and ``undo`` failed for good: "blob … is missing (pruned?)". The blob a
    write names is kept (made young as it is found), so the write is undone byte for byte."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a").write_text("v0\n")
    for path, content in (("a", "v1\n"), ("a", "v0\n"), ("b", "b\n")):
        out = _cli(capsys, root, "call", "write_file", "--args",
                   json.dumps({"path": path, "content": content}))  # fmt: skip
        assert out["ok"], out
    [store] = (ringfence_home / "checkpoints").iterdir()
    old = time.time() - 7200  # stored two hours ago: past the store's hour of grace
    for f in store.rglob("*"):
        if f.is_file():
            os.utime(f, (old, old))
    argv = [sys.executable, "-m", "ringfence", "call", "write_file", "--args",
            json.dumps({"path": "a", "content": "v9\n"}),
            "--workspace", str(root), "--approve", "no", "--json",
            "--posture", "allow-reversible"]  # fmt: skip
    # Held 8 s as it stores its after-image (its first rename): its before-image is found
    # stored already, its manifest not saved yet.
    writer = subprocess.Popen(
        ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=renameat",
         "-e", "inject=renameat:delay_enter=8000000:when=1", *argv],
        env={**os.environ, "RINGFENCE_HOME": str(ringfence_home)},
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(
            n.startswith(".") for n in os.listdir(store / "blobs")
        ):
            time.sleep(0.02)
        assert any(n.startswith(".") for n in os.listdir(store / "blobs")), "never held"
        monkeypatch.setenv("RINGFENCE_CHECKPOINTS_KEEP", "1")
        assert main(["checkpoints", "list", "--workspace", str(root), "--json"]) == 0
        listed = json.loads(capsys.readouterr().out)["result"]
        monkeypatch.delenv("RINGFENCE_CHECKPOINTS_KEEP")
        assert [s["paths"] for s in listed] == [["b"]]  # the sets naming v0 were dropped
        stdout, _ = writer.communicate(timeout=60)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    written = json.loads(stdout)
    assert written["ok"] and written["result"]["checkpoint"], written
    assert (root / "a").read_text() == "v9\n"
    out = _cli(capsys, root, "undo", written["result"]["checkpoint"])
    assert out["ok"], out
    assert (root / "a").read_text() == "v0\n"  # the write's checkpoint was kept whole


@needs_strace
@needs_bwrap
def test_what_a_killed_writer_left_in_the_store_is_removed(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shell command writing 2 MB is killed (SIGKILL) as it names the blob it streamed in
    (its temporary file left), and again as it names its pack's index (the pack left, named,
    with no index: prune never looked at it). Those bytes stayed in the store for good, outside its limit (every kill, 2 MB
    more). Once an hour old (a live writer's is newer), the next start removes them and
    nothing else: the change sets listed are the same."""
    root = tmp_path / "ws"
    root.mkdir()
    out = _cli(capsys, root, "call", "write_file", "--args",
               json.dumps({"path": "x", "content": "x"}))  # fmt: skip
    assert out["ok"], out
    [store] = (ringfence_home / "checkpoints").iterdir()
    argv = [sys.executable, "-m", "ringfence", "call", "run_shell", "--args",
            json.dumps({"command": "head -c 2000000 /dev/urandom > big; echo s > small"}),
            "--workspace", str(root), "--approve", "no", "--json",
            "--posture", "allow-reversible"]  # fmt: skip

    def left() -> list[Path]:
        named = {f.name[:-4] for f in (store / "packs").glob("*.idx")}
        out = [f for f in store.rglob(".*") if f.parent.name in ("blobs", "packs", "sets")]
        return out + [f for f in (store / "packs").glob("*.pack") if f.name[:-5] not in named]

    # Killed at the first rename in blobs/ (the big blob streamed in, about to be named),
    # then at the second in packs/ (the pack named, its index about to be).
    for where, when in (("blobs", 1), ("packs", 2)):
        killed = subprocess.run(
            ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=renameat",
             "-P", str(store / where), "-e", f"inject=renameat:signal=KILL:when={when}",
             *argv],
            env={**os.environ, "RINGFENCE_HOME": str(ringfence_home)},
            capture_output=True, timeout=120, check=False,
        )  # fmt: skip
        assert killed.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL), killed
    found = left()
    assert any(f.suffix == ".pack" for f in found), found  # a pack with no index
    assert sum(f.stat().st_size for f in found) >= 2_000_000, found  # never named or pruned
    assert main(["checkpoints", "list", "--workspace", str(root), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["result"]
    assert all(f.exists() for f in found)  # young: it could be a live writer's
    old = time.time() - 7200
    for f in found:
        os.utime(f, (old, old))
    assert main(["checkpoints", "list", "--workspace", str(root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["result"] == listed
    assert [f for f in found if f.exists()] == []

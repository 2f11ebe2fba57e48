"""Attacks on "every change is undoable, and a crash never leaves a workspace mixed".

Each test performs its attack through the command line (in-process ``main``, or
a real ``python -m ringfence`` killed with SIGKILL at a chosen system call by
``strace --inject``) and asserts the promise and that nothing else changed on
disk: the tree byte for byte with modes (:func:`tree_helpers.exact_state`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import isolated  # noqa: F401 (an autouse fixture)
from tree_helpers import exact_state, git_found

from ringfence.cli._main import main
from ringfence.workspace import Change, ChangeSet, CheckpointStore, Workspace
from ringfence.workspace.changes._journal import TURN_WAIT_SECONDS
from ringfence.workspace.changes._model import Image


def _cli(capsys: pytest.CaptureFixture[str], root: Path, *words: str) -> dict[str, Any]:
    main([*words, "--workspace", str(root), "--approve", "no", "--json",
          "--posture", "allow-reversible"])  # fmt: skip
    return json.loads(capsys.readouterr().out)


def test_undo_refuses_to_overwrite_a_mode_changed_after_the_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The person's ``chmod`` after the change set is theirs: ``undo`` names it a conflict
    instead of putting the old mode (and bytes) back over it."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "f").write_text("old\n")
    (root / "f").chmod(0o644)
    out = _cli(capsys, root, "call", "write_file", "--args",
               json.dumps({"path": "f", "content": "new\n"}))  # fmt: skip
    assert out["ok"], out
    (root / "f").chmod(0o600)  # the person's change, after the set
    mine = exact_state(root)
    out = _cli(capsys, root, "undo")
    assert not out["ok"] and out["error"]["details"]["conflicts"] == ["f"], out
    assert exact_state(root) == mine
    # A directory the set made, its mode changed since: the same.
    out = _cli(capsys, root, "call", "write_file", "--args",
               json.dumps({"path": "d/g", "content": "x"}))  # fmt: skip
    assert out["ok"], out
    (root / "d").chmod(0o700)
    (root / "d" / "g").unlink()
    (root / "d" / "g").write_text("x")  # the same bytes again, by someone else: not a conflict
    (root / "d" / "g").chmod(0o644)
    mine = exact_state(root)
    out = _cli(capsys, root, "undo")
    assert not out["ok"] and out["error"]["details"]["conflicts"] == ["d"], out
    assert exact_state(root) == mine


# -- recovery: a rollback is a writer, judged like every merge ---------------------------------

needs_strace = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed"
)


def killed_at(
    root: Path,
    home: Path,
    words: list[str],
    syscall: str,
    under: Path,
    when: int = 1,
    also: Path | None = None,
) -> None:
    """Run ``python -m ringfence *words`` and SIGKILL it (every process of it) as it enters its
    ``when``-th ``syscall`` on a descriptor or path of ``under`` (or ``also``; ``strace
    --inject``): a kill at
    an exact point of its write, where a timer would land anywhere."""
    session = [] if words[0] == "recover" else ["--approve", "no", "--posture", "allow-reversible"]
    argv = [sys.executable, "-m", "ringfence", *words, "--workspace", str(root), "--json",
            *session]  # fmt: skip
    env = {**os.environ, "RINGFENCE_HOME": str(home)}
    proc = subprocess.run(
        ["strace", "-f", "-qq", "-o", "/dev/null", "-e", f"trace={syscall}",
         "-e", f"inject={syscall}:signal=KILL:when={when}", "-P", str(under),
         *(["-P", str(also)] if also else []), *argv],
        env=env, capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == -9 or proc.returncode == 137, (proc.returncode, proc.stderr[-2000:])


def _forge_interrupted(root: Path, changes: list[Change]) -> str:
    """A change set and a journal line ``B <set>`` nobody holds, written straight into the
    store: what someone who can write ``$RINGFENCE_HOME`` could leave for the next start."""
    with Workspace([root]) as ws:
        store = CheckpointStore(ws)
        cs = ChangeSet(store.new_id(), time.time(), "run_shell", tuple(changes))
        store.save(cs)
        journal = store.journal_fd_if_any(create=True)
        assert journal is not None
        fd = os.open("99999-00000000abcd.log", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=journal)
        os.write(fd, f"B {cs.id}\n".encode())
        os.close(fd)
        store.close()
    return cs.id


def test_a_tampered_manifest_makes_recovery_write_nothing_a_merge_refuses(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A manifest read back by recovery is data: its before-images go through the merge's
    rules, so it cannot plant a link out, a set-uid file, a FIFO or a git hook, nor stop every
    later start with an error."""
    root = tmp_path / "ws"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "sub" / "objects").mkdir(parents=True)
    (root / "sub" / "refs").mkdir()
    before = exact_state(root)
    with Workspace([root]) as ws:
        store = CheckpointStore(ws)
        hook = store.put(b"#!/bin/sh\ntouch /tmp/pwned\n")
        out, head = store.put(b"/etc"), store.put(b"ref: refs/heads/main\n")
        store.close()
    hostile = {
        "out": Image("symlink", 0o777, out, 4),
        "suid": Image("file", 0o4755, hook, 27),
        ".git/hooks/pre-commit": Image("file", 0o755, hook, 27),
        "fifo": Image("fifo", 0o644),
        "../escape": Image("file", 0o644, hook, 27),
        "sub/HEAD": Image("file", 0o644, head, 21),  # would complete a repository
    }
    set_id = _forge_interrupted(root, [Change(0, p, img, None) for p, img in hostile.items()])
    code = main(["recover", "--workspace", str(root), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    [done] = report["result"]["sets"]
    assert done["id"] == set_id and done["undone"] == 0
    assert sorted(r["path"] for r in done["refused"]) == sorted(hostile)
    assert exact_state(root) == before  # nothing written, in .git or anywhere
    assert not (tmp_path / "escape").exists()
    # Every later start works (a refused entry is reported once, never an error for ever).
    code = main(["checkpoints", "list", "--workspace", str(root), "--json"])
    assert code == 0, capsys.readouterr()


@needs_strace
@needs_bwrap
def test_a_link_planted_after_a_kill_does_not_carry_recovery_into_git(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A merge killed after it deleted ``sub/pre-commit``; then another process (a second
    session, the person's shell) makes ``sub`` a link to ``.git/hooks``. Recovery puts back
    what it can and never writes through the link: no hook appears, nothing else moves."""
    root = tmp_path / "ws"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "sub").mkdir()
    (root / "sub" / "pre-commit").write_text("#!/bin/sh\necho the person's script\n")
    (root / "f1").write_text("old\n")
    command = "echo new > f1; rm sub/pre-commit; echo z > sub/zz"
    # Killed as it renames sub/zz in: f1 and the deletion are merged, the set not ended.
    killed_at(root, ringfence_home, ["call", "run_shell", "--args",
              json.dumps({"command": command})], "renameat", root / "sub")  # fmt: skip
    assert (root / "f1").read_text() == "new\n" and not (root / "sub" / "pre-commit").exists()
    shutil.rmtree(root / "sub")
    (root / "sub").symlink_to(".git/hooks")
    planted = exact_state(root)
    code = main(["recover", "--workspace", str(root), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert not (root / ".git" / "hooks" / "pre-commit").exists()
    planted["f1"] = ("file", 0o644, b"old\n")  # the one change recovery could put back
    assert exact_state(root) == planted
    assert code == 0, report
    [done] = report["result"]["sets"]
    assert [r["path"] for r in done["refused"]] == ["sub/pre-commit"]


# -- the journal: never lost to a recovery running beside its writer ---------------------------


@needs_strace
@needs_bwrap
def test_a_recovery_starting_beside_a_merge_never_takes_its_journal(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second ringfence process starts (and recovers) just as a merge makes its journal
    file; the merge is then killed midway. The next start must still find its journal and
    roll it back whole: the workspace is never left half-merged with nothing to say so."""
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    for i in range(1, 9):
        (root / "sub" / f"f{i}").write_text("old\n")
    out = _cli(capsys, root, "call", "write_file", "--args",
               json.dumps({"path": "x", "content": "x"}))  # fmt: skip
    assert out["ok"], out  # the store and its journal directory exist
    before = exact_state(root)
    [store] = (ringfence_home / "checkpoints").iterdir()
    journal = store / "journal"
    assert os.listdir(journal) == []
    argv = [sys.executable, "-m", "ringfence", "call", "run_shell", "--args",
            json.dumps({"command": "for i in $(seq 1 8); do echo new > sub/f$i; done"}),
            "--workspace", str(root), "--approve", "no", "--json",
            "--posture", "allow-reversible"]  # fmt: skip
    # The 9th open in sub/ or the journal directory is the journal file's (after the capture's
    # 8 reads): held there 4 s after it was made. Killed at a rename well inside the merge.
    writer = subprocess.Popen(
        ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=openat,renameat",
         "-e", "inject=openat:delay_exit=4000000:when=9",
         "-e", "inject=renameat:signal=KILL:when=6",
         "-P", str(journal), "-P", str(root / "sub"), *argv],
        env={**os.environ, "RINGFENCE_HOME": str(ringfence_home)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not os.listdir(journal) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert os.listdir(journal), "the merge never made its journal file"
        assert main(["recover", "--workspace", str(root), "--json"]) == 0  # the other process
        capsys.readouterr()
        assert writer.wait(timeout=120) != 0
    finally:
        if writer.poll() is None:
            writer.kill()
    assert exact_state(root) != before  # killed midway: part of the set is merged
    code = main(["recover", "--workspace", str(root), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert exact_state(root) == before, report
    assert code == 0 and len(report["result"]["sets"]) == 1
    assert os.listdir(journal) == []


@needs_strace
def test_a_write_file_killed_after_its_first_mkdir_leaves_no_directory(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``write_file a/b/c.txt`` makes ``a`` and ``b`` before its file: killed between the
    two, the next start removes ``a`` (its journal began before the first ``mkdir``), and no
    change set is left for a write that never happened."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "keep").write_text("keep\n")
    before = exact_state(root)
    write = ["call", "write_file", "--args", json.dumps({"path": "a/b/c.txt", "content": "x"})]
    # Killed as it enters its second mkdirat (of b, in a): a is made, b is not.
    killed_at(root, ringfence_home, write, "mkdirat", root, when=2, also=root / "a")
    assert (root / "a").is_dir() and not (root / "a" / "b").exists()
    assert main(["checkpoints", "list", "--workspace", str(root), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["result"]
    assert exact_state(root) == before
    assert listed == []


# -- a full file system midway -----------------------------------------------------------------


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs of the test's own (mounting needs root: skipped otherwise)."""
    where = tmp_path / "small"
    where.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)],
        capture_output=True, check=False,
    )  # fmt: skip
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode(errors='replace')}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@needs_bwrap
def test_an_undo_that_fills_the_disk_midway_is_never_left_half_written(
    small_fs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``undo`` puts ``q`` back (space kept by the person's hard link ``q2``), then ``p``
    fails for space, and putting ``q`` back to the set's bytes fails too. It said "p cannot
    be written" and left q undone, p not, with no record and no journal: a mixed tree for
    good. Now it says the workspace is half-written, keeps the set in flight, and the next
    start after space is freed rolls it back to exactly the tree before the undo."""
    root = small_fs
    (root / "p").write_bytes(os.urandom(1_500_000))
    (root / "q").write_text("small\n")
    command = "echo s > p; head -c 1500000 /dev/urandom > q"
    out = _cli(capsys, root, "call", "run_shell", "--args", json.dumps({"command": command}))
    assert out["ok"], out
    os.link(root / "q", root / "q2")
    (root / "fill").write_bytes(b"\0" * 1_600_000)
    before_undo = exact_state(root)
    out = _cli(capsys, root, "undo")
    assert not out["ok"], out
    assert out["error"].get("details", {}).get("half_written") == ["q"], out
    assert "half-written" in out["error"]["message"]
    # Still full: every start says what it is doing and why it cannot, naming the set.
    out = _cli(capsys, root, "call", "list_directory", "--args", '{"path": "."}')
    assert not out["ok"] and "could not roll back change set" in out["error"]["message"], out
    (root / "fill").unlink()
    del before_undo["fill"]
    assert main(["recover", "--workspace", str(root), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["result"]
    assert [s["record"] for s in report["sets"]] == ["dropped"], report
    assert exact_state(root) == before_undo
    assert not [n for n in os.listdir(root) if n.startswith(".ringfence-")]


@needs_strace
def test_a_recovery_killed_between_mkdir_and_chmod_is_finished_by_the_next(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An undo killed midway; its recovery killed between making ``d/e`` (0700) and giving it
    its mode: the recovery after that must finish the job, mode included, not leave ``d/e``
    at 0700 as "changed by someone else"."""
    root = tmp_path / "ws"
    root.mkdir()
    out = _cli(capsys, root, "call", "write_file", "--args",
               json.dumps({"path": "d/e/f", "content": "x"}))  # fmt: skip
    assert out["ok"], out
    before = exact_state(root)
    assert before["d/e"][1] == 0o755
    # The undo removes f, e, d: killed as it removes d (f and e are gone).
    killed_at(root, ringfence_home, ["undo"], "unlinkat", root, when=2, also=root / "d")
    assert not (root / "d" / "e").exists()
    # Its recovery makes e again, then is killed as it gives e its mode.
    killed_at(root, ringfence_home, ["recover"], "fchmodat", root / "d")
    assert stat.S_IMODE((root / "d" / "e").stat().st_mode) == 0o700
    assert main(["recover", "--workspace", str(root), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["result"]
    assert exact_state(root) == before, report
    assert [s["left"] for s in report["sets"]] == [[]]


@needs_bwrap
def test_no_writer_makes_a_file_named_as_ringfence_s_temporary_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Recovery removes ``.ringfence-<16 hex>.tmp`` files from every directory a killed set
    touched, unrecorded (they are its writers' own). So no command or file tool may leave a
    file of its own under such a name, where a later recovery would delete it without a
    trace: refused by name, the rest of the command merged."""
    root = tmp_path / "ws"
    root.mkdir()
    name = ".ringfence-0123456789abcdef.tmp"
    out = _cli(capsys, root, "call", "run_shell", "--args",
               json.dumps({"command": f"echo data > {name}; echo x > y"}))  # fmt: skip
    assert not out["ok"], out
    assert [r["path"] for r in out["error"]["details"]["changes"]["refused"]] == [name]
    out = _cli(capsys, root, "call", "write_file", "--args",
               json.dumps({"path": f"sub/{name}", "content": "x"}))  # fmt: skip
    assert not out["ok"] and out["error"]["code"] == "invalid_arguments", out
    assert exact_state(root) == {"y": ("file", 0o644, b"x\n")}


@needs_strace
@needs_bwrap
def test_an_editor_writing_during_an_undo_is_a_conflict_not_overwritten(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``undo`` checks every path, then writes them one by one: the person's editor saving
    ``f`` after the check and before the undo reaches ``f`` was overwritten. Now each write
    checks its path again: the editor's bytes stay, what the undo had written is put back,
    and the undo says it was a conflict."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "f").write_text("f0\n")
    (root / "g").write_text("g0\n")
    out = _cli(capsys, root, "call", "run_shell", "--args",
               json.dumps({"command": "echo f1 > f; echo g1 > g"}))  # fmt: skip
    assert out["ok"], out
    argv = [sys.executable, "-m", "ringfence", "undo", "--workspace", str(root), "--json",
            "--approve", "no", "--posture", "allow-reversible"]  # fmt: skip
    # The undo writes g first: held 3 s as it renames g's new bytes into place.
    undo = subprocess.Popen(
        ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=renameat",
         "-e", "inject=renameat:delay_enter=3000000:when=1", "-P", str(root), *argv],
        env={**os.environ, "RINGFENCE_HOME": str(ringfence_home)},
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not [
            n for n in os.listdir(root) if n.startswith(".ringfence-")
        ]:
            time.sleep(0.01)
        (root / "f").write_text("the person's edit\n")  # after the undo's conflict check
        mine = {k: v for k, v in exact_state(root).items() if not k.startswith(".ringfence-")}
        stdout, _ = undo.communicate(timeout=120)
    finally:
        if undo.poll() is None:
            undo.kill()
    out = json.loads(stdout)
    assert exact_state(root) == mine  # f is the editor's, g as the set left it
    assert not out["ok"] and out["error"]["details"]["conflicts"] == ["f"], out


def _holding(path: Path) -> bool:
    """Does any process have ``path`` open (its descriptors, read from /proc)?"""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                    return True
            except OSError:
                continue
    return False


@needs_strace
@needs_bwrap
def test_two_recoveries_at_once_never_roll_a_set_back_twice(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two starts recover the same dead journal: the second opened it before the first
    removed it, and locks it after the first is done — by then the person has applied the
    rolled-back set again. The second must see the journal was recovered already, not roll
    the person's apply back (leaving it recorded as applied, and the tree without it)."""
    root = tmp_path / "ws"
    root.mkdir()
    for i in range(1, 4):
        (root / f"f{i}").write_text("old\n")
    command = "for i in 1 2 3; do echo new > f$i; done"
    killed_at(root, ringfence_home, ["call", "run_shell", "--args",
              json.dumps({"command": command})], "renameat", root, when=2)  # fmt: skip
    [store] = (ringfence_home / "checkpoints").iterdir()
    [name] = os.listdir(store / "journal")
    journal = store / "journal" / name
    err = tmp_path / "second.err"
    with err.open("wb") as err_file:  # the child keeps its own copy
        second = subprocess.Popen(
            ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=flock",
             "-e", "inject=flock:delay_enter=3000000:when=1", "-P", str(journal),
             sys.executable, "-m", "ringfence", "recover", "--workspace", str(root), "--json"],
            env={**os.environ, "RINGFENCE_HOME": str(ringfence_home)},
            stdout=subprocess.PIPE, stderr=err_file,
        )  # fmt: skip
    try:
        # Longer than a start may wait for the writers' lock (TURN_WAIT_SECONDS): a CI run
        # once saw no open within 60 s, and one run alone took 52 s (cause not yet found).
        deadline = time.monotonic() + TURN_WAIT_SECONDS + 60
        while not _holding(journal) and second.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _holding(journal), (
            "the second recovery never opened the journal",
            second.poll(),
            err.read_text(errors="replace")[-2000:],
        )
        assert main(["recover", "--workspace", str(root), "--json"]) == 0  # the first
        sets = json.loads(capsys.readouterr().out)["result"]["sets"]
        if not sets:
            # The second locks a dead journal only under the writers' lock (since
            # 2026-12-07), so it held that lock through its delay and rolled back first.
            stdout, _ = second.communicate(timeout=120)
            sets = json.loads(stdout)["result"]["sets"]
            second = subprocess.Popen(
                [sys.executable, "-m", "ringfence", "recover", "--workspace", str(root),
                 "--json"], env={**os.environ, "RINGFENCE_HOME": str(ringfence_home)},
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        [done] = sets
        assert done["record"] == "staged"
        out = _cli(capsys, root, "call", "apply_changes", "--args",
                   json.dumps({"id": done["id"]}))  # fmt: skip
        assert out["ok"], out
        applied = exact_state(root)
        assert applied["f3"] == ("file", 0o644, b"new\n")
        stdout, _ = second.communicate(timeout=120)
    finally:
        if second.poll() is None:
            second.kill()
    assert exact_state(root) == applied, stdout
    assert json.loads(stdout)["result"]["sets"] == []


def test_an_undo_with_the_store_s_file_system_full_names_it_and_changes_nothing(
    tmp_path: Path, small_fs: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    """The journal's first line is the first thing an undo writes: on a full store it said
    ``undo failed: OSError: [Errno 28]``. Now it is ``unavailable`` naming the store's file
    system and what to do, and nothing was changed."""
    home = small_fs / "home"
    monkeypatch.setenv("RINGFENCE_HOME", str(home))
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a").write_text("a\n")
    out = _cli(capsys, root, "call", "write_file", "--args",
               json.dumps({"path": "a", "content": "b\n"}))  # fmt: skip
    assert out["ok"], out
    with contextlib.suppress(OSError):
        (small_fs / "fill").write_bytes(b"\0" * (8 << 20))
    before = exact_state(root)
    out = _cli(capsys, root, "undo")
    assert not out["ok"] and out["error"]["code"] == "unavailable", out
    assert "checkpoint store" in out["error"]["message"] and "is full" in out["error"]["message"]
    assert exact_state(root) == before


# -- two ringfence processes on one workspace ----------------------------------------------------


@needs_strace
@needs_bwrap
def test_two_undos_of_one_set_at_once_never_leave_it_half_undone(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two ``undo`` processes of the same set: the first is held as it renames ``g`` back (its
    checks passed), the second undoes the set whole meanwhile. The first then found ``f``
    undone already (a conflict) and "put back" ``g`` to the set's bytes: ``f`` undone, ``g``
    not, recorded as undone. Now writers of one workspace take turns: the second waits, then
    finds the set undone and changes nothing."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "f").write_text("f0\n")
    (root / "g").write_text("g0\n")
    out = _cli(capsys, root, "call", "run_shell", "--args",
               json.dumps({"command": "echo f1 > f; echo g1 > g"}))  # fmt: skip
    assert out["ok"], out
    set_id = out["result"]["changes"]["id"]
    before = exact_state(root)
    argv = [sys.executable, "-m", "ringfence", "undo", set_id, "--workspace", str(root), "--json",
            "--approve", "no", "--posture", "allow-reversible"]  # fmt: skip
    first = subprocess.Popen(
        ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=renameat",
         "-e", "inject=renameat:delay_enter=3000000:when=1", "-P", str(root), *argv],
        env={**os.environ, "RINGFENCE_HOME": str(ringfence_home)},
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not [
            n for n in os.listdir(root) if n.startswith(".ringfence-")
        ]:
            time.sleep(0.01)
        second = _cli(capsys, root, "undo", set_id)  # the other process, as the first is held
        stdout, _ = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    results = [json.loads(stdout), second]
    assert sorted(r["ok"] for r in results) == [False, True], results
    assert exact_state(root) == {"f": ("file", 0o644, b"f0\n"), "g": ("file", 0o644, b"g0\n")}
    [failed] = [r for r in results if not r["ok"]]
    assert failed["error"].get("details", {}).get("conflicts"), failed
    assert before != exact_state(root)


@needs_bwrap
def test_a_write_while_another_process_holds_the_workspace_waits_then_changes_nothing(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    """Another process holds the workspace's writer turn (a long merge; here ``flock(1)`` on
    the store's ``writer.lock``) past the wait: a ``write_file`` is ``unavailable`` with
    nothing written and no set, a shell command's changes are kept as a staged set (not lost
    with its overlay), and once the turn is free ``apply_changes`` merges them."""
    from ringfence.workspace.changes import _journal

    monkeypatch.setattr(_journal, "TURN_WAIT_SECONDS", 0.5)
    root = tmp_path / "ws"
    root.mkdir()
    out = _cli(capsys, root, "call", "write_file", "--args",
               json.dumps({"path": "x", "content": "x"}))  # fmt: skip
    assert out["ok"], out  # the store exists
    [store] = (ringfence_home / "checkpoints").iterdir()
    before = exact_state(root)
    holder = subprocess.Popen(
        ["flock", "-o", str(store / "writer.lock"), "sleep", "30"], start_new_session=True
    )
    try:
        deadline = time.monotonic() + 10
        while not _holding(store / "writer.lock") and time.monotonic() < deadline:
            time.sleep(0.01)
        out = _cli(capsys, root, "call", "write_file", "--args",
                   json.dumps({"path": "y", "content": "y"}))  # fmt: skip
        assert not out["ok"] and out["error"]["code"] == "unavailable", out
        assert "another ringfence process" in out["error"]["message"], out
        out = _cli(capsys, root, "call", "run_shell", "--args",
                   json.dumps({"command": "echo z > z"}))  # fmt: skip
        assert not out["ok"] and out["error"]["code"] == "unavailable", out
        staged = out["error"]["details"]["changes"]
        assert staged["staged"], out
        assert exact_state(root) == before
    finally:
        os.killpg(holder.pid, 9)
        holder.wait()
    out = _cli(capsys, root, "call", "apply_changes", "--args", json.dumps({"id": staged["id"]}))
    assert out["ok"], out
    assert exact_state(root) == {**before, "z": ("file", 0o644, b"z\n")}


# -- a plan apply killed midway ------------------------------------------------------------------


@needs_strace
@needs_bwrap
def test_a_plan_apply_killed_midway_names_the_call_it_never_finished(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plan of three calls, killed inside the second's merge: the next start rolls that
    merge back, and the call stays marked applied (a plan applies once). ``plan show`` said
    "applied" for it and ``plan apply`` ran the third: the workspace held the first and the
    third, with nothing saying the second was not there. Now the ledger records each call's
    end; a call marked without one is named by ``plan show`` and ``plan apply`` as not
    applied, with how to make it by hand, which then gives the plan's whole tree."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a").write_text("old\n")
    (root / "b").write_text("old\n")
    plan = tmp_path / "plan.json"
    for tool, args in (
        ("write_file", {"path": "a", "content": "new a\n"}),
        ("run_shell", {"command": "echo new > b; echo c > c"}),
        ("write_file", {"path": "d/e", "content": "e\n"}),
    ):
        out = _cli(capsys, root, "call", tool, "--args", json.dumps(args), "--dry-run", str(plan))
        assert out["ok"], out
    # Killed at its third rename in the root: a is written, b merged, c not yet.
    killed_at(root, ringfence_home, ["plan", "apply", str(plan)], "renameat", root, when=3)
    assert main(["plan", "show", str(plan), "--json"]) == 0  # a start: the merge rolled back
    shown = json.loads(capsys.readouterr().out)["result"]
    first, second, _ = (c["call_id"] for c in shown["calls"])
    assert set(shown["applied"]) == {first, second}
    assert list(shown["unended"]) == [second], shown
    assert shown["unended"][second]["in_workspace"] is False
    assert exact_state(root) == {"a": ("file", 0o644, b"new a\n"), "b": ("file", 0o644, b"old\n")}
    assert main(["plan", "show", str(plan)]) == 0
    text = capsys.readouterr().out
    assert "NOT APPLIED" in text and "ringfence call apply_changes --args" in text, text
    out = _cli(capsys, root, "plan", "apply", str(plan))
    assert out["ok"] and list(out["result"]["unended"]) == [second], out
    staged = shown["calls"][1]["arguments"]["id"]
    out = _cli(capsys, root, "call", "apply_changes", "--args", json.dumps({"id": staged}))
    assert out["ok"], out
    assert exact_state(root) == {
        "a": ("file", 0o644, b"new a\n"),
        "b": ("file", 0o644, b"new\n"),
        "c": ("file", 0o644, b"c\n"),
        "d": ("dir", 0o755, b""),
        "d/e": ("file", 0o644, b"e\n"),
    }
    out = _cli(capsys, root, "plan", "apply", str(plan))  # spent: refused, the call named
    assert not out["ok"] and list(out["error"]["details"]["unended"]) == [second], out


# -- a damaged store -----------------------------------------------------------------------------


def test_a_torn_or_swapped_manifest_hides_no_other_change_set(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One manifest cut to nothing (written, not fsynced, then a power loss) and one swapped
    for a link to another: ``checkpoints list`` and ``undo`` failed with ``JSONDecodeError``
    for every set, so no set the store listed could be undone. Now the damaged ones are
    listed as damaged, naming their file, and the others are listed and undone as ever."""
    root = tmp_path / "ws"
    root.mkdir()
    ids = []
    for name in ("a", "b", "c"):
        out = _cli(capsys, root, "call", "write_file", "--args",
                   json.dumps({"path": name, "content": f"{name}\n"}))  # fmt: skip
        assert out["ok"], out
        ids.append(out["result"]["checkpoint"])
    [store] = (ringfence_home / "checkpoints").iterdir()
    (store / "sets" / f"{ids[0]}.json").write_bytes(b"")
    (store / "sets" / f"{ids[2]}.json").unlink()
    (store / "sets" / f"{ids[2]}.json").symlink_to(f"{ids[1]}.json")
    assert main(["checkpoints", "list", "--workspace", str(root), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["result"]
    assert [s["id"] for s in listed] == ids[::-1]
    assert [bool(s.get("damaged")) for s in listed] == [True, False, True], listed
    assert f"{ids[0]}.json is damaged" in listed[2]["damaged"]
    out = _cli(capsys, root, "undo")  # the newest set that can be undone: b's
    assert out["ok"] and [u["undone"] for u in out["result"]] == [ids[1]], out
    assert exact_state(root) == {"a": ("file", 0o644, b"a\n"), "c": ("file", 0o644, b"c\n")}
    out = _cli(capsys, root, "undo", ids[0])
    assert not out["ok"] and out["error"]["code"] == "tool_error", out
    assert f"{ids[0]}.json is damaged" in out["error"]["message"]
    assert exact_state(root) == {"a": ("file", 0o644, b"a\n"), "c": ("file", 0o644, b"c\n")}


# -- a workspace renamed after a kill ------------------------------------------------------------


@needs_strace
@needs_bwrap
def test_a_merge_killed_then_its_workspace_renamed_is_rolled_back_at_the_new_path(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A merge killed midway, then the person renames the workspace's directory. The store is
    named by the roots' paths, so the next start under the new name had a store of its own
    and never read the killed merge's journal: the tree stayed half-merged for good, and
    ``recover`` found nothing. Now the roots' identity names the store that wrote there: the
    start under the new name takes it over and rolls the merge back."""
    root = tmp_path / "ws"
    root.mkdir()
    for i in range(1, 4):
        (root / f"f{i}").write_text("old\n")
    before = exact_state(root)
    command = "for i in 1 2 3; do echo new > f$i; done"
    killed_at(root, ringfence_home, ["call", "run_shell", "--args",
              json.dumps({"command": command})], "renameat", root, when=2)  # fmt: skip
    assert exact_state(root) != before  # half-merged
    moved = tmp_path / "renamed"
    root.rename(moved)
    assert main(["recover", "--workspace", str(moved), "--json"]) == 0
    [done] = json.loads(capsys.readouterr().out)["result"]["sets"]
    assert exact_state(moved) == before, done
    assert done["record"] == "staged" and done["left"] == [], done
    assert main(["recover", "--workspace", str(moved), "--json"]) == 0  # once
    assert json.loads(capsys.readouterr().out)["result"]["sets"] == []


def test_a_renamed_workspace_lists_and_undoes_the_sets_made_before(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Renamed, a workspace had an empty store: ``checkpoints list`` showed nothing and
    ``undo`` said there was nothing to undo, the sets made an hour before unreachable. Now
    the store of its directories under the old path becomes its store."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "f").write_text("old\n")
    before = exact_state(root)
    out = _cli(capsys, root, "call", "write_file", "--args",
               json.dumps({"path": "f", "content": "new\n"}))  # fmt: skip
    assert out["ok"], out
    set_id = out["result"]["checkpoint"]
    moved = tmp_path / "renamed"
    root.rename(moved)
    assert main(["checkpoints", "list", "--workspace", str(moved), "--json"]) == 0
    assert [s["id"] for s in json.loads(capsys.readouterr().out)["result"]] == [set_id]
    out = _cli(capsys, moved, "undo")
    assert out["ok"] and [u["undone"] for u in out["result"]] == [set_id], out
    assert exact_state(moved) == before
    # A new directory at the old path is another workspace: its own, empty store.
    root.mkdir()
    assert main(["checkpoints", "list", "--workspace", str(root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["result"] == []


@needs_strace
@needs_bwrap
def test_a_merge_killed_then_moved_onto_a_path_with_a_store_is_rolled_back(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same, renamed onto a path that has a store already (an earlier directory there):
    the start there rolls back the killed merge from the store of the old path."""
    moved = tmp_path / "renamed"
    moved.mkdir()
    out = _cli(capsys, moved, "call", "write_file", "--args",
               json.dumps({"path": "x", "content": "x"}))  # fmt: skip
    assert out["ok"], out
    root = tmp_path / "ws"
    root.mkdir()  # before the removal: not the removed directory's inode again
    shutil.rmtree(moved)
    for i in range(1, 4):
        (root / f"f{i}").write_text("old\n")
    before = exact_state(root)
    command = "for i in 1 2 3; do echo new > f$i; done"
    killed_at(root, ringfence_home, ["call", "run_shell", "--args",
              json.dumps({"command": command})], "renameat", root, when=2)  # fmt: skip
    root.rename(moved)
    assert main(["recover", "--workspace", str(moved), "--json"]) == 0
    [done] = json.loads(capsys.readouterr().out)["result"]["sets"]
    assert exact_state(moved) == before, done
    assert done["record"] == "staged" and done["store"], done


# -- a write failing between its visible step and its mode ---------------------------------------


@needs_strace
@needs_bwrap
@pytest.mark.parametrize("where", ["", "d"])
def test_an_undo_whose_chmod_fails_after_the_write_puts_that_write_back(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """``undo`` makes a directory (0700) or renames a file into place, then gives it its
    mode: that ``chmod`` failing (EIO) left the directory or file there, the undo reporting
    an error and putting back only the changes before it — a tree neither before nor after,
    with no record and no journal. Now the write begun is put back with the rest."""
    root = tmp_path / "ws"
    (root / "d").mkdir(parents=True)
    (root / "e").mkdir()
    for name in ("f", "d/g", "e/h"):
        (root / name).write_text(f"old {name}\n")
    out = _cli(capsys, root, "call", "run_shell", "--args",
               json.dumps({"command": "echo new > f; rm d/g; rm -r e"}))  # fmt: skip
    assert out["ok"], out
    before = exact_state(root)
    argv = [sys.executable, "-m", "ringfence", "undo", "--workspace", str(root), "--json",
            "--approve", "no", "--posture", "allow-reversible"]  # fmt: skip
    # The first fchmodat in the root is e's (made again), in d that of g (written again).
    proc = subprocess.run(
        ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=fchmodat",
         "-e", "inject=fchmodat:error=EIO:when=1", "-P", str(root / where), *argv],
        env={**os.environ, "RINGFENCE_HOME": str(ringfence_home)},
        capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    out = json.loads(proc.stdout)
    assert not out["ok"] and "Input/output error" in out["error"]["message"], out
    assert exact_state(root) == before
    assert main(["recover", "--workspace", str(root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["result"]["sets"] == []
    assert exact_state(root) == before


@needs_strace
def test_a_write_file_whose_directory_fsync_fails_keeps_its_change_set(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``write_file`` renames its file into place, then fsyncs the directory: that fsync
    failing (EIO) made the call an error and dropped its change set — the new bytes in the
    workspace with no record, nothing to undo. Now the error says the file was written and
    names its change set, which ``undo`` reverses byte for byte."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "f").write_text("old\n")
    (root / "f").chmod(0o640)
    before = exact_state(root)
    argv = [sys.executable, "-m", "ringfence", "call", "write_file", "--args",
            json.dumps({"path": "f", "content": "new\n"}), "--workspace", str(root), "--json",
            "--approve", "no", "--posture", "allow-reversible"]  # fmt: skip
    # The first fsync of the root's own descriptor is the directory's, after the rename.
    proc = subprocess.run(
        ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=fsync",
         "-e", "inject=fsync:error=EIO:when=1", "-P", str(root), *argv],
        env={**os.environ, "RINGFENCE_HOME": str(ringfence_home)},
        capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    out = json.loads(proc.stdout)
    assert not out["ok"] and out["error"].get("details", {}).get("written"), out
    kept = out["error"]["details"]["checkpoint"]
    assert exact_state(root) == {"f": ("file", 0o640, b"new\n")}
    out = _cli(capsys, root, "undo")
    assert out["ok"] and out["result"][0]["undone"] == kept, out
    assert exact_state(root) == before


def test_a_journal_this_version_cannot_read_is_kept_and_named(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dead journal whose lines this version cannot read (another version's format, or
    damaged) may name an operation left half-written: it was removed at the next start as
    if empty, the tree left as it was with nothing saying so. Now it is kept and named at
    every start; the lines it can read are rolled back as ever."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "f").write_text("old\n")
    with Workspace([root]) as ws:
        store = CheckpointStore(ws)
        old, new = store.put(b"old\n"), store.put(b"new\n")
        change = Change(0, "f", Image("file", 0o644, old, 4), Image("file", 0o644, new, 4))
        cs = ChangeSet(store.new_id(), time.time(), "run_shell", (change,))
        store.save(cs)
        journal = store.journal_fd_if_any(create=True)
        assert journal is not None
        fd = os.open("99999-00000000abcd.log", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=journal)
        os.write(fd, f"B {cs.id}\nB2 {cs.id} 4 future-format\nE\u00e9 {cs.id}\n".encode())
        os.close(fd)
        store.close()
    (root / "f").write_text("new\n")  # the set half-merged
    for _ in range(2):  # named at every start, never removed unread
        assert main(["recover", "--workspace", str(root), "--json"]) == 0
        report = json.loads(capsys.readouterr().out)["result"]
        [kept] = report["unreadable"]
        assert kept["journal"].endswith("99999-00000000abcd.log"), kept
        assert kept["lines"][0].startswith("B2 "), kept
        assert exact_state(root) == {"f": ("file", 0o644, b"old\n")}  # the readable B line
    [journal_dir] = (ringfence_home / "checkpoints").iterdir()
    assert os.listdir(journal_dir / "journal") == ["99999-00000000abcd.log"]
    assert main(["recover", "--workspace", str(root)]) == 0
    assert "cannot read" in capsys.readouterr().out


# -- a clock stepped back --------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("faketime") is None, reason="faketime is not installed")
def test_undo_after_the_clock_stepped_back_undoes_the_last_set(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A set's id is its creation time, and ids sort by age. With the clock stepped back an
    hour (NTP, a resumed VM: here ``faketime`` for one ringfence process), the new set's id
    sorted before the previous one, so ``undo`` undid the previous set, not the last. Now a
    new id is always past every id the store holds."""
    root = tmp_path / "ws"
    root.mkdir()
    out = _cli(capsys, root, "call", "write_file", "--args",
               json.dumps({"path": "a", "content": "a\n"}))  # fmt: skip
    assert out["ok"], out
    proc = subprocess.run(
        ["faketime", "-f", "-1h", sys.executable, "-m", "ringfence", "call", "write_file",
         "--args", json.dumps({"path": "b", "content": "b\n"}), "--workspace", str(root),
         "--json", "--approve", "no", "--posture", "allow-reversible"],
        env={**os.environ, "RINGFENCE_HOME": str(ringfence_home)},
        capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    last = json.loads(proc.stdout)
    assert last["ok"], (last, proc.stderr[-1000:])
    out = _cli(capsys, root, "undo")
    assert out["ok"] and out["result"][0]["undone"] == last["result"]["checkpoint"], out
    assert exact_state(root) == {"a": ("file", 0o644, b"a\n")}


def test_a_fifo_named_as_a_journal_does_not_hang_every_start(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A FIFO left in the journal directory under a journal's name (a damaged store, or
    someone who can write ``$RINGFENCE_HOME``): every start opened it to read and waited for
    a writer for ever. Now it is read without waiting, as an empty journal."""
    root = tmp_path / "ws"
    root.mkdir()
    out = _cli(capsys, root, "call", "write_file", "--args",
               json.dumps({"path": "a", "content": "a\n"}))  # fmt: skip
    assert out["ok"], out
    [store] = (ringfence_home / "checkpoints").iterdir()
    os.mkfifo(store / "journal" / "1-0123456789ab.log")
    proc = subprocess.run(
        [sys.executable, "-m", "ringfence", "checkpoints", "list", "--workspace", str(root),
         "--json"],
        env={**os.environ, "RINGFENCE_HOME": str(ringfence_home)},
        capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [s["tool"] for s in json.loads(proc.stdout)["result"]] == ["write_file"]


def test_recovery_never_completes_a_repository_or_sends_a_link_out_elsewhere(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each change a rollback makes passed the merge's entry rules, and each write checked its
    own directory; but the tree it leaves was never judged as a merge's is. A manifest whose
    rollback only makes a directory ``o`` completed ``sub`` (``objects -> ../o``, its HEAD, refs
    and a ``core.fsmonitor`` already there) into a repository; one whose rollback puts a
    directory back where a link ``d -> s/t`` was sent ``x -> d/../..`` out of the root."""
    root = tmp_path / "ws"
    marker = tmp_path / "PWNED"
    (root / "sub" / "refs").mkdir(parents=True)
    (root / "sub" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "sub" / "objects").symlink_to("../o")
    (root / "sub" / "config").write_text(f'[core]\n\tfsmonitor = "touch {marker}"\n')
    (root / "s" / "t").mkdir(parents=True)
    (root / "d").symlink_to("s/t")
    (root / "x").symlink_to("d/../..")  # root/s/t/../.. = root: inside
    before = exact_state(root)
    with Workspace([root]) as ws:
        store = CheckpointStore(ws)
        target = store.put(b"s/t")
        store.close()
    forged = [
        Change(0, "o", Image("dir", 0o755), None),  # rolled back: mkdir o
        Change(0, "d", Image("dir", 0o755), Image("symlink", 0o777, target, 3)),
    ]
    set_id = _forge_interrupted(root, forged)
    code = main(["recover", "--workspace", str(root), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    [done] = report["result"]["sets"]
    assert done["id"] == set_id and done["undone"] == 0, done
    assert sorted(r["path"] for r in done["refused"]) == ["d", "o"], done
    assert exact_state(root) == before
    assert git_found(root / "sub", tmp_path) is None
    assert os.path.realpath(root / "x") == str(root)
    subprocess.run(["git", "-c", "safe.directory=*", "status"], cwd=root / "sub",
                   capture_output=True, env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"})  # fmt: skip
    assert not marker.exists()


# -- set-id and sticky bits: never in a set that undo could not reverse ----------------------------


@needs_bwrap
def test_a_set_id_path_is_never_changed_by_a_set_that_undo_could_not_reverse(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A command deleting the host's set-uid file (or a set-gid directory's bit) was merged,
    and its ``undo`` then refused the whole set ("set-uid, set-gid and sticky bits are not
    merged"): nothing of it could be put back, not even the plain file deleted beside. A
    ``write_file`` over a set-uid file kept the bit on the agent's bytes, an undoable-never
    set too. Now such a path is left as it is and named; the rest merges and undoes whole."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "plain").write_text("plain\n")
    (root / "prog").write_bytes(b"\x7fELF the host's set-uid program")
    (root / "prog").chmod(0o4755)
    (root / "shared").mkdir()
    (root / "shared").chmod(0o2775)
    (root / "shared" / "a").write_text("a\n")
    before = exact_state(root)
    assert before["prog"][1] == 0o4755 and before["shared"][1] == 0o2775
    out = _cli(capsys, root, "call", "run_shell", "--args",
               json.dumps({"command": "rm -f plain prog shared/a; chmod g-s shared"}))  # fmt: skip
    changes = (out.get("result") or out["error"]["details"])["changes"]
    assert sorted(r["path"] for r in changes["refused"]) == ["prog", "shared"], out
    merged = exact_state(root)
    assert merged["prog"] == before["prog"] and merged["shared"] == before["shared"]
    assert "plain" not in merged and "shared/a" not in merged
    out = _cli(capsys, root, "undo")
    assert out["ok"], out
    assert exact_state(root) == before
    # The file tools: refused before anything is written, no change set.
    assert main(["checkpoints", "list", "--workspace", str(root), "--json"]) == 0
    listed = capsys.readouterr().out
    out = _cli(capsys, root, "call", "write_file", "--args",
               json.dumps({"path": "prog", "content": "#!/bin/sh\nid\n"}))  # fmt: skip
    assert not out["ok"] and out["error"]["code"] == "invalid_arguments", out
    assert "4755" in out["error"]["message"]
    assert exact_state(root) == before
    assert main(["checkpoints", "list", "--workspace", str(root), "--json"]) == 0
    assert capsys.readouterr().out == listed


def _xattrs(root: Path) -> dict[str, dict[str, bytes]]:
    """Every entry's extended attributes below ``root`` (links not followed)."""
    out = {}
    for rel in exact_state(root):
        path = root / rel
        out[rel] = {n: os.getxattr(path, n, follow_symlinks=False)
                    for n in os.listxattr(path, follow_symlinks=False)}  # fmt: skip
    return out


@needs_bwrap
def test_a_deletion_that_would_lose_extended_attributes_is_refused_and_undo_is_exact(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An image holds kind, mode and bytes, not extended attributes: a command deleting a
    file with a ``user.*`` attribute (or a POSIX ACL, a directory's default ACL) was merged,
    and its undo gave the bytes back without them. A file with file capabilities, changed,
    kept them on the agent's bytes (``write_file`` copies a replaced file's attributes). Now
    such a path is left as it is and named; a file replaced in place keeps its attributes
    and its undo gives them back with the bytes."""
    root = tmp_path / "ws"
    root.mkdir()
    for name in ("tagged", "edited", "plain"):
        (root / name).write_text(f"{name}\n")
    (root / "d").mkdir()
    (root / "d" / "z").write_text("z\n")
    try:
        os.setxattr(root / "tagged", "user.origin", b"https://example.org/")
        os.setxattr(root / "edited", "user.origin", b"kept")
        os.setxattr(root / "d", "user.note", b"dir")
    except OSError as exc:
        pytest.skip(f"no user extended attributes here: {exc}")
    before, attrs = exact_state(root), _xattrs(root)
    out = _cli(capsys, root, "call", "run_shell", "--args",
               json.dumps({"command": "rm -rf tagged plain d; echo new > edited"}))  # fmt: skip
    changes = (out.get("result") or out["error"]["details"])["changes"]
    assert sorted(r["path"] for r in changes["refused"]) == ["d", "tagged"], out
    assert any("user.origin" in r["message"] for r in changes["refused"]), out
    merged = exact_state(root)
    assert merged["tagged"] == before["tagged"] and merged["d"] == before["d"]
    assert "plain" not in merged and merged["edited"][2] == b"new\n"
    assert _xattrs(root)["edited"] == attrs["edited"]  # replaced in place: kept
    out = _cli(capsys, root, "undo")
    assert out["ok"], out
    assert exact_state(root) == before and _xattrs(root) == attrs
    # File capabilities: never carried onto new bytes by a file tool.
    prog = root / "prog"
    prog.write_bytes(b"\x7fELF the host's privileged program")
    try:  # VFS_CAP_REVISION_2, permitted CAP_NET_RAW
        os.setxattr(prog, "security.capability", (0x02000001).to_bytes(4, "little")
                    + (1 << 13).to_bytes(4, "little") + bytes(12))  # fmt: skip
    except OSError as exc:
        pytest.skip(f"file capabilities cannot be set here: {exc}")
    before, attrs = exact_state(root), _xattrs(root)
    out = _cli(capsys, root, "call", "write_file", "--args",
               json.dumps({"path": "prog", "content": "agent's bytes"}))  # fmt: skip
    assert not out["ok"] and out["error"]["code"] == "invalid_arguments", out
    assert "file capabilities" in out["error"]["message"]
    assert exact_state(root) == before and _xattrs(root) == attrs


@needs_bwrap
def test_a_command_making_or_deleting_too_many_entries_is_refused_whole(
    tmp_path: Path,
    ringfence_home: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A change set had no bound on its entries: a command touching a million empty files
    (no bytes for the store's limit to count) held them all in memory, a gigabyte, and merged
    them for ten minutes, its undo the same again. Now a set holds at most ``MAX_ENTRIES``
    (lowered here to keep the test short), new entries or the deleted contents of a
    directory alike; past it the command's changes are refused whole, nothing merged."""
    from ringfence.workspace.changes import _upper

    monkeypatch.setattr(_upper, "MAX_ENTRIES", 1000, raising=False)
    root = tmp_path / "ws"
    root.mkdir()
    (root / "host").mkdir()
    for i in range(1200):
        (root / "host" / f"f{i}").write_bytes(b"")
    before = exact_state(root)
    for command in ("mkdir many && cd many && seq 1200 | xargs touch", "rm -rf host"):
        out = _cli(capsys, root, "call", "run_shell", "--args",
                   json.dumps({"command": command}))  # fmt: skip
        assert not out["ok"], out
        assert "1,000 entries" in out["error"]["message"], out
        assert exact_state(root) == before
    assert main(["checkpoints", "list", "--workspace", str(root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["result"] == []
    # Within the limit: merged and undone as ever.
    out = _cli(capsys, root, "call", "run_shell", "--args",
               json.dumps({"command": "mkdir few && cd few && seq 900 | xargs touch"}))  # fmt: skip
    assert out["ok"] and out["result"]["changes"]["files"] == 901, out
    assert _cli(capsys, root, "undo")["ok"]
    assert exact_state(root) == before


def test_a_workspace_root_inside_ringfence_s_home_is_refused(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--workspace ~/.ringfence/checkpoints``: the home inside a root was refused, a root
    inside the home was not, so the session's tools read and wrote every workspace's change
    sets and journals — a manifest rewritten there is what ``undo`` and the next recovery of
    that other workspace write back into it. Now refused before any tool runs."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "f").write_text("old\n")
    out = _cli(capsys, root, "call", "write_file", "--args",
               json.dumps({"path": "f", "content": "new\n"}))  # fmt: skip
    assert out["ok"], out
    [store] = (ringfence_home / "checkpoints").iterdir()
    home_before = exact_state(ringfence_home)
    for inside in (ringfence_home / "checkpoints", store / "sets", ringfence_home):
        manifest = f"sets/{out['result']['checkpoint']}.json"
        out2 = _cli(capsys, inside, "call", "write_file", "--args",
                    json.dumps({"path": manifest, "content": "{}"}))  # fmt: skip
        assert not out2["ok"] and out2["error"]["code"] == "invalid_arguments", out2
        assert out2["error"]["field"] in ("workspace", "RINGFENCE_HOME"), out2
        assert exact_state(ringfence_home) == home_before
    out = _cli(capsys, root, "undo")
    assert out["ok"], out
    assert (root / "f").read_text() == "old\n"


@needs_bwrap
def test_entries_below_a_refused_new_directory_are_refused_not_merged_into_an_unrecorded_one(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``mkdir -m 1777 t; echo q > t/q``: ``t`` was refused (its sticky bit) and ``t/q``
    merged, the writer's walk making ``t`` on its own — a directory in no change set, which
    ``undo`` then left in the workspace. Now what lies below a refused new directory is
    refused with it; the rest merges, and undoes to the tree before, byte for byte."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a").write_text("a\n")
    (root / "shared").mkdir()
    (root / "shared").chmod(0o2775)  # a set-gid directory: what a command makes in it is too
    before = exact_state(root)
    command = "mkdir -m 1777 t && mkdir -p t/u/v && echo q > t/u/v/q && echo q > t/q; " \
              "mkdir shared/x && echo x > shared/x/x; echo b > a"  # fmt: skip
    out = _cli(capsys, root, "call", "run_shell", "--args", json.dumps({"command": command}))
    changes = out["error"]["details"]["changes"]
    assert {r["path"] for r in changes["refused"]} == {
        "t", "t/q", "t/u", "t/u/v", "t/u/v/q", "shared/x", "shared/x/x"
    }, out  # fmt: skip
    assert exact_state(root) == {**before, "a": ("file", 0o644, b"b\n")}
    out = _cli(capsys, root, "undo")
    assert out["ok"], out
    assert exact_state(root) == before


def test_a_write_file_in_a_set_gid_directory_is_undone(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``write_file shared/new/f`` in a set-gid directory: ``new`` inherited the bit, its set
    recorded the mode asked for, so ``undo`` called ``new`` changed since and refused — the
    set undoable only by ``--force``. Now the directory made is exactly what the set says."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "shared").mkdir()
    (root / "shared").chmod(0o2775)
    before = exact_state(root)
    out = _cli(capsys, root, "call", "write_file", "--args",
               json.dumps({"path": "shared/new/deeper/f", "content": "x\n"}))  # fmt: skip
    assert out["ok"], out
    assert not (root / "shared" / "new").stat().st_mode & stat.S_ISGID
    out = _cli(capsys, root, "undo")
    assert out["ok"], out
    assert exact_state(root) == before


@needs_bwrap
def test_a_merge_out_of_descriptors_puts_everything_back_at_once(
    tmp_path: Path, ringfence_home: Path
) -> None:
    """A merge that runs out of file descriptors (``EMFILE``, a low ``ulimit -n``) midway put
    back what it had written with the replaced files' descriptors still held, so the put-back
    failed too: the workspace was left half-written until the next start. Now those are
    closed first; at every limit the tree is the one before or the one after, at once."""
    import resource

    root = tmp_path / "ws"
    root.mkdir()
    for i in range(50):
        (root / f"f{i}").write_text("old\n")
    before = exact_state(root)
    command = "for i in $(seq 0 49); do echo new > f$i; done; mkdir -p a/b/c/d/e/f/g && echo z > a/b/c/d/e/f/g/z"
    argv = [sys.executable, "-m", "ringfence", "call", "run_shell", "--args",
            json.dumps({"command": command}), "--workspace", str(root), "--json",
            "--approve", "no", "--posture", "allow-reversible"]  # fmt: skip
    failed = 0
    for limit in range(48, 72, 2):

        def low(limit: int = limit) -> None:
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))

        proc = subprocess.run(argv, capture_output=True, text=True, preexec_fn=low, timeout=120,
                              check=False)  # fmt: skip
        out = json.loads(proc.stdout)
        state = exact_state(root)
        if out["ok"]:
            assert state["f0"][2] == b"new\n" and "a/b/c/d/e/f/g/z" in state, limit
            assert main(["undo", "--workspace", str(root), "--approve", "no", "--json",
                         "--posture", "allow-reversible"]) == 0  # fmt: skip
            assert exact_state(root) == before
            continue
        failed += 1
        assert "half_written" not in out["error"].get("details", {}), (limit, out)
        assert state == before, (limit, out)
    assert failed, "no limit made the merge fail midway"

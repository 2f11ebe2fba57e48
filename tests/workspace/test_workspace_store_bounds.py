"""The checkpoint store's bounds and its journal on a full disk, through the CLI and the API.

A file tool's write keeps the before-image of the file it replaces: the store's limit
(``RINGFENCE_CHECKPOINTS_MIB``) bounds that set as it bounds a shell command's. The journal's
``E`` line is written on a disk that may have filled since its ``B`` line: the operation's
answer stays true (a named ``unavailable``, or done and recorded as done).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import cli_json, isolated  # noqa: F401 (an autouse fixture)

from ringfence import create_kernel

needs_strace = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed"
)


def _store_bytes(home: Path) -> int:
    """The bytes the checkpoint stores hold on disk (blocks, so a sparse copy counts too)."""
    total = 0
    for path in (home / "checkpoints").rglob("*"):
        st = path.lstat()
        if path.is_file() and not path.is_symlink():
            total += st.st_blocks * 512
    return total


def test_a_write_over_a_file_larger_than_the_store_keeps_is_refused(
    tmp_path: Path,
    ringfence_home: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``write_file`` over a 64 MiB (sparse) file with a 1 MiB store: before, all 64 MiB were
    copied into the store as the set's before-image (a sparse file of terabytes filled the
    disk with its holes). Now it is refused as a shell command's set is, naming the limit,
    before a byte is stored, and the file keeps its bytes."""
    monkeypatch.setenv("RINGFENCE_CHECKPOINTS_MIB", "1")
    root = tmp_path / "ws"
    root.mkdir()
    (root / "small").write_text("s\n")
    with open(root / "big", "wb") as f:
        f.write(b"head")
        f.truncate(64 << 20)
    args = ["--workspace", str(root), "--posture", "allow-reversible", "--approve", "no"]
    code, out = cli_json(capsys, "call", "write_file", "--args",
                         json.dumps({"path": "big", "content": "x"}), *args)  # fmt: skip
    assert code != 0 and out["error"]["code"] == "unavailable", out
    message = out["error"]["message"]
    assert "RINGFENCE_CHECKPOINTS_MIB" in message and "big" in message, message
    assert (root / "big").stat().st_size == 64 << 20
    with open(root / "big", "rb") as f:
        assert f.read(4) == b"head"
    assert _store_bytes(ringfence_home) < 256 * 1024
    code, listed = cli_json(capsys, "checkpoints", "list", "--workspace", str(root))
    assert code == 0 and listed["result"] == [], listed
    # Within the limit the same write is made, and undone.
    code, out = cli_json(capsys, "call", "write_file", "--args",
                         json.dumps({"path": "small", "content": "t\n"}), *args)  # fmt: skip
    assert code == 0, out
    code, out = cli_json(capsys, "undo", out["result"]["checkpoint"], *args)
    assert code == 0, out
    assert (root / "small").read_text() == "s\n"
    assert not os.path.exists(root / "x")


@needs_strace
@needs_bwrap
def test_a_failed_command_never_removes_a_blob_another_session_named(
    tmp_path: Path,
    ringfence_home: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Session 1's command stores a 2 MB file's bytes as a blob of its own, then its set is
    refused (over the store's limit) and it gives the blob's space back; it is held just
    before the removal (``strace``: the first ``unlinkat`` in ``blobs/``, held 45 s so
    that a loaded machine still finishes session 2 meanwhile; checked). Session 2 then
    rewrites a file holding the same 2 MB: its set names that blob as the before-image.
    Before, session 1 removed it anyway: ``write_file`` had reported its checkpoint and
    ``undo`` failed for good with "blob … is missing (pruned?)", the 2 MB lost. Now the blob
    another writer named is kept, and the undo gives the bytes back."""
    monkeypatch.setenv("RINGFENCE_CHECKPOINTS_MIB", "3")
    root = tmp_path / "ws"
    root.mkdir()
    shared = b"x" * 2_000_000
    (root / "g").write_bytes(shared)
    digest = hashlib.sha256(shared).hexdigest()
    args = ["--workspace", str(root), "--posture", "allow-reversible", "--approve", "no"]
    code, out = cli_json(capsys, "call", "write_file", "--args",
                         json.dumps({"path": "init", "content": "i"}), *args)  # fmt: skip
    assert code == 0, out  # the store exists
    [store] = (ringfence_home / "checkpoints").iterdir()
    command = "mkdir 0; echo a > 0/a; cp g b; head -c 2000000 /dev/urandom > c"
    argv = [sys.executable, "-m", "ringfence", "call", "run_shell", "--args",
            json.dumps({"command": command}), "--json", *args]  # fmt: skip
    held = subprocess.Popen(
        ["strace", "-f", "-qq", "-o", "/dev/null", "-P", str(store / "blobs"),
         "-e", "trace=unlinkat", "-e", "inject=unlinkat:delay_enter=45000000:when=1", *argv],
        env={**os.environ, "RINGFENCE_HOME": str(ringfence_home)},
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not any(
            n.startswith((digest, f".gone.{digest}")) for n in os.listdir(store / "blobs")
        ):
            assert held.poll() is None, held.communicate()
            assert time.monotonic() < deadline, "the command never stored its blob"
            time.sleep(0.05)
        code, out = cli_json(capsys, "call", "write_file", "--args",
                             json.dumps({"path": "g", "content": "y"}), *args)  # fmt: skip
        assert code == 0, out
        set_id = out["result"]["checkpoint"]
        assert held.poll() is None, "session 1 went on before session 2's write was made"
        first, _ = held.communicate(timeout=120)
    finally:
        if held.poll() is None:
            held.kill()
            held.wait()
    assert json.loads(first)["error"]["code"] == "unavailable", first
    assert (root / "g").read_bytes() == b"y"
    assert not (root / "b").exists() and not (root / "c").exists()
    code, out = cli_json(capsys, "undo", set_id, *args)
    assert code == 0, out
    assert (root / "g").read_bytes() == shared
    assert not [n for n in os.listdir(store / "blobs") if n.startswith(".")]


@needs_strace
@pytest.mark.parametrize("when", range(2, 7))  # the 1st: also the answer's own (stdout)
def test_an_undo_on_a_disk_filling_as_it_ends_answers_what_it_did(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str], when: int
) -> None:
    """``ENOSPC`` injected at the ``when``-th ``write`` of each thread of an ``undo`` (its
    manifest, the file, its journal's ``E`` line, ...): whatever the
    point, the answer is what happened and stays so at the next start. Before, a full disk
    at the ``E`` line answered "undo failed: OSError: [Errno 28]" (``tool_error``) beside a
    workspace holding the whole undo, recorded as undone."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "f").write_text("old\n")
    args = ["--workspace", str(root), "--posture", "allow-reversible", "--approve", "no"]
    code, out = cli_json(capsys, "call", "write_file", "--args",
                         json.dumps({"path": "f", "content": "new\n"}), *args)  # fmt: skip
    assert code == 0, out
    set_id = out["result"]["checkpoint"]
    argv = [sys.executable, "-m", "ringfence", "undo", set_id, "--json", *args]
    proc = subprocess.run(
        ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=write",
         "-e", f"inject=write:error=ENOSPC:when={when}", *argv],
        env={**os.environ, "RINGFENCE_HOME": str(ringfence_home)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    result = json.loads(proc.stdout)
    for _ in range(2):  # as answered, and again after the next start's recovery
        code, listed = cli_json(capsys, "checkpoints", "list", "--workspace", str(root))
        assert code == 0, listed
        [mine] = [s for s in listed["result"] if s["id"] == set_id]
        if result["ok"]:
            assert (root / "f").read_text() == "old\n", result
            assert mine["undone_by"], listed
        else:
            assert result["error"]["code"] in ("unavailable", "unwritable"), result
            assert (root / "f").read_text() == "new\n", result
            assert not mine["undone_by"], listed
        code, recovered = cli_json(capsys, "recover", "--workspace", str(root))
        assert code == 0 and recovered["result"]["sets"] == [], recovered


def _ringfence(home: Path, *words: str) -> dict:
    """The CLI as a process of its own, given a minute (a hang is the failure looked for)."""
    proc = subprocess.run(
        [sys.executable, "-m", "ringfence", *words, "--json"],
        env={**os.environ, "RINGFENCE_HOME": str(home)},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return json.loads(proc.stdout)


def test_a_fifo_swapped_for_a_blob_is_damaged_not_a_hang(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A blob replaced by a FIFO between sessions: ``undo`` opened it to read and waited for
    a writer for ever (a rollback needing it hung every start). It is refused as damaged,
    named, and nothing is written."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "f").write_text("old\n")
    args = ["--workspace", str(root), "--posture", "allow-reversible", "--approve", "no"]
    code, out = cli_json(capsys, "call", "write_file", "--args",
                         json.dumps({"path": "f", "content": "new\n"}), *args)  # fmt: skip
    assert code == 0, out
    [store] = (ringfence_home / "checkpoints").iterdir()
    blob = store / "blobs" / hashlib.sha256(b"old\n").hexdigest()
    blob.unlink()
    os.mkfifo(blob)
    out = _ringfence(ringfence_home, "undo", out["result"]["checkpoint"], *args)
    assert not out["ok"] and "damaged" in out["error"]["message"], out
    assert blob.name in out["error"]["message"], out
    assert (root / "f").read_text() == "new\n"


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_a_fifo_swapped_for_a_pack_or_its_index_stops_no_start(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shell command's pack index replaced by a FIFO: every start's prune opened it and
    hung (``checkpoints list``, any session on the workspace); its pack likewise hung the
    ``undo`` reading it. Both are passed over or refused as damaged, and the other sets
    are listed and undone as ever."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "f").write_text("old\n")
    args = ["--workspace", str(root), "--posture", "allow-reversible", "--approve", "no"]
    code, out = cli_json(capsys, "call", "run_shell", "--args",
                         json.dumps({"command": "echo n > f; echo m > g"}), *args)  # fmt: skip
    assert code == 0, out
    shell_set = out["result"]["changes"]["id"]
    code, out = cli_json(capsys, "call", "write_file", "--args",
                         json.dumps({"path": "h", "content": "h\n"}), *args)  # fmt: skip
    assert code == 0, out
    [store] = (ringfence_home / "checkpoints").iterdir()
    [index] = (store / "packs").glob("*.idx")
    [pack] = (store / "packs").glob("*.pack")
    for swapped in (index, pack):
        swapped.rename(tmp_path / swapped.name)
        os.mkfifo(swapped)
        listed = _ringfence(ringfence_home, "checkpoints", "list", "--workspace", str(root))
        assert listed["ok"] and len(listed["result"]) == 2, listed
        out = _ringfence(ringfence_home, "undo", shell_set, *args)
        assert not out["ok"], out  # its bytes cannot be read: nothing undone
        assert (root / "f").read_text() == "n\n" and (root / "g").read_text() == "m\n"
        swapped.unlink()
        (tmp_path / swapped.name).rename(swapped)
    out = _ringfence(ringfence_home, "undo", "--last", "1", *args)
    assert out["ok"], out
    assert not (root / "h").exists()
    out = _ringfence(ringfence_home, "undo", shell_set, *args)
    assert out["ok"], out
    assert (root / "f").read_text() == "old\n" and not (root / "g").exists()


@pytest.mark.skipif(shutil.which("faketime") is None, reason="faketime is not installed")
async def test_a_long_session_s_next_set_is_past_one_another_session_saved_meanwhile(
    tmp_path: Path, ringfence_home: Path
) -> None:
    """A long session (the API's kernel) and a CLI session whose clock runs two hours
    ahead (``faketime``; or the long session's clock stepped back since it started) write
    one workspace. The long session read the store's newest id once: its next set got an
    id older than the set the other session had saved meanwhile, so ``undo --last 1``
    undid that earlier write instead of the last one. A new id is past every id the store
    holds when it is made."""
    root = tmp_path / "ws"
    root.mkdir()
    async with create_kernel(roots=[root], posture="allow-reversible") as kernel:
        out = await kernel.invoke("write_file", {"path": "a", "content": "a\n"})
        assert out.error is None, out
        args = ["--workspace", str(root), "--posture", "allow-reversible", "--approve", "no"]
        proc = subprocess.run(
            ["faketime", "-f", "+2h", sys.executable, "-m", "ringfence", "call", "write_file",
             "--args", json.dumps({"path": "b", "content": "b\n"}), "--json", *args],
            env={**os.environ, "RINGFENCE_HOME": str(ringfence_home)},
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert json.loads(proc.stdout)["ok"], (proc.stdout, proc.stderr[-1000:])
        out = await kernel.invoke("write_file", {"path": "c", "content": "c\n"})
        assert out.error is None, out
        last = out.value["checkpoint"]
    out = _ringfence(ringfence_home, "undo", "--last", "1", *args)
    assert out["ok"] and out["result"][0]["undone"] == last, out
    assert sorted(os.listdir(root)) == ["a", "b"]


def test_an_event_file_on_a_full_disk_keeps_whole_records(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The event file's file system fills (a small tmpfs the test mounts, filled to the
    last byte): the session's records were written in part. The call answered
    "cannot use a file" (``tool_error``), ``events verify`` called the log ``TAMPERED`` (a
    line that is no record, without its newline) and every later session was refused
    ("does not end with a whole event record"). Now the file holds whole records only: the
    error names the full file system (``unavailable``, field ``events``), the killed-like
    session is ``NOT SEALED`` (not tampering), and the next session appends once there is
    room."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    root = tmp_path / "ws"
    root.mkdir()
    place = tmp_path / "ev"
    place.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(place)], check=True)
    try:
        events = place / "events.jsonl"
        args = ["--workspace", str(root), "--posture", "allow-reversible", "--approve", "no",
                "--events", str(events)]  # fmt: skip
        out = _ringfence(ringfence_home, "call", "list_directory", "--args", '{"path": "."}', *args)
        assert out["ok"], out
        filler = os.open(place / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            with pytest.raises(OSError):
                while True:
                    os.write(filler, b"\0" * 512)
        finally:
            os.close(filler)
        out = _ringfence(ringfence_home, "call", "list_directory", "--args", '{"path": "."}', *args)
        assert not out["ok"] and out["error"]["code"] == "unavailable", out
        assert out["error"]["field"] == "events" and "full" in out["error"]["message"], out
        assert events.read_bytes().endswith(b"\n")
        report = _ringfence(ringfence_home, "events", "verify", "--allow-open", str(events))
        assert report["ok"] and not report["result"]["tampered"], report
        (place / "filler").unlink()
        out = _ringfence(ringfence_home, "call", "list_directory", "--args", '{"path": "."}', *args)
        assert out["ok"], out
        report = _ringfence(ringfence_home, "events", "verify", "--allow-open", str(events))
        assert report["ok"] and not report["result"]["tampered"], report
    finally:
        subprocess.run(["umount", str(place)], check=False)


@needs_bwrap
def test_a_refused_command_of_large_files_alone_gives_their_space_back(
    tmp_path: Path,
    ringfence_home: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A command writing only large files (each a blob of its own, none packed) whose set
    is refused as it is read (over the store's limit): its stored blobs stayed for an hour,
    outside the limit (2 MB a refused command: the same command again and again filled the
    disk). They go at once, as a set with small files did."""
    monkeypatch.setenv("RINGFENCE_CHECKPOINTS_MIB", "3")
    root = tmp_path / "ws"
    root.mkdir()
    args = ["--workspace", str(root), "--posture", "allow-reversible", "--approve", "no"]
    command = "head -c 2000000 /dev/urandom > b; head -c 2000000 /dev/urandom > c"
    for _ in range(3):
        code, out = cli_json(capsys, "call", "run_shell", "--args",
                             json.dumps({"command": command}), *args)  # fmt: skip
        assert code != 0 and out["error"]["code"] == "unavailable", out
    assert os.listdir(root) == []
    assert _store_bytes(ringfence_home) < 256 * 1024


def test_an_undo_of_several_sets_refused_midway_names_what_it_undid(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``undo --last 2``: the newer set (``b`` written) is undone, then the older one meets
    a conflict (``a`` edited since). The answer said "conflict … nothing was changed" beside
    a workspace where ``b`` was gone, and named no set. It now names the set it refused and
    the one it undid, which stays undone (and listed as undone), and the edit is kept."""
    root = tmp_path / "ws"
    root.mkdir()
    args = ["--workspace", str(root), "--posture", "allow-reversible", "--approve", "no"]
    ids = []
    for name in ("a", "b"):
        code, out = cli_json(capsys, "call", "write_file", "--args",
                             json.dumps({"path": name, "content": f"{name}1"}), *args)  # fmt: skip
        assert code == 0, out
        ids.append(out["result"]["checkpoint"])
    (root / "a").write_text("edited")
    code, out = cli_json(capsys, "undo", "--last", "2", *args)
    assert code != 0, out
    message = out["error"]["message"]
    assert "nothing was changed" not in message, message
    assert ids[0] in message and ids[1] in message, message
    assert [d["undone"] for d in out["error"]["details"]["undone"]] == [ids[1]], out
    assert sorted(os.listdir(root)) == ["a"] and (root / "a").read_text() == "edited"
    code, listed = cli_json(capsys, "checkpoints", "list", "--workspace", str(root))
    undone = {s["id"]: s["undone_by"] for s in listed["result"]}
    assert undone[ids[1]] and not undone[ids[0]], listed

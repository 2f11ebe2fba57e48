"""Change sets through the CLI and the Python API: recording, undo, the guarded merge.

Every file tool write is a change set under ``$RINGFENCE_HOME/checkpoints``
(before-image, after-image, directories made), linked from the call's
result and events; ``ringfence undo`` restores the tree byte for byte and
refuses a file that changed since (unless ``--force``); ``merge_changes``
refuses every hostile entry with nothing changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import (
    cli_json as cli,
    isolated,  # noqa: F401  (autouse fixture)
)
from kernel_helpers import event_records

from ringfence.workspace import Change, ChangeSet, CheckpointStore, Workspace, undo
from ringfence.workspace.changes._merge import merge_changes
from ringfence.workspace.changes._model import Image
from ringfence.workspace.changes._upper import changes_from_upper


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "ws"
    r.mkdir()
    (r / "keep.txt").write_text("keep\n")
    (r / "doc.txt").write_text("alpha\nbeta\n")
    os.chmod(r / "doc.txt", 0o640)
    return r


def hashes(root: Path) -> dict[str, tuple[str, str, int]]:
    """Every entry under ``root``: kind, sha256 of its bytes (or link target), mode."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p), 0)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", "", stat.S_IMODE(st.st_mode))
            else:
                digest = hashlib.sha256(p.read_bytes()).hexdigest()
                out[rel] = ("file", digest, stat.S_IMODE(st.st_mode))
    return out


def call(capsys: pytest.CaptureFixture[str], root: Path, tool: str, **args: Any) -> Any:
    code, body = cli(
        capsys,
        "call",
        tool,
        "--workspace",
        str(root),
        "--posture",
        "allow-reversible",
        "--args",
        json.dumps(args),
    )
    assert code == 0, body
    return body["result"]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load_set(root: Path, set_id: str) -> Any:
    with Workspace([root]) as ws:
        store = CheckpointStore(ws)
        try:
            return store.load(set_id)
        finally:
            store.close()


def test_writes_and_edits_produce_the_exact_change_sets(
    capsys: pytest.CaptureFixture[str], root: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    code, body = cli(
        capsys,
        "call",
        "write_file",
        "--workspace",
        str(root),
        "--posture",
        "allow-reversible",
        "--events",
        str(events),
        "--args",
        json.dumps({"path": "new/deep/f.txt", "content": "fresh\n"}),
    )
    assert code == 0
    first = body["result"]["checkpoint"]
    second = call(capsys, root, "edit_file", path="doc.txt", old="beta", new="gamma")["checkpoint"]
    third = call(capsys, root, "write_file", path="doc.txt", content="whole\n")["checkpoint"]

    cs = load_set(root, first)
    assert cs.tool == "write_file"
    umask = os.umask(0)
    os.umask(umask)
    assert [(c.path, c.before, c.after) for c in cs.changes] == [
        ("new", None, Image("dir", 0o777 & ~umask)),
        ("new/deep", None, Image("dir", 0o777 & ~umask)),
        ("new/deep/f.txt", None, Image("file", 0o666 & ~umask, sha(b"fresh\n"), 6)),
    ]
    cs = load_set(root, second)
    assert [(c.path, c.before, c.after) for c in cs.changes] == [
        (
            "doc.txt",
            Image("file", 0o640, sha(b"alpha\nbeta\n"), 11),
            Image("file", 0o640, sha(b"alpha\ngamma\n"), 12),
        )
    ]
    cs = load_set(root, third)
    assert [(c.before.digest, c.after.digest) for c in cs.changes] == [  # type: ignore[union-attr]
        (sha(b"alpha\ngamma\n"), sha(b"whole\n"))
    ]
    # The call's events name its change set.
    records = event_records(events)
    linked = [r for r in records if r["kind"] == "checkpoint"]
    assert [r["id"] for r in linked] == [first]
    assert linked[0]["tool"] == "write_file"
    # list (newest first) and show (a unified diff).
    code, body = cli(capsys, "checkpoints", "list", "--workspace", str(root))
    assert [s["id"] for s in body["result"]] == [third, second, first]
    code, body = cli(capsys, "checkpoints", "show", second, "--workspace", str(root))
    assert "-beta\n+gamma\n" in body["result"]["diff"]
    assert "--- a/doc.txt\n+++ b/doc.txt\n" in body["result"]["diff"]


def test_undo_restores_the_tree_byte_for_byte_and_is_undoable(
    capsys: pytest.CaptureFixture[str], root: Path
) -> None:
    original = hashes(root)
    call(capsys, root, "write_file", path="a/b/c.txt", content="c\n")
    call(capsys, root, "edit_file", path="doc.txt", old="alpha", new="ALPHA")
    call(capsys, root, "write_file", path="keep.txt", content="changed\n")
    call(capsys, root, "write_file", path="a/two.txt", content="2\n")
    changed = hashes(root)
    assert changed != original

    code, body = cli(
        capsys, "undo", "--last", "4", "--workspace", str(root), "--posture", "allow-reversible"
    )
    assert code == 0, body
    assert len(body["result"]) == 4
    assert hashes(root) == original  # every file, mode and directory, byte for byte

    # The undo is a change set of its own: undoing it brings the changes back.
    undo_ids = [u["checkpoint"] for u in body["result"]]
    for undo_id in reversed(undo_ids):
        code, body = cli(
            capsys, "undo", undo_id, "--workspace", str(root), "--posture", "allow-reversible"
        )
        assert code == 0, body
    assert hashes(root) == changed


def test_undo_refuses_a_file_changed_since_unless_forced(
    capsys: pytest.CaptureFixture[str], root: Path
) -> None:
    original = hashes(root)
    set_id = call(capsys, root, "write_file", path="doc.txt", content="agent\n")["checkpoint"]
    (root / "doc.txt").write_text("the person's own edit\n")
    before = hashes(root)
    code, body = cli(
        capsys, "undo", set_id, "--workspace", str(root), "--posture", "allow-reversible"
    )
    assert code != 0
    assert body["error"]["code"] == "tool_error"
    assert "doc.txt" in body["error"]["message"]
    assert body["error"]["details"]["conflicts"] == ["doc.txt"]
    assert hashes(root) == before  # nothing changed

    code, body = cli(
        capsys, "undo", set_id, "--force", "--workspace", str(root), "--posture", "allow-reversible"
    )
    assert code == 0, body
    assert hashes(root) == original


def test_undo_goes_through_the_gate(capsys: pytest.CaptureFixture[str], root: Path) -> None:
    call(capsys, root, "write_file", path="doc.txt", content="agent\n")
    after = hashes(root)
    code, body = cli(
        capsys,
        "undo",
        "--last",
        "1",
        "--workspace",
        str(root),
        "--posture",
        "ask",
        "--approve",
        "no",
    )
    assert code != 0
    assert body["error"]["code"] == "denied"
    assert hashes(root) == after


def _store_with(root: Path, data: dict[str, bytes]) -> dict[str, str]:
    with Workspace([root]) as ws:
        store = CheckpointStore(ws)
        try:
            return {k: store.put(v) for k, v in data.items()}
        finally:
            store.close()


GOOD = Change(0, "fine.txt", None, Image("file", 0o644, sha(b"ok\n"), 3))


def _hostile(root: Path, outside: Path) -> list[tuple[str, Change]]:
    d = _store_with(
        root,
        {
            "x": b"[core]\n\tfsmonitor = touch /tmp/pwned\n",
            "ok": b"ok\n",
            "abs": os.fsencode(str(outside / "secret")),
            "up": b"../../outside/secret",
            "gitdir": b"gitdir: /tmp/elsewhere\n",
        },
    )
    file = Image("file", 0o644, d["x"], 10)
    return [
        ("git_metadata", Change(0, ".git/config", None, file)),
        ("git_metadata", Change(0, "sub/.GIT", None, Image("dir", 0o755))),
        ("git_metadata", Change(0, "sub/.git", None, Image("file", 0o644, d["gitdir"], 22))),
        ("git_metadata", Change(0, "git~1/hooks/pre-commit", None, file)),
        ("invalid_arguments", Change(0, "dev", None, Image("device", 0o644))),
        ("invalid_arguments", Change(0, "fifo", None, Image("fifo", 0o644))),
        ("invalid_arguments", Change(0, "suid", None, Image("file", 0o4755, d["ok"], 3))),
        ("invalid_arguments", Change(0, "sgid", None, Image("file", 0o2755, d["ok"], 3))),
        ("invalid_arguments", Change(0, "abs", None, Image("symlink", 0o777, d["abs"], 1))),
        ("invalid_arguments", Change(0, "sub/up", None, Image("symlink", 0o777, d["up"], 1))),
        ("invalid_arguments", Change(0, "../escape.txt", None, file)),
        ("invalid_arguments", Change(0, "/etc/passwd", None, file)),
    ]


def test_merge_refuses_each_hostile_entry_with_nothing_changed(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("s\n")
    (root / "sub").mkdir()
    _store_with(root, {"ok": b"ok\n"})
    for code, bad in _hostile(root, outside):
        before, out_before = hashes(root), hashes(tmp_path)
        with Workspace([root]) as ws:
            store = CheckpointStore(ws)
            with pytest.raises(Exception) as info:
                merge_changes(ws, [GOOD, bad], store)
            store.close()
        assert getattr(info.value, "code", None) == code, (bad, info.value)
        assert "nothing was changed" in info.value.message  # type: ignore[attr-defined]
        assert hashes(root) == before, bad
        assert hashes(tmp_path) == out_before, bad


def test_partial_merge_applies_the_rest_and_reports_the_refused(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "sub").mkdir()
    hostile = _hostile(root, outside)
    with Workspace([root]) as ws:
        store = CheckpointStore(ws)
        report = merge_changes(ws, [GOOD, *(c for _, c in hostile)], store, atomic=False)
        store.close()
    assert [c.path for c in report.applied] == ["fine.txt"]
    assert [r["code"] for r in report.refused] == [code for code, _ in hostile]
    assert (root / "fine.txt").read_bytes() == b"ok\n"
    assert sorted(p.name for p in (root / "sub").iterdir()) == []
    assert not (root / ".git").exists() and not (root / "dev").exists()


def test_a_plain_sibling_first_never_lets_a_hostile_name_beside_it_through(root: Path) -> None:
    """The merge checks a directory's names once per set: every later sibling's own name
    is still judged (git spellings, empty, ``.``, ``..``), and an absolute path is no
    sibling of a top-level file."""
    (root / "sub").mkdir()
    d = _store_with(root, {"ok": b"ok\n"})
    file = Image("file", 0o644, d["ok"], 3)
    hostile = ["sub/.git", "sub/.GIT", "sub/git~1", "sub/..", "sub/.", "sub/", "/abs", "sub/x/../y"]
    changes = [Change(0, "top.txt", None, file), Change(0, "sub/ok.txt", None, file)]
    changes += [Change(0, p, None, file) for p in hostile]
    with Workspace([root]) as ws:
        store = CheckpointStore(ws)
        report = merge_changes(ws, changes, store, atomic=False)
        store.close()
    assert [c.path for c in report.applied] == ["top.txt", "sub/ok.txt"]
    assert [r["path"] for r in report.refused] == hostile
    assert sorted(p.name for p in (root / "sub").iterdir()) == ["ok.txt"]


def test_a_manifest_in_the_keyed_form_of_earlier_versions_still_loads_and_undoes(
    capsys: pytest.CaptureFixture[str], root: Path
) -> None:
    result = call(capsys, root, "write_file", path="doc.txt", content="new\n")
    with Workspace([root]) as ws:
        store = CheckpointStore(ws)
        cs = store.load(result["checkpoint"])
        keyed = {
            **{k: v for k, v in json.loads(json.dumps(cs.to_json())).items() if k != "changes"},
            "changes": [
                {
                    "root": c.root,
                    "path": c.path,
                    "before": c.before and {"kind": c.before.kind, "mode": c.before.mode,
                                            "digest": c.before.digest, "size": c.before.size},
                    "after": c.after and {"kind": c.after.kind, "mode": c.after.mode,
                                          "digest": c.after.digest, "size": c.after.size},
                }
                for c in cs.changes
            ],
        }  # fmt: skip
        (store.path / "sets" / f"{cs.id}.json").write_text(json.dumps(keyed))
        store.close()
    assert load_set(root, cs.id) == cs
    code, body = cli(
        capsys, "undo", cs.id, "--workspace", str(root), "--posture", "allow-reversible"
    )
    assert code == 0, body
    assert (root / "doc.txt").read_text() == "alpha\nbeta\n"


def test_merge_refuses_a_stale_before_image(root: Path) -> None:
    d = _store_with(root, {"new": b"new\n", "old": b"not what is there\n"})
    change = Change(
        0, "doc.txt", Image("file", 0o640, d["old"], 18), Image("file", 0o640, d["new"], 4)
    )
    before = hashes(root)
    with Workspace([root]) as ws:
        store = CheckpointStore(ws)
        with pytest.raises(Exception) as info:
            merge_changes(ws, [change, GOOD], store)
        store.close()
    assert info.value.code == "tool_error"  # type: ignore[attr-defined]
    assert info.value.details["conflicts"] == ["doc.txt"]  # type: ignore[attr-defined]
    assert hashes(root) == before


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give files away")
def test_merged_entries_belong_to_the_workspace_owner(root: Path) -> None:
    os.chown(root, 4321, 4321)
    d = _store_with(root, {"ok": b"ok\n"})
    changes = [
        Change(0, "made", None, Image("dir", 0o755)),
        Change(0, "made/f.txt", None, Image("file", 0o644, d["ok"], 3)),
    ]
    with Workspace([root]) as ws:
        store = CheckpointStore(ws)
        merge_changes(ws, changes, store)
        store.close()
    for p in (root / "made", root / "made" / "f.txt"):
        st = p.lstat()
        assert (st.st_uid, st.st_gid) == (4321, 4321), p


def test_a_durable_merge_commits_its_file_system(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A durable merge (undo, apply) ends in one ``syncfs`` that succeeds: the walk's
    directory descriptors are ``O_PATH``, which ``syncfs`` refuses, and the error was
    passed over (no merge was ever committed)."""
    from ringfence.workspace.changes import _fscalls

    if not _fscalls.can_syncfs():
        pytest.skip("no syncfs in this C library: the merge fsyncs each file and directory")
    real, results = _fscalls.syncfs, []

    def watched(fd: int) -> None:  # the real call, its outcome noted
        try:
            real(fd)
        except OSError as exc:
            results.append(exc.errno)
            raise
        results.append(0)

    monkeypatch.setattr(_fscalls, "syncfs", watched)
    d = _store_with(root, {"ok": b"ok\n"})
    with Workspace([root]) as ws:
        store = CheckpointStore(ws)
        merge_changes(ws, [Change(0, "new.txt", None, Image("file", 0o644, d["ok"], 3))], store)
        store.close()
    assert results == [0]
    assert (root / "new.txt").read_bytes() == b"ok\n"


def test_a_damaged_blob_is_refused_never_restored(
    capsys: pytest.CaptureFixture[str], root: Path, ringfence_home: Path
) -> None:
    set_id = call(capsys, root, "write_file", path="doc.txt", content="agent\n")["checkpoint"]
    old = sha(b"alpha\nbeta\n")
    (blob,) = ringfence_home.glob(f"checkpoints/*/blobs/{old}")
    blob.write_bytes(b"torn")  # what a power loss can leave behind
    before = hashes(root)
    code, body = cli(
        capsys, "undo", set_id, "--workspace", str(root), "--posture", "allow-reversible"
    )
    assert code != 0 and "damaged" in body["error"]["message"]
    assert hashes(root) == before


def test_undo_never_deletes_a_file_it_did_not_make(
    capsys: pytest.CaptureFixture[str], root: Path
) -> None:
    set_id = call(capsys, root, "write_file", path="a/b/c.txt", content="c\n")["checkpoint"]
    (root / "a" / "b" / "mine.txt").write_text("the person's\n")
    before = hashes(root)
    args = ("--workspace", str(root), "--posture", "allow-reversible")
    code, body = cli(capsys, "undo", set_id, *args)
    assert code != 0 and body["error"]["details"]["conflicts"] == ["a/b"]
    assert hashes(root) == before
    code, body = cli(capsys, "undo", set_id, "--force", *args)
    assert code == 0, body
    assert not (root / "a" / "b" / "c.txt").exists()
    assert (root / "a" / "b" / "mine.txt").read_text() == "the person's\n"


def test_merge_refuses_assembling_a_git_directory_and_rolls_back(root: Path) -> None:
    d = _store_with(root, {"head": b"ref: refs/heads/main\n", "cfg": b"[core]\n", "ok": b"ok\n"})
    changes = [
        GOOD,
        Change(0, "evil", None, Image("dir", 0o755)),
        Change(0, "evil/objects", None, Image("dir", 0o755)),
        Change(0, "evil/refs", None, Image("dir", 0o755)),
        Change(0, "evil/config", None, Image("file", 0o644, d["cfg"], 7)),
        Change(0, "evil/HEAD", None, Image("file", 0o644, d["head"], 21)),
    ]
    before = hashes(root)
    with Workspace([root]) as ws:
        store = CheckpointStore(ws)
        with pytest.raises(Exception) as info:
            merge_changes(ws, changes, store)
        store.close()
    assert info.value.code == "git_metadata", info.value.message  # type: ignore[attr-defined]
    assert hashes(root) == before  # what was merged before the refusal was rolled back


def test_retention_drops_the_oldest_change_sets(
    capsys: pytest.CaptureFixture[str], root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [
        call(capsys, root, "write_file", path="doc.txt", content=f"v{i}\n")["checkpoint"]
        for i in range(5)
    ]
    monkeypatch.setenv("RINGFENCE_CHECKPOINTS_KEEP", "2")
    code, body = cli(capsys, "checkpoints", "list", "--workspace", str(root))
    assert [s["id"] for s in body["result"]] == ids[:2:-1]  # the newest two, newest first
    monkeypatch.setenv("RINGFENCE_CHECKPOINTS_KEEP", "0")
    code, body = cli(capsys, "checkpoints", "list", "--workspace", str(root))
    assert code == 2 and body["error"]["field"] == "RINGFENCE_CHECKPOINTS_KEEP"


@pytest.mark.skipif(os.geteuid() != 0, reason="a whiteout is a 0:0 device: mknod needs root")
def test_an_overlay_upper_directory_becomes_a_change_set_merged_and_undone(
    root: Path, tmp_path: Path
) -> None:
    """The upper layer of a command that edits, creates, deletes, renames a directory,
    deletes a directory, and replaces one opaquely: merged, the workspace is exactly
    what the command saw; undone, it is byte for byte what it was.
    """
    (root / "gone.txt").write_text("gone\n")
    (root / "olddir" / "sub").mkdir(parents=True)
    (root / "olddir" / "a.txt").write_text("a\n")
    (root / "olddir" / "sub" / "b.txt").write_text("b\n")
    (root / "deldir").mkdir()
    (root / "deldir" / "c.txt").write_text("c\n")
    (root / "opq").mkdir()
    (root / "opq" / "x.txt").write_text("x\n")
    (root / "f2d").write_text("file becoming a dir\n")
    original = hashes(root)

    upper = tmp_path / "upper"
    (upper / "newdir" / "sub").mkdir(parents=True)  # olddir renamed: copied up whole
    (upper / "newdir" / "a.txt").write_text("a\n")
    (upper / "newdir" / "sub" / "b.txt").write_text("b\n")
    (upper / "doc.txt").write_text("alpha\nedited\n")
    (upper / "new.txt").write_text("new\n")
    for whiteout in ("gone.txt", "olddir", "deldir"):
        os.mknod(upper / whiteout, stat.S_IFCHR | 0o000, os.makedev(0, 0))
    (upper / "opq").mkdir()
    os.setxattr(upper / "opq", "user.overlay.opaque", b"y")
    (upper / "opq" / "z.txt").write_text("z\n")
    (upper / "f2d").mkdir()
    (upper / "f2d" / "inner.txt").write_text("inner\n")

    expected = tmp_path / "expected"
    shutil.copytree(root, expected, symlinks=True)
    shutil.rmtree(expected / "olddir")
    shutil.rmtree(expected / "deldir")
    shutil.rmtree(expected / "opq")
    (expected / "gone.txt").unlink()
    (expected / "f2d").unlink()
    for p in sorted(upper.rglob("*")):
        if p.is_char_device():
            continue
        rel = p.relative_to(upper)
        if p.is_dir():
            (expected / rel).mkdir(exist_ok=True)
        else:
            shutil.copy2(p, expected / rel)

    with Workspace([root]) as ws:
        store = CheckpointStore(ws)
        upper_fd = os.open(upper, os.O_RDONLY | os.O_DIRECTORY)
        lower_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            changes = changes_from_upper(upper_fd, lower_fd, 0, store)
        finally:
            os.close(upper_fd)
            os.close(lower_fd)
        assert hashes(root) == original  # reading the upper layer changes nothing
        report = merge_changes(ws, changes, store)
        assert hashes(root) == hashes(expected)
        cs = ChangeSet(store.new_id(), 0.0, "run_shell", report.applied)
        store.save(cs)
        undo(store, ids=[cs.id])
        store.close()
    assert hashes(root) == original

"""Change sets on the confined ``local`` backend: a new directory tree merged by one rename.

When a command makes a new directory (a package unpacked, a build output),
the merge renames it from the overlay's upper directory whole, instead of
entry by entry, if the read found nothing in it that the Gate would refuse
or change: only files with one name, links and directories, no extended
attributes, one owner, no git directory. These tests drive real commands
(through the CLI and the kernel) and check both sides: a clean tree goes
whole (it leaves the upper directory) and is exactly what the change set
says, undone byte for byte; and every hostile entry planted inside a new
tree is refused or stripped just as it is outside one, with nothing of it
in the workspace.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from backends_helpers import WORKSPACE_UID, workspace  # noqa: F401 (a fixture)
from cli_helpers import cli_json, isolated  # noqa: F401 (an autouse fixture)
from test_backends_changesets import owned, tree_state

from ringfence import create_kernel
from ringfence.backends import SessionSpec, ShellResult
from ringfence.backends._changesets import merge_or_stage
from ringfence.backends.confined._session import start_confined as start_local
from ringfence.runtime import Posture
from ringfence.workspace import CheckpointStore, Workspace

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

# A package-like tree: nested directories with their own modes, an executable, a link
# inside the tree, an empty directory, a name that is not UTF-8.
PACKAGE = (
    "mkdir -p pkg/lib/deep pkg/bin pkg/empty && chmod 750 pkg/lib && "
    "printf 'module.exports = 1;\\n' > pkg/lib/index.js && "
    "printf 'deep\\n' > pkg/lib/deep/d.txt && "
    "printf '#!/bin/sh\\necho hi\\n' > pkg/bin/run && chmod 755 pkg/bin/run && "
    "ln -s ../lib/index.js pkg/bin/index.js && "
    "printf 'odd\\n' > \"pkg/$(printf 'caf\\351')\""
)


class _Context:
    """What merge_or_stage reads of a call's context, to run it on a bare session."""

    class tool:
        name = "run_shell"

    call_id = "test"

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def emit(self, kind: str, /, **data: Any) -> None:
        self.events.append((kind, data))


@dataclass
class Merged:
    """What :func:`run_and_merge` saw: the result, the call's output, its context's events,
    and the names left in the upper directory after the merge (before it is emptied)."""

    result: ShellResult
    out: dict[str, Any]
    ctx: _Context
    left_in_upper: list[str]


async def run_and_merge(
    workspace: Path,  # noqa: F811
    command: str,
    spool: Path | None = None,
    pause_collector: bool = False,
) -> Merged:
    """``command`` on a fresh change-set session of the local backend, captured and merged
    as ``run_shell`` does (the rest merged when an entry is refused)."""
    ctx = _Context()
    with Workspace([workspace]) as ws:
        store = CheckpointStore(ws)
        spec = SessionSpec(roots=(workspace,), change_sets=True, spool_dir=spool)
        session = await start_local(spec)
        try:
            result = await session.run(
                command, cwd=workspace, env={}, timeout=60, output_cap=1 << 16
            )
            assert result.exit_code == 0, result
            root = Path(os.path.realpath(workspace))
            out = await merge_or_stage(
                result,
                {},
                ctx,  # type: ignore[arg-type]
                store,
                roots=[root],
                merge_rest=True,
                staging=False,
                pause_collector=pause_collector,
            )
            left = sorted(p.name for u in result.uppers for p in u.path.iterdir())
        finally:
            await session.aclose()
            store.close()
    return Merged(result, out, ctx, left)


async def test_a_clean_new_tree_leaves_the_upper_whole_and_is_exactly_its_change_set(
    workspace: Path,  # noqa: F811
) -> None:
    (workspace / "kept.txt").write_text("kept\n")
    before = tree_state(workspace)
    root = Path(os.path.realpath(workspace))
    with Workspace([workspace]) as ws:
        store = CheckpointStore(ws)
        session = await start_local(SessionSpec(roots=(workspace,), change_sets=True))
        try:
            result = await session.run(
                PACKAGE, cwd=workspace, env={}, timeout=60, output_cap=1 << 16
            )
            assert result.exit_code == 0, result
            (upper,) = result.uppers
            assert (upper.path / "pkg" / "lib" / "index.js").is_file()
            out = await merge_or_stage(
                result, {}, _Context(), store, roots=[root], merge_rest=True, staging=False
            )
            # Renamed whole: nothing of it is left in the upper (entry by entry, its
            # directories would stay there until the upper is emptied).
            assert not (upper.path / "pkg").exists()
            changes = out["changes"]
            assert changes["refused"] == [] and changes["files"] == 10, changes
            cs = store.load(changes["id"])
        finally:
            await session.aclose()
            store.close()
    after = tree_state(workspace)
    differ = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    assert {os.fsdecode(os.fsencode(c.path)) for c in cs.changes} == differ
    assert after["pkg/lib"] == ("dir", 0o750, "")
    assert after["pkg/bin/run"][:2] == ("file", 0o755)
    assert os.readlink(workspace / "pkg/bin/index.js") == "../lib/index.js"
    assert (workspace / os.fsdecode(b"pkg/caf\xe9")).read_text() == "odd\n"
    assert all(c.before is None for c in cs.changes)
    owner = workspace.stat().st_uid
    assert all(p.lstat().st_uid == owner for p in (workspace / "pkg").rglob("*"))


@pytest.mark.parametrize("asked", [True, False], ids=["asked", "not-asked"])
async def test_the_collector_is_paused_while_a_set_is_read_and_merged_when_asked(
    workspace: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    asked: bool,
) -> None:
    """Asked (the process's owner: ``pause_collector``), a 2,000-file set's objects are not
    swept by the cyclic collector while it is read and merged (the pause of
    ringfence.workspace.changes._collector); not asked, the collector is left alone. On after,
    either way."""
    import ringfence.workspace.changes._merge as merge_module
    import ringfence.workspace.changes._upper as upper_module

    homes = {"changes_from_upper": upper_module, "merge_changes": merge_module}
    seen: dict[str, bool] = {}
    for name, home in homes.items():
        real = getattr(home, name)

        def observed(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            seen[_name] = gc.isenabled()  # observed only: the real step runs
            return _real(*args, **kwargs)

        monkeypatch.setattr(home, name, observed)
    assert gc.isenabled()
    merged = await run_and_merge(
        workspace,
        "mkdir -p gen && for i in $(seq 2000); do echo $i > gen/f$i; done",
        pause_collector=asked,
    )
    out = merged.out
    assert out["changes"]["files"] == 2001
    assert seen == {"changes_from_upper": not asked, "merge_changes": not asked}
    assert gc.isenabled()
    assert (workspace / "gen" / "f2000").read_text() == "2000\n"


@pytest.mark.parametrize("owner", [0, WORKSPACE_UID], ids=["root-owned", "user-owned"])
def test_a_new_tree_through_the_cli_is_undone_byte_for_byte(
    tmp_path: Path, owner: int, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "kept.txt").write_text("kept\n")
    owned(ws, owner)
    before = tree_state(ws)
    args = ["--workspace", str(ws), "--posture", "allow-reversible", "--approve", "no"]
    code, out = cli_json(
        capsys, "call", "run_shell", "--args", json.dumps({"command": PACKAGE}), *args
    )
    assert code == 0, out
    assert out["result"]["changes"]["files"] == 10
    assert all(p.lstat().st_uid == owner for p in ws.rglob("*"))  # merged as the owner's
    code, shown = cli_json(
        capsys, "checkpoints", "show", out["result"]["changes"]["id"], "--workspace", str(ws)
    )
    assert code == 0 and "+module.exports = 1;" in shown["result"]["diff"], shown
    code, undone = cli_json(capsys, "undo", *args)
    assert code == 0, undone
    assert tree_state(ws) == before


# Each plants one hostile entry in a new tree beside harmless files. The tree must not be
# moved whole: the entry is judged as it would be anywhere (refused, or merged stripped).
REFUSED_IN_A_NEW_TREE = {
    "a .git directory": ("mkdir -p pkg/.git && echo x > pkg/.git/config", "git_metadata"),
    "a gitfile": ("echo 'gitdir: /tmp/evil' > pkg/.git", "git_metadata"),
    "a .GIT in another spelling": (
        "mkdir -p pkg/a/.GIT && echo x > pkg/a/.GIT/HEAD",
        "git_metadata",
    ),
    "a link leaving the roots": ("ln -s /etc/passwd pkg/out", "invalid_arguments"),
    "a FIFO": ("mkfifo pkg/fifo", "invalid_arguments"),
}
# (Set-id bits cannot be set in the local sandbox at all: its seccomp filter refuses them.)


@pytest.mark.parametrize("attack", list(REFUSED_IN_A_NEW_TREE), ids=list(REFUSED_IN_A_NEW_TREE))
async def test_a_hostile_entry_in_a_new_tree_is_refused_and_the_rest_merged(
    workspace: Path,  # noqa: F811
    tmp_path: Path,
    attack: str,
) -> None:
    command, code = REFUSED_IN_A_NEW_TREE[attack]
    events = tmp_path / "events.jsonl"
    async with create_kernel(
        roots=[workspace], posture=Posture.ALLOW_REVERSIBLE, events_path=events
    ) as k:
        outcome = await k.invoke(
            "run_shell",
            {"command": f"mkdir -p pkg/lib && echo ok > pkg/lib/ok.js && {command}"},
        )
    assert outcome.error is not None and outcome.error.code == code, outcome
    refused = outcome.error.details["changes"]["refused"]
    assert refused and all(r["code"] == code for r in refused), refused
    assert (workspace / "pkg" / "lib" / "ok.js").read_text() == "ok\n"  # the rest was merged
    names = {str(p.relative_to(workspace)) for p in workspace.rglob("*")}
    assert names == {"pkg", "pkg/lib", "pkg/lib/ok.js"} | ({"pkg/a"} if "GIT" in attack else set())
    for p in workspace.rglob("*"):
        st = p.lstat()
        assert stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)
        assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID)
    assert not Path("/tmp/evil").exists()
    records = [json.loads(line) for line in events.read_text().splitlines()]
    (checkpoint,) = [r for r in records if r["kind"] == "checkpoint"]
    assert checkpoint["refused"] == refused


async def test_a_git_directory_assembled_in_a_new_tree_never_reaches_the_workspace(
    workspace: Path,  # noqa: F811
) -> None:
    """No `.git` name at all: HEAD, objects/ and refs/ in a new directory make it a git
    directory that `git -C pkg/sub` would use (and run its config's programs)."""
    command = (
        "mkdir -p pkg/sub/objects pkg/sub/refs && echo 'ref: refs/heads/main' > pkg/sub/HEAD "
        "&& printf '[core]\\n\\tfsmonitor = touch /tmp/pwned-tree\\n' > pkg/sub/config "
        "&& echo ok > pkg/ok.txt"
    )
    async with create_kernel(roots=[workspace], posture=Posture.ALLOW_REVERSIBLE) as k:
        outcome = await k.invoke("run_shell", {"command": command})
    assert outcome.error is not None and outcome.error.code == "git_metadata", outcome
    sub = workspace / "pkg" / "sub"
    assert not all((sub / n).exists() for n in ("HEAD", "objects", "refs"))
    assert not Path("/tmp/pwned-tree").exists()


# Harmless in themselves, but the tree cannot be moved as it is: merged entry by entry.
STRIPPED_IN_A_NEW_TREE = {
    "an extended attribute": (
        "python3 -c \"import os; os.setxattr('pkg/x.js', 'user.planted', b'1')\"",
        lambda ws: os.listxattr(ws / "pkg" / "x.js", follow_symlinks=False) == [],
    ),
    "a hard link to a file outside the tree": (
        "ln outside.txt pkg/hl.txt",
        lambda ws: (
            (ws / "pkg" / "hl.txt").stat().st_ino != (ws / "outside.txt").stat().st_ino
            and (ws / "pkg" / "hl.txt").stat().st_nlink == 1
        ),
    ),
    "a hard link inside the tree": (
        "ln pkg/x.js pkg/y.js",
        lambda ws: (ws / "pkg" / "y.js").stat().st_ino != (ws / "pkg" / "x.js").stat().st_ino,
    ),
}


@pytest.mark.parametrize("case", list(STRIPPED_IN_A_NEW_TREE), ids=list(STRIPPED_IN_A_NEW_TREE))
def test_what_a_tree_cannot_carry_is_merged_entry_by_entry(
    tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "outside.txt").write_text("outside\n")
    command, check = STRIPPED_IN_A_NEW_TREE[case]
    code, out = cli_json(
        capsys,
        "call",
        "run_shell",
        "--args",
        json.dumps({"command": f"mkdir pkg && echo x > pkg/x.js && {command}"}),
        "--workspace",
        str(ws),
        "--posture",
        "allow-reversible",
        "--approve",
        "no",
    )
    assert code == 0, out
    assert out["result"]["changes"]["refused"] == []
    assert (ws / "pkg" / "x.js").read_text() == "x\n"
    assert check(ws)
    (ws / "outside.txt").write_text("changed\n")  # no merged name shares its inode
    assert all(p.read_text() != "changed\n" for p in (ws / "pkg").iterdir())


# A merge that renames a new tree whole hands the next scan of the workspace the directories
# inside it as the read listed them, so that scan does not list them again
# (changes._resulting.note_moved). What it hands over must keep every candidate the check
# needs: these sets try to build a repository around such a directory later.


async def test_a_git_dir_candidate_inside_a_moved_tree_cannot_be_completed_later(
    workspace: Path,  # noqa: F811
) -> None:
    """A directory inside a moved tree with HEAD, refs/ and objects (no repository for git
    yet: its objects is a link to nothing) could be completed by a later set from elsewhere
    (the link's target, no git name in the set). It is refused when laid now: nothing of it
    reaches the workspace."""
    first = (
        "mkdir -p pkg/deep/wt/refs && echo 'ref: refs/heads/main' > pkg/deep/wt/HEAD && "
        "ln -s ../../store pkg/deep/wt/objects && "
        "sleep 0.3 && echo ok > pkg/ok.txt"  # older than the check's hot margin
    )
    async with create_kernel(roots=[workspace], posture=Posture.ALLOW_REVERSIBLE) as k:
        merged = await k.invoke("run_shell", {"command": first})
    # A link named objects counts whatever it leads to (a later session on other roots could
    # complete it unseen), so the candidate is refused when it is laid, with its whole tree:
    # there is nothing left for a later set to complete.
    assert merged.error is not None and merged.error.code == "git_metadata", merged
    assert "pkg/deep/wt" in merged.error.message
    assert not (workspace / "pkg").exists()


async def test_a_gitfile_put_into_a_moved_tree_later_is_seen_by_the_next_check(
    workspace: Path,  # noqa: F811
) -> None:
    """A ``.git`` file written into a directory of a moved tree after the merge (by someone
    else: here the test, as the workspace's owner) changes that directory's ctime, so the next
    scan lists it again: a later set that makes its gitfile lead to a repository through a
    new link (no git name in the set) is refused, the link never made."""
    first = "mkdir -p pkg/a/b && echo x > pkg/a/b/x.txt && sleep 0.3 && echo ok > pkg/ok.txt"
    async with create_kernel(roots=[workspace], posture=Posture.ALLOW_REVERSIBLE) as k:
        merged = await k.invoke("run_shell", {"command": first})
        assert merged.error is None, merged
        # Outside the sets: a repository, and a gitfile pointing at it through a missing link.
        repo = workspace / "real" / "g"
        for sub in ("objects", "refs"):
            (repo / sub).mkdir(parents=True)
        (repo / "HEAD").write_text("ref: refs/heads/main\n")
        (workspace / "pkg" / "a" / "b" / ".git").write_text("gitdir: ../../lnk/g\n")
        outcome = await k.invoke("run_shell", {"command": "ln -s ../real pkg/lnk"})
    assert outcome.error is not None and outcome.error.code == "git_metadata", outcome
    assert "pkg/a/b" in outcome.error.message
    assert not (workspace / "pkg" / "lnk").is_symlink()

"""Git metadata is never written: git's own spelling vectors, real repositories, assembling."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from workspace_helpers import Tree, git, needs_git, snapshot

from ringfence.runtime import GitMetadata, RingfenceError
from ringfence.workspace import Workspace
from ringfence.workspace.git._rules import (
    is_dotgit,
    is_dotgitmodules,
    is_git_directory,
    parse_gitfile,
    valid_head,
)

U200C = "\u200c"

# git/git t/t1014-read-tree-confusing.sh: every one of these is refused as a file
# name and as a directory name (with core.protectNTFS and core.protectHFS on).
T1014_REFUSED = [
    ".git",
    ".GIT",
    f"{U200C}.Git",
    f".gI{U200C}T",
    f".GiT{U200C}",
    "git~1",
    ".git. ",
    ".\\.GIT\\foobar",
    ".git\\foobar",
    ".git...:alternate-stream",
]
# The same rules from the notes and git's path.c comments: more positives ...
MORE_DOTGIT = [
    ".git::$INDEX_ALLOCATION",
    ".git:$DATA",
    "GIT~1",
    "git~1. . ",
    ".git.",
    ".git ",
    "\ufeff.G\u202ei\u206aT",
    ".g\u200dit",
    ".gi\u200et",
]
# ... and names git allows (t1014 "utf-8 paths allowed" and the notes' list).
NOT_DOTGIT = [
    ".gitx",
    "..git",
    " .git",
    "git~2",
    "git~10",
    ".git-foo",
    ".git\u00a0",
    ".git\t",
    ".gitignore",
    ".gitmodules",
    ".github",
    ".\u0147it",  # .Ňit: a non-ignorable non-ASCII letter
    "foo:bar",
    ".git .config",
]

# git/git t/t0060-path-utils.sh 'match .gitmodules' (the generic NTFS/HFS rules).
T0060_GITMODULES = [
    ".gitmodules", f".git{U200C}modules", ".Gitmodules", ".gitmoduleS",
    ".gitmodules ", ".gitmodules.", ".gitmodules  ", ".gitmodules. ", ".gitmodules .",
    ".gitmodules..", ".gitmodules   ", ".gitmodules.  ", ".gitmodules . ", ".gitmodules  .",
    ".Gitmodules ", ".Gitmodules.", ".Gitmodules  ", ".Gitmodules. ", ".Gitmodules .",
    ".Gitmodules..", ".Gitmodules   ", ".Gitmodules.  ", ".Gitmodules . ", ".Gitmodules  .",
    "GITMOD~1", "gitmod~1", "GITMOD~2", "gitmod~3", "GITMOD~4",
    "GITMOD~1 ", "gitmod~2.", "GITMOD~3  ", "gitmod~4. ", "GITMOD~1 .", "gitmod~2   ",
    "GITMOD~3.  ", "gitmod~4 . ",
    "GI7EBA~1", "gi7eba~9",
    "GI7EB~10", "GI7EB~11", "GI7EB~99", "GI7EB~10", "GI7E~100", "GI7E~101", "GI7E~999",
    "~1000000", "~9999999",
    ".gitmodules:$DATA", "gitmod~4 . :$DATA",
]  # fmt: skip
T0060_NOT_GITMODULES = [
    ".gitmodules x", ".gitmodules .x", " .gitmodules", "..gitmodules", "gitmodules",
    ".gitmodule", ".gitmodules x ", ".gitmodules .x",
    "GI7EBA~", "GI7EBA~0", "GI7EBA~~1", "GI7EBA~X", "Gx7EBA~1", "GI7EBX~1",
    "GI7EB~1", "GI7EB~01", "GI7EB~1X", ".gitmodules,:$DATA",
]  # fmt: skip


@pytest.mark.parametrize("name", T1014_REFUSED + MORE_DOTGIT)
def test_dotgit_spellings_match(name: str) -> None:
    assert is_dotgit(name)


@pytest.mark.parametrize("name", NOT_DOTGIT)
def test_near_misses_do_not_match(name: str) -> None:
    assert not is_dotgit(name)


def test_t0060_gitmodules_vectors() -> None:
    assert [n for n in T0060_GITMODULES if not is_dotgitmodules(n)] == []
    assert [n for n in T0060_NOT_GITMODULES if is_dotgitmodules(n)] == []


@pytest.mark.parametrize("name", T1014_REFUSED + MORE_DOTGIT)
def test_t1014_names_are_refused_at_end_of_path_and_as_subtree(
    ws: Workspace, tree: Tree, name: str
) -> None:
    before = snapshot(tree.ws)
    for path in (name, f"{name}/config", f"deep/er/{name}", f"deep/er/{name}/hooks/pre-commit"):
        with pytest.raises(GitMetadata) as info:
            ws.write_text(path, "[core]\n\thooksPath = /tmp/evil\n")
        assert "Git runs programs" in info.value.message
    assert snapshot(tree.ws) == before


def test_t1014_dot_and_dotdot_are_not_writable_names(ws: Workspace, tree: Tree) -> None:
    before = snapshot(tree.ws)
    for path, code in ((".", "invalid_arguments"), ("..", "outside_workspace")):
        with pytest.raises(RingfenceError) as info:
            ws.write_text(path, "x")
        assert info.value.code == code
    assert snapshot(tree.ws) == before


@pytest.mark.parametrize("name", NOT_DOTGIT)
def test_near_miss_names_are_writable(ws: Workspace, tree: Tree, name: str) -> None:
    ws.write_text(f"d/{name}", "ok\n")
    assert (tree.ws / "d" / name).read_text() == "ok\n"


# -- real repositories -------------------------------------------------------------------


@pytest.fixture
def repo(tree: Tree) -> Path:
    """ws is a git work tree with a nested repo, a bare repo, a submodule-like git dir,
    a separate git dir and a linked worktree in ws2 (whose .git file points back into ws)."""
    if git("--version").returncode != 0:
        pytest.skip("git is not installed (add it to .ci/run)")
    ws = tree.ws
    assert git("init", "-q", cwd=ws).returncode == 0
    assert git("commit", "-q", "--allow-empty", "-m", "base", cwd=ws).returncode == 0
    (ws / "vendor" / "lib").mkdir(parents=True)
    assert git("init", "-q", cwd=ws / "vendor" / "lib").returncode == 0  # Codex: nested .git
    assert git("init", "-q", "--bare", str(ws / "mirror.git")).returncode == 0
    assert (
        git("init", "-q", "--separate-git-dir", str(ws / "sepdir"), str(ws / "proj")).returncode
        == 0
    )
    assert git("worktree", "add", "-q", str(tree.ws2 / "wt"), cwd=ws).returncode == 0
    return ws


GIT_TARGETS = [
    ".git/config",
    ".git/hooks/pre-commit",
    ".git/hooks/post-checkout",
    ".git/info/attributes",
    ".git/new-file",
    ".GIT/config",
    "vendor/lib/.git/config",
    "vendor/lib/.git/hooks/pre-commit",
    "mirror.git/config",
    "mirror.git/hooks/post-update",
    "mirror.git/new-dir/file",
    "sepdir/config",
    "sepdir/hooks/pre-commit",
    "proj/.git",
    "vendor/.git",
    ".git/worktrees/wt/config.worktree",
    "{ws2}/wt/.git",
]


@needs_git
def test_git_metadata_is_never_written_in_real_repositories(
    ws: Workspace, tree: Tree, repo: Path
) -> None:
    before = (snapshot(tree.ws), snapshot(tree.ws2))
    outcomes = {}
    for target in GIT_TARGETS:
        path = target.format(ws2=tree.ws2)
        for name, attempt in (
            ("write", lambda p=path: ws.write_text(p, "[core]\n\tfsmonitor = touch /tmp/pwned\n")),
            ("unrestricted", lambda p=path: ws.with_host_root([].append).write_text(p, "x")),
            ("edit", lambda p=path: ws.edit_text(p, "[core]", "[core]\n\thooksPath = /x")),
        ):
            try:
                attempt()
                outcomes[(path, name)] = "ok"
            except RingfenceError as exc:
                outcomes[(path, name)] = exc.code
    # An edit of a file that does not exist may say so first; nothing else gets through.
    wrong = {
        k: v
        for k, v in outcomes.items()
        if v != "git_metadata" and not (k[1] == "edit" and v == "not_found")
    }
    assert wrong == {}
    assert (snapshot(tree.ws), snapshot(tree.ws2)) == before


@needs_git
def test_git_metadata_stays_readable(ws: Workspace, repo: Path) -> None:
    assert "[core]" in ws.read_text(".git/config")
    assert ws.read_text("mirror.git/HEAD").startswith("ref: refs/heads/")
    assert any(e["name"] == "hooks" for e in ws.list_dir(".git"))


@needs_git
def test_links_into_git_metadata_are_refused(ws: Workspace, tree: Tree, repo: Path) -> None:
    (repo / "cfg").symlink_to(".git/config")
    (repo / "hooks").symlink_to(".git/hooks")
    (repo / "abs_hooks").symlink_to(repo / "mirror.git" / "hooks")
    (repo / "innocent").symlink_to(".git")
    before = snapshot(repo)
    for path in ("cfg", "hooks/pre-commit", "abs_hooks/post-update", "innocent/config"):
        with pytest.raises(GitMetadata):
            ws.write_text(path, "evil")
    assert snapshot(repo) == before


@needs_git
def test_a_hard_link_to_git_config_is_replaced_not_written_through(
    ws: Workspace, repo: Path
) -> None:
    config = repo / ".git" / "config"
    original = config.read_bytes()
    os.link(config, repo / "hardcfg")
    ws.write_text("hardcfg", "[core]\n\thooksPath = /tmp/evil\n")
    assert config.read_bytes() == original
    assert (repo / "hardcfg").read_text() == "[core]\n\thooksPath = /tmp/evil\n"
    assert (repo / "hardcfg").stat().st_ino != config.stat().st_ino


@needs_git
def test_is_git_directory_agrees_with_git(tree: Tree, repo: Path) -> None:
    base = tree.base / "candidates"
    base.mkdir()
    cases = {
        "ref_head": ("ref: refs/heads/main\n", True, True),
        "oid_head": ("0123456789abcdef0123456789abcdef01234567\n", True, True),
        "spaced_ref": ("ref:   refs/heads/x\n", True, True),
        "bad_head": ("ref: heads/main\n", True, True),
        "short_oid": ("0123456789abcdef\n", True, True),
        "no_objects": ("ref: refs/heads/main\n", False, True),
        "no_refs": ("ref: refs/heads/main\n", True, False),
    }
    for name, (head, objects, refs) in cases.items():
        d = base / name
        d.mkdir()
        (d / "HEAD").write_text(head)
        if objects:
            (d / "objects").mkdir()
        if refs:
            (d / "refs").mkdir()
    linked = base / "symlink_head"
    (linked / "objects").mkdir(parents=True)
    (linked / "refs").mkdir()
    (linked / "HEAD").symlink_to("refs/heads/main")
    dirs = [*(base / n for n in cases), linked, repo / ".git", repo / "mirror.git", repo / "sepdir",
            repo / ".git" / "worktrees" / "wt", repo, repo / "vendor"]  # fmt: skip
    for d in dirs:
        ours = _is_git_dir(d)
        theirs = git("--git-dir", str(d), "rev-parse", "--git-dir", cwd=tree.base).returncode == 0
        assert ours == theirs, (d, ours, theirs)


def _is_git_dir(d: Path) -> bool:
    fd = os.open(d, os.O_PATH | os.O_DIRECTORY)
    try:
        return is_git_directory(fd)
    finally:
        os.close(fd)


def test_valid_head_rules() -> None:
    assert valid_head(b"ref: refs/heads/main\n")
    assert valid_head(b"ref:refs/x")
    assert valid_head(b"ref: \t refs/x")
    assert valid_head(b"a" * 40)
    assert valid_head(b"0" * 64 + b"\n")
    assert not valid_head(b"ref: HEAD")
    assert not valid_head(b"g" * 40)
    assert not valid_head(b"")
    assert valid_head(None, symlink_target="refs/heads/x")
    assert not valid_head(None, symlink_target="../../etc/passwd")


# -- assembling a git directory ------------------------------------------------------------


def test_writing_head_into_objects_and_refs_is_refused(ws: Workspace, tree: Tree) -> None:
    d = tree.ws / "fake"
    (d / "objects").mkdir(parents=True)
    (d / "refs").mkdir()
    before = snapshot(tree.ws)
    with pytest.raises(GitMetadata) as info:
        ws.write_text("fake/HEAD", "ref: refs/heads/main\n")
    assert "would make fake a git directory" in info.value.message
    assert snapshot(tree.ws) == before
    # A HEAD git would not accept does not make a git directory ...
    ws.write_text("fake/HEAD", "not a ref\n")
    # ... and turning it into one later is refused just the same.
    with pytest.raises(GitMetadata):
        ws.edit_text("fake/HEAD", "not a ref", "ref: refs/heads/main")
    with pytest.raises(GitMetadata):
        ws.write_text("fake/HEAD", "0123456789abcdef0123456789abcdef01234567\n")
    assert (d / "HEAD").read_text() == "not a ref\n"


@pytest.mark.parametrize("missing", ["objects", "refs"])
def test_creating_the_last_missing_directory_is_refused(
    ws: Workspace, tree: Tree, missing: str
) -> None:
    d = tree.ws / "fake"
    d.mkdir()
    (d / "HEAD").write_text("ref: refs/heads/main\n")
    present = "refs" if missing == "objects" else "objects"
    (d / present).mkdir()
    before = snapshot(tree.ws)
    with pytest.raises(GitMetadata):
        ws.write_text(f"fake/{missing}/pack/x", "y")
    assert snapshot(tree.ws) == before  # not even the directory was created


def test_assembling_in_any_order_stops_at_the_last_piece(ws: Workspace, tree: Tree) -> None:
    ws.write_text("asm/config", "[core]\n\thooksPath = hooks\n")  # not a git dir yet
    ws.write_text("asm/hooks/post-checkout", "#!/bin/sh\ntouch /tmp/pwned\n")
    ws.write_text("asm/objects/info/x", "")
    ws.write_text("asm/HEAD", "ref: refs/heads/main\n")
    with pytest.raises(GitMetadata):
        ws.write_text("asm/refs/heads/main", "0" * 40 + "\n")
    assert not (tree.ws / "asm" / "refs").exists()
    fd = os.open(tree.ws / "asm", os.O_PATH)
    try:
        assert not is_git_directory(fd)
    finally:
        os.close(fd)


def test_commondir_and_gitfiles_cannot_be_written(ws: Workspace, tree: Tree) -> None:
    (tree.ws / "w").mkdir()
    (tree.ws / "w" / "HEAD").write_text("ref: refs/heads/main\n")
    before = snapshot(tree.ws)
    with pytest.raises(GitMetadata):
        ws.write_text("w/commondir", "../common\n")
    with pytest.raises(GitMetadata):
        ws.write_text("proj/.git", "gitdir: ../w\n")
    assert snapshot(tree.ws) == before


def test_a_root_inside_git_metadata_refuses_every_write(tree: Tree) -> None:
    hooks = tree.base / "r" / ".git" / "hooks"
    hooks.mkdir(parents=True)
    with Workspace([hooks]) as w:
        with pytest.raises(GitMetadata) as info:
            w.write_text("pre-commit", "#!/bin/sh\n")
        assert "inside a .git directory" in info.value.message
        assert not (hooks / "pre-commit").exists()


@needs_git
def test_a_bare_repository_as_root_refuses_every_write(tree: Tree, repo: Path) -> None:
    with Workspace([repo / "mirror.git"]) as w:
        with pytest.raises(GitMetadata):
            w.write_text("hooks/post-update", "#!/bin/sh\n")
        with pytest.raises(GitMetadata):
            w.write_text("newfile", "x")


@needs_git
def test_git_directories_lists_every_git_dir_for_read_only_mounts(tree: Tree, repo: Path) -> None:
    (repo / "escape").symlink_to(tree.outside)  # never entered
    (tree.outside / "repo").mkdir()
    assert git("init", "-q", cwd=tree.outside / "repo").returncode == 0
    with Workspace(tree.roots()) as w:
        found = w.git_directories()
    assert found == sorted(
        {
            repo / ".git",
            repo / "vendor" / "lib" / ".git",
            repo / "mirror.git",
            repo / "sepdir",  # target of proj/.git, a gitfile
        }
    )
    # ws2/wt/.git points at repo/.git/worktrees/wt: covered by repo/.git.
    assert all(not str(p).startswith(str(tree.outside)) for p in found)


def test_dotdot_after_created_directories_still_finds_the_git_directory(
    ws: Workspace, tree: Tree
) -> None:
    # Descriptors closed by ".." get reused for the next directory opened; a check
    # remembered per descriptor number would take the git directory for "newdir".
    bare = tree.ws / "fakebare"
    (bare / "objects").mkdir(parents=True)
    (bare / "refs").mkdir()
    (bare / "HEAD").write_text("ref: refs/heads/main\n")
    before = snapshot(tree.ws)
    with pytest.raises(GitMetadata):
        ws.write_text("newdir/sub/../../fakebare/refs/planted", "x")
    assert snapshot(tree.ws) == before


# A gitfile's body from these pieces; git directories wait at some of the paths they spell.
GITFILE_PIECES = [b"real", b"a", b"b", b"\n", b"\r", b"\0", b" ", b"/", b".."]
GIT_DIR_NAMES = [b"real", b"a", b"real\nb", b"a\nb", b"real\rb", b"real b", b"real\n\nb"]


@pytest.fixture(scope="module")
def gitfile_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding a bare git directory under each of GIT_DIR_NAMES."""
    base = tmp_path_factory.mktemp("gitfile") / "base"
    base.mkdir()
    for name in GIT_DIR_NAMES:
        git("init", "--bare", "-q", os.fsdecode(name), cwd=base)
    return base


@needs_git
@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(pieces=st.lists(st.sampled_from(GITFILE_PIECES), max_size=6))
def test_a_gitfile_is_read_as_git_reads_it(gitfile_base: Path, pieces: list[bytes]) -> None:
    """Differential, git the oracle: ``parse_gitfile``'s target is the git directory git
    itself opens for that ``.git`` file (``rev-parse --absolute-git-dir``), and when git
    finds none, the target is no git directory either. Cut at the first newline, the
    parser took ``gitdir: real\\nb`` for ``real`` where git opened ``real\\nb``."""
    content = b"gitdir: " + b"".join(pieces)
    (gitfile_base / ".git").write_bytes(content)
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(gitfile_base.parent)}
    env.pop("GIT_DIR", None)
    found = subprocess.run(
        ["git", "rev-parse", "--absolute-git-dir"],
        cwd=gitfile_base,
        env=env,
        capture_output=True,
        check=False,
    )
    ours = parse_gitfile(content)
    judged = None if ours is None else os.path.realpath(gitfile_base / ours)
    if found.returncode == 0:
        assert judged == os.path.realpath(os.fsdecode(found.stdout[:-1])), (content, found)
    else:
        assert judged is None or not _opens_as_git_directory(judged), (content, found.stderr)


def _opens_as_git_directory(path: str) -> bool:
    try:
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return is_git_directory(fd)
    finally:
        os.close(fd)

"""Git metadata and links judged on the tree a change set leaves, attacked through the CLI.

Each attack is a real confined command (``ringfence call run_shell``) whose
writes, entry by entry, look harmless: a repository assembled with a link or
with executable *files* for ``objects``/``refs``, a ``commondir``, a link that
leaves the roots through another link, an existing link made to point out.
Each must be refused whole, with the workspace byte for byte as before, real
``git`` finding no new repository there (so no ``core.fsmonitor`` can run),
and no change set recorded as applied.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from backends_helpers import DOCKER_OPTIONS, WORKSPACE_UID, chown_like_workspace
from cli_helpers import cli_json, isolated  # noqa: F401 (an autouse fixture)
from test_backends_changesets import owned, tree_state
from tree_helpers import git_found

from ringfence.backends._trees import remove_tree

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

HEAD = "printf 'ref: refs/heads/main\\n' > HEAD"
FSMONITOR = '[core]\n\tfsmonitor = "touch {m}"\n'
HOOK = "#!/bin/sh\ntouch {m}\n"


def config(marker: Path, worktree: str = "..") -> str:
    return (
        "printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n"
        f'\\tworktree = {worktree}\\n\\tfsmonitor = "touch {marker}"\\n\' > config'
    )


# name -> (command, directory git must not take for a repository). {config} is the hostile config.
GIT_ATTACKS = {
    # The finding as reported: refs a link to objects.
    "refs a link": (
        f"mkdir sub && cd sub && {HEAD} && mkdir objects && ln -s objects refs && {{config}}",
        "sub",
    ),
    "HEAD a link": (
        "mkdir sub && cd sub && ln -s refs/heads/main HEAD && mkdir objects refs && {config}",
        "sub",
    ),
    "objects and refs linking to a workspace directory": (
        f"mkdir sub && cd sub && {HEAD} && ln -s ../data objects && ln -s ../data refs && {{config}}",
        "sub",
    ),
    "a commondir": (
        f"mkdir -p sub common/objects common/refs && cd sub && {HEAD} && echo ../common > commondir && {{config}}",
        "sub",
    ),
    # git's test is access(X_OK): an executable empty *file* passes.
    "executable files, no directory at all": (
        f"mkdir sub && cd sub && {HEAD} && touch objects refs && chmod 755 objects refs && {{config}}",
        "sub",
    ),
    "executable files at the root": (
        f"{HEAD} && touch objects refs && chmod 755 objects refs && {{config}}",
        ".",
    ),
    "renamed into place whole": (
        f"mkdir -p /tmp/t/sub && cd /tmp/t/sub && {HEAD} && mkdir objects && ln -s objects refs"
        " && {config} && cd - >/dev/null && mv /tmp/t/sub sub",
        "sub",
    ),
}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "data").mkdir(parents=True)
    (root / "data" / "keep.txt").write_text("data\n")
    (root / "notes.txt").write_text("notes\n")
    return owned(root, WORKSPACE_UID)


def git_dir(where: Path) -> str | None:
    """What the real git finds from ``where`` (no repository above the test's directory)."""
    return git_found(where, where.parent.parent)


def git_status(where: Path) -> None:
    """``git status`` where a person would run it: a planted fsmonitor would run here."""
    if where.is_dir():
        subprocess.run(  # as root, over the workspace owner's files: trust them, as the owner would
            ["git", "-c", "safe.directory=*", "status"],
            cwd=where,
            capture_output=True,
            env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"},
        )


def call(
    capsys: pytest.CaptureFixture[str], ws: Path, command: str, *extra: str
) -> tuple[int, Any]:
    args = ["--workspace", str(ws), "--posture", "allow-reversible", "--approve", "no"]
    return cli_json(
        capsys, "call", "run_shell", "--args", json.dumps({"command": command}), *args, *extra
    )


def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def assert_refused_and_unchanged(
    code: int,
    out: Any,
    ws: Path,
    before: dict[str, Any],
    marker: Path,
    events_path: Path,
    where: str,
) -> None:
    assert code != 0, out
    assert out["error"]["code"] in ("git_metadata", "invalid_arguments"), out
    assert "refused as a whole" in out["error"]["message"]
    assert tree_state(ws) == before
    assert git_dir(ws / where) is None
    git_status(ws / where)
    assert not marker.exists()
    applied = [e for e in events(events_path) if e["kind"] == "checkpoint" and e.get("id")]
    assert applied == []


@pytest.mark.parametrize("attack", list(GIT_ATTACKS), ids=list(GIT_ATTACKS))
def test_a_repository_assembled_any_way_is_refused_whole(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], attack: str
) -> None:
    marker = tmp_path / "PWNED"
    command, where = GIT_ATTACKS[attack]
    before = tree_state(ws)
    events_path = tmp_path / "events.jsonl"
    code, out = call(
        capsys, ws, command.format(config=config(marker)), "--events", str(events_path)
    )
    assert_refused_and_unchanged(code, out, ws, before, marker, events_path, where)


def test_an_almost_repository_completed_by_a_later_command_is_refused(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Step one plants HEAD, config and dangling links (not a repository for git yet); step
    two only makes two directories elsewhere. Step one is refused now: links named
    ``objects``/``refs`` count whatever they lead to, since a later writer that does not see
    ``sub`` (a session on other roots) could complete them. Laid all the same (by hand, or
    by a version before that), the second is judged on the tree it leaves."""
    marker = tmp_path / "PWNED"
    step1 = f"mkdir sub && cd sub && {HEAD} && ln -s ../o objects && ln -s ../r refs && {config(marker)}"
    before = tree_state(ws)
    code, out = call(capsys, ws, step1, "--events", str(tmp_path / "step1.jsonl"))
    assert_refused_and_unchanged(code, out, ws, before, marker, tmp_path / "step1.jsonl", ".")
    subprocess.run(["sh", "-c", step1], cwd=ws, check=True)
    assert git_dir(ws / "sub") is None
    before = tree_state(ws)
    events_path = tmp_path / "events.jsonl"
    code, out = call(capsys, ws, "mkdir o r", "--events", str(events_path))
    assert_refused_and_unchanged(code, out, ws, before, marker, events_path, "sub")


# git reads all of a commondir, strips its trailing newlines, and only then stops at a NUL.
COMMONDIRS = {
    "longer than 4096 bytes": (
        "c",
        "printf '%.0s./' $(seq 2100) > commondir && printf c >> commondir",
    ),
    "a NUL after its newline": ("$d", "printf 'd\\n\\0' > commondir"),
}


@pytest.mark.parametrize("spelling", list(COMMONDIRS), ids=list(COMMONDIRS))
def test_a_commondir_read_as_git_reads_it(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], spelling: str
) -> None:
    """Step one: ``sub/commondir`` naming ``sub/c`` (``objects``, ``refs``, the hostile
    config), no HEAD: no repository. Step two: ``ln -s refs/heads/main sub/HEAD`` (a link: no
    file content for the merge's own check to read). git's common directory is ``sub/c``."""
    marker = tmp_path / "PWNED"
    common, write = COMMONDIRS[spelling]
    step1 = (
        "d=$(printf 'd\\n.') && d=${d%.} && mkdir sub && cd sub"
        f' && mkdir -p "{common}/objects" "{common}/refs" && {write} && cd "{common}"'
        f" && {config(marker)}"
    )
    code, out = call(capsys, ws, step1)
    assert code == 0, out
    assert git_dir(ws / "sub") is None
    before = tree_state(ws)
    events_path = tmp_path / "events.jsonl"
    code, out = call(capsys, ws, "ln -s refs/heads/main sub/HEAD", "--events", str(events_path))
    assert_refused_and_unchanged(code, out, ws, before, marker, events_path, "sub")
    assert out["error"]["code"] == "git_metadata" and f"{ws / 'sub'} " in out["error"]["message"]


def test_an_almost_repository_completed_by_write_file_is_refused(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "PWNED"
    step1 = f"mkdir sub && cd sub && {HEAD} && ln -s ../o objects && ln -s ../r refs && {config(marker)}"
    assert call(capsys, ws, step1)[0] != 0  # links named objects/refs count: a repository
    subprocess.run(["sh", "-c", step1], cwd=ws, check=True)  # laid by hand (or an old version)
    assert git_dir(ws / "sub") is None
    args = ["--workspace", str(ws), "--posture", "allow-reversible", "--approve", "no"]
    before = tree_state(ws)
    # sub counts as a repository now, so what its links lead to is git metadata: o/ alone
    # (which completed nothing, and was written) is refused too.
    for path in ("o/x", "r/x"):
        code, out = cli_json(
            capsys,
            "call",
            "write_file",
            "--args",
            json.dumps({"path": path, "content": "x"}),
            *args,
        )
        assert code != 0 and out["error"]["code"] == "git_metadata", out
        assert tree_state(ws) == before
    assert git_dir(ws / "sub") is None
    git_status(ws / "sub")
    assert not marker.exists()


# The link attacks: `realpath` (the kernel's walk) decides, not `normpath`.
def test_a_link_that_leaves_through_another_link_is_refused(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    depth = len(ws.parts) - 1  # climbs from the root to /
    up = "/".join(f"d{i}" for i in range(depth))
    lexically_inside = up + "/up/" + "../" * depth + "etc"
    assert not os.path.normpath(lexically_inside).startswith("..")  # what a lexical judge saw
    command = f"mkdir -p {up} && ln -s {'../' * (depth - 1)}.. {up}/up && ln -s {lexically_inside} etclink"
    before = tree_state(ws)
    code, out = call(capsys, ws, command)
    assert code != 0 and out["error"]["code"] == "invalid_arguments", out
    assert "etclink" in out["error"]["message"] and "refused as a whole" in out["error"]["message"]
    assert tree_state(ws) == before


def test_an_absolute_link_through_a_link_is_refused(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    depth = len(ws.parts) - 1
    up = "/".join(f"d{i}" for i in range(depth))
    target = f"{ws}/{up}/up/{'../' * depth}etc"
    assert os.path.normpath(target).startswith(str(ws) + "/")  # what a lexical judge saw
    command = f"mkdir -p {up} && ln -s {'../' * (depth - 1)}.. {up}/up && ln -s {target} etclink"
    before = tree_state(ws)
    code, out = call(capsys, ws, command)
    assert code != 0 and out["error"]["code"] == "invalid_arguments", out
    assert tree_state(ws) == before


def test_an_existing_link_made_to_point_out_is_refused(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``L -> a/b/../../x`` resolves inside while ``a/b`` is a directory; turning ``a`` into a
    link to ``.`` (itself inside) makes ``L`` resolve above the root."""
    code, out = call(capsys, ws, "mkdir -p a/b && ln -s a/b/../../x L")
    assert code == 0, out
    assert os.path.realpath(ws / "L").startswith(str(ws) + "/")
    before = tree_state(ws)
    code, out = call(capsys, ws, "rm -r a && ln -s . a")
    assert code != 0 and out["error"]["code"] == "invalid_arguments", out
    assert "existing link" in out["error"]["message"] and "L" in out["error"]["message"]
    assert tree_state(ws) == before
    assert os.path.realpath(ws / "L").startswith(str(ws) + "/")


# A link outside the roots may name a different place for each process that follows it
# (/proc/self/cwd, /proc/self/fd/N, /dev/fd/N): ringfence's own walk through it says nothing
# about the host's. ringfence runs in the workspace here, its CLI's default.
def _through_proc(ws: Path, from_dir: str, rest: str) -> tuple[str, str]:
    """A command making ``d0/…/up -> <root>`` and the lexically-inside text of a link in
    ``from_dir`` that climbs to ``/`` through ``up`` and goes on into ``/proc/self/cwd/<rest>``."""
    depth = len(ws.parts) - 1
    up = "/".join(f"d{i}" for i in range(depth))
    prefix = "../" * from_dir.count("/") + ("../" if from_dir else "")
    text = f"{prefix}{up}/up/{'../' * depth}proc/self/cwd{rest}"
    return f"mkdir -p {up} && ln -s {'../' * (depth - 1)}.. {up}/up", text


def test_a_link_through_the_hosts_per_process_links_is_refused(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cwdlink -> …/up/../../proc/self/cwd``: ringfence's walk (its cwd is the root) ends
    inside; the kernel, for any other process, ends in that process's directory."""
    monkeypatch.chdir(ws)
    make_up, text = _through_proc(ws, "", "")
    assert not os.path.normpath(text).startswith("..")  # lexically inside
    before = tree_state(ws)
    code, out = call(capsys, ws, f"{make_up} && ln -s {text} cwdlink")
    assert code != 0 and out["error"]["code"] == "invalid_arguments", out
    assert "cwdlink" in out["error"]["message"] and "refused as a whole" in out["error"]["message"]
    assert tree_state(ws) == before
    assert not os.path.lexists(ws / "cwdlink")


def test_a_repository_completed_through_the_hosts_per_process_links_is_refused(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sub/objects -> …/proc/self/cwd/objdir``: from ringfence's directory (the root) there
    is no ``objdir``, so no repository; from ``sub``, where a person runs ``git status``,
    there is one, and git runs ``core.fsmonitor``."""
    monkeypatch.chdir(ws)
    marker = tmp_path / "PWNED"
    make_up, text = _through_proc(ws, "sub", "/objdir")
    command = (
        f"{make_up} && mkdir -p sub/objdir sub/refs && cd sub && {HEAD} && {config(marker)}"
        f" && ln -s {text} objects"
    )
    before = tree_state(ws)
    events_path = tmp_path / "events.jsonl"
    code, out = call(capsys, ws, command, "--events", str(events_path))
    assert_refused_and_unchanged(code, out, ws, before, marker, events_path, "sub")
    assert out["error"]["code"] == "git_metadata", out
    assert f"repository at {ws / 'sub'} " in out["error"]["message"], out


def test_links_that_stay_inside_are_merged(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The control: links inside the roots, chains included, merge as before."""
    code, out = call(
        capsys,
        ws,
        "mkdir -p a/b && ln -s ../.. a/b/up && ln -s a/b/up/data d && ln -s ../notes.txt a/n",
    )
    assert code == 0, out
    assert os.path.realpath(ws / "d") == str(ws / "data")
    assert (ws / "a" / "n").read_text() == "notes\n"


def test_no_change_sets_scan_refuses_a_repository_of_executable_files(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The before/after scan of `--no-change-sets` applies git's X_OK rule too."""
    marker = tmp_path / "PWNED"
    command = f"mkdir sub && cd sub && {HEAD} && touch objects refs && chmod 755 objects refs && {config(marker, '.')}"
    args = [
        "--workspace",
        str(ws),
        "--posture",
        "allow-reversible",
        "--approve",
        "yes",
        "--no-change-sets",
    ]
    code, out = cli_json(
        capsys, "call", "run_shell", "--args", json.dumps({"command": command}), *args
    )
    assert code != 0 and out["error"]["code"] == "git_metadata", out
    assert git_dir(ws / "sub") is None
    git_status(ws / "sub")
    assert not marker.exists()


def test_no_change_sets_scan_undoes_a_root_made_a_repository(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """HEAD, objects and refs at the root itself: the root cannot be moved out like a new
    directory, and inside what was now a git directory only its config and hooks were undone,
    so HEAD, objects and refs were "left" and git took the root (and every directory below
    it, through discovery) for a repository."""
    marker = tmp_path / "PWNED"
    command = f"{HEAD} && mkdir objects refs && {config(marker, '.')}"
    args = ["--workspace", str(ws), "--posture", "allow-reversible", "--approve", "yes"]
    code, out = cli_json(
        capsys, "call", "run_shell", "--args", json.dumps({"command": command}), *args,
        "--no-change-sets",
    )  # fmt: skip
    assert code != 0 and out["error"]["code"] == "git_metadata", out
    for name in ("HEAD", "objects", "refs", "config"):
        assert f"{ws / name} (new, quarantined)" in out["error"]["message"], out
    assert sorted(p.name for p in ws.iterdir()) == ["data", "notes.txt"]
    assert git_dir(ws) is None and git_dir(ws / "data") is None
    git_status(ws / "data")
    assert not marker.exists()


def test_no_change_sets_scan_refuses_a_repository_deeper_than_recursion(
    ws: Path, tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A repository 1,200 directories down (2,440 characters: git finds it there) is moved
    out like any other. Its quarantine copy was made with a recursive ``mkdir(parents=True)``:
    RecursionError, the check failed (``run_shell failed: RecursionError``) and the
    repository with its ``core.fsmonitor`` stayed in the workspace."""
    marker = tmp_path / "PWNED"
    command = (
        "mkdir top && cd top && for i in $(seq 1200); do mkdir a && cd a; done && "
        f"{HEAD} && mkdir objects refs && {config(marker, '.')}"
    )
    args = ["--workspace", str(ws), "--posture", "allow-reversible", "--approve", "yes"]
    deepest = ws / "top" / "/".join(["a"] * 1200)
    try:
        code, out = cli_json(
            capsys, "call", "run_shell", "--args", json.dumps({"command": command}), *args,
            "--no-change-sets",
        )  # fmt: skip
        assert code != 0 and out["error"]["code"] == "git_metadata", out
        assert "(new, quarantined)" in out["error"]["message"], out
        assert (ws / "top").is_dir() and not (deepest / "HEAD").exists()
        assert git_found(deepest.parent, tmp_path) is None
        git_status(deepest.parent)
        assert not marker.exists()
    finally:
        # pytest's own clean-up (shutil.rmtree) fails on a tree this deep (the workspace's,
        # and the quarantine's copy in the spool).
        for place in (tmp_path, ringfence_home):
            for child in place.iterdir():
                if child.is_dir() and not child.is_symlink():
                    remove_tree(child)


# ``sub/objects -> ../L1/M``: two links, each a 2,600-byte walk down one chain of directories, so
# the directory it reaches lies 5,200 bytes below the root, past PATH_MAX. The kernel follows the
# links from ``sub`` (git's ``access(X_OK)`` passes); a walk that spells the path from the root
# cannot, and took ``objects`` for missing.
DEEP_OBJECTS = """
import os, sys
n = "d" * 19
os.makedirs("A")
fd = os.open("A", os.O_RDONLY)
for i in range(260):
    os.mkdir(n, dir_fd=fd)
    fd = os.open(n, os.O_RDONLY, dir_fd=fd)
os.symlink("A/" + "/".join([n] * 130), "L1")
os.symlink("/".join([n] * 130), "L1/M")
os.makedirs("sub/refs")
if sys.argv[1] == "HEAD":
    open("sub/HEAD", "w").write("ref: refs/heads/main\\n")
open("sub/config", "w").write(sys.argv[2])
os.symlink("../L1/M", "sub/objects")
"""


@pytest.mark.parametrize("writer", ["the command", "write_file"])
def test_a_repository_whose_objects_lie_past_path_max_is_refused(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], writer: str
) -> None:
    """``--no-change-sets``: the command makes the whole repository, or everything but ``HEAD``
    and then ``write_file sub/HEAD`` completes it. Both were accepted (``objects`` unseen),
    and git in ``sub`` ran the planted ``core.fsmonitor``."""
    marker = tmp_path / "PWNED"
    hostile = f'[core]\n\tfsmonitor = "touch {marker}"\n'
    head = "HEAD" if writer == "the command" else "none"
    command = f"python3 -c {shlex.quote(DEEP_OBJECTS)} {head} {shlex.quote(hostile)}"
    args = ["--workspace", str(ws), "--posture", "allow-reversible", "--approve", "yes"]
    code, out = cli_json(
        capsys, "call", "run_shell", "--args", json.dumps({"command": command}), *args,
        "--no-change-sets",
    )  # fmt: skip
    if writer == "the command":
        assert code != 0 and out["error"]["code"] == "git_metadata", out
        assert f"{ws / 'sub'} (new, quarantined)" in out["error"]["message"], out
    else:
        assert code == 0, out  # no HEAD: no repository yet
        assert os.access(ws / "sub" / "objects", os.X_OK)
        before = tree_state(ws / "sub")  # (the chain below A is too long to spell)
        write = json.dumps({"path": "sub/HEAD", "content": "ref: refs/heads/main\n"})
        code, out = cli_json(capsys, "call", "write_file", "--args", write, *args)
        assert code != 0 and out["error"]["code"] == "git_metadata", out
        assert tree_state(ws / "sub") == before
    assert git_dir(ws / "sub") is None
    git_status(ws / "sub")
    assert not marker.exists()


# A chain of 260 directories below ``A`` (5,200 bytes, past PATH_MAX), ``L1 -> A/<130 levels>``
# and ``L1/M -> <130 levels>``: ``L1/M`` is its bottom, reached by the kernel from the root.
DEEP_CHAIN = """
import os
n = "d" * 19
os.makedirs("A")
fd = os.open("A", os.O_RDONLY)
for i in range(260):
    os.mkdir(n, dir_fd=fd)
    fd = os.open(n, os.O_RDONLY, dir_fd=fd)
os.symlink("A/" + "/".join([n] * 130), "L1")
os.symlink("/".join([n] * 130), "L1/M")
"""


def test_a_change_set_completing_a_repository_past_path_max_is_refused(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Step one makes the deep chain (no repository); step two ``sub`` with HEAD, refs, a
    config and ``objects -> ../L1/M``. The resulting-tree check read the chain on disk by
    one path from the root (ENAMETOOLONG: missing), merged step two, and git found ``sub``."""
    marker = tmp_path / "PWNED"
    code, out = call(capsys, ws, f"python3 -c {shlex.quote(DEEP_CHAIN)}")
    assert code == 0 and out["result"]["changes"]["refused"] == [], out
    step2 = f"mkdir -p sub/refs && cd sub && {HEAD} && ln -s ../L1/M objects && {config(marker)}"
    before = tree_state(ws / "sub") if (ws / "sub").exists() else None
    code, out = call(capsys, ws, step2)
    assert code != 0 and out["error"]["code"] == "git_metadata", out
    assert "refused as a whole" in out["error"]["message"], out
    assert not (ws / "sub").exists() and before is None
    assert git_dir(ws / "sub") is None
    assert not marker.exists()


def _kernel_realpath(root: Path, rel_dir: str, name: str) -> str:
    """Where the kernel resolves the link ``rel_dir/name`` (a path past PATH_MAX: reached in
    steps; ``os.path.realpath`` cannot look at it and takes the link for a plain name)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for part in rel_dir.split("/"):
        nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        os.close(fd)
        fd = nxt
    try:
        end = os.open(name, os.O_PATH, dir_fd=fd)
    finally:
        os.close(fd)
    try:
        return os.readlink(f"/proc/self/fd/{end}")
    finally:
        os.close(end)


def test_an_existing_link_past_path_max_sent_out_is_refused(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Step one: the chain, a directory ``A/d`` and at the chain's bottom ``E`` climbing back
    to ``A`` and then ``d/..`` (``A``: inside). Step two puts the link ``A/d -> ..`` (the root:
    inside) where the directory was: ``E`` would resolve to the root's parent. The
    existing-link check could not read ``E`` by its path (ENAMETOOLONG), passed over it, and
    merged the set."""
    deep = "/".join(["d" * 19] * 260)
    make_e = f"import os; os.symlink({'../' * 260 + 'd/..'!r}, 'L1/M/E')"
    step1 = f"python3 -c {shlex.quote(DEEP_CHAIN)} && mkdir A/d && python3 -c {shlex.quote(make_e)}"
    code, out = call(capsys, ws, step1)
    assert code == 0 and out["result"]["changes"]["refused"] == [], out
    assert _kernel_realpath(ws, f"A/{deep}", "E") == str(ws / "A")
    code, out = call(capsys, ws, "rmdir A/d && ln -s .. A/d")
    assert code != 0 and out["error"]["code"] == "invalid_arguments", out
    assert "outside the workspace roots" in out["error"]["message"], out
    assert (ws / "A" / "d").is_dir() and not (ws / "A" / "d").is_symlink()
    assert _kernel_realpath(ws, f"A/{deep}", "E") == str(ws / "A")


def test_no_change_sets_scan_refuses_a_repository_through_the_hosts_per_process_links(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sub/objects -> /proc/self/cwd/objdir`` is no directory from ringfence's own directory
    (the root) and one from ``sub``: the scan does not follow a link out of the root."""
    monkeypatch.chdir(ws)
    marker = tmp_path / "PWNED"
    command = (
        f"mkdir -p sub/objdir sub/refs && cd sub && {HEAD} && {config(marker)}"
        " && ln -s /proc/self/cwd/objdir objects"
    )
    args = ["--workspace", str(ws), "--posture", "allow-reversible", "--approve", "yes"]
    code, out = cli_json(
        capsys, "call", "run_shell", "--args", json.dumps({"command": command}), *args,
        "--no-change-sets",
    )  # fmt: skip
    assert code != 0 and out["error"]["code"] == "git_metadata", out
    assert f"{ws / 'sub'} (new, quarantined)" in out["error"]["message"], out
    assert not (ws / "sub").exists()
    monkeypatch.chdir(tmp_path)
    assert git_dir(ws / "sub") is None
    git_status(ws / "sub")
    assert not marker.exists()


def test_write_file_completing_a_repository_through_the_hosts_per_process_links_is_refused(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `--no-change-sets` command leaves ``sub/objects -> /proc/self/cwd/objdir``, ``refs``
    and a config, no HEAD (no repository: nothing to refuse); then ``write_file sub/HEAD``.
    From ringfence's directory (the root) ``objects`` leads nowhere; from ``sub`` it does."""
    monkeypatch.chdir(ws)
    marker = tmp_path / "PWNED"
    step1 = (
        f"mkdir -p sub/objdir sub/refs && cd sub && {config(marker)}"
        " && ln -s /proc/self/cwd/objdir objects"
    )
    args = ["--workspace", str(ws), "--posture", "allow-reversible", "--approve", "yes"]
    code, out = cli_json(
        capsys, "call", "run_shell", "--args", json.dumps({"command": step1}), *args,
        "--no-change-sets",
    )  # fmt: skip
    assert code == 0, out
    before = tree_state(ws)
    write = json.dumps({"path": "sub/HEAD", "content": "ref: refs/heads/main\n"})
    code, out = cli_json(capsys, "call", "write_file", "--args", write, *args)
    assert code != 0 and out["error"]["code"] == "git_metadata", out
    assert "sub/HEAD" in out["error"]["message"], out
    assert tree_state(ws) == before
    assert not (ws / "sub" / "HEAD").exists()
    monkeypatch.chdir(tmp_path)
    assert git_dir(ws / "sub") is None
    git_status(ws / "sub")
    assert not marker.exists()


@pytest.mark.docker
@pytest.mark.parametrize("attack", ["refs a link", "executable files, no directory at all"])
def test_docker_change_sets_refuse_the_same_repositories(
    docker_client: Any,
    ws: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    attack: str,
) -> None:
    monkeypatch.setenv("RINGFENCE_DOCKER_IMAGE", DOCKER_OPTIONS["image"])
    marker = tmp_path / "PWNED"
    command, where = GIT_ATTACKS[attack]
    before = tree_state(ws)
    events_path = tmp_path / "events.jsonl"
    code, out = call(
        capsys, ws, command.format(config=config(marker)), "--backend", "docker", "--change-sets",
        "--events", str(events_path),
    )  # fmt: skip
    assert_refused_and_unchanged(code, out, ws, before, marker, events_path, where)


@pytest.mark.docker
def test_docker_change_sets_refuse_a_link_that_leaves_through_a_link(
    docker_client: Any,
    ws: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RINGFENCE_DOCKER_IMAGE", DOCKER_OPTIONS["image"])
    chown_like_workspace(ws)
    depth = len(ws.parts) - 1
    up = "/".join(f"d{i}" for i in range(depth))
    command = f"mkdir -p {up} && ln -s {'../' * (depth - 1)}.. {up}/up && ln -s {up}/up/{'../' * depth}etc etclink"
    before = tree_state(ws)
    code, out = call(capsys, ws, command, "--backend", "docker", "--change-sets")
    assert code != 0 and out["error"]["code"] == "invalid_arguments", out
    assert tree_state(ws) == before


@pytest.mark.docker
def test_docker_change_sets_refuse_a_repository_through_the_hosts_per_process_links(
    docker_client: Any,
    ws: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same merge judges a container's set: ``objects`` into ``/proc/self/cwd/objdir``."""
    monkeypatch.setenv("RINGFENCE_DOCKER_IMAGE", DOCKER_OPTIONS["image"])
    chown_like_workspace(ws)
    monkeypatch.chdir(ws)
    marker = tmp_path / "PWNED"
    make_up, text = _through_proc(ws, "sub", "/objdir")
    command = (
        f"{make_up} && mkdir -p sub/objdir sub/refs && cd sub && {HEAD} && {config(marker)}"
        f" && ln -s {text} objects"
    )
    before = tree_state(ws)
    events_path = tmp_path / "events.jsonl"
    code, out = call(
        capsys, ws, command, "--backend", "docker", "--change-sets", "--events", str(events_path)
    )
    assert_refused_and_unchanged(code, out, ws, before, marker, events_path, "sub")


# A git directory's common directory (what its `commondir` names) holds the config and hooks
# git reads for it, and needs no HEAD of its own: git metadata all the same.
def _shared_common(ws: Path) -> None:
    """``w/.git`` -> ``gd`` (``HEAD``, ``commondir`` -> ``../common``); ``common`` has
    ``objects``, ``refs`` and ``config``, no ``HEAD``: git in ``w`` reads ``common/config``."""
    (ws / "common" / "objects").mkdir(parents=True)
    (ws / "common" / "refs").mkdir()
    (ws / "common" / "config").write_text("[core]\n\trepositoryformatversion = 0\n")
    (ws / "gd").mkdir()
    (ws / "gd" / "HEAD").write_text("ref: refs/heads/main\n")
    (ws / "gd" / "commondir").write_text("../common\n")
    (ws / "w").mkdir()
    (ws / "w" / ".git").write_text("gitdir: ../gd\n")
    owned(ws, WORKSPACE_UID)


COMMON_ATTACKS = {
    # name -> (tool, arguments, extra options); {m} is the marker a planted command touches
    "write_file config": ("write_file", {"path": "common/config", "content": FSMONITOR}, ()),
    "edit_file config": (
        "edit_file",
        {"path": "common/config", "old": "[core]", "new": FSMONITOR.rstrip("\n")},
        (),
    ),
    "write_file a hook": (
        "write_file",
        {"path": "common/hooks/post-index-change", "content": HOOK},
        (),
    ),
    "run_shell config": (
        "run_shell",
        {"command": f"printf '%s' '{FSMONITOR}' >> common/config"},
        (),
    ),
    "run_shell a hook": (
        "run_shell",
        {
            "command": f"mkdir common/hooks && printf '%s' '{HOOK}' > common/hooks/post-index-change"
            " && chmod +x common/hooks/post-index-change"
        },
        (),
    ),
}


@pytest.mark.parametrize("attack", list(COMMON_ATTACKS), ids=list(COMMON_ATTACKS))
def test_a_git_directorys_common_directory_is_git_metadata(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], attack: str
) -> None:
    """git in ``w`` reads ``common/config`` and ``common/hooks`` (``gd``'s commondir), and
    ``common`` has no HEAD, so it was no git directory to ringfence: a write there set a
    ``core.fsmonitor`` (or a hook) that the person's next ``git status`` in ``w`` ran."""
    _shared_common(ws)
    marker = tmp_path / "PWNED"
    tool, arguments, extra = COMMON_ATTACKS[attack]
    arguments = json.loads(json.dumps(arguments).replace("{m}", str(marker)))
    before = tree_state(ws)
    events_path = tmp_path / "events.jsonl"
    code, out = cli_json(
        capsys, "call", tool, "--args", json.dumps(arguments), "--workspace", str(ws),
        "--posture", "allow-reversible", "--approve", "yes", "--events", str(events_path), *extra,
    )  # fmt: skip
    assert code != 0 and out["error"]["code"] == "git_metadata", out
    assert "the common directory of the git directory" in out["error"]["message"], out
    assert tree_state(ws) == before
    assert not [e for e in events(events_path) if e["kind"] == "checkpoint"]
    git_status(ws / "w")
    assert not marker.exists()


@pytest.mark.parametrize("what", ["config", "a hook"])
def test_no_change_sets_cannot_write_a_git_directorys_common_directory(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], what: str
) -> None:
    """A `--no-change-sets` command writes the roots itself: the common directory is mounted
    read-only like the git directories present at session start, so the write fails."""
    _shared_common(ws)
    marker = tmp_path / "PWNED"
    if what == "config":
        command = f"printf '%s' '{FSMONITOR.format(m=marker)}' >> common/config"
    else:
        command = f"mkdir common/hooks && printf '%s' '{HOOK.format(m=marker)}' > common/hooks/x"
    before = tree_state(ws)
    code, out = cli_json(
        capsys, "call", "run_shell", "--args", json.dumps({"command": command}),
        "--workspace", str(ws), "--posture", "allow-reversible", "--approve", "yes",
        "--no-change-sets",
    )  # fmt: skip
    assert code == 0 and out["result"]["exit_code"] != 0, out
    assert "Read-only file system" in out["result"]["stderr"], out
    assert tree_state(ws) == before
    git_status(ws / "w")
    assert not marker.exists()


def test_host_backend_restores_a_git_directorys_common_directory(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The unconfined ``host`` backend writes the roots as the user: its before/after scan
    counts the common directory as git metadata, so the planted config is refused and its
    before-image put back."""
    _shared_common(ws)
    marker = tmp_path / "PWNED"
    command = f"printf '%s' '{FSMONITOR.format(m=marker)}' >> common/config"
    before = tree_state(ws)
    events_path = tmp_path / "events.jsonl"
    code, out = cli_json(
        capsys, "call", "run_shell", "--args", json.dumps({"command": command}),
        "--workspace", str(ws), "--posture", "allow-reversible", "--approve", "yes",
        "--backend", "host", "--events", str(events_path),
    )  # fmt: skip
    assert code != 0 and out["error"]["code"] == "git_metadata", out
    assert "common/config (changed, restored)" in out["error"]["message"], out
    assert tree_state(ws) == before
    assert [e for e in events(events_path) if e["kind"] == "git_metadata_refused"]
    git_status(ws / "w")
    assert not marker.exists()


def test_a_directory_like_a_common_directory_that_none_names_is_written(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control: ``objects``/``refs`` side by side, no git directory naming them."""
    (ws / "lib" / "objects").mkdir(parents=True)
    (ws / "lib" / "refs").mkdir()
    owned(ws, WORKSPACE_UID)
    args = json.dumps({"path": "lib/config", "content": "x"})
    code, out = cli_json(
        capsys, "call", "write_file", "--args", args, "--workspace", str(ws),
        "--posture", "allow-reversible", "--approve", "yes",
    )  # fmt: skip
    assert code == 0, out
    code, out = call(capsys, ws, "echo y > lib/config2")
    assert code == 0, out
    assert (ws / "lib" / "config2").read_text() == "y\n"


# git's own configuration (global, system) is read in every repository: a root holding it is
# refused before anything opens, whichever tool would write it.
HOME_ATTACKS = {
    # name -> (the root below the fake home, the file the attack writes in it, extra env)
    "the home: ~/.gitconfig": (".", ".gitconfig", {}),
    "~/.config: git/config": (".config", "git/config", {}),
    "$XDG_CONFIG_HOME": ("xdg", "git/config", {"XDG_CONFIG_HOME": "xdg"}),
    "$GIT_CONFIG_GLOBAL": ("dots", "gitconfig", {"GIT_CONFIG_GLOBAL": "dots/gitconfig"}),
    "a dotfiles directory ~/.gitconfig links into": ("dotfiles", "gitconfig", {}),
}


@pytest.mark.parametrize("attack", list(HOME_ATTACKS), ids=list(HOME_ATTACKS))
@pytest.mark.parametrize("tool", ["write_file", "run_shell"])
def test_a_root_holding_gits_own_configuration_is_refused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    attack: str,
    tool: str,
) -> None:
    """With ``$RINGFENCE_HOME`` elsewhere, a root that holds the person's ``~/.gitconfig``
    (or the XDG or ``$GIT_CONFIG_GLOBAL`` one) would let the agent set ``core.fsmonitor``
    for every repository on the host. Refused, naming the file; nothing written; the host's
    git, in a repository of its own, runs nothing."""
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True)
    (home / "project").mkdir()
    (home / "dotfiles").mkdir()
    (home / "dotfiles" / "gitconfig").write_text("[user]\n\tname = someone\n")
    (home / ".gitconfig").symlink_to(home / "dotfiles" / "gitconfig")
    where, name, extra = HOME_ATTACKS[attack]
    root = (home / where).resolve()
    root.mkdir(exist_ok=True)
    env = {k: str(home / v) for k, v in extra.items()}
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("RINGFENCE_HOME", str(tmp_path / "ringfence-home"))
    marker = tmp_path / "PWNED"
    hostile = f'[core]\n\tfsmonitor = "touch {marker}"\n'
    if tool == "write_file":
        args = json.dumps({"path": name, "content": hostile})
    else:
        command = f"mkdir -p $(dirname {name}) && printf '%s' '{hostile}' > {name}"
        args = json.dumps({"command": command})
    before = tree_state(home)
    code, out = cli_json(
        capsys, "call", tool, "--args", args, "--workspace", str(root),
        "--posture", "allow-reversible", "--approve", "no",
    )  # fmt: skip
    assert code != 0 and out["error"]["code"] == "invalid_arguments", out
    assert (
        out["error"]["field"] == "roots"
        and f"workspace root {root} holds" in out["error"]["message"]
    )
    assert tree_state(home) == before
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True, capture_output=True)
    subprocess.run(
        ["git", "status"], cwd=repo, capture_output=True,
        env={**os.environ, "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", **env},
    )  # fmt: skip
    assert not marker.exists()


@pytest.mark.parametrize(
    "writer",
    [("run_shell", "--no-change-sets"), ("run_shell",), ("write_file",)],
    ids=["run_shell --no-change-sets", "run_shell", "write_file"],
)
def test_a_root_holding_a_hard_link_of_gits_own_configuration_is_refused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    writer: tuple[str, ...],
) -> None:
    """``~/.gitconfig`` a *hard* link of ``dotfiles/gitconfig`` (no directory of the home in
    the root, no symlink to follow): a command writing the root directly appended
    ``core.fsmonitor`` to the shared inode, and the host's next ``git status`` ran it. The
    root is refused before anything opens; nothing written; the host's git runs nothing."""
    home = tmp_path / "home"
    (home / "dotfiles").mkdir(parents=True)
    (home / "dotfiles" / "gitconfig").write_text("[user]\n\tname = someone\n")
    os.link(home / "dotfiles" / "gitconfig", home / ".gitconfig")
    root = home / "dotfiles"
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_CONFIG_HOME", "GIT_CONFIG_GLOBAL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RINGFENCE_HOME", str(tmp_path / "ringfence-home"))
    marker = tmp_path / "PWNED"
    hostile = f'[core]\n\tfsmonitor = "touch {marker}"\n'
    tool, *extra = writer
    if tool == "write_file":
        args = json.dumps({"path": "gitconfig", "content": hostile})
    else:
        args = json.dumps({"command": f"printf '%s' '{hostile}' >> gitconfig"})
    before = tree_state(home)
    events_path = tmp_path / "events.jsonl"
    code, out = cli_json(
        capsys, "call", tool, "--args", args, "--workspace", str(root),
        "--posture", "allow-reversible", "--approve", "yes", "--events", str(events_path), *extra,
    )  # fmt: skip
    assert code != 0 and out["error"]["code"] == "invalid_arguments", out
    assert out["error"]["field"] == "roots", out
    assert f"{root / 'gitconfig'} is the same file (a hard link)" in out["error"]["message"]
    assert tree_state(home) == before
    assert not [
        e for e in events(events_path) if e["kind"] in ("checkpoint", "started", "finished")
    ]
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True, capture_output=True)
    subprocess.run(
        ["git", "status"], cwd=repo, capture_output=True,
        env={**os.environ, "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1"},
    )  # fmt: skip
    assert not marker.exists()


# What git's own configuration names is git's configuration too: included files, a hooks
# directory. name -> (the ~/.gitconfig text, the file the attack writes in the root ~/proj)
NAMED_ATTACKS = {
    "include.path, relative": ("[include]\n\tpath = proj/local.gitconfig\n", "local.gitconfig"),
    "includeIf.*.path under ~/": (
        '[includeIf "gitdir:/"]\n\tpath = "~/proj/cfg/extra"\n',
        "cfg/extra",
    ),
    "an include of an include": ("[include]\n\tpath = ~/dots/first\n", "second"),
    # git 2.52's optional path (skipped while missing): was read as a relative ":(optional)~".
    "include.path, :(optional)": (
        '[include]\n\tpath = ":(optional)~/proj/opt.gitconfig"\n',
        "opt.gitconfig",
    ),
    "core.hooksPath": ("[core]\n\thooksPath = ~/proj/hooks\n", "hooks/post-index-change"),
}


@pytest.mark.parametrize("attack", list(NAMED_ATTACKS), ids=list(NAMED_ATTACKS))
@pytest.mark.parametrize("tool", ["write_file", "run_shell"])
def test_a_root_holding_what_gits_own_configuration_names_is_refused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    attack: str,
    tool: str,
) -> None:
    """``~/.gitconfig`` includes ``~/proj/local.gitconfig`` (or names ``~/proj/hooks``):
    with ``~/proj`` a root, the agent wrote ``core.fsmonitor`` there and the host's next
    ``git status`` in any repository ran it. Refused before anything opens, nothing written,
    the host's git runs nothing."""
    home = tmp_path / "home"
    root = home / "proj"
    root.mkdir(parents=True)
    (home / "dots").mkdir()
    (home / "dots" / "first").write_text("[include]\n\tpath = ../proj/second\n")
    gitconfig, name = NAMED_ATTACKS[attack]
    (home / ".gitconfig").write_text(gitconfig)
    monkeypatch.setenv("HOME", str(home))
    for var in ("XDG_CONFIG_HOME", "GIT_CONFIG_GLOBAL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RINGFENCE_HOME", str(tmp_path / "ringfence-home"))
    marker = tmp_path / "PWNED"
    hostile = HOOK if name.startswith("hooks/") else FSMONITOR
    hostile = hostile.format(m=marker)
    if tool == "write_file":
        args = json.dumps({"path": name, "content": hostile})
    else:
        command = (
            f"mkdir -p $(dirname {name}) && printf '%s' '{hostile}' > {name} && chmod +x {name}"
        )
        args = json.dumps({"command": command})
    before = tree_state(home)
    code, out = cli_json(
        capsys, "call", tool, "--args", args, "--workspace", str(root),
        "--posture", "allow-reversible", "--approve", "yes",
    )  # fmt: skip
    assert code != 0 and out["error"]["code"] == "invalid_arguments", out
    assert out["error"]["field"] == "roots", out
    message = out["error"]["message"]
    assert f"workspace root {root} holds " in message and name.split("/")[0] in message, out
    assert tree_state(home) == before
    repo = tmp_path / "repo"
    env = {**os.environ, "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", str(repo)], check=True, capture_output=True, env=env)
    (repo / "f").write_text("f")
    subprocess.run(["git", "add", "f"], cwd=repo, capture_output=True, env=env)
    subprocess.run(["git", "status"], cwd=repo, capture_output=True, env=env)
    assert not marker.exists()


def test_a_project_directory_in_the_home_is_a_root_as_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: a root below the home (not holding git's configuration) works."""
    home = tmp_path / "home"
    (home / "project").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("RINGFENCE_HOME", str(tmp_path / "ringfence-home"))
    code, out = cli_json(
        capsys, "call", "write_file", "--args", json.dumps({"path": "a.txt", "content": "a"}),
        "--workspace", str(home / "project"), "--posture", "allow-reversible", "--approve", "no",
    )  # fmt: skip
    assert code == 0, out
    assert (home / "project" / "a.txt").read_text() == "a"

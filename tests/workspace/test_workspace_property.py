"""Property: over random trees of dirs, files and symlinks and random path strings, no path ever
opens, lists or writes anything outside the roots, and both resolver paths agree.

Each opened descriptor is checked through ``/proc/self/fd``: the file the kernel
actually opened must lie under a root, and its bytes must not be the outside marker.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st
from workspace_helpers import RESOLVER_MODES, fd_target, snapshot, under

from ringfence.runtime import RingfenceError
from ringfence.workspace import Workspace
from ringfence.workspace.git._rules import is_git_directory

MARK = b"OUTSIDE"
NAMES = ["a", "b", "c"]
PLACES = ["ws", "ws2", "out", "ws_sib"]  # ws_sib: a sibling sharing the root's name as a prefix
ANCHORS = ["ws", "ws2", "out", "ws_sib", "", "/proc/self/root", "/proc/self/cwd", "/etc", "//"]

components = st.lists(st.sampled_from([*NAMES, "..", ".", ""]), max_size=5)
# Probes also aim at git metadata and at the names that assemble a git directory.
probe_components = st.lists(
    st.sampled_from(
        [
            *NAMES,
            "..",
            ".",
            "",
            ".git",
            ".GIT",
            "repo.git",
            "HEAD",
            "objects",
            "refs",
            "hooks",
            "almost",
        ]
    ),
    max_size=5,
)


@st.composite
def entries(draw: st.DrawFn) -> tuple:
    place = draw(st.sampled_from(PLACES))
    rel = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3))
    kind = draw(st.sampled_from(["dir", "file", "rel_link", "abs_link"]))
    target = draw(components)
    anchor = draw(st.sampled_from(ANCHORS))
    return place, tuple(rel), kind, tuple(target), anchor


@st.composite
def paths(draw: st.DrawFn) -> str:
    anchor = draw(st.sampled_from(["", "", "", *ANCHORS]))
    comps = draw(probe_components)
    return anchor, "/".join(comps)


def spell(base: Path, anchor: str, rel: str) -> str:
    if anchor in ("ws", "ws2", "out", "ws_sib"):
        return f"{base / anchor}/{rel}"
    if anchor == "//":
        return f"//{base / 'ws'}/{rel}"
    if anchor.startswith("/"):
        return f"{anchor}{base / 'ws'}/{rel}" if anchor == "/proc/self/root" else f"{anchor}/{rel}"
    return rel


def build(base: Path, items: list[tuple]) -> None:
    for place in PLACES:
        (base / place).mkdir()
    # Git metadata the probes aim at: a .git directory and a bare-style git directory.
    for gitdir in (base / "ws" / ".git", base / "ws" / "repo.git"):
        (gitdir / "objects").mkdir(parents=True)
        (gitdir / "refs").mkdir()
        (gitdir / "hooks").mkdir()
        (gitdir / "HEAD").write_bytes(b"ref: refs/heads/main\n")
        (gitdir / "config").write_bytes(b"[core]\n")
    # A directory one step from being a git directory: HEAD and objects, no refs.
    (base / "ws" / "almost" / "objects").mkdir(parents=True)
    (base / "ws" / "almost" / "HEAD").write_bytes(b"ref: refs/heads/main\n")
    for place, rel, kind, target, anchor in items:
        # Build without following the links the tree itself holds: an earlier entry may have
        # made a parent a link to /etc or /proc/self/cwd, and the builder must not write there.
        parent = real_parent(base / place, rel[:-1])
        if parent is None:
            continue
        p = parent / rel[-1]
        try:
            if kind == "dir":
                p.mkdir()
            elif kind == "file":
                data = MARK if place in ("out", "ws_sib") else b"inside:" + "/".join(rel).encode()
                fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
            elif kind == "rel_link":
                p.symlink_to("/".join(target) or ".")
            else:
                p.symlink_to(spell(base, anchor, "/".join(target)))
        except OSError:
            continue  # the random tree collided with itself: skip that entry


def real_parent(start: Path, names: tuple[str, ...]) -> Path | None:
    """``start/names…`` made of real directories only (created as needed), or None."""
    here = start
    for name in names:
        here = here / name
        try:
            here.mkdir()
        except FileExistsError:
            if not stat.S_ISDIR(os.lstat(here).st_mode):
                return None  # a link or a file: never build through it
    return here


def outcome(w: Workspace, path: str, roots: list[Path]) -> tuple:
    """Open ``path``; check the kernel's idea of what was opened; a comparable answer."""
    try:
        fd = w.open_fd(path, os.O_RDONLY | os.O_NONBLOCK)
    except RingfenceError as exc:
        return ("error", exc.code)
    try:
        target = fd_target(fd)
        assert under(target, roots), (path, target)
        st_ = os.fstat(fd)
        if stat.S_ISREG(st_.st_mode):
            assert os.pread(fd, 64, 0) != MARK, (path, target)
        return ("ok", st_.st_dev, st_.st_ino)
    finally:
        os.close(fd)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(items=st.lists(entries(), max_size=14), probes=st.lists(paths(), min_size=1, max_size=12))
def test_no_path_ever_leaves_the_roots(items: list[tuple], probes: list[tuple[str, str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp).resolve()
        build(base, items)
        roots = [base / "ws", base / "ws2"]
        outside_before = (snapshot(base / "out"), snapshot(base / "ws_sib"))
        git_before = [snapshot(base / "ws" / d) for d in (".git", "repo.git")]
        workspaces = []
        for mode in RESOLVER_MODES:
            w = Workspace(roots)
            w.use_openat2 = mode == "openat2"
            workspaces.append(w)
        try:
            for anchor, rel in probes:
                path = spell(base, anchor, rel)
                answers = [outcome(w, path, roots) for w in workspaces]
                assert all(a == answers[0] for a in answers), (path, answers)
                for w in workspaces:
                    try:
                        text = w.read_text(path)
                    except RingfenceError:
                        pass
                    else:
                        assert "OUTSIDE" not in text
                    try:
                        listing = w.glob("**", path) + [m["text"] for m in w.grep("OUTSIDE", path)]
                    except RingfenceError:
                        pass
                    else:
                        assert not any("OUTSIDE" in s for s in listing), (path, listing)
            # Writes last: whatever they do, nothing outside changes.
            for anchor, rel in probes:
                path = spell(base, anchor, rel)
                for w in workspaces:
                    with contextlib.suppress(RingfenceError):
                        w.write_text(path, "written")
                    with contextlib.suppress(RingfenceError):
                        w.write_text(path.rstrip("/") + "/made/deeper", "written")
        finally:
            for w in workspaces:
                w.close()
        assert (snapshot(base / "out"), snapshot(base / "ws_sib")) == outside_before
        assert [snapshot(base / "ws" / d) for d in (".git", "repo.git")] == git_before
        assert_no_new_git_directories(base, {base / "ws" / ".git", base / "ws" / "repo.git"})


def assert_no_new_git_directories(base: Path, known: set[Path]) -> None:
    for root in (base / "ws", base / "ws2"):
        for dirpath, dirnames, _ in os.walk(root):
            for name in dirnames:
                d = Path(dirpath) / name
                if d.is_symlink() or d in known or any(k in d.parents for k in known):
                    continue
                fd = os.open(d, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW)
                try:
                    assert not is_git_directory(fd), f"a write assembled a git directory at {d}"
                finally:
                    os.close(fd)

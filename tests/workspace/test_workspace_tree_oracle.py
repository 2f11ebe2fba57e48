"""Oracles for the resulting-tree check: the real git and ``os.path.realpath`` judge the merge.

Random small trees (``HEAD``, ``objects``, ``refs``, ``commondir``, ``config``,
``gitdir`` as files with and without the execute bit, as directories and as
links; ``.git`` files and directories; links among them and to existing
directories) are laid on disk, then a random change set (those entries made,
replaced and removed) is merged through the
real :func:`~ringfence.workspace.merge_changes` (the writer of ``run_shell`` on
every backend, ``undo`` and ``plan apply``), then ``write_file`` (the file tools'
writer) makes a directory. After each, either the writer refused and nothing
changed, or:

* git: the real ``git rev-parse --absolute-git-dir`` run in every directory
  finds no repository that it did not find from some directory before;
* links: ``os.path.realpath`` of every link lies inside the root, when every
  link did before.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from tree_helpers import exact_state as tree_state, git_found

from ringfence.runtime import RingfenceError
from ringfence.workspace import Change, CheckpointStore, Workspace
from ringfence.workspace.changes._merge import merge_changes
from ringfence.workspace.changes._model import Image, image_at

pytestmark = pytest.mark.slow

# -- trees and change sets -------------------------------------------------------------------

CONTENTS = [
    b"ref: refs/heads/main\n",
    b"0123456789abcdef0123456789abcdef01234567\n",
    b"gitdir: s\n",
    b"gitdir: ../u\n",
    b"..\n",
    b"../s\n",
    b"s\n",
    b"hello\n",
]
GIT_NAMES = ["HEAD", "objects", "refs", "commondir", "config", "gitdir", "s", "t", "u"]
GIT_TARGETS = [
    "refs/heads/main",
    ".",
    "..",
    "s",
    "s/t",
    "u",
    "../u",
    "objects",
    "refs",
    "t",
    "../s/t",
    "x",
]
GIT_DIRS = ["", "s", "s/t", "u"]


def entry(names: list[str], dirs: list[str], targets: list[str]) -> st.SearchStrategy:
    """(directory, name, kind, payload): a directory, a file (content, mode) or a link."""
    where = st.tuples(st.sampled_from(dirs), st.sampled_from(names))
    kind = st.one_of(
        st.tuples(st.just("dir"), st.none()),
        st.tuples(
            st.just("file"), st.tuples(st.sampled_from(CONTENTS), st.sampled_from([0o644, 0o755]))
        ),
        st.tuples(st.just("symlink"), st.sampled_from(targets)),
    )
    return st.tuples(where, kind).map(lambda t: (t[0][0], t[0][1], t[1][0], t[1][1]))


def lay(root: Path, entries: list[tuple[str, str, str, object]]) -> None:
    """Put entries on disk directly (the "before" a user made), skipping what cannot be made."""
    for directory, name, kind, payload in entries:
        parent = root / directory if directory else root
        try:
            parent.mkdir(parents=True, exist_ok=True)
            path = parent / name
            if path.is_symlink() or path.exists():
                continue
            if kind == "dir":
                path.mkdir()
            elif kind == "file":
                content, mode = payload  # type: ignore[misc]
                path.write_bytes(content)
                path.chmod(mode)
            else:
                path.symlink_to(str(payload))
        except OSError:
            continue


class Builder:
    """Change sets over a model of the tree (loaded from disk): put and remove, in order."""

    def __init__(self, root: Path, store: CheckpointStore) -> None:
        self.store = store
        self.changes: list[Change] = []
        self.model: dict[str, Image] = {}
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for dirpath, dirnames, filenames in os.walk(root):
                for name in dirnames + filenames:
                    rel = os.path.relpath(os.path.join(dirpath, name), root)
                    image = image_at(fd, rel, store)
                    assert image is not None
                    self.model[rel] = image
        finally:
            os.close(fd)

    def _emit(self, path: str, after: Image | None) -> None:
        before = self.model.get(path)
        self.changes.append(Change(0, path, before, after))
        if after is None:
            self.model.pop(path, None)
        else:
            self.model[path] = after

    def remove(self, path: str) -> None:
        if path not in self.model:
            return
        if self.model[path].kind == "dir":
            for child in sorted((p for p in self.model if p.startswith(path + "/")), reverse=True):
                self._emit(child, None)
        self._emit(path, None)

    def put(self, path: str, kind: str, payload: object) -> None:
        parts = path.split("/")
        for i in range(1, len(parts)):
            ancestor = "/".join(parts[:i])
            found = self.model.get(ancestor)
            if found is not None and found.kind != "dir":
                self.remove(ancestor)
                found = None
            if found is None:
                self._emit(ancestor, Image("dir", 0o755))
        found = self.model.get(path)
        if kind == "dir":
            if found is not None and found.kind == "dir":
                return
            self.remove(path)
            self._emit(path, Image("dir", 0o755))
            return
        if found is not None and found.kind == "dir":
            self.remove(path)
        if kind == "file":
            content, mode = payload  # type: ignore[misc]
            self._emit(path, Image("file", mode, self.store.put(content), len(content)))
        else:
            data = os.fsencode(str(payload))
            self._emit(path, Image("symlink", 0o777, self.store.put(data), len(data)))


def directories(root: Path) -> list[Path]:
    return [Path(d) for d, _, _ in os.walk(root)]


@contextmanager
def scratch(home: Path, depth: int = 4) -> Iterator[Path]:
    """A fresh root ``depth`` levels below a fresh directory (``..`` chains can climb out)."""
    base = Path(tempfile.mkdtemp(dir=home))
    root = base.joinpath(*[f"l{i}" for i in range(depth)])
    root.mkdir(parents=True)
    try:
        yield root
    finally:
        shutil.rmtree(base, ignore_errors=True)


# -- the git oracle ------------------------------------------------------------------------------


def found_everywhere(root: Path) -> set[str]:
    return {f for d in directories(root) if (f := git_found(d, root.parent)) is not None}


git_before = st.lists(entry([*GIT_NAMES, ".git"], GIT_DIRS, [*GIT_TARGETS, "../s"]), max_size=8)
# A set also removes: without its commondir a directory's own objects and refs count (a
# repository where there was none), without a link a walk ends elsewhere.
git_removal = st.tuples(st.sampled_from(GIT_DIRS), st.sampled_from(GIT_NAMES)).map(
    lambda t: (t[0], t[1], "remove", None)
)
# git's names in another case too: what a case-insensitive file system reads as them is
# refused as they are (never half-applied); here git itself finds nothing there.
SET_NAMES = [*GIT_NAMES, "OBJECTS", "Head"]
git_set = st.lists(
    st.one_of(entry(SET_NAMES, GIT_DIRS, GIT_TARGETS), git_removal), min_size=1, max_size=8
)
write_dirs = st.sampled_from(["o/x", "s/new/x", "u/q/x", "t/x", "refs/x", "objects/x"])
TALLY: dict[str, int] = {"accepted": 0, "refused": 0}


@settings(
    max_examples=int(os.environ.get("ORACLE_EXAMPLES", "160")),
    derandomize=True,  # the same examples every run: the tallies below are reproducible
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(before=git_before, changes=git_set, write=write_dirs)
def _git_property(tmp_path: Path, before: list, changes: list, write: str) -> None:
    with scratch(tmp_path) as root:
        lay(root, before)
        known = found_everywhere(root)
        with Workspace([root]) as ws:
            store = CheckpointStore(ws)
            builder = Builder(root, store)
            for directory, name, kind, payload in changes:
                path = f"{directory}/{name}" if directory else name
                if kind == "remove":
                    builder.remove(path)
                else:
                    builder.put(path, kind, payload)
            state = tree_state(root)
            try:
                merge_changes(ws, builder.changes, store)
            except RingfenceError:
                TALLY["refused"] += 1
                assert tree_state(root) == state  # refused: nothing applied
            else:
                TALLY["accepted"] += 1
                new = found_everywhere(root) - known
                assert new == set(), (before, changes)
            # The file tools' writer: a directory made for a write_file.
            known = found_everywhere(root)
            state = tree_state(root)
            try:
                ws.write_text(write, "x\n")
            except RingfenceError:
                assert tree_state(root) == state
            else:
                assert found_everywhere(root) - known == set(), (before, changes, write)
            store.close()


def test_git_finds_no_new_repository_after_any_merge_or_write(tmp_path: Path) -> None:
    """The property, then its tally: it must have seen sets merged and sets refused (else it
    judged nothing). One test, so the tally is the property's own run's (a separate test could
    run in another worker)."""
    TALLY.update(accepted=0, refused=0)
    _git_property(tmp_path=tmp_path)
    assert TALLY["accepted"] > 10 and TALLY["refused"] > 10, TALLY


# -- the link oracle ----------------------------------------------------------------------------

LINK_NAMES = ["a", "b", "c", "L", "M"]
LINK_DIRS = ["", "a", "a/b", "c"]


def link_targets(root: Path) -> list[str]:
    return [
        ".",
        "..",
        "../..",
        "a",
        "a/b",
        "b",
        "../a",
        "a/b/../..",
        "a/../..",
        "x",
        "c/../a",
        "L/..",
        "M/../..",
        "/",
        f"{root}/a",
        f"{root}/a/b/../../..",
        f"{root}/L/..",
    ]


def inside(path: str, root: Path) -> bool:
    return path == str(root) or path.startswith(str(root) + "/")


def links_inside(root: Path) -> bool:
    return all(
        inside(os.path.realpath(Path(d) / n), root)
        for d, dirs, files in os.walk(root)
        for n in dirs + files
        if (Path(d) / n).is_symlink()
    )


# Targets are drawn by position: the root's path is only known inside the test.
link_entry = st.tuples(
    st.sampled_from(LINK_DIRS),
    st.sampled_from(LINK_NAMES),
    st.one_of(st.just(-1), st.integers(0, 16)),  # -1: a directory
)
link_op = st.one_of(
    link_entry.map(lambda e: ("put", *e)),
    st.tuples(st.sampled_from(LINK_DIRS), st.sampled_from(LINK_NAMES)).map(
        lambda e: ("remove", *e, 0)
    ),
)
LINK_TALLY: dict[str, int] = {"accepted": 0, "refused": 0}


def as_entries(root: Path, raw: list[tuple[str, str, int]]) -> list[tuple[str, str, str, object]]:
    targets = link_targets(root)
    return [(d, n, "dir", None) if t < 0 else (d, n, "symlink", targets[t]) for d, n, t in raw]


@settings(
    max_examples=int(os.environ.get("ORACLE_EXAMPLES", "160")),
    derandomize=True,  # the same examples every run: the tallies below are reproducible
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(before=st.lists(link_entry, max_size=8), ops=st.lists(link_op, min_size=1, max_size=6))
def _link_property(tmp_path: Path, before: list, ops: list) -> None:
    with scratch(tmp_path) as root:
        lay(root, as_entries(root, before))
        if not links_inside(root):
            return  # the property starts from a tree whose links all stay inside
        with Workspace([root]) as ws:
            store = CheckpointStore(ws)
            builder = Builder(root, store)
            targets = link_targets(root)
            for op, directory, name, target in ops:
                path = f"{directory}/{name}" if directory else name
                if op == "remove":
                    builder.remove(path)
                elif target < 0:
                    builder.put(path, "dir", None)
                else:
                    builder.put(path, "symlink", targets[target])
            state = tree_state(root)
            try:
                merge_changes(ws, builder.changes, store)
            except RingfenceError:
                LINK_TALLY["refused"] += 1
                assert tree_state(root) == state
            else:
                LINK_TALLY["accepted"] += 1
                assert links_inside(root), (before, ops)
            store.close()


def test_every_link_resolves_inside_after_any_merge(tmp_path: Path) -> None:
    """The property, then its tally (as above)."""
    LINK_TALLY.update(accepted=0, refused=0)
    _link_property(tmp_path=tmp_path)
    assert LINK_TALLY["accepted"] > 10 and LINK_TALLY["refused"] > 5, LINK_TALLY

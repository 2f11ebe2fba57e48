"""Searching through the resolver: glob_files and grep_files, a walker that never enters links, ripgrep.

The walker (:func:`list_tree`) reads directories through descriptors and opens
each subdirectory with ``O_NOFOLLOW``, so it never enters a linked directory,
even one swapped in while it runs. Symlinked *files* are reported as links;
:func:`glob` and :func:`grep` keep one only when the resolver says its target
is a regular file (or directory) inside a root. The walker, the search loop
and the wait for ripgrep check the call's :class:`~._deadline.Deadline`;
patterns are compiled for RE2 in :mod:`._patterns`.

``grep_files`` runs ripgrep, when installed, only as a *prefilter*: ``rg -l``
names the files that might match (run without a config file, without ignore
files, without following links and without preprocessors). Every file is then
read through the confined resolver and searched by
:func:`~._patterns.search_text`, the same code the pure-Python fallback runs
on every file. So the two engines return the same results by construction,
and nothing ripgrep read along a path swapped under it can reach a result:
result text only ever comes from a confined read. ripgrep is asked only for
patterns it reads at least as widely as RE2 (RE2's ``\\W``, ``\\b``, ... are
ASCII, ripgrep's Unicode); any other pattern is searched in every file.
"""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
from collections import deque
from collections.abc import Callable, Container
from typing import Any

from ..runtime._errors import InvalidArguments, RingfenceError
from ._deadline import current_deadline
from ._judged import judge_place
from ._patterns import compile_glob, compile_name_filter, compile_regex, scan_escapes, search_text
from ._reader import READ_FLAGS, read_all
from ._resolver import (
    Access,
    Place,
    Resolver,
    Root,
    display_path,
    open_leaf,
    pseudo_filesystem,
    refuse_pseudo,
)
from .git._rules import MAY_START_DOTGIT, is_dotgit

__all__ = ["GREP_MAX_FILE_BYTES", "Entry", "RipgrepRun", "glob", "grep", "list_tree"]

# Files larger than this are skipped by both engines (ripgrep's --max-filesize).
GREP_MAX_FILE_BYTES = 64 * 1024 * 1024

_RDDIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


# -- the walker -------------------------------------------------------------------------


# An entry is (path relative to the walk's start, "/"-joined; kind), kind being
# "file", "dir", "link" or "other". Plain tuples and strings: a 20k-file walk
# builds 20k of them, and openat2 and ripgrep both speak "/"-joined paths.
Entry = tuple[str, str]


def _scan(fd: int, prefix: str, out: list[Entry], subdirs: list[str]) -> None:
    append = out.append
    with os.scandir(fd) as it:
        for e in it:
            name = e.name
            if (name[0] in MAY_START_DOTGIT or "\\" in name) and is_dotgit(name):
                continue  # git metadata: read it with read_file/list_directory, not by search
            # d_type answers these without a syscall; files are the common case.
            if e.is_file(follow_symlinks=False):
                append((prefix + name, "file"))
            elif e.is_dir(follow_symlinks=False):
                append((prefix + name, "dir"))
                subdirs.append(name)
            elif e.is_symlink():
                append((prefix + name, "link"))
            else:
                append((prefix + name, "other"))


def list_tree(
    dir_fd: int, *, max_depth: int | None = None, mounts: list[str] | None = None
) -> list[Entry]:
    """Every entry below ``dir_fd`` as ``(relative path, kind)``; never enters a link;
    skips ``.git`` entries and never enters a kernel-state file system (a ``proc`` or
    ``sysfs`` mounted inside a root). ``mounts``, when given, receives the prefix
    (``"a/b/"``) of every directory on another file system than ``dir_fd``.

    Each subdirectory is opened relative to its parent's descriptor with
    ``O_NOFOLLOW``, so a directory swapped for a link is not entered. At most
    one descriptor per level is open. Directories that vanish, turn into links
    or cannot be read are skipped silently (the walk reports what it could see).
    Raises ToolTimeout (or ToolError, cancelled) at the current :class:`Deadline`.
    """
    out: list[Entry] = []
    deadline = current_deadline()
    top = os.open(".", _RDDIR, dir_fd=dir_fd)
    if pseudo_filesystem(top) is not None:  # a glob's prefix can name the mount itself
        os.close(top)
        return out
    # Each frame: (fd, "/"-terminated prefix, depth, subdirectories still to visit, device).
    stack: list[tuple[int, str, int, list[str], int]] = []
    try:
        subdirs: list[str] = []
        try:
            _scan(top, "", out, subdirs)
        except OSError:
            os.close(top)
            return out
        subdirs.reverse()
        stack.append((top, "", 1, subdirs, os.fstat(top).st_dev))
        while stack:
            if deadline is not None:
                deadline.check()  # per directory: a huge tree ends at the call's deadline
            fd, prefix, depth, pending, dev = stack[-1]
            if not pending:
                stack.pop()
                os.close(fd)
                continue
            name = pending.pop()
            if max_depth is not None and depth >= max_depth:
                continue
            try:
                sub = os.open(name, _RDDIR | os.O_NOFOLLOW, dir_fd=fd)
            except OSError:
                continue  # vanished, or swapped for a link: never entered
            child = f"{prefix}{name}/"
            sub_dev = os.fstat(sub).st_dev
            if sub_dev != dev:  # a mount point (one fstat per directory)
                if pseudo_filesystem(sub) is not None:
                    os.close(sub)  # a proc or sysfs mounted inside a root: kernel state
                    continue
                if mounts is not None:
                    mounts.append(child)
            found: list[str] = []
            try:
                _scan(sub, child, out, found)
            except OSError:
                os.close(sub)
                continue
            found.reverse()
            stack.append((sub, child, depth + 1, found, sub_dev))
    finally:
        while stack:
            os.close(stack.pop()[0])
    return out


# -- ripgrep as a prefilter -------------------------------------------------------------


def ripgrep_env() -> dict[str, str]:
    """The environment ripgrep runs with: ours, without a configuration file."""
    env = dict(os.environ)
    env.pop("RIPGREP_CONFIG_PATH", None)
    return env


class _Everything:
    """Contains every path: "ripgrep was not asked, read every file"."""

    def __contains__(self, item: object) -> bool:
        return True


_EVERYTHING = _Everything()
# How often the wait for ripgrep looks at the call's deadline.
_RG_POLL_SECONDS = 0.05


class RipgrepRun:
    """``rg -l`` over one directory, started now and read by :meth:`finish`.

    The directory is handed over as ``/proc/<pid>/fd/<fd>`` for the child's
    working directory, so ripgrep starts in exactly the directory the resolver
    opened. Output goes to an unlinked temp file, so ripgrep never stalls on
    a full pipe while the walker runs.
    """

    def __init__(self, rg: str, dir_fd: int, pattern: str) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        # RE2 reads \W, \b, ... as ASCII, ripgrep as Unicode: ripgrep could then skip a
        # file RE2 matches, so such a pattern is searched in every file without it.
        self._everything = not scan_escapes(pattern)[1]
        if self._everything:
            return
        self._out = tempfile.TemporaryFile()  # noqa: SIM115 - closed by finish() or kill()
        self._err = tempfile.TemporaryFile()  # noqa: SIM115 - closed by finish() or kill()
        cmd = [
            rg,
            "--no-config",
            "--files-with-matches",
            "--null",
            "--hidden",
            "--no-ignore",
            "--no-follow",
            "--no-pre",
            "--no-search-zip",
            "--no-messages",
            # Never into another mount (a proc inside a root is endless): files there are
            # searched without the prefilter (grep keeps every candidate below a mount).
            "--one-file-system",
            "--color",
            "never",
            "--max-filesize",
            f"{GREP_MAX_FILE_BYTES // (1024 * 1024)}M",
            "--glob",
            "!.git",
            "--regexp",
            pattern,
            "--",
            ".",
        ]
        try:
            self._proc = subprocess.Popen(
                cmd,
                cwd=f"/proc/{os.getpid()}/fd/{dir_fd}",
                env=ripgrep_env(),
                stdin=subprocess.DEVNULL,
                stdout=self._out,
                stderr=self._err,
            )
        except OSError:
            self._proc = None
            self._out.close()
            self._err.close()

    def finish(self) -> Container[str] | None:
        """Paths (relative components) ripgrep says may match; None if it could not run.

        Every path "may match" when the pattern is one ripgrep reads more
        narrowly than RE2. Waits at most until the current :class:`Deadline`
        (ToolTimeout; the caller then calls :meth:`kill`).
        """
        if self._everything:
            return _EVERYTHING
        if self._proc is None:
            return None
        deadline = current_deadline()
        while True:
            try:
                code = self._proc.wait(timeout=_RG_POLL_SECONDS)
                break
            except subprocess.TimeoutExpired:
                if deadline is not None:
                    deadline.check()
        try:
            self._out.seek(0)
            data = self._out.read()
            self._err.seek(0)
            err = self._err.read()
        finally:
            self._out.close()
            self._err.close()
        if code not in (0, 1) and (not data or b"regex" in err.lower()):
            return None  # ripgrep refused the pattern or failed outright
        found: set[str] = set()
        for raw in data.split(b"\x00"):
            if raw:
                name = os.fsdecode(raw)
                found.add(name[2:] if name.startswith("./") else name)
        return found

    def kill(self) -> None:
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        if not self._out.closed:
            self._out.close()
            self._err.close()


# -- glob_files and grep_files ------------------------------------------------------------


def glob(
    resolver: Resolver, access: Access, pattern: str, path: str, *, max_results: int
) -> list[str]:
    """Paths matching a glob pattern (see :meth:`Workspace.glob`)."""
    compiled = compile_glob(pattern)
    want = "dir" if compiled.dirs_only else "file"
    found: list[str] = []
    with resolver:
        root, names, start_fd = _start_dir(resolver, access, path)
        try:
            base_fd = start_fd
            if compiled.prefix:
                try:
                    base_fd = resolver.open_beneath_nofollow(
                        start_fd, "/".join(compiled.prefix), os.O_PATH | os.O_DIRECTORY
                    )
                except OSError:
                    return []
            base = _display_base(root, names)
            prefix = "".join(f"{p}/" for p in compiled.prefix)
            try:
                for entry_rel, kind in list_tree(base_fd, max_depth=compiled.max_depth):
                    rel = prefix + entry_rel
                    if kind not in (want, "link") or not compiled.matches(rel):
                        continue
                    if kind == "link" and _link_kind(resolver, access, root, names, rel) != want:
                        continue
                    shown = base + rel
                    found.append(shown + "/" if want == "dir" else shown)
            finally:
                if base_fd != start_fd:
                    os.close(base_fd)
        finally:
            os.close(start_fd)
    found.sort()
    return found[:max_results]


def grep(
    resolver: Resolver,
    access: Access,
    pattern: str,
    path: str,
    *,
    glob: str | None,
    max_results: int,
    ripgrep: str | None,
    on_notice: Callable[[str], None] | None,
) -> list[dict[str, Any]]:
    """Lines matching a regular expression (see :meth:`Workspace.grep`)."""
    if max_results < 1:
        raise InvalidArguments("max_results must be at least 1", field="max_results")
    rx = compile_regex(pattern)
    name_filter = compile_name_filter(glob) if glob else None
    results: list[dict[str, Any]] = []
    with resolver:
        root, names, start_fd = _start_dir(resolver, access, path)
        rg = RipgrepRun(ripgrep, start_fd, pattern) if ripgrep else None
        try:
            mounts: list[str] = []
            candidates: list[tuple[str, bool]] = [
                (rel, kind == "link")
                for rel, kind in list_tree(start_fd, mounts=mounts)
                if kind in ("file", "link") and (name_filter is None or name_filter(rel))
            ]
            if rg is not None:
                maybe = rg.finish()
                if maybe is None:
                    if on_notice is not None:
                        on_notice(
                            "ripgrep could not run this search; every file was searched in Python"
                        )
                else:
                    below_mount = tuple(mounts)  # ripgrep stays on one file system
                    candidates = [
                        c
                        for c in candidates
                        if c[1] or c[0] in maybe or (below_mount and c[0].startswith(below_mount))
                    ]
            candidates.sort()
            base = _display_base(root, names)
            for rel, is_link in candidates:
                data = _read_candidate(resolver, access, root, names, start_fd, rel, is_link)
                if data is None:
                    continue
                shown = base + rel
                for line, text in search_text(rx, data, max_results - len(results)):
                    results.append({"path": shown, "line": line, "text": text})
                if len(results) >= max_results:
                    break
        finally:
            if rg is not None:
                rg.kill()
            os.close(start_fd)
    return results


def _start_dir(resolver: Resolver, access: Access, path: str) -> tuple[Root, list[str], int]:
    """Resolve a search's starting directory: (root, names from the root, O_PATH fd)."""
    opener = open_leaf(os.O_PATH)

    def op(place: Place) -> tuple[Root, list[str], int]:
        fd = opener(place)
        try:
            judge_place(place)  # the directory searched, every link followed, meets the rules
        except BaseException:
            os.close(fd)
            raise
        refuse_pseudo(fd, place.display())
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            os.close(fd)
            raise InvalidArguments(
                f"{place.display()} is not a directory; give the directory to search",
                field="path",
            )
        names = place.names + ([place.leaf] if place.leaf is not None else [])
        return place.root, names, fd

    return resolver.walk(path, op, access=access)


def _link_kind(
    resolver: Resolver, access: Access, root: Root, names: list[str], rel: str
) -> str | None:
    """What a symlink found by a search resolves to, if inside a root: file, dir or None."""
    try:
        fd = resolver.walk_from(
            root,
            deque([*names, *rel.split("/")]),
            open_leaf(os.O_PATH),
            roots=resolver.roots_for(access),
            original=rel,
        )
    except RingfenceError:
        return None
    try:
        mode = os.fstat(fd).st_mode
    finally:
        os.close(fd)
    if stat.S_ISREG(mode):
        return "file"
    return "dir" if stat.S_ISDIR(mode) else None


def _read_candidate(
    resolver: Resolver,
    access: Access,
    root: Root,
    names: list[str],
    start_fd: int,
    rel: str,
    is_link: bool,
) -> bytes | None:
    """A search candidate's bytes, read confined; None to skip it silently."""
    try:
        if is_link:
            fd = resolver.walk_from(
                root,
                deque([*names, *rel.split("/")]),
                open_leaf(READ_FLAGS),
                roots=resolver.roots_for(access),
                original=rel,
            )
        else:
            # Found by the walker as a plain file: re-open it refusing every link on
            # the way, so a directory swapped for a link since is not entered.
            fd = resolver.open_beneath_nofollow(start_fd, rel, READ_FLAGS)
    except (OSError, RingfenceError):
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > GREP_MAX_FILE_BYTES:
            return None
        if pseudo_filesystem(fd) is not None:
            return None  # kernel state (a proc mounted inside a root): never searched
        return read_all(fd, GREP_MAX_FILE_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)


def _display_base(root: Root, names: list[str]) -> str:
    """What to put before a search result's relative path so tools can take it back."""
    base = display_path(root, names)
    if base == ".":
        return ""
    return base if base.endswith("/") else base + "/"

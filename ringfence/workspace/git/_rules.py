"""Git metadata: which names git treats as ``.git``, and which directories are git directories.

Git runs programs that its configuration and hooks name, so a file tool that
can write ``.git/config`` or ``.git/hooks/*`` can be talked into running code.
These checks are written from git's documented rules (``is_ntfs_dotgit``,
``is_hfs_dotgit``, ``is_git_directory``, gitfiles), not copied from git:

* ``.git`` is matched the way git matches it with ``core.protectNTFS`` and
  ``core.protectHFS`` on (their defaults): ASCII case-insensitively, with
  trailing dots and spaces, the ``git~1`` short name, any alternate data stream
  (``.git::$INDEX_ALLOCATION``), backslash-separated segments, and HFS+
  ignorable code points (U+200C, U+FEFF, …) anywhere in the name.
* A directory is a git directory when its ``HEAD`` is a ref or an object id and
  its common directory has ``objects/`` and ``refs/`` (git's own test).

Every function here is pure or works on an open directory descriptor; the
resolver decides *where* to look.
"""

from __future__ import annotations

import contextlib
import os
import stat
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

__all__ = [
    "GITFILE_MAX_BYTES",
    "Overlay",
    "first_git_directory",
    "git_discovery_name",
    "is_dotgit",
    "is_dotgitmodules",
    "is_git_directory",
    "is_hfs_dot_generic",
    "is_hfs_dotgit",
    "is_ntfs_dot_generic",
    "is_ntfs_dotgit",
    "may_be_common_directory",
    "parse_gitfile",
    "read_commondir",
    "read_gitfile",
    "valid_head",
]

# git refuses to read a gitfile larger than this.
GITFILE_MAX_BYTES = 1 << 20
# Reading this much of HEAD is enough to validate it (git reads a ref's first line).
_HEAD_READ_BYTES = 256

# HFS+ ignores these code points when comparing names, so ".g\u200cit" is ".git" there.
_HFS_IGNORABLE = frozenset(
    [*range(0x200C, 0x2010), *range(0x202A, 0x202F), *range(0x206A, 0x2070), 0xFEFF]
)
# Every .git spelling starts with one of these characters, unless a backslash splits it.
MAY_START_DOTGIT = frozenset(".gG") | frozenset(chr(c) for c in _HFS_IGNORABLE)


def _only_dots_and_spaces_then_end(rest: str, *, separators: str) -> bool:
    """True if ``rest`` is dots and spaces up to its end or one of ``separators``."""
    for ch in rest:
        if ch in separators:
            return True
        if ch not in ". ":
            return False
    return True


def is_ntfs_dotgit(name: str) -> bool:
    """Would NTFS open ``.git`` for this name? (git's ``is_ntfs_dotgit``.)

    ``.git`` or its short name ``git~1`` (ASCII case-insensitive), followed only
    by dots and spaces (which Windows strips) up to the end, a directory
    separator (``/`` or ``\\``) or ``:`` (so every alternate data stream counts).
    Only the leading segment is examined; callers split paths first.
    """
    lowered = name[:5].lower()
    if lowered[:4] == ".git":
        rest = name[4:]
    elif lowered == "git~1":
        rest = name[5:]
    else:
        return False
    return _only_dots_and_spaces_then_end(rest, separators="/\\:")


def is_ntfs_dot_generic(name: str, dotname: str, shortname_prefix: str) -> bool:
    """NTFS spellings of ``.<dotname>`` (e.g. ``.gitmodules``): git's generic rule.

    Matches ``.<dotname>``, the short name ``<first 6 of dotname>~1``..``~4``,
    and the hashed short name ``<prefix>~N`` (8 characters, ``N`` not starting
    with 0), each followed only by dots and spaces up to the end or a ``:``.
    """
    n = len(dotname)
    if name[:1] == "." and name[1 : 1 + n].lower() == dotname:
        return _only_dots_and_spaces_then_end(name[1 + n :], separators=":")
    if len(name) >= 8 and name[:6].lower() == dotname[:6] and name[6] == "~" and name[7] in "1234":
        return _only_dots_and_spaces_then_end(name[8:], separators=":")
    # The hashed form: up to 6 prefix characters, "~", then digits to 8 characters.
    if len(name) < 8:
        return False
    saw_tilde = False
    i = 0
    while i < 8:
        ch = name[i]
        if saw_tilde:
            if not ch.isascii() or not ch.isdigit():
                return False
        elif ch == "~":
            i += 1
            if i >= 8 or name[i] not in "123456789":
                return False
            saw_tilde = True
        elif i >= 6 or ch.lower() != shortname_prefix[i]:
            return False
        i += 1
    if not saw_tilde:
        return False
    return _only_dots_and_spaces_then_end(name[8:], separators=":")


def _hfs_chars(name: str):
    for ch in name:
        if ord(ch) not in _HFS_IGNORABLE:
            yield ch


def is_hfs_dot_generic(name: str, needle: str) -> bool:
    """Would HFS+ read this name as ``.<needle>``? (git's ``is_hfs_dot_generic``.)

    Ignorable code points are skipped anywhere; the rest must be ``.`` then
    ``needle`` (ASCII case-insensitive; any other non-ASCII character means
    "no"), then the end or ``/``.
    """
    chars = _hfs_chars(name)
    if next(chars, "") != ".":
        return False
    for want in needle:
        ch = next(chars, "")
        if not ch or ord(ch) > 127 or ch.lower() != want:
            return False
    ch = next(chars, "")
    return ch == "" or ch == "/"


def is_hfs_dotgit(name: str) -> bool:
    return is_hfs_dot_generic(name, "git")


def is_dotgit(name: str) -> bool:
    """Is this path component ``.git`` in any spelling git itself protects?

    Backslashes count as separators here, as they do in git with
    ``core.protectNTFS``, so a single Linux file name like ``.\\.GIT\\foobar``
    is refused: a checkout on Windows would read it as ``.GIT/foobar``.
    """
    if name[:1] not in MAY_START_DOTGIT and "\\" not in name:
        return False  # the common case, decided without the full rules
    return any(is_ntfs_dotgit(seg) or is_hfs_dotgit(seg) for seg in name.split("\\"))


def is_dotgitmodules(name: str) -> bool:
    """``.gitmodules`` in any NTFS or HFS+ spelling (git's t0060 rules)."""
    return is_ntfs_dot_generic(name, "gitmodules", "gi7eba") or is_hfs_dot_generic(
        name, "gitmodules"
    )


# -- the names git's discovery reads, as a file system may compare them ----------------

# What git's is_git_directory reads in a directory, by the folded name (see git_discovery_name).
_DISCOVERY = {"head": "HEAD", "objects": "objects", "refs": "refs", "commondir": "commondir"}


def git_discovery_name(name: str) -> str | None:
    """The name git's discovery reads (``HEAD``, ``objects``, ``refs``, ``commondir``) that
    ``name`` may be on some file system, or None.

    git asks the kernel for ``HEAD`` and ``access("objects", X_OK)``; on a case-insensitive
    file system (vfat, exFAT, NTFS, an SMB share, a casefolded ext4/f2fs/tmpfs directory,
    XFS ``ascii-ci``) ``OBJECTS``, ``Head``, ``ref\\u017f`` (a long s) or ``HEAD.`` (vfat drops
    trailing dots) is the entry that answers, so a name a write adds is compared as the
    widest of them would: HFS+ ignorables dropped, NFKC, upper- then case-folded (NTFS's
    upcase makes a dotless i an ``I``), trailing dots and spaces dropped. On a case-sensitive file
    system this refuses a little more than git would read (the safe side)."""
    if name.isascii():
        key = name.rstrip(". ").lower()
    else:
        kept = "".join(ch for ch in name if ord(ch) not in _HFS_IGNORABLE)
        key = unicodedata.normalize("NFKC", kept).upper().casefold().rstrip(". ")
    return _DISCOVERY.get(key)


def _overlaid(overlay: Overlay, name: str) -> tuple[str, bytes | None] | None:
    """The entry a pending write adds that git would read as ``name`` (see
    :func:`git_discovery_name`), or None."""
    found = overlay.get(name)
    if found is not None:
        return found
    for key, entry in overlay.items():
        if git_discovery_name(key) == name:
            return entry
    return None


# -- git directories ------------------------------------------------------------------

_HEX = frozenset(b"0123456789abcdefABCDEF")


def valid_head(content: bytes | None, *, symlink_target: str | None = None) -> bool:
    """git's ``validate_headref``: is this a HEAD git would accept?

    A symlink to ``refs/...``; or a file starting ``ref:`` then optional
    whitespace then ``refs/``; or a file starting with an object id (git
    accepts the hex prefix of any hash it knows, so 40 hex digits suffice).
    """
    if symlink_target is not None:
        return symlink_target.startswith("refs/")
    if content is None:
        return False
    if content.startswith(b"ref:"):
        return content[4:].lstrip(b" \t\n\r").startswith(b"refs/")
    return len(content) >= 40 and all(b in _HEX for b in content[:40])


# An overlay describes entries a pending write would add to a directory:
# name -> ("file", content bytes), ("dir", None) or ("symlink", target bytes). It lets the same test
# answer "would this write *assemble* a git directory?".
Overlay = Mapping[str, tuple[str, bytes | None]]


def _lstat(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None


def _is_searchable(
    name: str, dir_fd: int, overlay: Overlay, beneath: tuple[int, str] | None = None
) -> bool:
    """git's ``access(name, X_OK)``: a directory, or a file with an execute bit (git's test
    passes an executable *file* named ``objects``). A file a pending write adds counts
    whatever its mode (the safe side).

    A *link* counts whatever it leads to, now or never: what it resolves to changes without
    this directory changing (a directory made, a mode set, at its target), and a writer that
    does that may not see this directory at all (a later session whose roots are only the
    target's: ``x/objects -> ../sub/o`` laid by a session on ``/p``, ``o`` made by one on
    ``/p/sub``, and ``x`` was a repository whose ``config`` the agent wrote). ``beneath`` is
    kept for the callers: the entry itself is all that is read."""
    pending = _overlaid(overlay, name)
    if pending is not None:
        return pending[0] in ("dir", "file", "symlink")
    st = _lstat(name, dir_fd)
    if st is None:
        return False
    if stat.S_ISLNK(st.st_mode) or stat.S_ISDIR(st.st_mode):
        return True
    # A file with another name: its mode changes through that name too (as HEAD's bytes do).
    return bool(st.st_mode & 0o111) or (stat.S_ISREG(st.st_mode) and st.st_nlink > 1)


# A path below a root at least this long is reached in steps: one system call cannot spell a
# path past PATH_MAX (4,096 bytes with its NUL), and the kernel reaches such a place through
# links from a shallow directory (git's access() does).
_STEP = 3072
_THROUGH = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


@contextlib.contextmanager
def at_beneath(root_fd: int, rel: str) -> Iterator[tuple[int, str]]:
    """``(directory descriptor, name)`` naming ``rel`` below ``root_fd`` for one ``*at`` call:
    ``(root_fd, rel)`` when short; else the directory holding its last component, opened in
    steps of under :data:`_STEP` bytes, links between followed as that one call would."""
    if len(rel) < _STEP:
        yield root_fd, rel
        return
    parent, _, leaf = rel.rpartition("/")
    fd = root_fd
    try:
        chunk: list[str] = []
        size = 0
        for name in parent.split("/"):
            if chunk and size + len(name) >= _STEP:
                nxt = os.open("/".join(chunk), _THROUGH, dir_fd=fd)
                if fd != root_fd:
                    os.close(fd)
                fd, chunk, size = nxt, [], 0
            chunk.append(name)
            size += len(name) + 1
        nxt = os.open("/".join(chunk), _THROUGH, dir_fd=fd)
        if fd != root_fd:
            os.close(fd)
        fd = nxt
        yield fd, leaf
    finally:
        if fd != root_fd:
            os.close(fd)


def _read_small(name: str, dir_fd: int, limit: int) -> bytes | None:
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def _head_is_valid(dir_fd: int, overlay: Overlay) -> bool:
    pending = _overlaid(overlay, "HEAD")
    if pending is not None:
        kind, content = pending
        if kind == "symlink":
            return content is not None and valid_head(None, symlink_target=os.fsdecode(content))
        return kind == "file" and valid_head(content)
    st = _lstat("HEAD", dir_fd)
    if st is None:
        return False
    if stat.S_ISLNK(st.st_mode):
        try:
            return valid_head(None, symlink_target=os.readlink("HEAD", dir_fd=dir_fd))
        except OSError:
            return False
    if not stat.S_ISREG(st.st_mode):
        return False
    if st.st_nlink > 1:
        # A file with another name: its bytes change through that name, which a writer (a
        # session on other roots) may change without ever looking at this directory.
        return True
    return valid_head(_read_small("HEAD", dir_fd, _HEAD_READ_BYTES))


def is_git_directory(
    dir_fd: int, overlay: Overlay | None = None, *, beneath: tuple[int, str] | None = None
) -> bool:
    """git's ``is_git_directory`` for the directory open at ``dir_fd``.

    True when ``HEAD`` is valid and either a ``commondir`` file is present
    (worktree git directories; we do not chase the common directory, which may
    lie outside the roots, and count it as a git directory: refusing more is
    the safe side) or ``objects/`` and ``refs/`` are directories.

    With ``overlay``, answers for the directory as it would be after a write
    adds those entries: the test for "assembling" a git directory. An
    ``objects``/``refs`` link counts as there whatever it leads to
    (:func:`_is_searchable`); ``beneath`` (the root's descriptor, this
    directory's path below it) is accepted for the callers and not needed.
    """
    overlay = overlay or {}
    if not _head_is_valid(dir_fd, overlay):
        return False
    if _overlaid(overlay, "commondir") is not None or _lstat("commondir", dir_fd) is not None:
        return True
    return _is_searchable("objects", dir_fd, overlay, beneath) and _is_searchable(
        "refs", dir_fd, overlay, beneath
    )


def may_be_common_directory(dir_fd: int, *, beneath: tuple[int, str]) -> bool:
    """Could the directory open at ``dir_fd`` be a git directory's common directory (its
    ``commondir`` names it)? git's test of one: ``objects`` and ``refs`` that pass
    ``access(X_OK)`` (no ``HEAD`` needed), links followed beneath the root as in
    :func:`is_git_directory`. git reads that repository's ``config`` and ``hooks`` there."""
    return _is_searchable("objects", dir_fd, {}, beneath) and _is_searchable(
        "refs", dir_fd, {}, beneath
    )


def read_commondir(dir_fd: int) -> str | None:
    """The path the ``commondir`` of the directory open at ``dir_fd`` names, read as git
    reads it (whole, through a link; trailing newlines stripped, then a NUL ends it); None
    when there is none or it is empty or unreadable."""
    try:
        fd = os.open("commondir", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, GITFILE_MAX_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    text = data.rstrip(b"\r\n").split(b"\0", 1)[0]
    return os.fsdecode(text) if text else None


def first_git_directory(paths: Iterable[Path]) -> Path | None:
    """The first of ``paths`` that is a git directory (:func:`is_git_directory`), or None.

    For a workspace root and its ancestors, opened by path. A path that cannot
    be opened is passed over (not checked); the callers check the root's own
    descriptor or a .git in its path besides.
    """
    for path in paths:
        try:
            fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if is_git_directory(fd):
                return path
        finally:
            os.close(fd)
    return None


def parse_gitfile(content: bytes) -> str | None:
    r"""The target of a ``.git`` file (``gitdir: PATH``), or None if it is not one.

    Read as git reads it (``read_gitfile_gently``): every byte after the prefix but the
    trailing CRs and LFs, as a C string (cut at a NUL). A newline inside stays in the path
    (cut at the first one, ``gitdir: a\nb`` was judged as ``a`` while git opened
    ``a\nb``); an empty path names the file's own directory."""
    if len(content) > GITFILE_MAX_BYTES or not content.startswith(b"gitdir: "):
        return None
    body = content.rstrip(b"\r\n")
    if len(body) < 9:
        return None  # git: "no path in gitfile"
    target = body[len(b"gitdir: ") :].split(b"\0", 1)[0]
    return os.fsdecode(target) if target else "."


def read_gitfile(dir_fd: int, name: str) -> str | None:
    """Read ``name`` in ``dir_fd`` as a gitfile; its target or None."""
    data = _read_small(name, dir_fd, GITFILE_MAX_BYTES + 1)
    return parse_gitfile(data) if data is not None else None

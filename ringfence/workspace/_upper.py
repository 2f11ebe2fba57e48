"""An overlay's upper directory read as a change set (for the confined shell's capture).

When a command ran on an overlay whose lower layer is a workspace root,
its upper directory holds everything it changed, in overlayfs's encoding:

* a file, link or directory that exists in the upper layer is its new
  state (copied up, or new);
* a character device 0:0 is a *whiteout*: the lower entry was deleted;
* a directory with the xattr ``trusted.overlay.opaque`` or
  ``user.overlay.opaque`` (unprivileged overlays) set to ``y`` is *opaque*:
  it replaced the lower directory, whose other entries are gone.

:func:`changes_from_upper` turns that into the file-level changes of a
:class:`~._changes.ChangeSet` (a renamed directory, copied up whole and
whited out, becomes its deletions and creations), storing every after- and
before-image in ``blobs``, so :func:`~._merge.merge_changes` can merge or
refuse it like any other set. Other special files (FIFOs, devices,
sockets) are described, not stored: the merge refuses them.

Not handled: ``redirect_dir`` and ``metacopy`` (ringfence mounts without
them, so a rename is a copy-up and every file's data is in the upper layer).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat

from ._changes import Blobs, Change, Image, image_at

__all__ = ["changes_from_upper"]

_OPAQUE_XATTRS = ("trusted.overlay.opaque", "user.overlay.opaque")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _is_opaque(fd: int) -> bool:
    for name in _OPAQUE_XATTRS:
        with contextlib.suppress(OSError):
            if os.getxattr(fd, name) == b"y":
                return True
    return False


def _open_dir(parent_fd: int | None, name: str) -> int | None:
    if parent_fd is None:
        return None
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: a link, not a directory
            return None
        raise


def _deleted(
    lower_fd: int, name: str, path: str, found: Image, blobs: Blobs, out: list[Change]
) -> None:
    """Deletions of ``name`` (a lower entry) and, for a directory, of all below it first."""
    if found.kind == "dir":
        sub_fd = os.open(name, _DIR_FLAGS, dir_fd=lower_fd)
        try:
            for child in sorted(os.listdir(sub_fd)):
                image = image_at(sub_fd, child, blobs)  # stored: the deletion can be undone
                if image is not None:
                    _deleted(sub_fd, child, f"{path}/{child}", image, blobs, out)
        finally:
            os.close(sub_fd)
    out.append(Change(-1, path, found, None))


def _after_image(upper_fd: int, name: str, st: os.stat_result, blobs: Blobs) -> Image | None:
    """The upper entry's image; a regular file's bytes go into the store by a hard link
    when the store can take one (``adopt``: same file system), else by copy.

    Safe to link: the upper directory is never written again (its command's
    processes are gone, the overlay unmounted) and is only emptied, so the
    store's link is the inode's one remaining name.
    """
    adopt = getattr(blobs, "adopt", None)
    if adopt is None or not stat.S_ISREG(st.st_mode):
        return image_at(upper_fd, name, blobs)
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=upper_fd)
    try:
        h, size = hashlib.sha256(), 0
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    digest = h.hexdigest()
    if not adopt(upper_fd, name, digest):
        return image_at(upper_fd, name, blobs)
    return Image("file", stat.S_IMODE(st.st_mode), digest, size)


def changes_from_upper(upper_fd: int, lower_fd: int, root: int, blobs: Blobs) -> list[Change]:
    """The changes an overlay's upper directory (``upper_fd``) makes to ``lower_fd``.

    ``lower_fd`` is the workspace root the overlay had as its lower layer
    (position ``root`` in the workspace); both are directory descriptors
    the caller owns. Before-images of changed and deleted files are stored
    in ``blobs`` too, so the set can be undone after it is merged. Order:
    a deletion before a creation at the same path, a directory before its
    entries, entries before their directory's deletion.
    """
    out: list[Change] = []
    _walk(upper_fd, lower_fd, "", blobs, out)
    return [Change(root, c.path, c.before, c.after) for c in out]


def _walk(
    upper_fd: int, lower_fd: int | None, prefix: str, blobs: Blobs, out: list[Change]
) -> None:
    for name in sorted(os.listdir(upper_fd)):
        path = f"{prefix}{name}"
        st = os.stat(name, dir_fd=upper_fd, follow_symlinks=False)
        before = image_at(lower_fd, name, blobs) if lower_fd is not None else None
        if _is_whiteout(st):
            if before is not None:
                assert lower_fd is not None
                _deleted(lower_fd, name, path, before, blobs, out)
            continue
        if stat.S_ISDIR(st.st_mode):
            sub_upper_fd = os.open(name, _DIR_FLAGS, dir_fd=upper_fd)
            sub_lower_fd = None
            try:
                opaque = _is_opaque(sub_upper_fd)
                mode = stat.S_IMODE(st.st_mode)
                if before is not None and (before.kind != "dir" or opaque):
                    assert lower_fd is not None
                    _deleted(lower_fd, name, path, before, blobs, out)  # replaced: gone first
                    before = None
                else:
                    sub_lower_fd = _open_dir(lower_fd, name)
                if before is None or before.mode != mode:
                    out.append(Change(-1, path, before, Image("dir", mode)))
                _walk(sub_upper_fd, sub_lower_fd, f"{path}/", blobs, out)
            finally:
                os.close(sub_upper_fd)
                if sub_lower_fd is not None:
                    os.close(sub_lower_fd)
            continue
        after = _after_image(upper_fd, name, st, blobs)
        if before is not None and before.kind == "dir":
            assert lower_fd is not None
            _deleted(lower_fd, name, path, before, blobs, out)  # a directory replaced by a file
            before = None
        if before != after:
            out.append(Change(-1, path, before, after))

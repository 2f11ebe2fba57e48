"""The docker backend on an engine that does not share our file system (a *remote* engine).

Nothing of the host is mounted. Layout of a remote session's container::

    /workspace, /workspace2, …   a named volume per root (local driver, on that engine):
                                 the root's copy, files owned by the container user
    /.rf-uppers                  a tmpfs owned by the container user (sized like the
                                 memory limit, whose cgroup its pages are charged to)
    └─ g<n>/<i>/u, g<n>/<i>/w    root i's overlay upper and work directories, in a
                                 directory of the n-th supervisor's own (one given
                                 up mid-line never touches its successor's)
    /tmp                         the session's tmpfs, as on a local engine
    rootfs                       read-only, as on a local engine

Every command runs under the same overlay wrapper as a local change-set session
(:func:`..docker._shell.overlay_wrapper`): the volume is the lower layer, the
upper is on the tmpfs, and ``/.rf-uppers`` is hidden from the command.

Around each command (:class:`RemoteWorkspace`):

* **before**: the host walks each root and syncs the copy (:mod:`._ship`): paths
  gone or changed in kind are deleted by the supervisor, new and changed entries
  arrive as one tar: up to :data:`STREAM_LIMIT` through the supervisor's stdin
  (a here-document into ``tar``, ~5 ms), larger ones (the first ship of a big
  workspace) by one ``put_archive`` into the volume (~100 ms and up; the Engine
  refuses an archive anywhere else in a read-only-rootfs container). Nothing
  changed, nothing sent. This is how file tools' writes and merged change sets
  reach the copy; a command's refused writes never do (they were only in its
  upper). A sync cut short empties the copy and ships it all next time.
* **after**: one line to the supervisor: when an upper is not empty, a
  ``unshare -Urm`` helper lists its opaque directories (each tested with a
  read-only overlay whose lower layers are the upper's parent directory and a
  sentinel named by a fresh token: an opaque directory hides the sentinel; busybox
  has no getfattr),
  writes the upper as a tar, base64, with the tar's sha256, and empties the
  upper. The host checks the digest, rebuilds the upper in its own directory
  (:func:`._ship.rebuild_upper`) and returns that as :attr:`ShellResult.uppers`,
  so the caller's capture and merge are the local ones. ``get_archive`` (~100 ms
  a call on Engine 20.10) is never used.

The supervisor's stream to a TLS engine is :func:`..docker._tls.attach_tls`.

Non-guarantees: the engine's operator (root on that machine) sees the shipped
workspace and every command's output; the volume outlives a kernel that is
killed (labelled ``ringfence.session``; removed by ``aclose``, or with the stale
container by the next session from this host on that engine). The host walks
every root before every command (~10 µs a file: 2,000 files ~20 ms). A command's
writes live in memory on the engine until fetched (the uppers' tmpfs).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import re
import secrets
import stat
from functools import partial
from pathlib import Path
from typing import Any

import trio
from docker.types import Mount

from ...runtime._errors import InvalidArguments, RingfenceError, ToolError, Unavailable
from .._trees import remove_tree
from .._types import SessionSpec, Upper
from ..docker._api import docker_call
from ..docker._images import docker_location
from ..docker._shell import CommandOutput, Supervisor, quote
from ..docker._upper import OWNER, uppers_base
from ._engines import Engine, EngineLoad
from ._ship import ShipGit, ShippedRoot, rebuild_upper

__all__ = [
    "UPPERS_DIR",
    "RemoteWorkspace",
    "engine_error",
    "load_json",
    "remote_workspace",
]

UPPERS_DIR = "/.rf-uppers"
STREAM_LIMIT = 1 << 20  # a sync up to this size goes through the shell, larger by archive


def _too_much(limit: int, engine: str) -> ToolError:
    return ToolError(
        f"engine {engine} sent more than {limit} bytes for one change set "
        "(at most three times the uppers' tmpfs, the memory option, plus 96 MiB; a "
        "sparse file travels whole): refused whole, the workspace is unchanged"
    )


def _damaged(engine: str, what: str) -> Unavailable:
    return Unavailable(
        f"the change set from engine {engine} is damaged ({what[:200]!r}); the workspace "
        "is unchanged"
    )


class _Tail:
    """The last :data:`_LINE_TAIL` bytes of one stream of an internal supervisor line (ours:
    its output is never used but to name a failure). The sandbox's image runs that line's
    programs: a ``mkdir`` that writes 64 MiB and fails was held whole (up to three times the
    memory option plus 96 MiB, some three copies of it at its peak) and put in the error."""

    def __init__(self) -> None:
        self.data = b""

    def feed(self, data: bytes) -> None:
        self.data = (self.data + data[-_LINE_TAIL:])[-_LINE_TAIL:]


_LINE_TAIL = 2000  # what an internal line's failure may quote of its output


# What the fetch's own stderr lines (modes, digests, opaque directories: ~8 KiB each at most)
# may hold in all, and how much of the rest (tar's warnings, which quote the command's file
# names) is kept for an error message.
_FETCH_OWN_LIMIT = 64 << 20
_FETCH_TAIL = 500


class _FetchErr:
    """The fetch's stderr as it arrives: the lines starting with ``token`` (ours, at most
    :data:`_FETCH_OWN_LIMIT` bytes: past it ToolError) and the last :data:`_FETCH_TAIL`
    bytes of everything. A command's files can make ``tar`` warn without end (a socket
    each, quoting its path): none of that is held."""

    def __init__(self, token: str, engine: str) -> None:
        self.prefix = f"{token} ".encode()
        self.engine = engine
        self.ours: list[list[str]] = []
        self.tail = b""
        self._size = 0
        self._line = bytearray()
        self._skip = False  # the current line is too long to be ours: dropped to its end

    def feed(self, data: bytes) -> None:
        self.tail = (self.tail + data)[-_FETCH_TAIL:]
        self._line += data
        start = 0
        while (end := self._line.find(b"\n", start)) >= 0:
            if not self._skip:
                self._take(bytes(self._line[start:end]))
            self._skip = False
            start = end + 1
        del self._line[:start]
        if len(self._line) > _FETCH_LINE * 4:  # longer than any line of ours
            self._skip = True
            self._line.clear()

    def _take(self, line: bytes) -> None:
        if not line.startswith(self.prefix):
            return
        self._size += len(line)
        if self._size > _FETCH_OWN_LIMIT:
            raise _too_much(_FETCH_OWN_LIMIT, self.engine)
        self.ours.append(line.decode("ascii", "replace").split()[1:])


# The longest line of the fetch's stdout taken (``base64`` writes 76 characters a line).
_FETCH_LINE = 4096
_SPOOL_CHUNK = 1 << 20  # decoded bytes held before they are written out
_ROOT_LINE = re.compile(rb"^@([^\n]*)\n", re.MULTILINE)


class _FetchSpool:
    """The fetch's stdout as it arrives: per root a line ``@<i>``, then its tar in base64
    lines, decoded and written to ``<directory>/<i>.tar`` a read at a time (:meth:`flush`,
    awaited between reads): the set is never held in memory, only the last read of it.

    Read as strictly as the whole text was: at most ``limit`` bytes in all (ToolError), a
    root named twice or that is none, a line longer than :data:`_FETCH_LINE`, base64 that
    is not (or goes on after its padding) is Unavailable naming the engine."""

    def __init__(self, directory: Path, roots: int, limit: int, engine: str) -> None:
        self.directory = directory
        self.roots = roots
        self.limit = limit
        self.engine = engine
        self.total = 0
        self.sent: list[int] = []  # the roots whose tar came, in order
        self.written: set[int] = set()  # the roots with a spool file
        self._line = bytearray()
        self._carry = b""  # base64 characters short of a group of four
        self._ended = False  # the current root's base64 had its padding
        self._decoded: list[tuple[int, bytes]] = []
        self._pending = 0  # bytes in _decoded
        self._files: dict[int, Any] = {}

    def path(self, root: int) -> Path:
        return self.directory / f"{root}.tar"

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        if self.total > self.limit:
            raise _too_much(self.limit, self.engine)
        self._line += data
        end = self._line.rfind(b"\n") + 1
        if end:  # every whole line at once: a read holds some 900 of base64's
            self._take(bytes(self._line[:end]))
            del self._line[:end]
        if len(self._line) > _FETCH_LINE:
            raise _damaged(self.engine, bytes(self._line[:40]).decode("ascii", "replace"))

    def _take(self, block: bytes) -> None:
        """Whole lines: base64, and a root's ``@<i>`` line before its own."""
        pos = 0
        for found in _ROOT_LINE.finditer(block):
            self._base64(block[pos : found.start()])
            self._root(found.group(1).decode("ascii", "replace"))
            pos = found.end()
        self._base64(block[pos:])

    def _root(self, text: str) -> None:
        self._end_root()
        if not (text.isascii() and text.isdigit()) or int(text) >= self.roots:
            raise _damaged(self.engine, text)
        if int(text) in self.sent:
            raise _damaged(self.engine, f"root {text} twice")
        self.sent.append(int(text))

    def _base64(self, lines: bytes) -> None:
        text = b"".join(lines.split())  # line ends (and blank lines) out
        if not text or not self.sent:
            return  # (before the first root's line: nothing of a tar)
        if self._ended:
            raise _damaged(self.engine, "base64 after its padding")
        group = self._carry + text
        whole = len(group) - len(group) % 4
        try:
            decoded = binascii.a2b_base64(group[:whole], strict_mode=True)
        except binascii.Error as exc:
            raise _damaged(self.engine, str(exc)) from None
        self._ended = group[:whole].endswith(b"=")
        self._carry = group[whole:]
        if decoded:
            self._decoded.append((self.sent[-1], decoded))
            self._pending += len(decoded)

    def _end_root(self) -> None:
        if self._carry:
            raise _damaged(self.engine, "base64 cut short")
        self._ended = False

    async def flush(self, *, least: int = _SPOOL_CHUNK) -> None:
        """Write what was decoded since the last flush to the roots' spool files, once it is
        ``least`` bytes (one thread hop a chunk, not a read)."""
        if not self._decoded or self._pending < least:
            return
        chunks, self._decoded, self._pending = self._decoded, [], 0
        await trio.to_thread.run_sync(self._write, chunks)

    def _write(self, chunks: list[tuple[int, bytes]]) -> None:
        for root, data in chunks:
            out = self._files.get(root)
            if out is None:
                fd = os.open(
                    self.path(root),
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                    0o600,
                )
                out = self._files[root] = os.fdopen(fd, "wb")
                self.written.add(root)
            out.write(data)

    async def finish(self) -> None:
        """The last of it written and every spool file closed; a cut-off tail is damaged."""
        if self._line.strip():
            self._take(bytes(self._line) + b"\n")
            self._line.clear()
        self._end_root()
        await self.flush(least=0)
        await trio.to_thread.run_sync(self.close)

    def close(self) -> None:
        """Close the spool files (blocking); idempotent."""
        files, self._files = self._files, {}
        for out in files.values():
            with contextlib.suppress(OSError):
                out.close()


def _size_bytes(text: str) -> int:
    """A size option (``512m``; checked by the options) in bytes; 512 MiB if unreadable."""
    m = re.fullmatch(r"(\d+)([bkmg]?)", text.strip(), re.IGNORECASE)
    if m is None:
        return 512 << 20
    return (
        int(m.group(1))
        * {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]
    )


# -- the shipped workspace --------------------------------------------------------------------


class RemoteWorkspace:
    """A remote session's shipped roots and the per-command sync and fetch. See the module doc."""

    def __init__(
        self,
        engine: Engine,
        session_id: str,
        roots: list[tuple[Path, str]],
        owner: tuple[int, int],
        ship_git: ShipGit,
        host_dir: Path,
    ) -> None:
        self.engine = engine
        self.roots = roots
        self.owner = owner
        self.shipped = [ShippedRoot(str(r), owner, ship_git) for r, _ in roots]
        self.host_dir = host_dir
        self.clean = False  # the uppers in the container hold nothing unfetched
        # Each upper directory's mode when it was made: its root's then (the overlay's top
        # directory is the upper, so the command sees that mode); another is its chmod.
        self.made_modes: list[int] = [0o755] * len(roots)
        # The uppers live in a directory of their supervisor's own (``_base``): a supervisor
        # given up mid-line (a cancelled fetch) may still be resetting its uppers in the
        # container, and must never touch the next supervisor's.
        self._generation = 0
        self._generation_of: Supervisor | None = None
        # What one line of our own may send back (a fetched change set's base64 above all):
        # set from the uppers' tmpfs size when the container is made (:meth:`tmpfs`). Its
        # files hold at most that much, but a sparse one is sent whole: without a bound, a
        # command's `truncate -s 100g` filled this process's memory.
        self._line_limit = 3 * (512 << 20) + (96 << 20)
        self._owned = False  # the session's directory names this process (:meth:`_fresh_spool`)

    def take_over(self, other: RemoteWorkspace) -> None:
        """Continue in the container ``other`` prepared (a claimed warm one): its uppers'
        directory, their modes and whether they hold anything unfetched."""
        self.clean, self.made_modes = other.clean, list(other.made_modes)
        self._generation, self._generation_of = other._generation, other._generation_of
        self._line_limit = other._line_limit

    # -- the container ------------------------------------------------------------------------

    def mounts(self) -> list[Mount]:
        # Anonymous volumes: removed with their container (auto_remove, ..docker._container),
        # so a killed kernel's shipped workspace goes with its container's lease.
        return [Mount(t, None, type="volume") for _, t in self.roots]

    def forget(self) -> None:
        """A new container has new, empty volumes: ship everything to it."""
        for shipped in self.shipped:
            shipped.forget()
        self.clean = False

    def tmpfs(self, memory: str) -> dict[str, str]:
        uid, gid = self.owner
        self._line_limit = 3 * _size_bytes(memory) + (96 << 20)
        return {UPPERS_DIR: f"rw,nosuid,nodev,size={memory},mode=0700,uid={uid},gid={gid}"}

    def main_setup(self) -> str:
        """Shell the container's main process (root) runs before it sleeps."""
        # The volumes' own directories are root's; the container user deletes entries
        # there when the host's are gone (every entry below is the container user's).
        return "chmod 1777 " + " ".join(quote(t) for _, t in self.roots)

    def layers(self) -> list[tuple[str, str, str]]:
        return [
            (t, f"{self._base}/{i}/u", f"{self._base}/{i}/w") for i, (_, t) in enumerate(self.roots)
        ]

    async def remove_host_dir(self) -> None:
        with contextlib.suppress(OSError):  # the session's directory: only ours, remote
            # By loop, not shutil.rmtree's recursion: a rebuilt upper can be deeper than
            # Python's recursion limit (its RecursionError failed the session's close).
            await trio.to_thread.run_sync(remove_tree, self.host_dir.parent)

    async def prepare(self, shell: Supervisor) -> None:
        """Make the upper and work directories on the tmpfs empty (after each new supervisor).

        Also before a command whose predecessor's writes were not fetched (it was
        cancelled, or the fetch was cut): they must not join the next change set.
        """
        if shell is not self._generation_of:  # a new supervisor: uppers of its own
            self._generation += 1
            self._generation_of = shell
        base = self._base
        dirs = " ".join(f"{base}/{i}/u {base}/{i}/w" for i in range(len(self.roots)))
        modes = self._root_modes()
        # The removal may race an old supervisor's line still running: its result is not
        # this one's (what it leaves is removed next time; the new directories are apart).
        status, _, err = await self._line(
            shell,
            f"find {UPPERS_DIR} -mindepth 1 -type d -exec chmod u+rwx {{}} + 2>/dev/null; "
            f"rm -rf {UPPERS_DIR}/* 2>/dev/null; mkdir -p {dirs} && {_made_with(base, modes)}",
        )
        if status != "0":
            raise Unavailable(
                f"engine {self.engine.name}: cannot make the upper directories: {err!r}"
            )
        self.made_modes = modes
        self.clean = True

    @property
    def _base(self) -> str:
        """The current supervisor's directory of uppers (on the tmpfs at UPPERS_DIR)."""
        return f"{UPPERS_DIR}/g{self._generation}"

    def _root_modes(self) -> list[int]:
        """The host roots' own modes now (a ``stat`` each: cheap enough for the event loop)."""
        return [stat.S_IMODE(os.stat(root).st_mode) for root, _ in self.roots]

    # -- before a command ---------------------------------------------------------------------

    async def sync(self, shell: Supervisor, container: Any) -> None:
        """Bring every root's copy up to the host's (see the module docstring)."""
        try:
            # Inside: a sync() whose result is lost to a cancellation was still recorded.
            syncs = [await trio.to_thread.run_sync(s.sync) for s in self.shipped]
            doomed = [
                quote(f"{target}/{path}")
                for (_, target), sync in zip(self.roots, syncs, strict=True)
                for path in sync.deletions
            ]
            for (_, target), sync in zip(self.roots, syncs, strict=True):
                if sync.wipe:  # a sync that may have half-arrived: start from empty
                    doomed += [f"{quote(target)}/{g}" for g in ("*", ".[!.]*", "..?*")]
            if doomed:
                words = " ".join(doomed)
                # Directories a command made unwritable are opened first; find matches no
                # link (chmod would follow one given by name).
                status, _, err = await self._line(
                    shell,
                    f"find {words} -type d -exec chmod u+rwx {{}} + 2>/dev/null; rm -rf {words}",
                )
                if status != "0":
                    raise ToolError(
                        f"engine {self.engine.name}: removing deleted paths from the shipped "
                        f"workspace failed: {err.decode(errors='replace')!r}"
                    )
            for (_, target), sync in zip(self.roots, syncs, strict=True):
                if not sync.entries:
                    continue
                if len(sync.tar) <= STREAM_LIMIT and await self._extract(shell, target, sync.tar):
                    continue  # a small sync through the shell: no ~100 ms archive call
                ok = await docker_call(container.put_archive, target, sync.tar)
                if not ok:
                    raise Unavailable(f"engine {self.engine.name} refused the workspace copy")
        except BaseException:
            for shipped in self.shipped:  # not known to have arrived: ship all next time
                shipped.forget()
            raise
        if not self.clean:
            await self.prepare(shell)
        elif (modes := self._root_modes()) != self.made_modes:  # the host chmodded a root
            status, _, err = await self._line(shell, _made_with(self._base, modes))
            if status != "0":
                raise Unavailable(
                    f"engine {self.engine.name}: cannot give the upper directories their roots' "
                    f"modes: {err!r}"
                )
            self.made_modes = modes
        self.clean = False  # the command runs next; its fetch makes it clean again

    async def _extract(self, shell: Supervisor, target: str, tar: bytes) -> bool:
        """Extract ``tar`` at ``target`` as the container user, through the shell's stdin.

        The shell reads a here-document itself (a child would race it for
        stdin). ``umask 0`` and ``-o``: the modes are the tar's, the owner the
        container user (as ``put_archive`` would make it). False when tar
        failed (say, a directory its owner made read-only): the caller falls
        back to ``put_archive``, which extracts as root on the engine.
        """
        end = f"__rf_end_{secrets.token_hex(12)}"
        data = base64.encodebytes(tar).decode("ascii")
        body = f"(umask 0; base64 -d | tar -xof - -C {quote(target)}) <<'{end}'"
        status, _, _ = await self._line(shell, body, after=f"{data}{end}\n")
        return status == "0"

    # -- after a command ----------------------------------------------------------------------

    async def fetch(self, shell: Supervisor, session_id: str) -> tuple[Upper, ...]:
        """Every root's upper, brought back and rebuilt on the host; the sandbox's emptied."""
        # An upper with an entry, or with a mode other than the one it was made with (the
        # command's chmod of its root), is fetched; the next command's uppers are made with
        # the roots' modes now.
        base = self._base
        nonempty = " || ".join(
            f'__rf_ne {base}/{i}/u || [ "$(stat -c %a {base}/{i}/u)" != {m:o} ]'
            for i, m in enumerate(self.made_modes)
        )
        modes = self._root_modes()
        targets = " ".join(f"{m:o} {quote(t)}" for m, (_, t) in zip(modes, self.roots, strict=True))
        token = secrets.token_hex(12)
        line = (
            '__rf_ne() { for __rf_e in "$1"/* "$1"/.[!.]* "$1"/..?*; do '
            '[ -e "$__rf_e" ] || [ -L "$__rf_e" ] && return 0; done; return 1; }; '
            f"if {nonempty}; then {quote(shell.unshare)} -Urm /bin/sh -c {quote(_FETCH)} rf "
            f"{quote(shell.mount)} {base} {token} {targets}; fi"
        )
        spool_dir = self.host_dir / "spool"
        await trio.to_thread.run_sync(self._fresh_spool, spool_dir)
        spool = _FetchSpool(spool_dir, len(self.roots), self._line_limit, self.engine.name)
        try:
            return await self._fetched(shell, line, token, modes, spool)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(spool.close)
                await trio.to_thread.run_sync(remove_tree, spool_dir)

    def _fresh_spool(self, spool_dir: Path) -> None:
        """An empty spool directory; the session's directory names this process as its owner
        (as a local session's does, ``..docker._upper.OWNER``). Before, it named none, so
        the next local docker session's sweep took a live remote session's directory (its
        rebuilt uppers) for an orphan's after two minutes, and a killed one's stayed."""
        _fresh_dir(spool_dir)
        owner = self.host_dir.parent / OWNER
        if not self._owned or not owner.exists():
            owner.write_text(str(os.getpid()))
            self._owned = True

    async def _fetched(
        self, shell: Supervisor, line: str, token: str, modes: list[int], spool: _FetchSpool
    ) -> tuple[Upper, ...]:
        """The fetch line run, its tars spooled, and the uppers rebuilt from them."""
        err = _FetchErr(token, self.engine.name)
        status, _, _ = await self._line(shell, line, out=spool, err=err)
        if shell.dead:
            raise Unavailable(
                f"engine {self.engine.name} ({self.engine.base_url}) went away while the "
                "change set was fetched; the workspace is unchanged"
            )
        ours = err.ours
        if status != "0" or any(f[:1] == ["f"] for f in ours):
            raise ToolError(
                f"engine {self.engine.name}: fetching the change set failed (status {status}): "
                f"{err.tail.decode(errors='replace')!r}; the workspace is unchanged"
            )
        await spool.finish()
        digests, upper_modes, opaque = _parsed_fetch(ours, len(self.roots), self.engine.name)
        uppers: list[Upper] = []
        for i, (root, _) in enumerate(self.roots):
            target = self.host_dir / str(i)
            await trio.to_thread.run_sync(_fresh_dir, target)
            if i in spool.sent:
                await trio.to_thread.run_sync(
                    partial(
                        rebuild_upper,
                        spool.path(i) if i in spool.written else b"",
                        digests.get(i, ""),
                        str(target),
                        opaque.get(i, []),
                        engine=self.engine.name,
                        owner=self.owner,
                    )
                )
            # The rebuilt upper's own mode: the sandbox's (the command's chmod of its root).
            made = self.made_modes[i]
            await trio.to_thread.run_sync(os.chmod, target, upper_modes.get(i, made))
            uppers.append(Upper(root, target, made_mode=made))
        if upper_modes:  # fetched: the uppers were made again
            self.made_modes = modes
        self.clean = True
        return tuple(uppers)

    async def _line(
        self,
        shell: Supervisor,
        body: str,
        *,
        after: str = "",
        out: _FetchSpool | None = None,
        err: _FetchErr | None = None,
    ) -> tuple[str, bytes, bytes]:
        """Run one line of our own shell in the supervisor (not a command); its status and the
        last :data:`_LINE_TAIL` bytes of its stdout and stderr (:class:`_Tail`).

        ``after`` follows the line (a here-document's text and its end word). ``out``,
        ``err``: where its stdout or stderr goes instead (then b"" is returned for it).
        """
        token = secrets.token_hex(12)
        sink, err_sink = _Tail(), _Tail()
        run = CommandOutput(token, out or sink, err or err_sink)  # type: ignore[arg-type]
        marker = quote(f"__rf{token}__")
        try:
            await shell.send(
                f"{body}; __rf_r=$?; printf '%s%s\\n' {marker} \"$__rf_r\"; "
                f"printf '%s\\n' {marker} >&2\n{after}"
            )
            with trio.move_on_after(120):
                await shell.read_until_done(run, between=out.flush if out else None)
        except BaseException:
            shell.dead = True  # cut mid-line: the next call starts a fresh shell
            raise
        if not run.done:
            shell.dead = True
            raise Unavailable(
                f"engine {self.engine.name} ({self.engine.base_url}) stopped answering the "
                "sandbox shell; the workspace is unchanged"
            )
        return run.status, bytes(sink.data), bytes(err_sink.data)


# What the fetch's lines of ours hold (see _FETCH): a root's number, then an octal mode, a
# sha256 or a path in hex.
_FETCH_FIELD = {
    "m": re.compile(r"[0-7]{1,6}"),
    "s": re.compile(r"[0-9a-f]{64}"),
    "o": re.compile(r"(?:[0-9a-f]{2})+"),
}


def _parsed_fetch(
    ours: list[list[str]], roots: int, engine: str
) -> tuple[dict[int, str], dict[int, int], dict[int, list[str]]]:
    """The fetch's own lines read strictly: per root its tar's sha256, upper mode and opaque
    directories (the tars themselves: :class:`_FetchSpool`). Anything else (a root that is
    none, a field that is not what the fetch writes) is Unavailable naming ``engine``: the
    set is not used."""

    def damaged(what: str) -> Unavailable:
        return _damaged(engine, what)

    def root(text: str) -> int:
        if not (text.isascii() and text.isdigit()) or int(text) >= roots:
            raise damaged(text)
        return int(text)

    digests: dict[int, str] = {}
    modes: dict[int, int] = {}
    opaque: dict[int, list[str]] = {}
    for fields in ours:
        pattern = _FETCH_FIELD.get(fields[0]) if len(fields) == 3 else None
        if pattern is None or not pattern.fullmatch(fields[2]):
            raise damaged(" ".join(fields))
        i = root(fields[1])
        if fields[0] == "s":
            digests[i] = fields[2]
        elif fields[0] == "m":
            modes[i] = int(fields[2], 8) & 0o7777
        else:
            opaque.setdefault(i, []).append(os.fsdecode(binascii.unhexlify(fields[2])))
    return digests, modes, opaque


def _made_with(base: str, modes: list[int]) -> str:
    """Shell that gives each root's upper directory (below ``base``) its root's mode
    (``modes``, by root)."""
    return " && ".join(f"chmod {m:o} {base}/{i}/u" for i, m in enumerate(modes))


def _fresh_dir(path: Path) -> None:
    """An empty directory at ``path``, its parents made private (0700) where new."""
    remove_tree(path)  # the last rebuilt upper (by loop: it may be deeper than recursion)
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for p in reversed(missing):  # a parent another session is making at once is fine
        p.mkdir(mode=0o700, exist_ok=True)


# Runs as root of a fresh user namespace (the container user) in a private mount
# namespace: $1 mount, $2 the uppers' directory, $3 a fresh token, then per root the
# mode (octal) its next upper is made with and its container path. Per upper: "@<i>"
# and its tar in base64 on stdout; on stderr, each line starting with the token (tar's
# own warnings, which can quote a file's name, cannot pass for one): "m <i> <mode>"
# (the upper's own, octal), "s <i> <sha256>", "o <i> <hex path>" per opaque directory,
# "f <i> <what>" on failure.
_FETCH = r"""
m=$1; b=$2; t=$3; shift 3
"$m" -t tmpfs -o size=1m,mode=0700 rf /tmp || { echo "$t f - tmpfs" >&2; exit 3; }
S=/tmp/s; M=/tmp/m; mkdir "$S" "$M" || exit 3
w() {
  local e n r
  for e in "$U/$1"* "$U/$1".[!.]* "$U/$1"..?*; do
    [ -d "$e" ] && [ ! -L "$e" ] || continue
    n=${e##*/}; r="$1$n"
    if [ -d "$L/$r" ] && [ ! -L "$L/$r" ]; then
      mkdir "$S/$n" && : > "$S/$n/.rf-$t" || { echo "$t f $i sentinel" >&2; exit 3; }
      (cd "$U/$1" && "$m" -t overlay -o "lowerdir=.:$S,userxattr" rf "$M") || {
        echo "$t f $i opaque-probe" >&2; exit 3; }
      [ -e "$M/$n/.rf-$t" ] || printf '%s o %s %s\n' "$t" "$i" \
        "$(printf %s "$r" | od -An -tx1 | tr -d ' \n')" >&2
      umount "$M" || { echo "$t f $i umount" >&2; exit 3; }
      rm -rf "$S/$n"
    fi
    w "$r/"
  done
}
i=0
while [ $# -ge 2 ]; do
  N=$1; L=$2; shift 2
  U="$b/$i/u"
  printf '%s m %s %s\n' "$t" "$i" "$(stat -c %a "$U")" >&2
  w ""
  printf '@%s\n' "$i"
  { { tar -cf - -C "$U" . || echo "$t f $i tar" >&2; } | tee /proc/self/fd/3 | sha256sum | {
      read h _; printf '%s s %s %s\n' "$t" "$i" "$h" >&2; }; } 3>&1 | base64
  find "$b/$i" -type d -exec chmod u+rwx {} + 2>/dev/null
  rm -rf "$U" "$b/$i/w" && mkdir "$U" "$b/$i/w" && chmod "$N" "$U" || {
    echo "$t f $i reset" >&2; exit 3; }
  i=$((i+1))
done
"""


def remote_workspace(
    spec: SessionSpec,
    engine: Engine,
    session_id: str,
    roots: list[tuple[Path, str]],
    owner: tuple[int, int],
    ship_git: ShipGit,
) -> RemoteWorkspace:
    """The shipped workspace of a session on a remote engine; only with change sets."""
    if not spec.change_sets:
        raise InvalidArguments(
            f"engine {engine.name} is remote (the workspace is shipped, not mounted): its "
            "commands' writes come back only as change sets; start the session with change sets",
            field="options.engines",
        )
    # spec.extra_mounts (the script bridge's files and socket) are host paths: never
    # mounted there; scripts ship their files and carry the bridge over the exec's own
    # stream (ringfence.bridge._remote).
    return RemoteWorkspace(
        engine, session_id, roots, owner, ship_git, uppers_base() / session_id / "r"
    )


def load_json(load: EngineLoad) -> dict[str, Any]:
    return {
        "engine": load.engine.name,
        "running": load.running,
        "cpus": load.cpus,
        "memory": load.memory,
        **({"error": load.error} if load.error else {}),
    }


def engine_error(exc: RingfenceError, engine: Engine) -> RingfenceError:
    """``exc`` (from a session on ``engine``) saying which engine, and its address."""
    if f"engine {engine.name}" in exc.message:
        return exc
    # map_docker_errors names DOCKER_HOST's daemon; this session's is the engine's.
    text = exc.message.replace(f"at {docker_location()} ", f"at {engine.base_url} ")
    return exc.with_(message=f"engine {engine.name} ({engine.base_url}): {text}")

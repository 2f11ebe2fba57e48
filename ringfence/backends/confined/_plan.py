"""The confined session's plan: its options and layers, bubblewrap's argv, the upper directories.

What :mod:`._session` starts is decided here: :class:`ConfinedOptions`
(checked before anything starts), the :class:`Layer` report, which host
directories are hidden and whose uid the sandbox runs as, bubblewrap's
argv and mount layout (:class:`SandboxArgv`, a mixin of
:class:`~._session.ConfinedSession`), the supervisor's options, and, under
change sets, the session's upper/work directories (made, emptied, removed).
(Over 500 lines on purpose: one plan, from the options to the supervisor's command line
and its bytecode, read together.)
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..._confine import boot
from ...runtime._errors import InvalidArguments, Unavailable
from ...runtime._files import current_places, ringfence_home
from ...runtime._programs import in_root, search_path
from .._mounts import LAYERS_DIR_FIELD, mount_of
from .._shellstate import PERSIST_OPTION, persist_option
from .._trees import claim, empty_directory, remove_tree, sweep_unclaimed
from .._types import SessionSpec
from ._limits import _processes_of

__all__ = [
    "BEST_EFFORT",
    "FIXES",
    "STRICT",
    "ConfinedOptions",
    "Layer",
    "SandboxArgv",
]

STRICT = "strict"


BEST_EFFORT = "best-effort"


_SIZE = re.compile(r"^(\d+)([bkmg]?)\Z", re.IGNORECASE)


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


_HIDDEN = ("/home", "/root", "/run", "/var/lib/docker", "/mnt", "/media", "/srv")


_SUPERVISOR = Path(__file__).resolve().parent / "_supervisor.py"
# How the interpreter runs it (ringfence._confine.boot): imported by its name, under
# ``python -I -S``, from this package's own directories and the standard library alone, so
# its compiled form in ``__pycache__`` is used (a script is compiled from source at every
# start: ~5-10 ms of a sandbox's start). The file's path is an argument (what ``ps``
# shows, and where the boot finds the package); the supervisor's own arguments follow.
SUPERVISOR_ARGV = tuple(boot.argv(f"{__package__}._supervisor", _SUPERVISOR))
_CONFINE = Path(boot.__file__).resolve().parent
# What the supervisor imports of ringfence (every file's bytecode: see supervisor_bytecode).
_SUPERVISOR_SOURCES = (
    _SUPERVISOR,
    _SUPERVISOR.with_name("_execcheck.py"),
    *(_CONFINE / f"{name}.py" for name in ("__init__", "libc", "landlock", "seccomp")),
    *(_CONFINE / f"{name}.py" for name in ("creds", "mounts", "rlimits")),
)
_bytecode_checked = False


def supervisor_bytecode() -> None:
    """Write the supervisor's bytecode cache where it is missing or older than its source.

    The sandbox cannot (the package is read-only there) and this process imports few of
    those files: in a checkout every sandbox would compile them (~5-10 ms of its start;
    pip writes the cache at install). Once per process, two ``stat`` calls per
    file; respects ``sys.dont_write_bytecode``; never raises. The sandbox's import still
    checks the cache against its source.
    """
    global _bytecode_checked
    if _bytecode_checked or sys.dont_write_bytecode:
        return
    _bytecode_checked = True
    import importlib.util

    for source in _SUPERVISOR_SOURCES:
        cached = importlib.util.cache_from_source(str(source))
        try:
            if os.stat(cached).st_mtime >= os.stat(source).st_mtime:
                continue
        except FileNotFoundError:
            pass
        except OSError:
            continue
        import py_compile

        try:
            py_compile.compile(str(source), cfile=cached, doraise=True)
        except (OSError, py_compile.PyCompileError):
            continue


# Where the session's upper/work directories are bound in the sandbox (change sets): inside
# the first hidden directory (an empty read-only tmpfs), where Landlock grants no write.
_LAYERS_NAME = ".ringfence-layers"


_LAYER_CAPS = (
    "CAP_SYS_ADMIN",  # unshare(CLONE_NEWNS), mount
    "CAP_SETPCAP",  # empty the commands' bounding set
    "CAP_DAC_OVERRIDE",  # overlayfs's work directory (mode 0) and copy-up
    "CAP_CHOWN",  # copy-up keeps a file's owner
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_MKNOD",  # whiteouts
)
# Exec checks: the supervisor reads a command's exec path and argv from /proc/<pid>/mem,
# whatever uid the command runs as (each command's child drops it with the rest).
_EXEC_CAPS = ("CAP_SYS_PTRACE",)


# Each layer's fix, for the refusal and for ``ringfence doctor``.
FIXES = {
    "namespaces": "install bubblewrap (sudo apt-get install bubblewrap) and allow unprivileged "
    "user namespaces (sudo sysctl kernel.unprivileged_userns_clone=1 "
    "user.max_user_namespaces=15000; on Ubuntu also "
    "kernel.apparmor_restrict_unprivileged_userns=0)",
    "landlock": "boot Linux >= 5.13 with landlock in the lsm= list",
    "seccomp": "a Linux kernel with CONFIG_SECCOMP_FILTER on x86-64",
    "rlimits": "raise the hard limits this process runs with (ulimit -H)",
    "no_new_privs": "a Linux kernel >= 3.5",
    "pids": "run ringfence as an unprivileged user, or give the workspace to one "
    "(commands then run as its owner and RLIMIT_NPROC holds), or make a cgroup "
    "hierarchy with the pids controller writable",
    "pid namespace": "bubblewrap >= 0.3 (--as-pid-1)",
    "overlay": "Linux >= 5.11 (overlayfs in a user namespace), or switch change sets off "
    "(--no-change-sets; create_kernel(change_sets=False))",
    "exec checks": "Linux >= 5.5 with seccomp user notification on x86-64 (deny rules over "
    "run_shell are then judged on the command line alone, so the Gate asks about a line it "
    "cannot read whole), or the local backend option exec_checks=false",
}


@dataclass(frozen=True)
class Layer:
    """One confinement layer of a session: applied (``ok``) or missing, and why."""

    name: str
    ok: bool
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"layer": self.name, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True)
class ConfinedOptions:
    """Options of the ``local`` backend (``SessionSpec.options``), checked before anything starts.

    ``sandbox``: ``strict`` (default; every layer or refuse) or
    ``best-effort`` (apply what this machine offers; the gaps are recorded).
    ``memory``: the session's memory where a cgroup can limit it, and each
    process's address space (``512m``-style; default ``4g``). ``pids``: the
    session's processes (default 512). ``file_size``: the largest file a
    command may write (default ``16g``). ``network``: ``True`` shares the
    host's network, as ``SessionSpec.network`` does (recorded).
    ``persist_shell_state``: the working directory and exported variables
    carry over between commands (:mod:`._shellstate`; default false).
    ``exec_checks``: every ``exec`` of a command is checked against the policy's
    ``run_shell`` deny rules by the supervisor (:mod:`._execcheck`;
    default true; probed before the session's first command under deny rules).
    """

    sandbox: str = STRICT
    network: bool = False
    memory: int = 4 << 30
    pids: int = 512
    file_size: int = 16 << 30
    persist_shell_state: bool = False
    exec_checks: bool = True

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> ConfinedOptions:
        known = {"sandbox", "memory", "pids", "file_size", "network", "exec_checks", PERSIST_OPTION}
        unknown = sorted(set(options) - known)
        if unknown:
            raise InvalidArguments(
                f"unknown local backend option(s) {unknown}; known: {sorted(known)}",
                field="options",
            )
        sandbox = options.get("sandbox", STRICT)
        if sandbox not in (STRICT, BEST_EFFORT):
            raise InvalidArguments(
                f"sandbox must be {STRICT!r} or {BEST_EFFORT!r}, not {sandbox!r} "
                "(the unconfined shell is the 'host' backend)",
                field="options.sandbox",
            )
        pids = options.get("pids", cls.pids)
        if isinstance(pids, bool) or not isinstance(pids, int) or pids < 8:
            raise InvalidArguments(
                f"pids must be an integer of at least 8, not {pids!r}", field="options.pids"
            )
        network = options.get("network", False)
        if not isinstance(network, bool):
            raise InvalidArguments(
                f"network must be true or false, not {network!r}", field="options.network"
            )
        exec_checks = options.get("exec_checks", True)
        if not isinstance(exec_checks, bool):
            raise InvalidArguments(
                f"exec_checks must be true or false, not {exec_checks!r}",
                field="options.exec_checks",
            )
        return cls(
            sandbox=sandbox,
            network=network,
            memory=_size(options, "memory", cls.memory),
            pids=pids,
            file_size=_size(options, "file_size", cls.file_size),
            persist_shell_state=persist_option(options),
            exec_checks=exec_checks,
        )


def _size(options: Mapping[str, Any], name: str, default: int) -> int:
    value = options.get(name)
    if value is None:
        return default
    m = _SIZE.match(str(value))
    if not m or int(m.group(1)) == 0:
        raise InvalidArguments(
            f"{name} must be a size like 512m, not {value!r}", field=f"options.{name}"
        )
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def _refuse(layer: str, why: str) -> Unavailable:
    """``unavailable`` naming the layer, why, its fix and the ways out."""
    fix = FIXES.get(layer)
    exc = Unavailable(
        f"the confined local backend cannot apply its {layer} layer: {why}"
        + (f"; fix: {fix}" if fix else "")
        + "; or choose sandbox='best-effort' (--sandbox best-effort), or the unconfined "
        "'host' backend",
        field="backend",
    )
    exc.layer = layer  # type: ignore[attr-defined]
    exc.why = why  # type: ignore[attr-defined]
    return exc


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _hidden_dirs(roots: list[Path]) -> list[str]:
    """The directories hidden behind empty read-only ones: homes, /run, docker's state, and
    ringfence's own home (its policy, MCP manifest, keys and checkpoints) wherever it is."""
    hidden = [h for h in _HIDDEN if os.path.isdir(h)]
    home = os.environ.get("HOME")
    if home and os.path.isdir(home):
        real = os.path.realpath(home)
        inside_hidden = any(_inside(Path(real), Path(h)) for h in hidden)
        if real != "/" and not inside_hidden and not any(_inside(Path(real), r) for r in roots):
            hidden.append(real)
    state = Path(os.path.realpath(ringfence_home()))
    masks = [Path(h) for h in (*hidden, "/tmp", "/var/tmp")]  # the private /tmp hides already
    if (
        state.is_dir()
        and state != Path("/")
        and not any(_inside(state, m) for m in masks)
        and not any(_inside(state, r) for r in roots)
    ):
        hidden.append(str(state))
    return hidden


def _session_user(roots: tuple[Path, ...], hidden: list[str]) -> tuple[int, int]:
    """Whose uid the sandbox runs as.

    The kernel's own, unless the kernel is root: then the first root's
    owner, when that user can reach every root (the real parents outside the
    sandbox's masks must be searchable by them), else root.
    """
    if os.geteuid() != 0 or not roots:
        return os.geteuid(), os.getegid()
    try:
        st = os.stat(roots[0])
    except OSError:
        return 0, 0
    masks = [Path(m) for m in (*hidden, "/tmp", "/var/tmp")]
    for root in roots:
        real = Path(os.path.realpath(root))
        for part in [*reversed(real.parents), real]:
            if any(m in part.parents for m in masks):
                continue  # made by the sandbox, searchable
            try:
                mode = part.stat()
            except OSError:
                return 0, 0
            bit = (
                stat.S_IXUSR
                if mode.st_uid == st.st_uid
                else stat.S_IXGRP
                if mode.st_gid == st.st_gid
                else stat.S_IXOTH
            )
            if not mode.st_mode & bit:
                return 0, 0
    return st.st_uid, st.st_gid


def _layers_base(spec: SessionSpec, roots: list[Path]) -> Path:
    """The directory a session's layers are made in.

    The places' ``layers_dir`` when set (``use_places``; on the command line
    ``$RINGFENCE_LAYERS_DIR``): an absolute path outside every root, made if
    missing. Otherwise the first of the kernel's spool directory and the
    system's temporary directory that is outside every root and on the first
    root's mount; when neither is, the first that is outside every root.
    """
    chosen_dir = current_places().layers_dir
    if chosen_dir is not None:
        given = os.fspath(chosen_dir)
        base = Path(os.path.realpath(given))
        if not os.path.isabs(given) or any(_inside(base, r) or _inside(r, base) for r in roots):
            raise InvalidArguments(
                f"{LAYERS_DIR_FIELD} ($RINGFENCE_LAYERS_DIR) must be an absolute path outside every workspace root "
                f"(it holds the overlays' upper directories), not {given!r}",
                field=LAYERS_DIR_FIELD,
            )
        try:
            base.mkdir(parents=True, exist_ok=True, mode=0o700)
            if not os.access(base, os.W_OK | os.X_OK):
                raise PermissionError(13, "not writable")
        except OSError as exc:
            raise InvalidArguments(
                f"{LAYERS_DIR_FIELD} ($RINGFENCE_LAYERS_DIR: {given}) cannot hold the overlays' directories: "
                f"{exc.strerror or exc}",
                field=LAYERS_DIR_FIELD,
            ) from None
        return base
    candidates = []
    if spec.spool_dir is not None:
        spool = Path(os.path.realpath(spec.spool_dir))
        if not any(_inside(spool, r) or _inside(r, spool) for r in roots):
            candidates.append(spool)
    temp = Path(os.path.realpath(tempfile.gettempdir()))
    if not any(_inside(temp, r) for r in roots):
        candidates.append(temp)
    if not candidates:
        raise Unavailable(
            "no directory outside the workspace roots for the overlays' upper directories "
            f"(the spool directory and {temp} are inside one); set {LAYERS_DIR_FIELD} ($RINGFENCE_LAYERS_DIR)",
            field=LAYERS_DIR_FIELD,
        )
    target = mount_of(roots[0])  # mountinfo read once for the root, once per candidate tried
    on_root_mount = (c for c in candidates if target is not None and mount_of(c) == target)
    chosen = next(on_root_mount, candidates[0])
    chosen.mkdir(parents=True, exist_ok=True)
    return chosen


def _make_layers(spec: SessionSpec, count: int) -> Path:
    """The session's ``<dir>/<i>/upper`` and ``<dir>/<i>/work``, outside every root, private.

    Where (:func:`_layers_base`): on the first root's mount when it can, so
    the merge renames a command's files and new trees into the workspace;
    from another mount it copies each file (correct, ~50x slower for many
    files; the change set's ``notice`` event says so and how to fix it).
    """
    base = _layers_base(spec, [Path(os.path.realpath(r)) for r in spec.roots])
    path = Path(tempfile.mkdtemp(prefix="ringfence-layers-", dir=base))
    for i in range(count):
        for name in ("upper", "work"):
            (path / str(i) / name).mkdir(parents=True, mode=0o700)
    _empty_uppers(path, spec.roots)
    return path


def claimed_layers(spec: SessionSpec, count: int) -> tuple[Path, int]:
    """:func:`_make_layers`, marked in use while the returned descriptor is open
    (:func:`~.._trees.claim`); the layers killed sessions left beside it are removed
    (bounded: half a second a start)."""
    path = _make_layers(spec, count)
    try:
        fd = claim(path)
    except BaseException:
        remove_tree(path)
        raise
    sweep_unclaimed(path.parent, prefix="ringfence-layers-", seconds=0.5)
    return path, fd


def _uppers_ready(layers: Path, roots: tuple[Path, ...]) -> tuple[int, ...] | None:
    """The roots' modes when every ``<i>/upper`` is empty already, with its root's owner and
    mode (what :func:`_empty_uppers` makes it), else None: a command that wrote nothing
    (``true``) leaves them so, and the next one then starts without a thread hop. A few
    ``stat`` calls."""
    modes = []
    for index, root in enumerate(roots):
        upper = layers / str(index) / "upper"
        st, up = os.stat(root), os.lstat(upper)
        if (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) != (
            up.st_uid,
            up.st_gid,
            stat.S_IMODE(up.st_mode),
        ) or not stat.S_ISDIR(up.st_mode):
            return None
        with os.scandir(upper) as entries:
            if next(entries, None) is not None:
                return None
        modes.append(stat.S_IMODE(up.st_mode))
    return tuple(modes)


def _empty_uppers(layers: Path, roots: tuple[Path, ...]) -> tuple[int, ...]:
    """Empty each ``<i>/upper`` (a command's writes, read already) and give it its root's
    owner and mode: the overlay's top directory shows the upper directory's own. The
    modes given, by root."""
    modes = []
    for index, root in enumerate(roots):
        upper = layers / str(index) / "upper"
        st = os.stat(root)
        os.chown(upper, st.st_uid, st.st_gid)
        os.chmod(upper, stat.S_IMODE(st.st_mode))
        modes.append(stat.S_IMODE(st.st_mode))
        fd = os.open(upper, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            empty_directory(fd)  # any depth: a recursive walk stops near 1,000 levels
        finally:
            os.close(fd)
    return tuple(modes)


class SandboxArgv:
    """How a :class:`~._session.ConfinedSession` is started: bubblewrap's argv (or the
    supervisor's alone, best-effort without namespaces) and the supervisor's options.

    A mixin: it reads the session's attributes (``_spec``, ``_options``,
    ``_hidden``, ``_uid``, ``_gid``, ``_readonly``, ``_degraded``,
    ``_layered``, ``_layers_dir``, ``_layer_fd``, ``_landlock``,
    ``_kernel_layers``).
    """

    _spec: SessionSpec
    _options: ConfinedOptions
    _hidden: list[str]
    _uid: int
    _gid: int
    _readonly: list[Path]
    _degraded: str | None
    _layered: bool
    _layers_dir: Path | None
    _layer_fd: int | None
    _landlock: str | None
    _kernel_layers: list[Layer]
    # Read-only views of paths a hidden directory or the private /tmp would hide (an MCP
    # server's program, its venv: ``_exec.program_views``); run_shell has none.
    _views: tuple[Path, ...] = ()

    @property
    def _switch_uid(self) -> bool:
        return os.geteuid() == 0 and self._uid != 0 and self._degraded is None

    def _argv(
        self, fd: int, info_fd: int, block_fd: int, seccomp_fd: int | None
    ) -> tuple[list[str], list[Layer]]:
        """bubblewrap's argv and the layers it provides. Raises Unavailable when bwrap is missing."""
        supervisor_bytecode()
        if self._degraded is not None:
            return self._degraded_argv(fd, seccomp_fd)
        spec = self._spec
        # Looked up on PATH without its entries in a root (an activated project venv puts
        # <ws>/.venv/bin first): the agent's own "bwrap" there ran on the host, unconfined,
        # as the sandbox. One found in a root all the same (through a link) is refused.
        path = os.environ.get("PATH", os.defpath)
        bwrap = current_places().bwrap or shutil.which("bwrap", path=search_path(path, spec.roots))
        if bwrap is not None and (root := in_root(bwrap, spec.roots)) is not None:
            raise _refuse(
                "namespaces",
                f"the bubblewrap found on PATH ({bwrap}) lies in the workspace root {root}, "
                "which the agent writes; install bubblewrap outside the workspace",
            )
        if bwrap is None or not os.access(bwrap, os.X_OK):
            raise _refuse("namespaces", f"bubblewrap ({bwrap or 'bwrap'}) is not installed")
        roots = [Path(os.path.realpath(r)) for r in spec.roots]
        argv = [
            bwrap,
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            *([] if spec.network else ["--unshare-net"]),
            "--die-with-parent",
            "--as-pid-1",
            "--new-session",
            "--hostname",
            "ringfence",
            "--ro-bind",
            "/",
            "/",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--perms",
            "1777",
            "--tmpfs",
            "/tmp",
            "--perms",
            "1777",
            "--tmpfs",
            "/var/tmp",
        ]
        if self._switch_uid:
            # bwrap runs as root and the sandbox starts as its root (host root, mapped, with
            # capabilities in the namespace) until the supervisor becomes the roots' owner,
            # which also drops every capability; the uid maps are written by start().
            argv += ["--info-fd", str(info_fd), "--userns-block-fd", str(block_fd)]
        elif self._layered:
            # The supervisor mounts each command's overlays, whose upper-layer writes are made
            # with the mounter's credentials (so these capabilities, in the sandbox's user
            # namespace); each command's child drops all of them before it execs.
            argv += ["--cap-drop", "ALL"]
            for cap in (*_LAYER_CAPS, *(_EXEC_CAPS if self._options.exec_checks else ())):
                argv += ["--cap-add", cap]
            argv += ["--disable-userns"]
        else:  # (with the uid switch, seccomp alone stops new user namespaces)
            argv += ["--cap-drop", "ALL", "--disable-userns"]
        hidden = self._hidden
        for path in hidden:
            argv += ["--tmpfs", path]
        masks = [Path(m) for m in (*hidden, "/tmp", "/var/tmp")]
        made: set[Path] = set()
        # What the supervisor needs, shown again if hidden: its interpreter (the base prefix,
        # and the venv, which a copied interpreter needs for its pyvenv.cfg: a user's venv
        # under /tmp) and this package; then the session's own views.
        python = os.path.realpath(sys.executable)
        supervisor = (sys.base_prefix, sys.prefix, _SUPERVISOR.parents[2])  # ringfence/
        shown = list(dict.fromkeys(Path(os.path.realpath(p)) for p in supervisor))
        shown += [v for v in self._views if v not in shown]
        shown = [p for p in shown if not any(q != p and _inside(p, q) for q in shown)]
        for path in [*shown, *roots]:
            # Directories made inside a mask: searchable, so the roots' owner can reach a root
            # whose real parents are private (bwrap would copy their modes).
            for parent in reversed(path.parents):
                if parent not in made and any(m in parent.parents for m in masks):
                    made.add(parent)
                    argv += ["--perms", "0755", "--dir", str(parent)]
        for path in shown:  # under a hidden directory or the private /tmp (a venv in /tmp)
            if any(_inside(path, m) for m in masks):
                argv += ["--ro-bind", str(path), str(path)]
        for root in roots:  # change sets: read-only, each command's overlay takes the writes
            argv += ["--ro-bind" if self._layered else "--bind", str(root), str(root)]
        if self._layers_dir is not None:
            if not hidden:
                raise _refuse("overlay", "no hidden directory to hold the upper directories")
            argv += ["--bind", str(self._layers_dir), f"{hidden[0]}/{_LAYERS_NAME}"]
        # Change sets: the roots are read-only already and the merge guards git metadata;
        # a mount inside a root would also be a locked child that overlayfs refuses to
        # take as its lower layer.
        readonly = [] if self._layered else self._readonly
        for path in readonly:
            if path.exists() and any(_inside(path, r) for r in roots):
                argv += ["--ro-bind", str(path), str(path)]
        for path in hidden:  # last: binds above needed their mount points made first
            argv += ["--remount-ro", path]
        if seccomp_fd is not None:
            argv += ["--seccomp", str(seccomp_fd)]
        argv += ["--chdir", "/", "--", python, *SUPERVISOR_ARGV]
        argv += [str(fd), *self._supervisor_options([str(r) for r in roots], self._layer_fd)]
        net = "host network (session option network)" if spec.network else "none (own loopback)"
        layers = [
            Layer(
                "namespaces",
                True,
                f"bubblewrap: user, mount, pid, ipc, uts, cgroup, network; no capabilities; "
                f"uid {self._uid}",
            ),
            Layer(
                "file system",
                True,
                f"host read-only; {len(roots)} root(s) "
                + (
                    "read-only, written through an overlay per command"
                    if self._layered
                    else "read-write"
                )
                + f"; {len(readonly)} git path(s) read-only; private /tmp; hidden: {', '.join(hidden)}",
            ),
            Layer("network", True, net),
            *self._kernel_layers,
        ]
        return argv, layers

    def _supervisor_options(self, roots: list[str], layer_fd: int | None = None) -> list[str]:
        limits = self._options
        layered = []
        if layer_fd is not None:
            layered = [f"layers={self._hidden[0]}/{_LAYERS_NAME}", f"layer_seccomp_fd={layer_fd}"]
            layered += [f"overlay={r}" for r in roots]
        return [
            *layered,
            f"level={limits.sandbox}",
            f"network={int(self._spec.network)}",
            f"address_space={limits.memory}",
            f"nproc={limits.pids + (_processes_of(os.geteuid()) if self._degraded else 0)}",
            "open_files=4096",
            f"file_size={limits.file_size}",
            "cpu_seconds=86400",
            *([f"uid={self._uid}", f"gid={self._gid}"] if self._switch_uid else []),
            *([f"landlock={self._landlock}"] if self._landlock else []),
            *(f"write={r}" for r in (*roots, "/tmp", "/var/tmp", "/dev")),
        ]

    def _degraded_argv(self, fd: int, seccomp_fd: int | None) -> tuple[list[str], list[Layer]]:
        """best-effort without namespaces: the supervisor on the host, as the kernel's user.

        What still holds: Landlock (writes only beneath the roots, /tmp,
        /var/tmp and /dev; no TCP without network; no signals to processes
        outside the sandbox, ABI >= 6), seccomp (no ptrace), rlimits, and the
        tree (a child-subreaper supervisor kills every descendant). What does
        not: other processes of the same user are visible in ``/proc``
        (``/proc/<pid>/environ`` included: checked, Landlock does not stop
        it); the host file system is as readable as for the kernel's user (``~/.ssh``),
        /tmp is the host's, git metadata is writable, the network is the host's
        (UDP, Unix sockets), and a root kernel's commands run as root.
        """
        roots = [os.path.realpath(r) for r in self._spec.roots]
        argv = [os.path.realpath(sys.executable), *SUPERVISOR_ARGV, str(fd)]
        argv += self._supervisor_options(roots)
        argv += ["pidns=0", *([f"seccomp_fd={seccomp_fd}"] if seccomp_fd is not None else [])]
        why = self._degraded or "no namespaces"
        layers = [
            Layer("namespaces", False, why),
            Layer(
                "file system",
                False,
                "no mount namespace: the host file system as the kernel's user sees it "
                "(~/.ssh readable, the host's /tmp, git metadata writable); writes limited by "
                "Landlock alone",
            ),
            Layer(
                "network",
                self._spec.network,
                "host network (session option network)"
                if self._spec.network
                else "no network namespace: host network; Landlock blocks TCP only",
            ),
            *[layer for layer in self._kernel_layers if layer.name != "seccomp" or not layer.ok],
        ]
        if os.geteuid() == 0:
            layers.append(Layer("uid", False, "no user namespace: commands run as root"))
        return argv, layers

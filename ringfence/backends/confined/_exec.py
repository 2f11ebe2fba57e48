"""One process confined like the ``local`` backend's commands, on its caller's stdio.

For MCP stdio servers (``sandbox = "local"`` in ``mcp.toml``): the MCP SDK
spawns the process and talks JSON-RPC over its stdin/stdout, so the whole
sandbox is one argv (:func:`confined_argv`:
bubblewrap, then the supervisor in ``exec`` mode, then the server) and the
supervisor's report arrives as the first stdout line, before any protocol
byte. :func:`confine_exec` plans it; :meth:`ConfinedExec.read_report` checks
that line and fails closed (``unavailable`` naming the layer and its fix).

Promised (as for ``run_shell``'s confined commands): new user, mount, PID,
IPC, UTS and network namespaces, no capabilities; the host file system
read-only, the roots read-only (a ``writable`` process writes through an
overlay of each, and its writes reach the roots only as change sets merged
by the guarded writer after each call: :mod:`._writes`), a private
``/tmp``, homes, ``/root``, ``/run``, the kernel's ``$HOME`` and ``$RINGFENCE_HOME`` hidden (what the server's
command line names shown read-only again: :func:`program_views`); ``/proc``
of the sandbox only; no network
unless ``network``; Landlock (writes only beneath the roots' overlays,
``/tmp``, ``/var/tmp``, ``/dev``; no TCP without ``network``); the seccomp
deny list; rlimits. When the server exits, everything it started is killed.

Not promised: the process runs as the kernel's own user (no uid switch) and
can read what that user can read outside the hidden directories (``/etc``,
other directories of the host); for a root kernel ``RLIMIT_NPROC`` does not
hold and no cgroup limits the process count or memory (recorded as the
``pids`` layer, missing); with ``network`` the host's whole network is reachable.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ... import _proc
from ...runtime._errors import InvalidArguments, Unavailable
from .._trees import remove_tree
from .._types import SessionSpec
from ._layers import DENIED_SYSCALLS
from ._plan import _SUPERVISOR, ConfinedOptions, Layer, _refuse, claimed_layers
from ._session import ConfinedSession
from ._writes import ExecChanges, ExecWrites

__all__ = [
    "ConfinedExec",
    "ExecChanges",
    "ExecWrites",
    "confine_exec",
    "confined_argv",
    "program_views",
    "refuse_writes",
]

# The private directories the sandbox puts over the host's: never shown whole.
_PRIVATE = ("/tmp", "/var/tmp")
_SHEBANG_BYTES = 256


def _on_path(name: str, masks: Sequence[Path]) -> str | None:
    """``name`` on ``PATH`` as the sandbox's ``exec`` will find it: the first match outside
    every mask (visible already: None), else the first match inside one (to be shown)."""
    hidden: str | None = None
    for entry in os.environ.get("PATH", os.defpath).split(os.pathsep):
        where = shutil.which(name, path=entry or ".")
        if where is None:
            continue
        real = Path(os.path.realpath(os.path.abspath(where)))
        if not any(m in real.parents for m in masks) and not any(
            m in Path(os.path.abspath(where)).parents for m in masks
        ):
            return None
        hidden = hidden or where
    return hidden


def _in_roots(path: Path, roots: Sequence[Path]) -> bool:
    """``path`` (as written, links not followed) is a root or lies below one: the agent's to
    write, so what it holds or points to is the agent's choice."""
    return any(path == r or r in path.parents for r in roots)


def _named_files(
    argv: Sequence[str], cwd: str, masks: Sequence[Path], roots: Sequence[Path] = ()
) -> list[Path]:
    """The files ``argv`` names: its program (on ``PATH`` as the sandbox's ``exec`` will find
    it), each argument that is an existing file, each by its own and its real path, and a
    script's ``#!`` interpreter (``/usr/bin/env NAME`` looked up on ``PATH``).

    Nothing is taken from a file inside ``roots`` (the workspace, which the agent writes):
    neither where it links to nor its ``#!`` line, since either would let the agent choose
    a hidden file or directory to be shown (a ``#!`` naming a file in ``~/.ssh`` showed
    ``~/.ssh``). The roots are bound in the sandbox already; such a file needs no view."""
    found: list[Path] = []

    def add(name: str, *, program: bool) -> None:
        if program and "/" not in name:
            where = _on_path(name, masks)
            if where is None:
                return
            name = where
        path = Path(cwd, name) if not os.path.isabs(name) else Path(name)
        written = Path(os.path.abspath(path))
        if _in_roots(written, roots) or not path.is_file():
            return
        # Every directory on the way, resolved: a link in a root part-way is the agent's too.
        real = Path(os.path.realpath(path))
        if _in_roots(real, roots) or any(
            _in_roots(Path(os.path.realpath(p)), roots) for p in written.parents
        ):
            return
        found.extend((written, real))

    if argv:
        add(argv[0], program=True)
    for arg in argv[1:]:
        if arg and not arg.startswith("-"):
            add(arg, program=False)
    for script in list(found):
        try:
            with open(script, "rb") as f:
                head = f.read(_SHEBANG_BYTES)
        except OSError:
            continue
        if not head.startswith(b"#!"):
            continue
        words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
        if words and os.path.basename(words[0]) == "env":
            words = [w for w in words[1:] if not w.startswith("-")]
        if words:
            add(words[0], program=True)
    return list(dict.fromkeys(found))


def _protected(path: Path, masks: Sequence[Path]) -> bool:
    """A directory never shown whole: a mask itself, or a home directory."""
    home = os.environ.get("HOME")
    homes = {Path("/root"), *([Path(os.path.realpath(home))] if home else [])}
    return path in masks or path in homes or path.parent == Path("/home")


def program_views(
    argv: Sequence[str],
    cwd: str,
    masks: Sequence[str | os.PathLike[str]],
    roots: Sequence[str | os.PathLike[str]] = (),
) -> tuple[Path, ...]:
    """What the sandbox shows read-only so the program ``argv`` names can start, though it lies
    in a directory the sandbox hides (``masks``: the homes and the private ``/tmp``).

    For each file ``argv`` names (:func:`_named_files`) inside a mask: the
    nearest directory holding ``pyvenv.cfg`` (a virtual environment, pipx's
    included: the interpreter's prefix), and the base interpreter's prefix
    that file names when it is hidden too; else the outermost
    ``node_modules`` directory (a Node package and its dependencies); else,
    for a file in a ``bin`` directory, the prefix above it (its ``lib``:
    ``/tmp/node-v20/bin/node``, ``~/.local/bin/tool``); else the file's own
    directory; the file alone when that directory is a mask or a home
    directory (which are never shown whole). A file outside every mask is
    visible already and adds nothing. Files are found as :func:`_named_files`
    says: the program, arguments that are existing files, a script's ``#!``
    interpreter; anything else the program reads under a mask (a
    configuration file named inside an option, a sibling directory) stays
    hidden. Nothing is derived from a file in ``roots`` (its link, its ``#!``
    line, a ``pyvenv.cfg``): the agent writes those, and would choose what is shown.
    """
    hidden = [Path(os.path.realpath(m)) for m in masks]
    inside = [
        *{Path(os.path.abspath(r)) for r in roots},
        *{Path(os.path.realpath(r)) for r in roots},
    ]
    views: list[Path] = []

    def mask_of(path: Path) -> Path | None:
        return next((m for m in hidden if m in path.parents), None)

    def show(path: Path) -> None:
        mask = mask_of(path)
        if mask is None:
            return
        below = [p for p in path.parents if mask in p.parents and not _protected(p, hidden)]
        venv = next(
            (p for p in below if (p / "pyvenv.cfg").is_file() and not _in_roots(p, inside)),
            None,
        )
        if venv is not None:
            views.append(venv)
            base = _venv_home(venv / "pyvenv.cfg")
            if base is not None and mask_of(base) is not None and not _protected(base, hidden):
                views.append(base.parent if base.name == "bin" else base)
            return
        modules = [p for p in below if p.name == "node_modules"]
        if modules:
            views.append(modules[-1])
        elif path.parent.name == "bin" and path.parent.parent in below:
            views.append(path.parent.parent)  # an install prefix: its bin/, lib/, share/
        elif path.parent in below:
            views.append(path.parent)
        else:
            views.append(path)

    for path in _named_files(argv, cwd, hidden, inside):
        show(path)
    return tuple(dict.fromkeys(views))


def _venv_home(cfg: Path) -> Path | None:
    """The ``home`` a ``pyvenv.cfg`` names (the base interpreter's directory), real path."""
    try:
        text = cfg.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, eq, value = line.partition("=")
        if eq and key.strip() == "home" and value.strip():
            return Path(os.path.realpath(value.strip()))
    return None


# The supervisor writes it (``_supervisor.REPORT_PREFIX``; it imports nothing of ours).
REPORT_PREFIX = b"ringfence-sandbox:"


def confined_argv(
    spec: SessionSpec,
    argv: list[str],
    *,
    cwd: str = "/",
    writable: bool = True,
    options: ConfinedOptions | None = None,
    layers_dir: Path | None = None,
) -> tuple[list[str], list[Layer]]:
    """One process confined like a session's commands, on the caller's stdin/stdout/stderr.

    Returns bubblewrap's argv (then the supervisor in ``exec`` mode, then
    ``argv``) and the layers known before it starts; the rest come in the
    supervisor's report, its first stdout line (``_exec``). For MCP
    stdio servers, whose process the MCP SDK spawns: no descriptor can be
    passed, so the seccomp filter travels hex-encoded in the supervisor's
    options and is installed by it (last), and there is no uid switch (the
    sandbox runs as the kernel's own user) and no limit cgroup (the ``pids``
    layer is ``RLIMIT_NPROC``, which does not hold for a root kernel).
    ``writable=False`` binds the roots read-only and leaves them out of
    Landlock's writable paths. ``layers_dir`` (with ``spec.change_sets``; the
    upper/work directories, :func:`~._plan._make_layers`): the roots are bound
    read-only and the supervisor runs ``argv`` on an overlay of each, mounted
    once (``_writes``). Strict always: raises Unavailable naming the first
    layer the kernel cannot plan (bubblewrap, Landlock, seccomp) and its fix.
    """
    options = options or ConfinedOptions()
    session = ConfinedSession(spec, options)
    missing = [layer for layer in session._kernel_layers if not layer.ok]
    if missing or session._seccomp is None:
        layer = missing[0] if missing else Layer("seccomp", False, "no filter was built")
        raise _refuse(layer.name, layer.detail)
    session._uid, session._gid = os.geteuid(), os.getegid()  # no uid switch (needs descriptors)
    roots = [str(Path(os.path.realpath(r))) for r in spec.roots]
    readonly = [*spec.readonly_paths, *([] if writable else roots)]
    session._readonly = [Path(os.path.realpath(p)) for p in readonly]
    layered = session._layered and layers_dir is not None and session._layer_filter is not None
    if layered:
        session._layers_dir, session._layer_fd = layers_dir, -1  # the filter goes as hex
    masks = [*session._hidden, *_PRIVATE]
    session._views = program_views(argv, cwd, masks, spec.roots)
    wrapper, layers = session._argv(-1, -1, -1, None)  # raises when bubblewrap is missing
    cut = wrapper.index(str(_SUPERVISOR)) + 1  # the session's socket descriptor follows
    kept = [o for o in wrapper[cut + 1 :] if writable or o.removeprefix("write=") not in roots]
    if layered:
        assert session._layer_filter is not None
        hex_filter = f"layer_seccomp_hex={session._layer_filter.hex()}"
        kept = [hex_filter if o == "layer_seccomp_fd=-1" else o for o in kept]
    wrapper = [*wrapper[:cut], "exec", *kept, f"seccomp_hex={session._seccomp.hex()}"]
    wrapper += [f"cwd={cwd}", "--", *argv]
    hidden = ", ".join(session._hidden)
    access = (
        "read-only, written through an overlay each (its writes reach them only as change "
        "sets, after each call)"
        if layered
        else f"read-write, {len(spec.readonly_paths)} git path(s) read-only"
        if writable
        else "read-only"
    )
    shown = "; shown read-only: " + ", ".join(map(str, session._views)) if session._views else ""
    details = {
        "file system": f"host read-only; {len(roots)} root(s) {access}; private /tmp; "
        f"hidden: {hidden}{shown}",
        "seccomp": f"{len(DENIED_SYSCALLS)} syscalls denied, no new namespaces, foreign ABIs "
        "killed (installed by the supervisor, last)",
    }
    layers = [Layer(x.name, x.ok, details.get(x.name, x.detail)) for x in layers]
    return wrapper, layers


@dataclass(frozen=True)
class ConfinedExec:
    """A planned confined process: the argv to start and the layers known before it starts;
    for a writable one, its :class:`~._writes.ExecWrites` (settled after each call, closed
    once the process is gone: the caller's)."""

    argv: tuple[str, ...]
    layers: tuple[Layer, ...]
    writes: ExecWrites | None = None

    def read_report(self, line: bytes) -> tuple[Layer, ...]:
        """Every layer, from the supervisor's report line (``b""``: stdout ended first).

        Raises Unavailable naming the layer and its fix when the sandbox did
        not start or a layer is missing (always strict).
        """
        if not line:
            raise _refuse(
                "namespaces",
                "the sandbox ended before its supervisor reported (bubblewrap could not "
                "start it; its message is in the server's stderr diagnostics)",
            )
        if not line.startswith(REPORT_PREFIX):
            raise _refuse(
                "namespaces", "the sandbox's first output was not its supervisor's report"
            )
        status, *records = line[len(REPORT_PREFIX) :].decode("utf-8", "replace").split("\t")
        planned = {layer.name: layer for layer in self.layers}
        for record in records:
            name, _, detail = record[1:].partition("\x1f")
            ok = record[:1] == "+"
            before = planned.get(name)  # seccomp: planned by the kernel, installed inside
            if before is not None:
                ok, detail = ok and before.ok, f"{before.detail}; {detail}"
            planned[name] = Layer(name, ok, detail)
        layers = list(planned.values())
        missing = [layer for layer in layers if not layer.ok and layer.name != "pids"]
        if status != "READY" or missing:
            layer = missing[0] if missing else Layer("supervisor", False, status)
            if layer.name == "overlay" and self.writes is not None:
                raise refuse_writes(f"the sandbox could not mount it: {layer.detail}", _OVERLAY)
            raise _refuse(layer.name, layer.detail)
        return tuple(layers)


_OVERLAY = "Linux >= 5.11 (overlayfs in a user namespace) and no mount point inside a root"
_FREEZER = (
    "a cgroup v2 hierarchy this process can write, on Linux >= 5.2 (cgroup.freeze): run "
    "ringfence in a systemd unit or container that delegates one, or as root"
)


def refuse_writes(why: str, fix: str) -> Unavailable:
    """``unavailable``: a writable server cannot be confined as promised; nothing starts."""
    return Unavailable(
        "a writable confined server (sandbox_writable = true) writes through an overlay whose "
        "upper directory is read, with its sandbox frozen, after each call and merged as a "
        f"change set; {why}; fix: {fix}, or set sandbox_writable = false for this server "
        "(it then reads the workspace only); the server was not started",
        field="sandbox_writable",
    )


def confine_exec(
    roots: Sequence[str | os.PathLike[str]],
    argv: Sequence[str],
    *,
    cwd: str | None = None,
    network: bool = False,
    writable: bool = False,
    changes: ExecChanges | None = None,
) -> ConfinedExec:
    """Plan ``argv`` confined to ``roots`` (read-only unless ``writable``).

    ``writable`` (with ``changes``, where its writes go): the roots stay
    read-only in the sandbox and the process writes through an overlay of
    each; after each call its cgroup is frozen and its writes are read and
    merged as a change set (:class:`~._writes.ExecWrites`, the result's
    ``writes``: the caller settles it after each call and closes it once the
    process is gone). There is no way to let it write the roots directly.
    ``cwd`` defaults to the first root. Raises Unavailable naming the layer
    and its fix when bubblewrap, Landlock or seccomp is missing, or, when
    ``writable``, the overlay or the cgroup v2 freezer (nothing is started
    then); InvalidArguments for ``writable`` without ``changes``.
    """
    if writable:
        if changes is None:
            raise InvalidArguments(
                "a writable confined process needs changes= (where its writes go: "
                "ExecChanges(store)); its writes never reach the roots directly",
                field="changes",
            )
        return _confine_writes(roots, argv, cwd=cwd, network=network, changes=changes)
    spec = SessionSpec(roots=tuple(Path(r) for r in roots), network=network)
    where = cwd or (str(spec.roots[0]) if spec.roots else "/")
    wrapper, layers = confined_argv(
        spec, list(argv), cwd=where, writable=False, options=ConfinedOptions(network=network)
    )
    return ConfinedExec(tuple(wrapper), (*layers, _pids_layer()))


def _confine_writes(
    roots: Sequence[str | os.PathLike[str]],
    argv: Sequence[str],
    *,
    cwd: str | None,
    network: bool,
    changes: ExecChanges,
) -> ConfinedExec:
    """:func:`confine_exec` for a writable process: overlays, its own cgroup, its writes."""
    spec = SessionSpec(
        roots=tuple(Path(r) for r in roots),
        network=network,
        change_sets=True,
        spool_dir=changes.spool_dir,
    )
    if not spec.roots:
        raise refuse_writes("there is no workspace root to write", "open a workspace")
    where = cwd or str(spec.roots[0])
    with contextlib.ExitStack() as on_failure:
        try:
            group, enter = _proc.cgroup_entry()
        except Unavailable as exc:
            raise refuse_writes(f"its cgroup cannot be made ({exc.message})", _FREEZER) from None
        on_failure.callback(group.destroy)
        if not group.can_freeze():
            raise refuse_writes("this kernel has no cgroup.freeze", _FREEZER)
        layers_dir, claim = claimed_layers(spec, len(spec.roots))  # a killed kernel's: swept
        on_failure.callback(os.close, claim)
        on_failure.callback(remove_tree, layers_dir)
        options = ConfinedOptions(network=network, exec_checks=False)
        wrapper, layers = confined_argv(
            spec, list(argv), cwd=where, writable=True, options=options, layers_dir=layers_dir
        )
        roots_real = [Path(os.path.realpath(r)) for r in spec.roots]
        writes = ExecWrites(roots_real, layers_dir, claim, group, changes)
        kept = (
            "each call's writes read with the sandbox's cgroup frozen and merged as its change "
            "set (refusals, the resulting-tree check, undo)"
            if changes.store is not None
            else "discarded when the process ends (nothing is merged)"
        )
        layer = Layer("writes", True, kept)
        on_failure.pop_all()
    return ConfinedExec((*enter, *wrapper), (*layers, layer, _pids_layer()), writes)


def _pids_layer() -> Layer:
    uid = os.geteuid()
    return (
        Layer("pids", True, f"RLIMIT_NPROC {ConfinedOptions.pids} (uid {uid})")
        if uid != 0
        else Layer(
            "pids",
            False,
            "the kernel runs as root, where RLIMIT_NPROC is not enforced, and an SDK-spawned "
            "server gets no limit cgroup: its process count is not limited",
        )
    )

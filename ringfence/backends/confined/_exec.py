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
read-only, the roots read-only unless ``writable`` (then their git
directories stay read-only), a private ``/tmp``, homes, ``/root``, ``/run``
the kernel's ``$HOME`` and ``$RINGFENCE_HOME`` hidden (what the server's
command line names shown read-only again: :func:`program_views`); ``/proc``
of the sandbox only; no network
unless ``network``; Landlock (writes only beneath the writable roots,
``/tmp``, ``/var/tmp``, ``/dev``; no TCP without ``network``); the seccomp
deny list; rlimits. When the server exits, everything it started is killed.

Not promised: the process runs as the kernel's own user (no uid switch) and
can read what that user can read outside the hidden directories (``/etc``,
other directories of the host); for a root kernel ``RLIMIT_NPROC`` does not
hold and no cgroup limits the process count or memory (recorded as the
``pids`` layer, missing); with ``network`` the host's whole network is reachable.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .._types import SessionSpec
from ._layers import DENIED_SYSCALLS
from ._plan import _SUPERVISOR, ConfinedOptions, Layer, _refuse
from ._session import ConfinedSession

__all__ = ["ConfinedExec", "confine_exec", "confined_argv", "program_views"]

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


def _named_files(argv: Sequence[str], cwd: str, masks: Sequence[Path]) -> list[Path]:
    """The files ``argv`` names: its program (on ``PATH`` as the sandbox's ``exec`` will find
    it), each argument that is an existing file, each by its own and its real path, and a
    script's ``#!`` interpreter (``/usr/bin/env NAME`` looked up on ``PATH``)."""
    found: list[Path] = []

    def add(name: str, *, program: bool) -> None:
        if program and "/" not in name:
            where = _on_path(name, masks)
            if where is None:
                return
            name = where
        path = Path(cwd, name) if not os.path.isabs(name) else Path(name)
        if not path.is_file():
            return
        found.extend((Path(os.path.abspath(path)), Path(os.path.realpath(path))))

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
    argv: Sequence[str], cwd: str, masks: Sequence[str | os.PathLike[str]]
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
    hidden.
    """
    hidden = [Path(os.path.realpath(m)) for m in masks]
    views: list[Path] = []

    def mask_of(path: Path) -> Path | None:
        return next((m for m in hidden if m in path.parents), None)

    def show(path: Path) -> None:
        mask = mask_of(path)
        if mask is None:
            return
        below = [p for p in path.parents if mask in p.parents and not _protected(p, hidden)]
        venv = next((p for p in below if (p / "pyvenv.cfg").is_file()), None)
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

    for path in _named_files(argv, cwd, hidden):
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
    Landlock's writable paths. Strict always: raises Unavailable naming the
    first layer the kernel cannot plan (bubblewrap, Landlock, seccomp) and its fix.
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
    masks = [*session._hidden, *_PRIVATE]
    session._views = program_views(argv, cwd, masks)
    wrapper, layers = session._argv(-1, -1, -1, None)  # raises when bubblewrap is missing
    cut = wrapper.index(str(_SUPERVISOR)) + 1  # the session's socket descriptor follows
    kept = [o for o in wrapper[cut + 1 :] if writable or o.removeprefix("write=") not in roots]
    wrapper = [*wrapper[:cut], "exec", *kept, f"seccomp_hex={session._seccomp.hex()}"]
    wrapper += [f"cwd={cwd}", "--", *argv]
    hidden = ", ".join(session._hidden)
    access = (
        f"read-write, {len(spec.readonly_paths)} git path(s) read-only" if writable else "read-only"
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
    """A planned confined process: the argv to start and the layers known before it starts."""

    argv: tuple[str, ...]
    layers: tuple[Layer, ...]

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
            raise _refuse(layer.name, layer.detail)
        return tuple(layers)


def confine_exec(
    roots: Sequence[str | os.PathLike[str]],
    argv: Sequence[str],
    *,
    cwd: str | None = None,
    network: bool = False,
    writable: bool = False,
    readonly_paths: Sequence[str | os.PathLike[str]] = (),
) -> ConfinedExec:
    """Plan ``argv`` confined to ``roots`` (read-only unless ``writable``).

    ``readonly_paths`` (the roots' git directories and gitfiles) stay
    read-only when the roots are writable. ``cwd`` defaults to the first
    root. Raises Unavailable naming the layer and its fix when bubblewrap,
    Landlock or seccomp is missing.
    """
    spec = SessionSpec(
        roots=tuple(Path(r) for r in roots),
        readonly_paths=tuple(Path(p) for p in readonly_paths) if writable else (),
        network=network,
    )
    where = cwd or (str(spec.roots[0]) if spec.roots else "/")
    wrapper, layers = confined_argv(
        spec, list(argv), cwd=where, writable=writable, options=ConfinedOptions(network=network)
    )
    uid = os.geteuid()
    pids = (
        Layer("pids", True, f"RLIMIT_NPROC {ConfinedOptions.pids} (uid {uid})")
        if uid != 0
        else Layer(
            "pids",
            False,
            "the kernel runs as root, where RLIMIT_NPROC is not enforced, and an SDK-spawned "
            "server gets no limit cgroup: its process count is not limited",
        )
    )
    return ConfinedExec(tuple(wrapper), (*layers, pids))

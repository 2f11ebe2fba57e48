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
and the kernel's ``$HOME`` hidden; ``/proc`` of the sandbox only; no network
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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ._confined import ConfinedSession
from ._confined_layers import DENIED_SYSCALLS
from ._confined_plan import _SUPERVISOR, ConfinedOptions, Layer, _refuse
from ._types import SessionSpec

__all__ = ["ConfinedExec", "confine_exec", "confined_argv"]

# The supervisor writes it (``_confined_supervisor.REPORT_PREFIX``; it imports nothing of ours).
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
    supervisor's report, its first stdout line (``_confined_exec``). For MCP
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
    wrapper, layers = session._argv(-1, -1, -1, None)  # raises when bubblewrap is missing
    cut = wrapper.index(str(_SUPERVISOR)) + 1  # the session's socket descriptor follows
    kept = [o for o in wrapper[cut + 1 :] if writable or o.removeprefix("write=") not in roots]
    wrapper = [*wrapper[:cut], "exec", *kept, f"seccomp_hex={session._seccomp.hex()}"]
    wrapper += [f"cwd={cwd}", "--", *argv]
    hidden = ", ".join(session._hidden)
    access = (
        f"read-write, {len(spec.readonly_paths)} git path(s) read-only" if writable else "read-only"
    )
    details = {
        "file system": f"host read-only; {len(roots)} root(s) {access}; private /tmp; "
        f"hidden: {hidden}",
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

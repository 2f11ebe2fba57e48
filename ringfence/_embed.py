"""Assemble a Kernel with ringfence's own tools: the embedding entry point.

``runtime`` stays free of its clients; this module, outside it, is where the
workspace, backends, bridge and MCP connectors are plugged into a Kernel.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

from .backends._registry import select_backend
from .backends._run_shell import register_shell_tool
from .bridge._config import ScriptConfig
from .bridge._tool import register_script_tool, unavailable_backend
from .runtime._approval import Approver, default_approver
from .runtime._errors import InvalidArguments, Unavailable
from .runtime._events import FileSink, MemorySink
from .runtime._files import ringfence_home
from .runtime._hooks import Hook
from .runtime._kernel import Kernel
from .runtime.policy._decide import Posture, Rules
from .runtime.policy._files import PolicyLayers, load_policy
from .runtime.policy._judge import Policy
from .workspace._file_tools import register_file_tools
from .workspace._workspace import Workspace
from .workspace.changes._store import CheckpointStore, Retention
from .workspace.changes._undo import register_undo_tool
from .workspace.git._config import refuse_git_config_inside_roots

__all__ = [
    "check_approver",
    "create_kernel",
    "mcp_stdio_confiner",
    "refuse_aliased_roots",
    "refuse_home_inside_roots",
]


EventObserver = Callable[[str], None]


class _ObservedFileSink(FileSink):
    """A FileSink that also hands each line to an observer (it continues the file's chain)."""

    def __init__(
        self, path: str | os.PathLike[str], observer: EventObserver, *, sync: bool = False
    ) -> None:
        super().__init__(path, sync=sync)
        self.observer = observer

    def write(self, line: str) -> None:
        super().write(line)  # the file first: an observer's failure cannot cost a record
        self.observer(line)

    def close(self) -> None:
        super().close()
        getattr(self.observer, "close", lambda: None)()


class _ObservedMemorySink(MemorySink):
    def __init__(self, observer: EventObserver) -> None:
        super().__init__()
        self.observer = observer

    def write(self, line: str) -> None:
        super().write(line)
        self.observer(line)

    def close(self) -> None:
        super().close()
        getattr(self.observer, "close", lambda: None)()


def check_approver(approver: object) -> None:
    """Raise TypeError unless ``approver.approve`` is an ``async def`` method.

    ringfence awaits ``approve(request)`` inside the Gate; a plain function would
    only fail there, on the first call that asks. Checked here instead, when the
    approver is handed over. A sync decision function fits ``ScriptedApprover``.
    """
    approve = getattr(approver, "approve", None)
    if not callable(approve):
        raise TypeError(
            f"approver {approver!r} has no approve(request) method "
            "(an Approver needs `async def approve(self, request) -> ApprovalAnswer`)"
        )
    if not inspect.iscoroutinefunction(approve):
        raise TypeError(
            f"{type(approver).__name__}.approve must be `async def` (ringfence awaits it); "
            "for a plain function use ScriptedApprover(lambda request: ApprovalAnswer...)"
        )


def _events_sink(
    events_path: str | os.PathLike[str] | None,
    observer: EventObserver | None,
    *,
    sync: bool = False,
) -> FileSink | MemorySink | None:
    if observer is None:
        return FileSink(events_path, sync=sync) if events_path else None
    if events_path:
        return _ObservedFileSink(events_path, observer, sync=sync)
    return _ObservedMemorySink(observer)


def create_kernel(
    *,
    roots: Iterable[str | os.PathLike[str]] = (),
    posture: Posture | str = Posture.ASK,
    approver: Approver | None = None,
    backend: str | None = None,
    backend_options: Mapping[str, Any] | None = None,
    rules: Rules | None = None,
    policy: Policy | PolicyLayers | bool | None = None,
    dry_run: bool = False,
    plan_path: str | os.PathLike[str] | None = None,
    events_path: str | os.PathLike[str] | None = None,
    events_sync: bool = False,
    mcp_manifest: Any = None,
    mcp_options: Mapping[str, Any] | None = None,
    script_sandbox: str | None = None,
    event_observer: EventObserver | None = None,
    checkpoints: bool = True,
    retention: Retention | None = None,
    change_sets: bool | None = None,
    merge_refused: bool = True,
    hooks: Iterable[Hook] = (),
    plugins: bool | str | os.PathLike[str] = False,
    pause_collector: bool = False,
    **kernel_options: Any,
) -> Kernel:
    """A Kernel with the native tools registered for ``roots``.

    ``roots`` (default: the current directory) are the workspace roots.

    ``backend`` is ``"local"`` (default: confined), ``"host"`` (unconfined)
    or ``"docker"``; backend sessions start
    on first use and close with the kernel. ``backend_options`` go to the
    backend (local: ``sandbox``, ``memory``, ``pids``, ``network``; docker:
    ``image``, ``memory``, ``cpus``, ``pids``, ``user``).

    ``script_sandbox`` (default ``strict``) weakens ``run_tool_script``'s OS
    sandbox to ``best-effort`` or ``none``; the level is recorded in the event
    stream on every run.

    Nothing here reads the environment: what a caller did not pass is the
    confined default, whatever ``RINGFENCE_EXECUTION_BACKEND``,
    ``RINGFENCE_SCRIPT_SANDBOX`` or ``RINGFENCE_WORKSPACE_ROOTS`` say (those
    are the command line's defaults, read by ``ringfence.cli``).

    ``mcp_manifest`` (opt-in, because connecting starts server processes): a
    ``ringfence.mcp_host.Manifest``, a path to an ``mcp.toml``, or ``True`` for
    the user manifest plus the first root's ``.ringfence/mcp.toml``. The
    servers connect when the kernel is entered and stop when it closes;
    ``mcp_options`` go to ``ringfence.mcp_host.connect_servers``.

    ``policy`` (e.g. from ``ringfence.runtime.load_layers``) adds rules over
    tool names and arguments to ``rules``; path rules are made relative to
    ``roots``. No policy file is read unless the caller asks: ``policy=True``
    reads the files the command line reads (managed, user, the first root's
    project file: ``load_policy(roots)``). From ``load_policy`` (a ``PolicyLayers``,
    or ``True``), its ``[mcp.<server>]`` statements also decide the MCP servers'
    trust and read tools, for every way of connecting them to this kernel
    (``mcp_manifest``, ``connect_servers``, ``attach_connectors``).

    ``event_observer(line)`` (e.g. ``ringfence.otel.OtelObserver``) sees each
    event line after it is written (redacted, as in the file); its ``close()``,
    if any, is called when the stream closes.

    ``checkpoints`` (default on) keeps every ``write_file``/``edit_file`` change
    as a change set under ``$RINGFENCE_HOME/checkpoints/``, bounded by ``retention``
    (default ``Retention()``: 500 sets, 30 days, 1024 MiB), and registers
    ``undo``; ``False`` registers no ``undo`` and records nothing.

    ``change_sets`` (default: on when ``checkpoints`` is on, for the ``local`` backend with
    its ``strict`` sandbox and for ``docker`` but on gVisor's ``runsc``; off otherwise): each ``run_shell`` command runs on
    an overlay of the roots and its writes reach them only through the
    guarded merge, as an undoable change set (``run_shell`` is then
    ``reversible`` without network); ``False`` lets commands write the roots
    directly (``--no-change-sets``). ``True`` on a backend that cannot
    refuses at its start. ``merge_refused`` (default True): a set with
    refused entries (git metadata, …) merges the rest; False refuses it whole.
    ``pause_collector`` (default False): hold the process's cyclic garbage
    collector off while a command's change set is read, saved and merged (a
    10,000-file one: ~0.1 s less); it is process-wide, so only for a caller
    that owns its process (the ``ringfence`` command does).

    ``hooks`` (``ringfence.runtime.Hook``): Python hooks at ``pre_call``,
    ``post_call``, ``session_start``, ``session_end``; they can only tighten
    what the Gate decides. ``plugins`` (opt-in): ``True`` for the plugins
    added in ``$RINGFENCE_HOME/plugins.toml``, or a path to such a file; an
    untrusted plugin only tightens, a trusted one's command hooks run
    confined, its skills are offered (``kernel.skills()``) and its MCP
    servers connect with ``mcp_manifest``'s. A plugin that cannot be read or
    does not validate refuses the kernel (InvalidArguments naming it).

    ``approver`` must have an ``async def approve(request)``; anything else
    raises TypeError here, before anything opens.

    Use the result as ``async with create_kernel(...) as kernel:``.
    """
    if approver is not None:
        check_approver(approver)
    # backends: checked before anything opens, so an unknown name leaks nothing
    backend_name = select_backend(backend)
    if change_sets is None:  # best-effort sandboxes may lack the namespaces overlays need
        opts = backend_options or {}
        strict = opts.get("sandbox", "strict") == "strict"
        # gVisor cannot mount the overlay in a user namespace: docker on runsc keeps its
        # default off (asked for explicitly, it is refused with the reason).
        change_sets = checkpoints and (
            (backend_name == "local" and strict)
            or (backend_name == "docker" and opts.get("runtime") != "runsc")
        )
    if change_sets and not checkpoints:
        raise InvalidArguments(
            "change_sets=True needs checkpoints=True (the store change sets are kept in)",
            field="change_sets",
        )
    if change_sets and backend_name == "host":
        raise InvalidArguments(
            "the host backend cannot keep change sets (it is not a sandbox); use local or "
            "docker, or change_sets=False",
            field="change_sets",
        )
    # bridge: checked before anything opens, like the backend
    script_config = ScriptConfig(sandbox=script_sandbox or "strict")
    # workspace: the roots file tools are confined to (opened first, so a bad root fails fast)
    root_paths = [Path(p) for p in roots] or [Path.cwd()]
    workspace = Workspace(root_paths)
    try:
        refuse_home_inside_roots(workspace.roots)
        refuse_aliased_roots(workspace.roots)
        refuse_git_config_inside_roots(workspace.roots)  # ~/.gitconfig, …: read everywhere
        if events_path:
            refuse_events_inside_roots(events_path, workspace.roots)
    except BaseException:
        workspace.close()
        raise
    rules = rules or Rules()
    mcp_policy = None
    if policy is True:  # the policy files, as the command line reads them
        try:
            policy = load_policy(workspace.roots)
        except BaseException:
            workspace.close()
            raise
    elif policy is False:
        policy = None
    if isinstance(policy, PolicyLayers):
        mcp_policy, policy = policy.mcp, policy.policy
    if policy is not None or rules.policy is not None:
        # Path rules need the roots, also when they came only in ``rules`` (TOOL(SPEC)
        # entries): without them an absolute spelling of a file in a root matched no
        # anchored rule (``read_file(path=/ws/secrets/k)`` under ``secrets/**``).
        if policy is None:
            merged = rules.policy
        else:
            merged = policy if rules.policy is None else rules.policy + policy
        assert merged is not None
        rules = dataclasses.replace(
            rules, policy=merged.with_roots(spellings_of(workspace, root_paths))
        )
    try:
        kernel = Kernel(
            posture=Posture.parse(posture),
            approver=approver if approver is not None else default_approver(),
            rules=rules,
            events_sink=_events_sink(events_path, event_observer, sync=events_sync),
            dry_run=dry_run,
            plan_path=Path(plan_path) if plan_path else None,
            roots=tuple(str(r) for r in workspace.roots),  # recorded in plans
            **kernel_options,
        )
    except BaseException:
        workspace.close()
        raise
    if mcp_policy is not None:  # every connect of this kernel's MCP servers applies it
        kernel.extensions["mcp_policy"] = mcp_policy
    # workspace: every file tool write is a change set (checkpoint) that `undo` can restore
    store = CheckpointStore(workspace, retention=retention) if checkpoints else None
    register_file_tools(kernel, workspace, checkpoints=store)
    if store is not None:
        register_undo_tool(kernel, store, atomic_apply=not merge_refused)

    async def close_workspace() -> None:
        if store is not None:
            store.close()
        workspace.close()

    kernel.push_async_callback(close_workspace)
    kernel.add_startup(_claim_spool)
    # hooks and plugins: checks that only tighten; a trusted plugin's hooks, skills, servers
    plugin_servers: list[Any] = []
    try:
        for hook in hooks:
            kernel.add_hook(hook)
        if plugins:
            from .plugins._attach import attach_plugins

            plugin_servers = attach_plugins(
                kernel,
                roots=kernel.roots,
                rule_roots=spellings_of(workspace, root_paths),
                config=None if plugins is True else plugins,  # type: ignore[arg-type]
            )
    except BaseException:
        workspace.close()
        raise
    # bridge: under docker, scripts run in the session's container, which needs the runner
    # files and a socket directory mounted (removed after the container, hence pushed first)
    bridge_dir: Path | None = None
    extra_mounts: list[tuple[Path, str, bool]] = []
    if backend_name == "docker":  # the bridge's docker transport is imported only here
        from .bridge._docker import bridge_mounts, make_bridge_dir, remove_bridge_dir

        bridge_dir = made = make_bridge_dir()

        async def remove_bridges() -> None:
            remove_bridge_dir(made)

        kernel.push_async_callback(remove_bridges)
        # A kernel never entered closes nothing: its directory goes with it (or at exit).
        weakref.finalize(kernel, remove_bridge_dir, made)
        extra_mounts = bridge_mounts(made)
    # backends: run_shell; its session starts on the first call and closes with the kernel
    shell = register_shell_tool(
        kernel,
        backend=backend_name,
        workspace=workspace,
        options=backend_options,
        extra_mounts=extra_mounts,
        change_sets=store if change_sets else None,
        merge_refused=merge_refused,
        pause_collector=pause_collector,
    )
    # bridge: run_tool_script, locally or in the docker session's container
    register_script_tool(
        kernel,
        backend_session_factory=(
            None
            if backend_name in ("local", "host")
            else shell.session
            if bridge_dir is not None
            else unavailable_backend(backend_name)
        ),
        bridge_dir=bridge_dir,
        config=script_config,
    )
    # mcp_host: connectors join the registry when the kernel is entered; sandbox = "local"
    # stdio servers start in the local backend's confinement over the workspace roots
    if mcp_manifest is not None:
        from .mcp_host._embedding import connect_when_entered

        connect_when_entered(
            kernel,
            mcp_manifest,
            workspace=workspace.roots[0],
            options={
                "stdio_confiner": mcp_stdio_confiner(
                    workspace, store, kernel=kernel, merge_refused=merge_refused
                ),
                **(mcp_options or {}),
            },
            policy=mcp_policy,
            extra_servers=plugin_servers,
        )
    return kernel


def spellings_of(workspace: Workspace, given: Sequence[Path]) -> list[str]:
    """Path rules see names relative to a root, in its real spelling or the one given (a root
    reached through a symlink), so either absolute spelling is judged alike."""
    return [*workspace.roots, *(os.path.abspath(p) for p in given)]


def refuse_home_inside_roots(roots: Sequence[Path]) -> None:
    """Raise InvalidArguments when ``$RINGFENCE_HOME`` lies inside (or is) a workspace root,
    when a file it holds (or the managed policy) can be written from inside one, or when a
    workspace root lies inside it.

    The home holds what governs a session and proves its records: the user
    policy, the MCP manifest, the plan and token keys, the checkpoint store.
    Inside a root every tool could read or write it (an ``allow = ["*"]``
    policy for the next session, a readable plan key). Compared by identity,
    not spelling: each directory from the home's real path up to ``/`` is
    ``stat``-ed and matched against each root's device and inode, so a
    symlink or a bind mount spelling the same directory otherwise is caught.
    Nothing is created (a home that does not exist yet is judged by the
    directories that would hold it).

    The same for each entry of the home and for ``/etc/ringfence/policy.toml``: a
    symbolic link resolving inside a root (``policy.toml`` linked into a dotfiles
    checkout the agent works in), and a file with a second name (a hard link) or a mount
    over it on a root's file system, which a tool could rewrite through that name.
    """
    home = ringfence_home()
    by_identity, devices = _identities(roots)

    def root_above(path: Path) -> Path | None:
        return _root_above(path, by_identity)

    mounts = _Mounts()
    root = root_above(home) or mounts.root_holding(home, roots)
    if root is not None:
        raise InvalidArguments(
            f"ringfence's home {home} (RINGFENCE_HOME, default ~/.ringfence) is inside the "
            f"workspace root {root}: the session's tools could read and write its policy, "
            "MCP manifest, plan key, checkpoints and tokens; set RINGFENCE_HOME to a "
            "directory outside every workspace root, or choose another root",
            field="RINGFENCE_HOME",
            home=str(home),
            root=str(root),
        )
    try:
        with os.scandir(home) as entries:
            held = [Path(entry.path) for entry in entries]
    except OSError:
        held = []  # no home yet (or unreadable: nothing of it is read either)
    for path in (*sorted(held), Path("/etc/ringfence/policy.toml")):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        root = root_above(path) if os.path.islink(path) else mounts.root_holding(path, roots)
        why = f"resolves inside the workspace root {root}" if root is not None else ""
        if not why and os.path.isfile(path) and st.st_nlink > 1 and st.st_dev in devices:
            why = f"has {st.st_nlink - 1} other name(s) (hard links) on a workspace root's file system"
        if why:
            raise InvalidArguments(
                f"{path}, which governs ringfence's sessions, {why}: the session's tools "
                "could rewrite it (an allow-everything policy for the next session, a readable "
                "key); make it a plain file outside every workspace root, or choose another "
                "root",
                field="RINGFENCE_HOME",
                home=str(home),
                path=str(path),
            )
    # The other way round: a root that is the home's directory or below it (`--workspace
    # ~/.ringfence/checkpoints`) hands the tools every workspace's change sets and journals,
    # which a recovery elsewhere then writes back into that workspace. A `--worktree`
    # session's own worktree (home/worktrees/<id>/<name>) is the exception: ringfence made
    # it for the session, and it holds none of the home's state.
    try:
        real = Path(os.path.realpath(home))
        home_st = os.stat(real)
    except OSError:
        return  # no home yet: nothing can be inside it
    try:
        trees_st = os.stat(real / "worktrees")
        trees: tuple[int, int] | None = (trees_st.st_dev, trees_st.st_ino)
    except OSError:
        trees = None
    for root in roots:
        inner = Path(os.path.realpath(root))
        below: tuple[int, int] | None = None  # the directory met just before, walking up
        for where in (inner, *inner.parents):
            try:
                st = os.stat(where)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == trees and where != inner:
                below = trees  # passed through home/worktrees, from one worktree inside it
                continue
            if (st.st_dev, st.st_ino) == (home_st.st_dev, home_st.st_ino):
                if below == trees and below is not None:
                    break  # a worktree of a --worktree session
                raise InvalidArguments(
                    f"the workspace root {root} is inside ringfence's home {home} "
                    "(RINGFENCE_HOME, default ~/.ringfence): the session's tools could read and "
                    "write its checkpoint store (every workspace's change sets and journals, "
                    "which undo and recovery write back), policy, keys and tokens; choose a "
                    "root outside the home",
                    field="workspace",
                    home=str(home),
                    root=str(root),
                )


def refuse_aliased_roots(roots: Sequence[Path]) -> None:
    """Raise InvalidArguments when a workspace root lies inside (or is) another root by where
    it lies in its file system but not by its path: a bind mount of ``<root>/sub`` given as a
    second root.

    Every writer judges the tree it leaves by path (``workspace/changes/_view.py``), one
    root inside another too; under another spelling a write through one root is a change
    the other's paths never show, so ``write_file /alias/o/f`` made ``<root>/sub/o`` unseen
    and completed ``x/objects -> ../sub/o``, a repository whose ``config`` the agent had
    written."""
    mounts = _Mounts()
    places = [(root, mounts.where(root)) for root in roots]
    for inner, at in places:
        for outer, there in places:
            if inner is outer or at is None or there is None or at[0] != there[0]:
                continue
            top = there[1].rstrip("/")
            if not (at[1] == there[1] or at[1].startswith(top + "/")):
                continue
            if inner == outer or outer in inner.parents:
                continue  # inside by its path too: judged as such
            raise InvalidArguments(
                f"the workspace root {inner} is the directory {at[1]} of the file system that "
                f"also holds the workspace root {outer} (a bind mount of a directory inside "
                "it?): a write through one would be a change the other's paths do not show; "
                "give the directory once, by one path",
                field="workspace",
                root=str(inner),
                other=str(outer),
            )


def refuse_events_inside_roots(events_path: str | os.PathLike[str], roots: Sequence[Path]) -> None:
    """Raise InvalidArguments when the event file lies inside a workspace root (by identity,
    as :func:`refuse_home_inside_roots` judges the home: a link, a bind mount, a second name).

    The session's own tools could overwrite or remove it: ``write_file events.jsonl``
    replaced the file with one line while the kernel went on appending to the unlinked one,
    so the session's whole record was gone from disk.
    """
    by_identity, devices = _identities(roots)
    path = Path(events_path)
    root = _root_above(path, by_identity) or _Mounts().root_holding(path, roots)
    why = f"is inside the workspace root {root}" if root is not None else ""
    try:
        st = os.stat(path)
    except OSError:
        st = None  # not made yet: where it would be made decides
    if not why and st is not None and st.st_nlink > 1 and st.st_dev in devices:
        why = f"has {st.st_nlink - 1} other name(s) (hard links) on a workspace root's file system"
    if why:
        raise InvalidArguments(
            f"the event file {events_path} {why}: the session's tools could overwrite or "
            "remove the record of the session; write it outside every workspace root "
            "(e.g. beside the project: ../events.jsonl)",
            field="events_path",
            path=str(events_path),
        )


def _identities(roots: Sequence[Path]) -> tuple[dict[tuple[int, int], Path], set[int]]:
    """Each root by (device, inode), and the roots' devices."""
    by_identity: dict[tuple[int, int], Path] = {}
    for root in roots:
        st = os.stat(root)
        by_identity[(st.st_dev, st.st_ino)] = root
    return by_identity, {dev for dev, _ in by_identity}


def _root_above(path: Path, by_identity: dict[tuple[int, int], Path]) -> Path | None:
    """The root that is ``path``'s real path or one of its parents, by identity."""
    real = Path(os.path.realpath(path))
    for where in (real, *real.parents):
        try:
            st = os.stat(where)
        except OSError:
            continue  # not made yet: its parents decide
        root = by_identity.get((st.st_dev, st.st_ino))
        if root is not None:
            return root
    return None


class _Mounts:
    """This process's mounts (``/proc/self/mountinfo``): where a path lies *within its file
    system*, so that a bind mount of a directory or file inside a root (the home mounted
    from ``<root>/.rf``) is known for what it is, whatever path spells it."""

    def __init__(self) -> None:
        self.table: list[tuple[str, str, str]] = []  # (mount point, its root, major:minor)
        try:
            with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
                lines = f.read().splitlines()
        except OSError:
            return
        for line in lines:
            fields = line.split(" ")
            if len(fields) > 4:
                self.table.append((_unescape(fields[4]), _unescape(fields[3]), fields[2]))

    def where(self, path: str | Path) -> tuple[str, str] | None:
        """(major:minor, the path within that file system) of ``path``'s real path; the
        last mount listed over it wins (it hides those below)."""
        real = os.path.realpath(path)
        best: tuple[str, str, str] | None = None
        for point, root, device in self.table:
            inside = real == point or real.startswith(point.rstrip("/") + "/")
            if inside and (best is None or len(point) >= len(best[0])):
                best = (point, root, device)
        if best is None:
            return None
        point, root, device = best
        rest = real[len(point.rstrip("/")) :] if point != "/" else real
        return device, (root.rstrip("/") + rest) or "/"

    def root_holding(self, path: str | Path, roots: Sequence[Path]) -> Path | None:
        """The root whose file system holds ``path`` at or below the root's own place."""
        here = self.where(path)
        if here is None:
            return None
        for root in roots:
            there = self.where(root)
            if there is None or there[0] != here[0]:
                continue
            top = there[1].rstrip("/")
            if here[1] == there[1] or here[1].startswith(top + "/"):
                return root
        return None


def _unescape(field: str) -> str:
    """A mountinfo path field: octal escapes (``\\040`` a space) decoded."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


async def _claim_spool(kernel: Kernel) -> None:
    """Mark this session's spool directory in use, and sweep the ones killed sessions left
    (their outputs and overlay uppers; bounded, the rest at the next start)."""
    from .backends._trees import claim, release, sweep_unclaimed

    spool = kernel.spool_dir

    def start() -> int:
        fd = claim(spool)
        sweep_unclaimed(spool.parent, seconds=1.0)
        return fd

    fd = await trio.to_thread.run_sync(start)

    async def done() -> None:
        release(spool, fd)

    kernel.push_async_callback(done)


def mcp_stdio_confiner(
    workspace: Workspace | None,
    store: CheckpointStore | None = None,
    *,
    kernel: Kernel | None = None,
    merge_refused: bool = True,
    discard_writes: bool = False,
) -> Callable[[Any], Any]:
    """A ``mcp_host.StdioConfiner`` over ``workspace``: the confined local backend's layers.

    ``None``: no roots (a server then sees none of a workspace).

    A writable server (``sandbox_writable = true``) writes through an overlay
    of each root; after each call its sandbox is frozen and what it wrote is
    merged into the roots as that call's change set, kept in ``store``, by
    the guarded writer (``merge_refused``: what is not refused is merged;
    under ``kernel``'s dry run the set is staged), as ``run_shell``'s
    commands are. Without a store such a server is refused (Unavailable),
    unless ``discard_writes`` (``mcp inspect``): then nothing it writes is
    ever merged. ``kernel`` also gives the upper directories its spool
    directory.

    The glue lives here, in the assembly layer, because it is the one layer
    that may import both sides: ``mcp_host`` declares what it needs (a
    callable from a ``StdioCommand`` to a ``ConfinedCommand``; it imports no
    backend), ``backends`` plans the sandbox (``confine_exec``; it imports
    nothing of MCP).
    """

    def confine(server: Any) -> Any:
        from .backends.confined._exec import ExecChanges, confine_exec
        from .mcp_host.transport._stdio import ConfinedCommand

        changes = None
        if server.writable:
            if store is None and not discard_writes:
                raise Unavailable(
                    "a writable confined server (sandbox_writable = true) writes the workspace "
                    "only through change sets, which need the checkpoint store: use "
                    "create_kernel(checkpoints=True) (the default), or set sandbox_writable = "
                    "false for this server; it was not started",
                    field="sandbox_writable",
                )
            changes = ExecChanges(
                store,
                merge_rest=merge_refused,
                staging=(lambda: kernel.dry_run) if kernel is not None else lambda: False,
                spool_dir=kernel.spool_dir if kernel is not None else None,
            )
        plan = confine_exec(
            workspace.roots if workspace is not None else (),
            server.argv,
            cwd=server.cwd,
            network=server.network,
            writable=server.writable,
            changes=changes,
        )

        def read_report(line: bytes) -> tuple[dict[str, Any], ...]:
            return tuple(layer.to_dict() for layer in plan.read_report(line))

        return ConfinedCommand(
            argv=plan.argv,
            layers=tuple(layer.to_dict() for layer in plan.layers),
            read_report=read_report,
            writes=plan.writes,
        )

    return confine

"""The ``run_shell`` tool: a kernel tool on top of a lazily started backend session.

(Over 500 lines on purpose: the model-facing descriptions and schema, and the git
metadata check around commands without change sets; the change-set merge is
:mod:`._changesets`.)

The Gate decides (``run_shell`` is residual: it asks first under every posture
short of ``unrestricted``); this module only resolves the working directory
through the workspace, builds the environment, runs the command on the
session's backend and shapes the result. The backend session starts on the
first call and is closed with the kernel.

Git metadata (every backend): a command must not leave git metadata that was
not there, nor change a gitfile or a file inside a git directory (a planted
``core.fsmonitor`` or hook runs on the host at the next ``git status``). The
tool snapshots the roots' git metadata right before each command and checks
them right after it (also after a timeout, a failure or a cancellation):
new metadata is moved to ``<kernel spool dir>/quarantine/<call id>/<root
index>/<path>``, changed gitfiles and git config/hook files get their
before-image back, and the call fails with ``git_metadata`` naming every path
(event ``git_metadata_refused``). On docker, gitfiles and git directories
present at session start are also mounted read-only, and setuid/setgid bits a
command set on a file are cleared (event ``setid_cleared``). Changes that
appeared *between* commands (the host's own git, the user) are taken as the
new baseline; a ``notice`` names them. Each scan starts from the previous one
(the check after command N is the base of the scan before N+1): only
directories whose ctime moved, or that changed too recently to tell, are
listed again; a session's first scan walks everything.

Change sets (a backend that fills ``ShellResult.uppers``, see
``SessionSpec.change_sets``; the default of ``local``): the command wrote
nothing into the roots, only into its overlay's upper directories. After
it ends (exited, signaled or timed out; a cancelled or failed call merges
nothing and its writes are discarded with the upper directories) each upper
is read as a change set (:func:`ringfence.workspace.changes_from_upper`),
saved in the checkpoint store with every before-image, and merged through
the guarded writer (:func:`ringfence.workspace.merge_changes`): git metadata
in any spelling, a changed gitfile, a new ``.git``, devices, FIFOs,
sockets, set-id bits and links leaving the roots are refused and named
(``git_metadata``, ``invalid_arguments``); the rest is merged (the default)
or, with ``merge_refused=False``, the whole set is refused. The call's
result and a ``checkpoint`` event carry ``changes: {id, files, refused}``;
a refusal fails the call with the first refused entry's code after the
rest was merged. The git metadata scan is skipped (nothing reaches the
roots but through the merge). Under ``--dry-run`` the set is staged
instead: saved as ``staged`` and a nested ``apply_changes`` call for it
goes into the plan (``plan apply`` merges it if every touched file still
has its before-image). With change sets and no network, ``run_shell`` is
``reversible`` and leaves the residual (everything it does can be listed
and undone); otherwise it stays ``irreversible`` and residual.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import trio

from ..runtime._calls import CallContext
from ..runtime._errors import GitMetadata, InvalidArguments, RingfenceError, ToolError, Unavailable
from ..runtime._kernel import Kernel
from ..runtime._redact import StreamRedactor
from ..runtime._tools import Consequence, ToolSpec
from ..runtime.policy._decide import Posture
from ..workspace._writelock import writers_turn
from ..workspace.changes._store import CheckpointStore
from ..workspace.git._enforce import diff_git_metadata, enforce_git_metadata
from ..workspace.git._scan import scan_git_metadata
from ..workspace.git._snapshot import GitReport, GitSnapshot, describe_findings
from ._changesets import merge_or_stage
from ._registry import select_backend, start_session
from ._shellstate import RESERVED_PREFIXES
from ._types import DEFAULT_KILL_GRACE, BackendSession, SessionSpec, ShellResult
from .confined._execrules import exec_checks_expected, exec_rules

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "MAX_TIMEOUT_SECONDS",
    "ShellTool",
    "WorkspaceLike",
    "register_shell_tool",
]

DEFAULT_TIMEOUT_SECONDS = 120.0
MAX_TIMEOUT_SECONDS = 3600.0
# Output streamed into the event log per call and stream; the result itself carries the rest.
EVENT_STREAM_BYTES = 16 * 1024
# File timestamps come from a coarse clock (a tick or more behind time.time_ns()): files whose
# status changed this long before the command started still count as changed by it.
CTIME_SLACK_NS = 1_000_000_000
# Findings listed in an error or event (the rest are counted): bounds what a command can log.
MAX_REPORTED_PATHS = 200
# Room for cap_text's marker, so the kernel's own cap does not cut an already-cut text again.
MARKER_ROOM = 1024

_HEAD = """Run a command in the session's execution backend and return its exit code and output.

`command` is a shell string (run with /bin/sh -c) or an argv list (run without a shell).
`cwd` is a directory inside the workspace (default: the first workspace root).
Each call starts fresh: cwd, exported variables and background processes do not carry
over to the next call; files do. Output beyond the cap is cut head+tail with the full
text saved to a file named in the output. A command still running at `timeout_seconds`
is killed with its whole process tree and the result says "timeout".
"""

DESCRIPTION = (
    _HEAD
    + """Git metadata is off limits: a command that creates a .git or a repository, or changes
anything inside a git directory or a .git file, fails with git_metadata after it ran,
and what it created there is moved out of the workspace (git commands that only read,
like status, diff and log, work; add, commit, checkout, init and clone do not)."""
)

DESCRIPTION_CHANGE_SETS = (
    _HEAD
    + """The command writes to a layer over the workspace; when it ends, its changes are merged
into the workspace as one change set (result "changes": id, files, refused) that can be
listed and undone. Git metadata (.git, gitfiles, a new repository), device nodes, FIFOs,
sockets, set-id bits and links leaving the workspace are refused at the merge, and the
call fails naming them (git commands that only read work; add, commit, init do not).
A directory rename inside the workspace is a copy (the layer has no directory rename)."""
)

# Under the session option persist_shell_state (._shellstate) the fresh-start sentence becomes:
_FRESH = """Each call starts fresh: cwd, exported variables and background processes do not carry
over to the next call; files do."""
_PERSISTENT = """The shell's cwd and exported variables carry over to the next call (given `cwd` moves
it there first; `exit`, `exec` or a killed shell resets them, as the result's "shell" says);
background processes do not; files do."""

# Two patterns because schema patterns are matched with RE2, which has no lookahead.
ENV_NAME_PATTERN = "^[A-Za-z_][A-Za-z0-9_]*$"
RESERVED_ENV_PREFIXES = f"^({'|'.join(RESERVED_PREFIXES)})"

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {
            "description": "a shell command line, or an argv list run without a shell",
            "oneOf": [
                {"type": "string", "minLength": 1},
                {"type": "array", "items": {"type": "string"}, "minItems": 1},
            ],
        },
        "cwd": {
            "type": "string",
            "description": "working directory inside the workspace (default: the first root)",
        },
        "timeout_seconds": {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": MAX_TIMEOUT_SECONDS,
            "description": f"kill the command after this long (default {DEFAULT_TIMEOUT_SECONDS:.0f})",
        },
        "env": {
            "type": "object",
            "description": "extra environment variables for this command (names: letters, "
            "digits, _; not LD_*, DYLD_* or RINGFENCE_*)",
            "propertyNames": {
                "pattern": ENV_NAME_PATTERN,
                "not": {"pattern": RESERVED_ENV_PREFIXES},
            },
            "additionalProperties": {"type": "string"},
        },
    },
    "required": ["command"],
    "additionalProperties": False,
}


def argument_defaults(persistent: bool) -> dict[str, Any]:
    """The values a call that leaves ``cwd`` or ``timeout_seconds`` out runs with, judged as
    such by the rules (:func:`ringfence.runtime.policy._judge.with_defaults`): a matcher on a
    missing argument never matched, so leaving ``cwd`` out passed ``run_shell(cwd=!src/**,
    command=rm *)``. A persistent shell starts a call without ``cwd`` where the last one
    left it, which no argument names: no ``cwd`` default there."""
    defaults: dict[str, Any] = {"timeout_seconds": DEFAULT_TIMEOUT_SECONDS}
    if not persistent:
        defaults["cwd"] = "."  # the first root (``resolve_dir(".")``)
    return defaults


class DirResolver(Protocol):
    """Resolves ``run_shell``'s ``cwd``: a workspace, or its host-root view."""

    def resolve_dir(self, path: str) -> Path: ...


class WorkspaceLike(DirResolver, Protocol):
    """What run_shell needs from :class:`ringfence.workspace.Workspace`."""

    @property
    def roots(self) -> Sequence[Path]: ...

    def with_host_root(self, on_notice: Callable[[str], None]) -> DirResolver: ...

    def git_directories(self) -> list[Path]: ...

    def linked_git_metadata(self, snapshot: GitSnapshot) -> list[Path]: ...


class ShellTool:
    """One kernel's ``run_shell``: its backend choice and its (lazy) session."""

    def __init__(
        self,
        kernel: Kernel,
        backend: str,
        workspace: WorkspaceLike,
        *,
        options: Mapping[str, Any] | None = None,
        network: bool = False,
        passthrough_env: Sequence[str] = (),
        kill_grace: float = DEFAULT_KILL_GRACE,
        extra_mounts: Sequence[tuple[Path, str, bool]] = (),
        change_sets: CheckpointStore | None = None,
        merge_refused: bool = True,
        exec_checked: bool = False,
        pause_collector: bool = False,
    ) -> None:
        self.kernel = kernel
        # run_shell's ToolSpec says the deny rules are enforced at every exec: a session
        # that cannot must refuse a call they apply to (see _exec_arguments).
        self.exec_checked = exec_checked
        # Where the commands' change sets go; None: the backend writes the roots directly.
        self.store = change_sets
        self._merge_rest = merge_refused
        self._pause_collector = pause_collector  # see workspace.changes._collector
        self._extra_mounts = tuple(extra_mounts)
        self.backend = backend
        self.workspace = workspace
        self._options = dict(options or {})
        # What rules judge for an argument a call leaves out (the Gate and the exec checks);
        # once registered, the ToolSpec's meta itself (see register_shell_tool).
        persistent = self._options.get("persist_shell_state") is True
        self.meta: dict[str, Any] = {
            "argument_defaults": argument_defaults(persistent),
            # a call without cwd starts where the last command left the shell: see policy
            "cwd_carries_over": persistent,
            # the shell's PATH is not the session's start: see _note_shell_path
            "path_carries_over": False,
        }
        self._path_session: BackendSession | None = None
        self._start_path: str | None = None
        self._roots = tuple(str(r) for r in workspace.roots)
        # The ringfence process's PATH, which local and host commands start with: one with a
        # relative entry or an entry inside a root names directories commands write.
        self._path_written = backend in ("local", "host") and _writable_path(
            os.environ.get("PATH", os.defpath), self._roots
        )
        self.meta["path_carries_over"] = self._path_written
        self._network = network
        self._passthrough = tuple(passthrough_env)
        self._operator_env_known = False
        self._grace = kill_grace
        self._session: BackendSession | None = None
        self._starting = trio.Lock()
        self._command_lock = trio.Lock()
        self._closed = False
        # Setuid/setgid bits are cleared only where commands run as a sandbox uid (every
        # backend but the unconfined host one).
        self._clear_setid = backend != "host"
        # The git metadata after the last checked command (for the between-commands notice).
        self._last: GitSnapshot | None = None
        # The git metadata the session's read-only mounts were decided from (its tops, held).
        self._mounted_tops: dict[Path, _Held] = {}

    async def session(
        self, ctx: CallContext, snapshot: GitSnapshot | None = None
    ) -> BackendSession:
        """The backend session, started on first use. Raises what the backend's start raises.

        A new session gets the workspace's git directories and the gitfiles
        of ``snapshot`` (the pre-command scan; scanned here when not given)
        as read-only paths.
        """
        async with self._starting:
            if self._closed:
                raise trio.ClosedResourceError("the kernel was closed")
            if self._session is None:
                if snapshot is None:  # started for another tool (the script bridge)
                    snapshot = await self._scan()
                _release(self._mounted_tops)
                self._mounted_tops = _hold_tops(snapshot)
                readonly = set(self.workspace.git_directories())
                # A gitfile is redirected by rewriting it: mount it read-only like a git dir.
                readonly.update(
                    f for f in snapshot.gitfiles if not any(d in f.parents for d in readonly)
                )
                # What git reads through a link in its metadata (.git/hooks -> ../githooks)
                # is git metadata under another name: read-only the same way.
                readonly.update(
                    p
                    for p in self.workspace.linked_git_metadata(snapshot)
                    if not any(d == p or d in p.parents for d in readonly)
                )
                spec = SessionSpec(
                    roots=tuple(self.workspace.roots),
                    readonly_paths=tuple(sorted(readonly)),
                    network=self._network,
                    passthrough_env=self._passthrough,
                    spool_dir=self.kernel.spool_dir,
                    kill_grace=self._grace,
                    options=self._options,
                    extra_mounts=self._extra_mounts,
                    change_sets=self.store is not None,
                )
                self._session = await start_session(self.backend, spec)
                if not self._operator_env_known:
                    # The first session's environment before any command: the operator's
                    # (passed-through host variables), whose secrets stay hidden even in a
                    # question. What later commands export or a call passes is the calls' own.
                    self._operator_env_known = True
                    self.kernel.redactor.register_env(self._session.environment({}))
                ctx.emit(
                    "backend_started",
                    backend=self.backend,
                    roots=[str(r) for r in spec.roots],
                    readonly_paths=[str(p) for p in spec.readonly_paths],
                    sandbox=self._session.metadata,
                )
            return self._session

    async def aclose(self) -> None:
        self._closed = True
        _release(self._mounted_tops)
        if self._session is not None:
            session, self._session = self._session, None
            await session.aclose()

    async def __call__(self, args: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        unrestricted = ctx.posture is Posture.UNRESTRICTED
        # Only the unrestricted posture may start a command outside the roots; the command
        # is unconfined then anyway, and the call's own events record its cwd.
        where = self.workspace.with_host_root(_no_notice) if unrestricted else self.workspace
        try:
            cwd = where.resolve_dir(args.get("cwd", "."))
        except RingfenceError as exc:
            # The resolver names its own argument; here it is cwd.
            raise exc.with_(field="cwd") from exc.__cause__
        args = await self._judge_cwd(args, ctx, cwd)
        timeout = float(args.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS))
        # One command at a time from scan to check: a second call's baseline must not
        # include what the first is about to have undone.
        async with self._command_lock:
            if self.store is not None:
                return await self._run_layered(args, ctx, cwd, timeout, self.store)
            return await self._run_checked(args, ctx, cwd, timeout)

    async def _judge_cwd(self, args: dict[str, Any], ctx: CallContext, cwd: Path) -> dict[str, Any]:
        """The call's ``cwd`` judged as the directory the command really starts in.

        Rules compare names: ``cwd=lnk`` with ``lnk -> sub`` (a link a command made) was
        judged as ``lnk``, so ``run_shell(cwd=sub/**, command=touch *)`` met neither the
        Gate nor the exec checks, and ``touch`` ran in ``sub``. The resolver already
        followed every link (``cwd`` is the real path the command is started in, not the
        spelling, so a link changed afterwards moves nothing): the call is judged again
        with that directory (a deny refuses, an ask asks), and the exec checks get the
        rules for it. Returns the arguments with ``cwd`` so named (for the exec rules).
        """
        if "cwd" not in args or not ctx.judges_path("cwd"):
            return args
        name = _as_spelled_root(str(cwd), [str(r) for r in self.workspace.roots])
        await ctx.confirm_path("cwd", name)
        return {**args, "cwd": name}

    # -- change sets ----------------------------------------------------------------------

    async def _run_layered(
        self,
        args: dict[str, Any],
        ctx: CallContext,
        cwd: Path,
        timeout: float,
        store: CheckpointStore,
    ) -> dict[str, Any]:
        """The command on its overlays, then its change set captured and merged (or staged)."""
        session = await self.session(ctx)
        # Cancelled or failed: nothing is merged; the session discards the upper directories.
        result = await self._run_command(session, args, ctx, cwd, timeout)
        if not result.uppers:
            raise ToolError(
                f"the {self.backend} backend was asked for change sets and reported no upper "
                "directory; nothing was merged"
            )
        out = {**result.to_dict(), "backend": self.backend, "cwd": str(cwd)}
        if result.session_restarted:
            ctx.emit("notice", message=f"the {self.backend} backend session was restarted")
        return await merge_or_stage(
            result,
            out,
            ctx,
            store,
            roots=[Path(os.path.realpath(r)) for r in self.workspace.roots],
            merge_rest=self._merge_rest,
            staging=self.kernel.dry_run,
            pause_collector=self._pause_collector,
        )

    async def _run_command(
        self,
        session: BackendSession,
        args: dict[str, Any],
        ctx: CallContext,
        cwd: Path,
        timeout: float,
    ) -> ShellResult:
        """``args["command"]`` in ``session``, its output streamed to the call's events; the
        Gate's PATH flag brought up to date after it, however it ended."""
        # git status would refresh .git/index as a side effect: a change in a git directory.
        env = {"GIT_OPTIONAL_LOCKS": "0", **dict(args.get("env") or {})}
        # Values the child receives that look like credentials are redacted from everything.
        self.kernel.redactor.register_env(session.environment(env), from_call=True)
        self._start_shell_path(session)
        checks = await self._exec_arguments(session, args)
        streams = _EventStreams(ctx, self.kernel)
        try:
            result = await session.run(
                args["command"],
                cwd=cwd,
                env=env,
                timeout=timeout,
                output_cap=max(self.kernel.output_cap_bytes - MARKER_ROOM, MARKER_ROOM),
                on_output=streams.feed,
                redact=self.kernel.redactor.redact,
                **_follow(session, args),
                **checks,
            )
        finally:
            self._note_shell_path(session)
        streams.flush()
        _note_exec_denied(result.exec_denied, ctx)
        return result

    async def _run_checked(
        self, args: dict[str, Any], ctx: CallContext, cwd: Path, timeout: float
    ) -> dict[str, Any]:
        """A command that writes the roots itself, between two scans of their git metadata.

        It is a writer like any other (``workspace/_writelock.py``): from the scan before it
        to the check after it, no file tool, merge or other process's writer judges and
        writes the roots, and it waits for theirs. Before, ``write_file d/HEAD`` judged
        ``d`` (no ``objects/``), the command made ``objects/``, ``refs/`` and a ``config``
        and its scan found no repository (no ``HEAD`` yet), then the write's rename made one.
        """
        async with writers_turn(self.workspace._resolver, timeout):
            return await self._run_checked_turn(args, ctx, cwd, timeout)

    async def _run_checked_turn(
        self, args: dict[str, Any], ctx: CallContext, cwd: Path, timeout: float
    ) -> dict[str, Any]:
        before_ns = time.time_ns()
        before = await self._scan()
        self._note_between_commands(before, ctx)
        self._refuse_special_files(before)
        await self._mount_new_git_metadata(before, ctx)
        session = await self.session(ctx, before)
        try:
            result = await self._run_command(session, args, ctx, cwd, timeout)
        except BaseException:
            # The command may have written before it failed or was cancelled: check anyway,
            # without replacing the original exception (cancellation stays cancellation).
            with trio.CancelScope(shield=True):
                try:
                    await self._check(before, before_ns, ctx)
                except Exception as exc:
                    ctx.emit("notice", message=f"the git metadata check failed: {exc!r}")
            raise
        report = await self._check(before, before_ns, ctx)
        if report.refused:
            moved = (
                f" Moved out of the workspace: to {report.quarantine}." if report.quarantine else ""
            )
            raise GitMetadata(
                "the command created or changed git metadata, which could make git on the "
                f"host run programs (it ran; exit code {result.exit_code}): "
                f"{describe_findings(report.findings)}.{moved} 'left' means git runs no "
                "program from that file and the change stays; run git commands that write "
                "a repository outside ringfence.",
                field="command",
                paths=[f.to_dict() for f in report.findings[:MAX_REPORTED_PATHS]],
                quarantine=str(report.quarantine) if report.quarantine else None,
                exit_code=result.exit_code,
            )
        if result.session_restarted:
            ctx.emit("notice", message=f"the {self.backend} backend session was restarted")
        return {**result.to_dict(), "backend": self.backend, "cwd": str(cwd)}

    # -- exec checks ----------------------------------------------------------------------

    async def _exec_arguments(
        self, session: BackendSession, args: Mapping[str, Any]
    ) -> dict[str, Any]:
        """``exec_rules`` for the session's ``run``: the policy's deny rules this call's execs
        must meet (read now: rules can change during a session); none when none apply.

        The confined local session probes its exec checks the first time (a child
        installs the filter and the supervisor reads its exec). A session without them
        while the ToolSpec claims them fails the call with ``unavailable`` and withdraws
        the claim, so the Gate judges later lines on their text alone (and asks about the
        ones it cannot read whole).
        """
        rules = exec_rules(self.kernel.rules.effective_policy, args, self.meta)
        if rules is None:
            return {}
        probe = getattr(session, "probe_exec_checks", None)  # the confined local session
        if probe is not None:
            layer = await probe()
            if layer.ok:
                return {"exec_rules": rules}
            missing = layer.detail
        else:
            missing = f"the {self.backend} backend does not check execs"
        if self.exec_checked:
            self.exec_checked = False
            spec = self.kernel.registry.find("run_shell")
            if spec is not None and spec.exec_checked:
                self.kernel.registry.remove("run_shell")
                self.kernel.register(dataclasses.replace(spec, exec_checked=False))
            raise Unavailable(
                "run_shell's deny rules were to be enforced at every exec, and this "
                f"{self.backend} session cannot check execs ({missing}); the command did not "
                f"run. Deny rules that apply: {', '.join(rules.labels)}. Later calls are "
                "judged on the command line alone.",
                field="backend",
            )
        return {}

    # -- the persistent shell's PATH -------------------------------------------------------

    def _start_shell_path(self, session: BackendSession) -> None:
        """Remember the PATH a new session's commands start with (its shell state's base)."""
        if self._path_session is not session:
            self._path_session = session
            self._start_path = session.environment().get("PATH")

    def _note_shell_path(self, session: BackendSession) -> None:
        """Tell the Gate whether the next command's PATH is still the session's start.

        Under ``persist_shell_state`` the next command gets the PATH the last one left, and
        the shell judge's *known* programs (``ls``: starts nothing else) are known by name,
        which PATH turns into a file: a command that wrote ``bin/ls`` and left
        ``PATH=/workspace/bin:…`` (an ``export``, or bytes written into the state the shell
        saves) had the next, read-whole ``ls`` run its script past the deny rules on a
        backend without exec checks. The Gate's judge reads ``path_carries_over``
        (``runtime/policy/_judge.py``) and takes no name as known while it is set; so it is
        while the PATH names a directory commands write (``_writable_path``)."""
        path = session.environment().get("PATH")
        moved = path != self._start_path or self._path_written or _writable_path(path, self._roots)
        self.meta["path_carries_over"] = moved

    # -- git metadata ---------------------------------------------------------------------

    def _refuse_special_files(self, before: GitSnapshot) -> None:
        """Refuse a sandboxed command while a socket, FIFO or device node lies in a root.

        The roots are the host's own directories here (bind-mounted writable): a Unix
        socket in one is reached by its inode whatever the sandbox's namespaces (a path
        socket belongs to no network namespace, and neither seccomp nor this kernel's
        Landlock sees a ``connect`` path), so a command could talk to the host process
        listening there (a dev server, an ssh-agent, git's fsmonitor daemon, a
        ``docker.sock``); a FIFO a host process reads or writes is its input or output
        the same way. A change set's overlay shows such an entry as the overlay's own
        inode, which no host process listens on or opens: only commands that write the
        roots themselves need this. The unconfined ``host`` backend promises nothing.
        Raises Unavailable naming the paths.
        """
        if self.backend == "host":
            return
        found = before.special_files
        if not found:
            return
        shown = ", ".join(str(p) for p in found[:10]) + (", …" if len(found) > 10 else "")
        raise Unavailable(
            f"the workspace holds {len(found)} socket(s), FIFO(s) or device node(s) "
            f"({shown}): a command writing the roots directly (no change sets) on the "
            f"{self.backend} backend could connect to or open them, reaching the host process "
            "behind them; the command did not run. Move them out of the workspace (a "
            "socket's place is a runtime directory such as $XDG_RUNTIME_DIR), or run with "
            "change sets (the default), where a command never reaches them",
            field="workspace",
            paths=[str(p) for p in found[:MAX_REPORTED_PATHS]],
        )

    async def _mount_new_git_metadata(self, before: GitSnapshot, ctx: CallContext) -> None:
        """Start the session again when git metadata appeared since it started.

        A session mounts the git directories and gitfiles it finds when it starts read-only;
        one the person made since (a ``git clone`` or ``git init`` in the workspace while
        the agent works) was writable by every later command, which the check after it
        undoes only once the command has ended: meanwhile a host ``git status`` (an
        editor's git view) ran the ``core.fsmonitor`` it wrote. Only the commands that
        write the roots themselves need this; a change set never writes them.
        """
        if self._session is None or _still_held(before, self._mounted_tops):
            return
        async with self._starting:
            session, self._session = self._session, None
        if session is not None:
            await session.aclose()
        ctx.emit(
            "notice",
            message=f"git metadata appeared in the workspace since the {self.backend} session "
            "started; the session was started again to mount it read-only",
        )

    async def _scan(self) -> GitSnapshot:
        """The roots' git metadata now: incremental from the last checked command's scan."""
        roots = [Path(r) for r in self.workspace.roots]
        base = self._last
        return await trio.to_thread.run_sync(lambda: scan_git_metadata(roots, base=base))

    def _note_between_commands(self, now: GitSnapshot, ctx: CallContext) -> None:
        """Name git metadata that changed since the last command; it becomes the baseline.

        Between commands only the host writes: every backend kills what a
        command left running (docker: every process of the sandbox uid, checked
        by the supervisor; local: its process group and session, which a
        ``setsid`` daemon can leave — issue 13), so this is the user's own git.
        """
        last, self._last = self._last, None
        if last is None or last.roots != now.roots:
            return
        changed = diff_git_metadata(last, now)
        if changed:
            shown = ", ".join(f"{now.path(k)} ({c})" for k, c in changed[:20])
            ctx.emit(
                "notice",
                message=f"git metadata changed between commands (taken as the new baseline): "
                f"{shown}{' …' if len(changed) > 20 else ''}",
            )

    async def _check(self, before: GitSnapshot, before_ns: int, ctx: CallContext) -> GitReport:
        """Scan after a command, undo what it did to git metadata, record it in the events."""
        # The Kernel always has a spool dir ($RINGFENCE_HOME/spool/<session>).
        assert self.kernel.spool_dir is not None
        spool = _outside(before.roots, Path(self.kernel.spool_dir))
        quarantine = spool / "quarantine" / ctx.call_id
        since = before_ns - CTIME_SLACK_NS
        setid = self._clear_setid

        def check() -> tuple[GitReport, GitSnapshot]:
            # Incremental from the pre-command scan: only directories whose ctime moved
            # (or that were hot) are listed again.
            after = scan_git_metadata(before.roots, since=since, setid=setid, base=before)
            report = enforce_git_metadata(before, after, quarantine)
            if report.refused:
                # What is there now, after the undo, is the next baseline.
                after = scan_git_metadata(before.roots, base=after)
            elif spool != Path(self.kernel.spool_dir):
                with contextlib.suppress(OSError):
                    os.rmdir(spool)  # the temporary spool of a call that quarantined nothing
            return report, after

        report, self._last = await trio.to_thread.run_sync(check)
        if report.setid_cleared:
            ctx.emit("setid_cleared", paths=list(report.setid_cleared))
        if report.index_rewritten:
            ctx.emit(
                "notice",
                message="the command rewrote a git index in place (git refreshes its stat "
                f"cache; nothing runs from it): {', '.join(report.index_rewritten[:20])}",
            )
        if report.refused:
            ctx.emit(
                "git_metadata_refused",
                paths=[f.to_dict() for f in report.findings[:MAX_REPORTED_PATHS]],
                more=max(len(report.findings) - MAX_REPORTED_PATHS, 0),
                quarantine=str(report.quarantine) if report.quarantine else None,
            )
        return report


def _note_exec_denied(denied: Mapping[str, Any] | None, ctx: CallContext) -> None:
    """One ``exec_denied`` event per command whose execs the deny rules refused."""
    if denied:
        ctx.emit(
            "exec_denied",
            denied=denied.get("denied", 0),
            denials=list(denied.get("denials", ()))[:MAX_REPORTED_PATHS],
        )


def _follow(session: BackendSession, args: Mapping[str, Any]) -> dict[str, bool]:
    """``follow_shell`` for a session that keeps its shell's state: without a ``cwd`` of the
    call's own, the command starts where the shell is (nothing for other sessions)."""
    if not session.metadata.get("persist_shell_state"):
        return {}
    return {"follow_shell": "cwd" not in args}


# At most this many git metadata tops are held open per session (a workspace of thousands of
# submodules must not run the process out of descriptors); the rest are compared by device,
# inode and ctime, which a change to the directory also moves (a restart: the safe side).
MAX_HELD_TOPS = 256

# A held top: an ``O_PATH`` descriptor, or (device, inode, ctime) past MAX_HELD_TOPS.
_Held = int | tuple[int, int, int]


def _hold_tops(snapshot: GitSnapshot) -> dict[Path, _Held]:
    """Each of ``snapshot``'s git metadata tops (``.git`` entries, git directories), by host
    path, held while the session that mounted them lives: an ``O_PATH`` descriptor, as an
    inode held open keeps its number, so one removed and made again at the same path (a
    clone made anew) is told apart by :func:`_still_held`, which a number alone cannot
    (file systems reuse a freed inode's number at once)."""
    held: dict[Path, _Held] = {}
    for key in sorted(snapshot.tops):
        path = snapshot.path(key)
        with contextlib.suppress(OSError):  # gone meanwhile: the next check sees it missing
            if len(held) < MAX_HELD_TOPS:
                held[path] = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
            else:
                st = os.lstat(path)
                held[path] = (st.st_dev, st.st_ino, st.st_ctime_ns)
    return held


def _still_held(snapshot: GitSnapshot, held: dict[Path, _Held]) -> bool:
    """Is every git metadata top of ``snapshot`` one of the ``held`` ones, the same inode?"""
    for key in snapshot.tops:
        path = snapshot.path(key)
        then = held.get(path)
        if then is None:
            return False
        try:
            now = os.lstat(path)
            if isinstance(then, int):
                was = os.fstat(then)
                if (now.st_dev, now.st_ino) != (was.st_dev, was.st_ino):
                    return False
            elif (now.st_dev, now.st_ino, now.st_ctime_ns) != then:
                return False
        except OSError:
            return False
    return True


def _release(held: dict[Path, _Held]) -> None:
    for value in held.values():
        if isinstance(value, int):
            os.close(value)
    held.clear()


def _outside(roots: Sequence[Path], spool: Path) -> Path:
    """``spool``, or a new private temporary directory when ``spool`` lies in a root.

    Quarantined git metadata inside the workspace would still be found by git.
    """
    real = Path(os.path.realpath(spool))
    if any(real == r or real.is_relative_to(r) for r in roots):
        return Path(tempfile.mkdtemp(prefix="ringfence-spool-"))
    return spool


class _EventStreams:
    """Streams output into the event log as ``output`` events: redacted, bounded per call."""

    def __init__(self, ctx: CallContext, kernel: Kernel) -> None:
        self._ctx = ctx
        self._redactors = {s: StreamRedactor(kernel.redactor) for s in ("stdout", "stderr")}
        self._budget = {"stdout": EVENT_STREAM_BYTES, "stderr": EVENT_STREAM_BYTES}

    def feed(self, stream: str, text: str) -> None:
        self._emit(stream, self._redactors[stream].feed(text))

    def flush(self) -> None:
        for stream, redactor in self._redactors.items():
            self._emit(stream, redactor.flush())

    def _emit(self, stream: str, text: str) -> None:
        budget = self._budget[stream]
        if not text or budget <= 0:
            return
        data = text.encode()[:budget].decode("utf-8", "ignore")
        self._budget[stream] = budget - len(data.encode())
        self._ctx.emit("output", stream=stream, text=data)
        if self._budget[stream] <= 0:
            self._ctx.emit("notice", message=f"further {stream} is in the result, not the events")


def register_shell_tool(
    kernel: Kernel,
    *,
    backend: str | None,
    workspace: WorkspaceLike,
    options: Mapping[str, Any] | None = None,
    network: bool = False,
    passthrough_env: Sequence[str] = (),
    kill_grace: float = DEFAULT_KILL_GRACE,
    extra_mounts: Sequence[tuple[Path, str, bool]] = (),
    change_sets: CheckpointStore | None = None,
    merge_refused: bool = True,
    pause_collector: bool = False,
) -> ShellTool:
    """Register ``run_shell`` on ``kernel``, running on ``backend``.

    ``backend`` is resolved now (explicit, else ``local``; never the
    environment; an unknown name raises InvalidArguments), but the session
    starts on the first call, with the workspace's roots and, as read-only
    paths, its git directories at that moment. The session is closed when the
    kernel closes. ``options`` go to the backend (docker: ``image``,
    ``memory``, …). ``extra_mounts`` go to the session spec (docker only).

    ``change_sets`` (a checkpoint store): every command runs on overlays and
    its writes reach the roots only through the guarded merge, recorded in
    the store (see the module docstring); ``merge_refused=False`` refuses a
    whole set when any entry is refused. On a confined backend (not
    ``host``) without network, ``run_shell`` is then ``reversible`` and not
    residual. ``pause_collector``: hold the process's garbage collector off
    while a command's change set is captured (only for a caller that owns the
    process: :mod:`ringfence.workspace.changes._collector`).
    """
    name = select_backend(backend)
    if change_sets is not None and name == "host":
        # It would run the command on the host's own files: nothing to capture, nothing undone.
        raise InvalidArguments(
            "the host backend cannot keep change sets (it is not a sandbox); use local or "
            "docker, or switch change sets off",
            field="change_sets",
        )
    networked = network or bool((options or {}).get("network"))
    if name == "docker" and options is not None and "network" in options:
        # The session spec carries it on docker (a bridge instead of none), not an option of
        # the container's: given as one (the command line's --network), it was refused as
        # "unknown docker backend option", and --network never worked on docker.
        options = {k: v for k, v in options.items() if k != "network"}
    tool = ShellTool(
        kernel,
        name,
        workspace,
        options=options,
        network=networked if name == "docker" else network,
        passthrough_env=passthrough_env,
        kill_grace=kill_grace,
        extra_mounts=extra_mounts,
        change_sets=change_sets,
        merge_refused=merge_refused,
        pause_collector=pause_collector,
    )
    # The confined local backend checks every exec against the deny rules (probed when the
    # session starts; a session without them refuses the calls they apply to).
    exec_checked = (
        name == "local" and (options or {}).get("exec_checks", True) is True
    ) and exec_checks_expected()
    tool.exec_checked = exec_checked
    # Its only effect is an undoable change set: reversible, out of the residual.
    reversible = change_sets is not None and name != "host" and not networked
    description = DESCRIPTION if change_sets is None else DESCRIPTION_CHANGE_SETS
    if (options or {}).get("persist_shell_state") is True:
        description = description.replace(_FRESH, _PERSISTENT)
    # One dict: the registered ToolSpec's meta (the Gate's view) is the tool's own, so what
    # the tool notes between commands (``path_carries_over``) is what the Gate reads.
    tool.meta = {
        "backend": name,
        "change_sets": change_sets is not None,
        "runs_on": runs_on(name, networked, change_sets is not None),
        **tool.meta,
    }
    kernel.register(
        ToolSpec(
            "run_shell",
            description,
            INPUT_SCHEMA,
            tool,
            consequence=Consequence.REVERSIBLE if reversible else Consequence.IRREVERSIBLE,
            residual=not reversible,
            meta=tool.meta,
            # A dry run runs it on the layer and stages its change set (apply_changes).
            composes_dry_run=change_sets is not None,
            exec_checked=exec_checked,
        )
    )
    kernel.push_async_callback(tool.aclose)
    return tool


def _writable_path(path: str | None, roots: Sequence[str]) -> bool:
    """Whether ``path`` (a PATH value) holds a directory commands may write: a relative
    entry (an empty one is the working directory) or one inside a workspace root."""
    if path is None:
        return False
    tops = [os.path.realpath(r).rstrip("/") + "/" for r in roots]
    for entry in path.split(os.pathsep):
        if not entry.startswith("/"):
            return True
        real = os.path.realpath(entry).rstrip("/") + "/"
        if any(real.startswith(top) for top in tops):
            return True
    return False


def runs_on(backend: str, network: bool, change_sets: bool) -> str:
    """One line for an approval prompt: where a command runs, what confines it, its network."""
    if backend == "host":
        return "host: UNCONFINED (your user's files, processes and network)"
    where = {
        "local": "local: confined (namespaces, Landlock, seccomp)",
        "docker": "docker: a container",
    }
    text = where.get(backend, f"{backend} backend")
    text += "; NETWORK ON" if network else "; no network"
    if change_sets:
        text += "; writes become an undoable change set"
    return text


def _as_spelled_root(real: str, roots: Sequence[str]) -> str:
    """A real path below a root's real path, spelled below the root as given (rules know the
    roots as given: a root reached through a link has another real path)."""
    for given in roots:
        top = os.path.realpath(given).rstrip("/")
        if real == top or real.startswith(top + "/"):
            return given.rstrip("/") + real[len(top) :]
    return real


def _no_notice(_place: str) -> None:
    """A ``cwd`` outside the roots says nothing more than the call's own events."""

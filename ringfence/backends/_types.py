"""The Backend protocol: values and the one interface every execution backend implements.

Shaped like an httpx transport: a backend is started into a *session* for one
kernel, and the session has one method that runs a command
(:meth:`BackendSession.run`) plus :meth:`BackendSession.aclose`. Backends do
no policy, approval, audit or retries; the Gate and the ``run_shell`` tool do
that before a command reaches a backend.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from ..runtime._errors import InvalidArguments

__all__ = [
    "BackendSession",
    "Command",
    "OutputCallback",
    "SessionSpec",
    "ShellResult",
    "ShellState",
    "Upper",
    "check_command",
    "check_env",
    "check_run_arguments",
]

Command = str | Sequence[str]
Stream = Literal["stdout", "stderr"]
# Called with each decoded chunk as it arrives, in arrival order per stream.
OutputCallback = Callable[[Stream, str], None]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
DEFAULT_KILL_GRACE = 2.0


@dataclass(frozen=True)
class SessionSpec:
    """What a backend session is started with.

    ``roots`` are the workspace roots (host paths; the docker backend
    bind-mounts them). ``readonly_paths`` are host paths (directories or
    files) inside a root that must stay read-only to commands (the wiring
    passes the workspace's git directories and gitfiles; the local backend
    cannot enforce them, ``run_shell``'s git metadata check covers it). ``network`` asks for network access (docker: a bridge
    network instead of none; local: ignored, the host network is always
    there). ``passthrough_env`` names host variables copied into every
    command's environment in addition to the backend's base allowlist.
    ``kill_grace`` is the time between SIGTERM and SIGKILL when a command is
    stopped. ``options`` are backend-specific (docker: ``image``, ``memory``,
    ``cpus``, ``pids``, ``user``, ``tmp_size``); unknown keys are an error.
    ``extra_mounts`` are ``(host path, container path, read_only)`` bind mounts
    other packages need in the container (the script bridge: its runner files
    and its socket directory); the local backend ignores them.
    ``change_sets`` asks the backend to keep every command's writes off the
    roots: each command runs on an overlay per root (the root its read-only
    lower layer) and the result names the upper directories
    (:attr:`ShellResult.uppers`) for ``run_shell`` to read as a change set and
    merge through the guarded writer. A backend that cannot do this refuses to
    start with ``Unavailable`` naming why; it never writes the roots instead.
    """

    roots: tuple[Path, ...] = ()
    readonly_paths: tuple[Path, ...] = ()
    network: bool = False
    passthrough_env: tuple[str, ...] = ()
    spool_dir: Path | None = None
    kill_grace: float = DEFAULT_KILL_GRACE
    shell: tuple[str, ...] = ("/bin/sh", "-c")
    options: Mapping[str, Any] = field(default_factory=dict)
    extra_mounts: tuple[tuple[Path, str, bool], ...] = ()
    change_sets: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "roots", tuple(Path(r) for r in self.roots))
        object.__setattr__(
            self,
            "extra_mounts",
            tuple((Path(h), str(c), bool(ro)) for h, c, ro in self.extra_mounts),
        )
        object.__setattr__(self, "readonly_paths", tuple(Path(p) for p in self.readonly_paths))
        object.__setattr__(self, "passthrough_env", tuple(self.passthrough_env))
        object.__setattr__(self, "shell", tuple(self.shell))
        object.__setattr__(self, "options", dict(self.options))
        for name in self.passthrough_env:
            if not _ENV_NAME.match(name):
                raise InvalidArguments(
                    f"passthrough_env name {name!r} is not a valid variable name",
                    field="passthrough_env",
                )
        if not (isinstance(self.kill_grace, int | float) and 0 <= self.kill_grace <= 60):
            raise InvalidArguments(
                f"kill_grace must be between 0 and 60 seconds, not {self.kill_grace!r}",
                field="kill_grace",
            )
        if not self.shell or not all(isinstance(s, str) and s for s in self.shell):
            raise InvalidArguments("shell must be a non-empty argv prefix", field="shell")


@dataclass(frozen=True)
class Upper:
    """One root's overlay upper directory after a command (``SessionSpec.change_sets``).

    ``path`` is a host path in overlayfs's encoding (whiteouts, opaque
    directories; see :func:`ringfence.workspace.changes_from_upper`). It
    belongs to the session: it stays as the command left it until the
    session's next :meth:`BackendSession.run` or :meth:`BackendSession.aclose`,
    which empty it; the caller reads it in between and never writes it.
    Nothing else writes it either once the command has ended: the merge
    moves a new directory of it into the workspace as it was read.

    ``made_mode``: the upper directory's own mode when the command started (its
    root's then, as the overlay showed it; every backend with change sets says), so a
    different one now is the command's ``chmod`` of the root itself, which the merge
    refuses, named; None: not known.
    """

    root: Path
    path: Path
    made_mode: int | None = None


@dataclass(frozen=True)
class ShellState:
    """What became of a persistent shell's state after one command (``persist_shell_state``).

    ``status``: ``saved`` (the command's working directory and exported
    variables carry over to the next command), ``kept`` (the state from
    before the command stays: it timed out, or was an argv command, which
    cannot change it) or ``reset`` (the command ended its shell before the
    state could be saved: ``exit``, ``exec``, ``set -e``, a signal, a lost
    session, or a state that could not be read; the next command starts like
    the session's first). ``cwd``: the shell's working directory now, as the
    sandbox names it (a container path on docker), or None after a reset.
    ``note`` says why when the status is not ``saved``, and which variables
    were not carried over; ``dropped`` names those variables (the command
    exported them, but they are reserved or change how a later program
    starts, see ``_shellstate.changes_startup``).
    """

    status: Literal["saved", "kept", "reset"]
    cwd: str | None = None
    note: str | None = None
    dropped: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.status, "cwd": self.cwd}
        if self.note:
            out["note"] = self.note
        if self.dropped:
            out["dropped"] = list(self.dropped)
        return out


@dataclass(frozen=True)
class ShellResult:
    """What one command did.

    ``exit_code`` follows the shell convention: the exit status, or 128+N
    when signal N ended the command; it is ``None`` only when the session died
    under the command and its status is unknown (then ``session_restarted``
    is true). ``signal`` is the signal that ended the command when known (the
    docker backend infers it from a status above 128). ``stdout``/``stderr``
    are decoded UTF-8 (invalid bytes replaced), cut head+tail to the output
    cap with the full text in ``*_spool`` when cut. ``timed_out`` means the
    deadline passed and the command's whole process tree was killed.
    ``uppers`` (only under ``SessionSpec.change_sets``) hold what the command
    wrote, one :class:`Upper` per root; the roots themselves are unchanged.
    ``shell`` (only under the session option ``persist_shell_state``) says
    whether the command's working directory and exported variables carry over.
    ``exec_denied`` (only where execs are checked against deny rules: the
    confined ``local`` backend) counts and lists the execs that were refused:
    ``{"denied": n, "denials": [{"rule", "program", "argv", …}]}``; ``execs_checked``
    how many exec calls were checked (None: none was). ``notes``: what the session
    knows that explains a failure the output alone does not (a root the command's
    uid cannot write), with the fix.
    """

    exit_code: int | None
    signal: int | None
    duration: float
    stdout: str
    stderr: str
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    stdout_spool: str | None = None
    stderr_spool: str | None = None
    timed_out: bool = False
    session_restarted: bool = False
    uppers: tuple[Upper, ...] = ()
    shell: ShellState | None = None
    exec_denied: Mapping[str, Any] | None = None
    execs_checked: int | None = None
    notes: tuple[str, ...] = ()

    @property
    def status(self) -> str:
        """``timeout``, ``lost`` (session died), ``signaled`` or ``exited``."""
        if self.timed_out:
            return "timeout"
        if self.exit_code is None:
            return "lost"
        if self.signal is not None:
            return "signaled"
        return "exited"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": self.status,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "duration_seconds": round(self.duration, 4),
            "timed_out": self.timed_out,
            "session_restarted": self.session_restarted,
        }
        if self.shell is not None:
            out["shell"] = self.shell.to_dict()
        if self.execs_checked is not None:
            out["execs_checked"] = self.execs_checked
        if self.exec_denied is not None:
            out["exec_denied"] = dict(self.exec_denied)
        if self.notes:
            out["notes"] = list(self.notes)
        if self.stdout_truncated or self.stderr_truncated:
            out["truncated"] = {
                "stdout": self.stdout_truncated,
                "stderr": self.stderr_truncated,
                "stdout_bytes": self.stdout_bytes,
                "stderr_bytes": self.stderr_bytes,
                "stdout_spool": self.stdout_spool,
                "stderr_spool": self.stderr_spool,
            }
        return out


@runtime_checkable
class BackendSession(Protocol):
    """One started backend: where the commands of one kernel session run.

    Contract for implementations (checked by
    :func:`ringfence.backends.testing.check_backend`):

    - :meth:`run` runs one command to completion and returns a
      :class:`ShellResult`; a non-zero exit, a signal or a timeout is a
      result, not an exception. When the command's main process ends, every
      process it left behind is killed: nothing a command starts outlives it.
    - On timeout the command's whole tree gets SIGTERM, then after the
      session's ``kill_grace`` SIGKILL, including processes that left its
      process group; the result says ``timed_out``.
    - On cancellation the same kill happens (shielded) before ``Cancelled``
      propagates; cancellation never becomes a result.
    - Commands of one session run one at a time (concurrent calls queue).
    - :meth:`aclose` is idempotent and closes even when it cannot be graceful;
      :meth:`run` after it raises ``trio.ClosedResourceError``.
    - Raises: ``InvalidArguments`` (bad command, cwd, env, timeout or cap,
      naming the field), ``Unavailable`` (the sandbox layer is gone),
      ``ToolError`` (the backend itself failed).
    - :attr:`metadata` says what the sandbox is (read-only, no I/O).
    """

    name: str

    @property
    def metadata(self) -> Mapping[str, Any]:
        """What confines this session's commands: recorded in the ``backend_started`` event.

        A JSON-serializable mapping, read-only and cheap (no I/O). Every session
        has at least ``confined`` (bool: are commands kept off the host, its
        files outside the roots and its processes), ``sandbox`` (str: what
        confines them, in the backend's words: ``none`` for the host backend,
        the confined backend's level ``strict``/``best-effort``, ``docker``)
        and ``network`` (bool: can commands reach a network). A backend adds
        its own keys: the confined backend its sandbox ``layers`` (each with
        whether it is in force), ``missing_layers`` and ``start_ms``; the host
        backend ``unconfined``; docker its ``image`` and ``runtime``. Not
        promised: the keys beyond those three, or that the mapping is a copy.
        """
        ...

    def environment(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The exact environment a command gets when ``run`` is given ``env``."""
        ...

    async def run(
        self,
        command: Command,
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout: float,
        output_cap: int,
        on_output: OutputCallback | None = None,
        redact: Callable[[str], str] | None = None,
    ) -> ShellResult: ...

    async def aclose(self) -> None: ...


# -- argument checks shared by every backend (checked before anything starts) ----------------


def check_command(command: object) -> str | list[str]:
    """A shell string or a non-empty argv; no NUL bytes. Raises InvalidArguments."""
    if isinstance(command, str):
        if not command.strip():
            raise InvalidArguments("command is empty", field="command")
        if "\0" in command:
            raise InvalidArguments("command contains a NUL byte", field="command")
        return command
    if isinstance(command, Sequence) and not isinstance(command, bytes | bytearray):
        argv = list(command)
        if not argv:
            raise InvalidArguments("command argv is empty", field="command")
        for i, arg in enumerate(argv):
            if not isinstance(arg, str):
                raise InvalidArguments(
                    f"command[{i}] must be a string, not {type(arg).__name__}",
                    field=f"command.{i}",
                )
            if "\0" in arg:
                raise InvalidArguments(f"command[{i}] contains a NUL byte", field=f"command.{i}")
        if not argv[0]:
            raise InvalidArguments("command[0] is empty", field="command.0")
        return argv
    raise InvalidArguments(
        f"command must be a string or a list of strings, not {type(command).__name__}",
        field="command",
    )


def check_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """Variable names ``[A-Za-z_][A-Za-z0-9_]*`` with string values without NUL."""
    out: dict[str, str] = {}
    for name, value in (env or {}).items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise InvalidArguments(f"env name {name!r} is not a valid variable name", field="env")
        if not isinstance(value, str):
            raise InvalidArguments(
                f"env value for {name} must be a string, not {type(value).__name__}",
                field=f"env.{name}",
            )
        if "\0" in value:
            raise InvalidArguments(f"env value for {name} contains a NUL byte", field=f"env.{name}")
        out[name] = value
    return out


def check_run_arguments(cwd: object, timeout: object, output_cap: object) -> Path:
    """``cwd`` absolute, ``timeout`` a finite positive number, ``output_cap`` ≥ 1."""
    if not isinstance(cwd, Path | str) or not Path(cwd).is_absolute():
        raise InvalidArguments(f"cwd must be an absolute path, not {cwd!r}", field="cwd")
    # bool is an int; a timeout of True is a mistake, not one second.
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise InvalidArguments(
            f"timeout must be a positive number of seconds, not {timeout!r}", field="timeout"
        )
    if isinstance(output_cap, bool) or not isinstance(output_cap, int) or output_cap < 1:
        raise InvalidArguments(
            f"output_cap must be a positive number of bytes, not {output_cap!r}",
            field="output_cap",
        )
    return Path(cwd)

"""``persist_shell_state``: a shell whose working directory and exports carry over.

A session option of the ``local`` and ``docker`` backends. Not one shell kept alive (it could
not move between the per-command overlays of change sets), but the shell's state **captured**
at each command's end (``env -0`` and ``$PWD`` on descriptor 3, parsed as data, never as shell
text) and **replayed** into the next command's fresh shell; every other guarantee of the backend
holds unchanged. Variables that change how a later program starts are not kept
(:func:`changes_startup`), so no later command runs code an earlier one planted.

The rules for cwd, environment, argv commands, timeouts and resets:
docs/design/shell-state.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..runtime._errors import InvalidArguments
from ._types import Command, ShellResult, ShellState, check_env

__all__ = [
    "PERSIST_OPTION",
    "RESERVED_PREFIXES",
    "STARTUP_NAMES",
    "STARTUP_PREFIXES",
    "STATE_FD",
    "STATE_LIMIT",
    "WRAPPER",
    "ShellKeeper",
    "ShellRun",
    "changes_startup",
    "parse_state",
    "persist_option",
]

PERSIST_OPTION = "persist_shell_state"
STATE_FD = 3
# Larger than any environment execve accepts (ARG_MAX is 2 MiB, one string 128 KiB, in practice
# far less is ever exported); a larger capture is refused, not truncated.
STATE_LIMIT = 1 << 20
CWD_NAME = "__RF_CWD"

# $1: the saved directory ('' = stay), $2: the command. The shell's own variables start with
# __rf_ (dropped from the capture even under `set -a`); `set +x` keeps a command's xtrace out of
# the capture's lines; `command -p env` is found whatever PATH the command left.
WRAPPER = (
    'if [ -n "$1" ] && ! cd "$1" 2>/dev/null; then '
    "printf 'ringfence: the shell'\\''s directory %s is gone; this command runs in %s\\n' "
    '"$1" "$PWD" >&2; fi; '
    '__rf_c=$2; shift 2; command eval "$__rf_c" 3>&-; '
    "{ __rf_r=$?; set +x; } 2>/dev/null; "
    f'command -p env -0 "{CWD_NAME}=$PWD" >&3; exit "$__rf_r"'
)
# An argv command: in the saved directory, with the saved exports; it cannot change them.
ARGV_WRAPPER = (
    'if [ -n "$1" ] && ! cd "$1" 2>/dev/null; then '
    "printf 'ringfence: the shell'\\''s directory %s is gone; this command runs in %s\\n' "
    '"$1" "$PWD" >&2; fi; shift; exec "$@"'
)

# Names a call may not set (run_shell's schema) are not carried over either: an allowed command
# must not run under a loader or ringfence variable an earlier command left behind.
RESERVED_PREFIXES = ("LD_", "DYLD_", "RINGFENCE_")

# The reviewed list of variables that change how a later program *starts* (what it loads, reads
# first or runs before its own code), so an earlier command could plant code that runs inside
# a later one whose own text a rule allowed. A command may export them for its own use; they are
# never replayed into the next command, and the result names each one dropped. Kept as one list
# (exact names, then prefixes), by the program that reads them:
STARTUP_NAMES = frozenset(
    {
        # the dynamic loader and glibc (glibc's own list of variables it drops for set-id
        # programs, unsecvars.h, plus the tunables and allocator switches)
        "GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH",
        "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TZDIR",
        # shells: startup files, prompts and hooks that expand or run text, options, splitting
        "BASH_ENV", "ENV", "PROMPT_COMMAND", "SHELLOPTS", "BASHOPTS", "PS0", "PS1", "PS2", "PS3",
        "PS4", "IFS", "CDPATH", "GLOBIGNORE", "BASH_XTRACEFD", "BASH_COMPAT",
        "BASH_LOADABLES_PATH", "EXECIGNORE", "INPUTRC", "FPATH", "ZDOTDIR", "POSIXLY_CORRECT",
        # where programs read their configuration (a ~/.gitconfig, a .bashrc) and which program
        # they hand text to
        "HOME", "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "EDITOR", "VISUAL", "PAGER", "MANPAGER",
        "LESSOPEN", "LESSCLOSE", "SSH_ASKPASS", "SUDO_ASKPASS", "BROWSER",
        # interpreters: code or modules loaded before the program's own
        "PYTHONSTARTUP", "PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONINSPECT",
        "PYTHONBREAKPOINT", "PYTHONWARNINGS", "PYTHONEXECUTABLE", "PYTHONPLATLIBDIR",
        "PYTHONPYCACHEPREFIX",
        "NODE_OPTIONS", "NODE_PATH", "NODE_REPL_EXTERNAL_MODULE",
        "PERL5OPT", "PERL5LIB", "PERLLIB", "PERL5DB", "PERL_MB_OPT", "PERL_MM_OPT",
        "RUBYOPT", "RUBYLIB", "RUBYSHELL",
        "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH",
        "LUA_INIT", "LUA_PATH", "LUA_CPATH", "TCLLIBPATH", "PHPRC", "PHP_INI_SCAN_DIR",
        "R_PROFILE", "R_PROFILE_USER", "R_ENVIRON", "R_ENVIRON_USER",
        # libraries that load code named by configuration
        "OPENSSL_CONF", "OPENSSL_ENGINES", "OPENSSL_MODULES",
        # build tools that read extra makefiles or flags
        "MAKEFLAGS", "GNUMAKEFLAGS", "MFLAGS", "MAKEFILES",
    }
)  # fmt: skip
STARTUP_PREFIXES = (
    "LD_",  # the loader (LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH, ...)
    "DYLD_",
    "MALLOC_",  # glibc's allocator (MALLOC_CHECK_, MALLOC_TRACE, ...)
    "BASH_FUNC_",  # exported bash functions
    "GIT_",  # git's configuration, programs and repository (GIT_CONFIG_*, GIT_SSH, GIT_DIR, ...)
    "LUA_INIT_",
    "NPM_CONFIG_",  # npm reads its configuration from npm_config_* in either case
    "npm_config_",
    "YARN_",
    "PIP_",  # pip's configuration (index, trusted hosts, ...)
)


def changes_startup(name: str) -> bool:
    """Whether ``name`` is a variable that changes how a later program starts (never replayed)."""
    return name in STARTUP_NAMES or name.startswith(STARTUP_PREFIXES)


_NAME = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
# Set by the shell itself (or by the wrapper), not by the command: never carried over.
_SHELL_OWNED = frozenset({"_", "SHLVL", "PWD"})
_SHELL_FLAG = re.compile(r"-[A-Za-z]*c")


def persist_option(options: Mapping[str, Any]) -> bool:
    """``options["persist_shell_state"]`` checked: true or false (default false)."""
    value = options.get(PERSIST_OPTION, False)
    if not isinstance(value, bool):
        raise InvalidArguments(
            f"{PERSIST_OPTION} must be true or false, not {value!r}",
            field=f"options.{PERSIST_OPTION}",
        )
    return value


@dataclass(frozen=True)
class _Saved:
    """A captured state: the shell's directory (sandbox path) and its exported variables."""

    cwd: str
    env: Mapping[str, str]


def parse_state(data: bytes) -> _Saved | str:
    """What descriptor 3 held after a command: the state, or why it is not one.

    Data only: split on NUL, each entry ``NAME=value`` with a valid name (an
    exported bash function's ``BASH_FUNC_f%%`` entry and the like are
    dropped); values decoded with ``surrogateescape`` so any byte but NUL
    round-trips. Empty data: the shell never reached the capture.
    """
    if not data:
        return "the command ended its shell (exit, exec, set -e or a signal) before its state was saved"
    if len(data) > STATE_LIMIT:
        return f"the shell's exported variables exceed {STATE_LIMIT} bytes"
    cwd: str | None = None
    env: dict[str, str] = {}
    for entry in data.split(b"\0"):
        name, eq, value = entry.partition(b"=")
        if not eq or not _NAME.fullmatch(name):
            continue
        key = name.decode("ascii")
        if key == CWD_NAME:
            cwd = value.decode("utf-8", "surrogateescape")
        elif key not in _SHELL_OWNED and not key.lower().startswith("__rf_"):
            env[key] = value.decode("utf-8", "surrogateescape")
    if not cwd or not cwd.startswith("/"):
        return "the shell's saved state had no working directory"
    return _Saved(cwd, env)


@dataclass(frozen=True)
class ShellRun:
    """One command as the keeper prepared it: its argv and environment, and what it was given."""

    argv: list[str]
    env: dict[str, str]
    given: Mapping[str, str] = field(default_factory=dict)
    captures: bool = True  # a command string (may change the state); an argv command cannot


class ShellKeeper:
    """One session's persistent shell state (see the module docstring for the rules).

    Held by the backend session, changed only by :meth:`finish` (commands of a
    session run one at a time). ``base_env`` is the environment a fresh shell
    gets (the backend's allowlist); ``shell`` the session's ``… -c`` prefix.
    Not ``enabled`` (the option off, the default): every command is fresh,
    ``begin`` gives today's ``<shell> -c <command>`` and ``finish`` the
    result as it came, so a backend calls the keeper either way.
    """

    def __init__(
        self, shell: Sequence[str], base_env: Mapping[str, str], *, enabled: bool = True
    ) -> None:
        self.enabled = enabled
        if enabled and not _SHELL_FLAG.fullmatch(shell[-1]):
            raise InvalidArguments(
                f"{PERSIST_OPTION} needs a POSIX shell run as '<shell> -c' (SessionSpec.shell), "
                f"not {list(shell)!r}",
                field="shell",
            )
        self._shell = tuple(shell)
        self._base = dict(base_env)
        self._saved: _Saved | None = None

    @property
    def cwd(self) -> str | None:
        """The shell's working directory now (a sandbox path), or None: the run's ``cwd``."""
        return self._saved.cwd if self._saved is not None else None

    def environment(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The exact environment the next command gets when given ``env``."""
        base = self._saved.env if self._saved is not None else self._base
        return {**base, **check_env(env)}

    def begin(self, command: Command, env: Mapping[str, str], *, follow: bool) -> ShellRun:
        """The argv and environment of one command (``command`` already checked).

        ``follow``: start in the shell's own directory (the caller gave no
        ``cwd`` of its own); otherwise the backend's ``cwd`` wins.
        """
        given = check_env(env)
        if not self.enabled:
            argv = [*self._shell, command] if isinstance(command, str) else list(command)
            return ShellRun(argv, self.environment(given), given, captures=False)
        where = self.cwd if follow and self.cwd is not None else ""
        if isinstance(command, str):
            argv = [*self._shell, WRAPPER, self._shell[0], where, command]
            return ShellRun(argv, self.environment(given), given)
        argv = list(command)
        if where:
            argv = [*self._shell, ARGV_WRAPPER, self._shell[0], where, *argv]
        return ShellRun(argv, self.environment(given), given, captures=False)

    def finish(self, run: ShellRun, result: ShellResult, data: bytes) -> ShellResult:
        """Save (or keep, or reset) the state from what descriptor 3 held; say so in the result."""
        if not self.enabled:
            return result
        if not run.captures:
            return replace(result, shell=ShellState("kept", self.cwd, "an argv command"))
        if result.timed_out:
            note = "it timed out: its own changes to cwd and exports are lost"
            return replace(result, shell=ShellState("kept", self.cwd, note))
        parsed = parse_state(data)
        if isinstance(parsed, str):
            self._saved = None
            note = f"{parsed}; cwd and exported variables are back to the session's start"
            return replace(result, shell=ShellState("reset", None, note))
        before = self._saved.env if self._saved is not None else self._base
        env = dict(parsed.env)
        for name, value in run.given.items():  # one call's variables are that call's alone
            if env.get(name) != value:
                continue
            if name in before:
                env[name] = before[name]
            else:
                env.pop(name)
        # The operator's own (passthrough) values of these names stay; a command's go. A name
        # the command unset comes back from the session's start too.
        dropped = sorted(
            n
            for n in {*env, *self._base}
            if (n.startswith(RESERVED_PREFIXES) or changes_startup(n))
            and env.get(n) != self._base.get(n)
        )
        for name in dropped:
            if name in self._base:
                env[name] = self._base[name]
            else:
                del env[name]
        self._saved = _Saved(parsed.cwd, env)
        note = (
            "not carried over (reserved, or they change how a later program starts): "
            + ", ".join(dropped)
            if dropped
            else None
        )
        return replace(result, shell=ShellState("saved", parsed.cwd, note, dropped=tuple(dropped)))

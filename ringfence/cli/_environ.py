"""The choices the command line makes from its flags and :class:`Settings`, and the weaker ones shown.

The library never reads these (``create_kernel``, ``select_backend`` and
``load_policy`` take what they are given, else their confined defaults):
only the command line turns ``RINGFENCE_EXECUTION_BACKEND``,
``RINGFENCE_SCRIPT_SANDBOX`` and ``RINGFENCE_MANAGED_POLICY`` (read once, by
``Settings.from_env``) into arguments. A choice weaker than the confined default, from a flag or from
the environment, is then shown (one warning line on stderr naming where it
came from) and recorded (a ``weaker_confinement`` event right after the
session's ``session_started``), besides what ``backend_started`` and each
script run record themselves.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._settings import Settings

__all__ = [
    "BACKEND_ENV",
    "MANAGED_POLICY_ENV",
    "POSTURE_ENV",
    "SCRIPT_SANDBOX_ENV",
    "Choice",
    "backend_choice",
    "managed_policy",
    "posture_choice",
    "script_sandbox_choice",
    "show_and_record",
    "weaker_choices",
]

BACKEND_ENV = (
    "RINGFENCE_EXECUTION_BACKEND"  # backends.ENV_VARIABLE (not imported: call stays light)
)
SCRIPT_SANDBOX_ENV = "RINGFENCE_SCRIPT_SANDBOX"
MANAGED_POLICY_ENV = "RINGFENCE_MANAGED_POLICY"


@dataclass(frozen=True)
class Choice:
    """One setting's value and where it came from (``--flag``, ``$VARIABLE`` or ``default``)."""

    value: str | None
    source: str


def backend_choice(flag: str | None, settings: Settings) -> Choice:
    """``--backend``, else ``$RINGFENCE_EXECUTION_BACKEND``, else none (the library's ``local``).

    Raises InvalidArguments (field ``backend``) naming the variable when it
    names no registered backend.
    """
    if flag:
        return Choice(flag, f"--backend {flag}")
    env = settings.backend
    if not env:
        return Choice(None, "default")
    from ..backends._registry import backend_names
    from ..runtime._errors import InvalidArguments

    if env not in backend_names():
        raise InvalidArguments(
            f"unknown execution backend {env!r} (from ${BACKEND_ENV}); known: "
            f"{', '.join(backend_names())}",
            field="backend",
        )
    return Choice(env, f"${BACKEND_ENV}={env}")


def script_sandbox_choice(settings: Settings) -> Choice:
    """``$RINGFENCE_SCRIPT_SANDBOX`` (``best-effort`` or ``none``), else the library's ``strict``."""
    env = settings.script_sandbox
    return Choice(env, f"${SCRIPT_SANDBOX_ENV}={env}") if env else Choice(None, "default")


def managed_policy(settings: Settings) -> str | None:
    """``$RINGFENCE_MANAGED_POLICY``: the managed policy file the command line loads instead."""
    return settings.managed_policy


POSTURE_ENV = "RINGFENCE_POSTURE"


def posture_choice(flag: str | None, settings: Settings) -> Choice:
    """``--posture``, else ``$RINGFENCE_POSTURE``, else the library's ``ask``."""
    if flag:
        return Choice(flag, f"--posture {flag}")
    if settings.posture:
        return Choice(settings.posture, f"${POSTURE_ENV}={settings.posture}")
    return Choice("ask", "default")


def _posture_means(value: str) -> str:
    """What a posture looser than ``ask`` lets run unasked, for its warning."""
    if value == "unrestricted":
        return (
            "every call the policy does not deny or ask about runs without asking, tools that "
            "ask under every other posture included (posture unrestricted)"
        )
    if value == "allow-reversible":
        return "reversible calls (writes, commands) run without asking (posture allow-reversible)"
    return f"every call the policy does not deny or ask about runs without asking (posture {value})"


def weaker_choices(
    backend: Choice,
    script_sandbox: Choice,
    sandbox: str | None,
    posture: Choice | None = None,
) -> list[dict[str, Any]]:
    """The session's choices below the confined default, each with its source and meaning.

    A posture looser than ``ask`` is one when the environment chose it (nothing on the
    command line says so: a project's ``.envrc`` can set it) and, whatever chose it, when it
    is ``unrestricted`` (even the tools every other posture asks about run unasked)."""
    out: list[dict[str, Any]] = []
    if (
        posture is not None
        and posture.value not in (None, "ask")
        and (posture.source.startswith("$") or posture.value == "unrestricted")
    ):
        out.append(
            {
                "setting": "posture",
                "value": posture.value,
                "source": posture.source,
                "means": _posture_means(str(posture.value)),
            }
        )
    if backend.value == "host":
        out.append(
            {
                "setting": "backend",
                "value": "host",
                "source": backend.source,
                "means": "run_shell runs UNCONFINED on the host (your user's files, processes "
                "and network)",
            }
        )
    if sandbox == "best-effort":
        out.append(
            {
                "setting": "sandbox",
                "value": sandbox,
                "source": f"--sandbox {sandbox}",
                "means": "run_shell's local sandbox applies only the layers this machine offers",
            }
        )
    if script_sandbox.value not in (None, "strict"):
        out.append(
            {
                "setting": "script_sandbox",
                "value": script_sandbox.value,
                "source": script_sandbox.source,
                "means": f"run_tool_script's OS sandbox is {script_sandbox.value}",
            }
        )
    return out


def show_and_record(kernel: Any, choices: list[dict[str, Any]]) -> None:
    """One stderr warning per weaker choice, and one ``weaker_confinement`` event for all."""
    if not choices:
        return
    for c in choices:
        sys.stderr.write(f"ringfence: warning: {c['means']} ({c['source']})\n")
    kernel.events.emit("weaker_confinement", kernel.session_id, choices=choices)

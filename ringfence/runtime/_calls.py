"""The values one call is made of: its context, the Gate's authorization, its outcome.

* :class:`CallContext`: what an executor learns about, and may do for, the
  call it runs (not the kernel).
* :class:`Authorization`: the Gate's answer for one call, made only by the
  Gate (:class:`NoPublicConstructor`).
* :class:`Outcome`: how one call ended (a value, a staged placeholder, or an
  error).

Made by the Kernel (``_kernel``) and the Gate (``_gate``); nothing here
decides anything.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, final

from ._errors import RingfenceError
from ._events import KERNEL_KINDS, RECORD_FIELDS
from ._intents import Intent
from ._output import cap_text
from ._redact import Redactor
from ._tools import ToolSpec
from .policy._decide import Decision

if TYPE_CHECKING:
    from ._kernel import Kernel

__all__ = ["AskHook", "Authorization", "CallContext", "NoPublicConstructor", "Outcome", "new_id"]

# The keys CallContext.emit fills in itself, on top of the log's own fields.
_CONTEXT_FIELDS = RECORD_FIELDS | {"call_id", "tool"}

AskHook = Callable[[], contextlib.AbstractAsyncContextManager[None]]


def new_id() -> str:
    return os.urandom(8).hex()  # secrets.token_hex(8), without its two extra calls


class NoPublicConstructor(type):
    """A metaclass that makes ``Cls(...)`` a TypeError; the owner calls ``Cls._create(...)``.

    trio's pattern: authority objects (an :class:`Authorization`) can be made only
    where the Gate decided, never by a caller holding the class.
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{cls.__module__}.{cls.__qualname__} has no public constructor")

    def _create(cls, *args: Any, **kwargs: Any) -> Any:
        return super().__call__(*args, **kwargs)


class CallContext(metaclass=NoPublicConstructor):
    """What an executor learns about, and may do for, the call it is running.

    Narrow on purpose: the call's identity (``tool``, ``call_id``,
    ``trace_id``, ``origin``, ``posture``), its own events (:meth:`emit`),
    redaction and the output cap/spool (:meth:`redact`, :meth:`cap`), and
    nested calls that re-enter the Gate as children of this one
    (:meth:`invoke`). It is not the kernel: an executor cannot change the
    posture, the rules, the approver or the grants, and cannot run a tool
    past the Gate. Made only by the kernel.
    """

    __slots__ = (
        "_approved",
        "_arguments",
        "_decision",
        "_kernel",
        "call_id",
        "origin",
        "posture",
        "tool",
        "trace_id",
    )

    def __init__(
        self,
        kernel: Kernel,
        tool: ToolSpec,
        call_id: str,
        trace_id: str,
        origin: str,
        arguments: Mapping[str, Any] | None = None,
        decision: Decision | None = None,
    ) -> None:
        self._kernel = kernel
        self.tool = tool
        self.call_id = call_id
        self.trace_id = trace_id
        self.origin = origin
        self.posture = kernel.posture
        self._arguments = dict(arguments or {})
        self._decision = decision
        self._approved: set[tuple[str, str]] = set()

    # -- paths judged as the file they resolve to -------------------------------------

    @property
    def arguments(self) -> dict[str, Any]:
        """A copy of the arguments the Gate judged for this call."""
        return dict(self._arguments)

    def judges_path(self, argument: str) -> bool:
        """Whether a rule for this tool looks at ``argument``: only then need a tool say what
        the path resolves to (:meth:`confirm_path`, :meth:`check_path`)."""
        return self._kernel._path_rules_for(self.tool, argument)

    async def confirm_path(self, argument: str, resolved: str) -> None:
        """Judge this call again with ``argument`` as ``resolved``, the workspace name of the
        file the tool will open (after every link was followed), before it opens it.

        Rules compare names; this makes a deny or ask rule on a path hold for the file, not
        only for the spelling. A deny raises ``denied``; an ask goes to the session's grants
        or the approver like any ask (a refusal raises ``denied``). Recorded as a ``notice``.
        """
        if await self._kernel._confirm_resolved_path(
            self.tool,
            self._arguments,
            self._decision,
            argument,
            resolved,
            self.call_id,
            self.trace_id,
            self.origin,
        ):
            self._approved.add((argument, resolved))

    def check_path(self, argument: str, resolved: str) -> None:
        """The same judgment, at the place the tool actually opens (any thread; no asking).

        A deny raises ``denied``; an ask not approved by :meth:`confirm_path` for this very
        name (the link changed since) raises ``denied`` too: fail closed, nobody to ask here.
        """
        if (argument, resolved) in self._approved:
            return
        self._kernel._check_resolved_path(
            self.tool, self._arguments, self._decision, argument, resolved
        )

    def emit(self, kind: str, /, **data: Any) -> None:
        """Add a tool-specific event (``notice``, ``output``, …) to this call's trace.

        The record gets this call's ``call_id`` and ``tool``. Raises ValueError
        when ``kind`` is one the kernel writes itself (``started``,
        ``finished``, …; a tool cannot fake its own outcome) or ``data`` uses
        a key the record already has (``tool``, ``call_id``, ``seq``, ``ts``,
        ``kind``, ``trace_id``, ``prev``, ``hash``): name such data otherwise
        (``nested_tool=…``).
        """
        if kind in KERNEL_KINDS:
            raise ValueError(f"CallContext.emit: {kind!r} records are written by the kernel only")
        clash = _CONTEXT_FIELDS.intersection(data)
        if clash:
            raise ValueError(
                f"CallContext.emit({kind!r}): {', '.join(sorted(clash))} is filled in by the "
                "kernel; name the data otherwise (e.g. nested_tool=…)"
            )
        self._kernel.events.emit(
            kind, self.trace_id, call_id=self.call_id, tool=self.tool.name, **data
        )

    # -- redaction and output ----------------------------------------------------------

    @property
    def redactor(self) -> Redactor:
        """The session's redactor (registering a secret only ever hides more)."""
        return self._kernel.redactor

    def redact(self, text: str) -> str:
        return self._kernel.redactor.redact(text)

    def redact_value(self, value: Any) -> Any:
        return self._kernel.redactor.redact_value(value)

    @property
    def output_cap_bytes(self) -> int:
        return self._kernel.output_cap_bytes

    @property
    def spool_dir(self) -> Path | None:
        return self._kernel.spool_dir

    def cap(self, text: str) -> str:
        """``text`` cut to the session's output cap, the whole of it spooled to a file."""
        return cap_text(text, self._kernel.output_cap_bytes, self._kernel.spool_dir).text

    # -- nested calls ------------------------------------------------------------------

    async def invoke(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        origin: str = "nested",
        trace_id: str | None = None,
        parent_id: str | None = None,
        on_ask: AskHook | None = None,
    ) -> Outcome:
        """A call made by this one: it re-enters the Gate (decided, asked, recorded) as a
        child of this call (``parent_id``), in this call's trace unless ``trace_id``
        names another. ``parent_id``, if given, must be this call's id."""
        if parent_id is not None and parent_id != self.call_id:
            raise ValueError("CallContext.invoke: a nested call's parent is the calling call")
        return await self._kernel.invoke(
            tool,
            arguments,
            origin=origin,
            trace_id=trace_id or self.trace_id,
            parent_id=self.call_id,
            on_ask=on_ask,
        )

    def __repr__(self) -> str:
        return f"CallContext({self.tool.name!r}, call_id={self.call_id!r}, origin={self.origin!r})"


@final
@dataclass(frozen=True)
class Authorization(metaclass=NoPublicConstructor):
    """The Gate's answer for one call. Only :meth:`Kernel.authorize` makes these
    (``Authorization(...)`` is a TypeError)."""

    spec: ToolSpec
    arguments: dict[str, Any]
    decision: Decision
    call_id: str
    trace_id: str
    origin: str
    intent: Intent | None = None
    staged: bool = False


@dataclass(frozen=True)
class Outcome:
    """The result of one call: a value, a staged placeholder, or an error."""

    tool: str
    call_id: str
    trace_id: str
    origin: str
    decision: Decision | None
    value: Any = None
    error: RingfenceError | None = None
    staged: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None

    def unwrap(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "tool": self.tool,
            "call_id": self.call_id,
            "decision": self.decision.to_dict() if self.decision else None,
            "staged": self.staged,
        }
        if self.error is not None:
            out["error"] = self.error.to_dict()
        else:
            out["result"] = self.value
        return out

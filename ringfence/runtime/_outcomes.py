"""Exactly one outcome per call: ``failed`` and ``cancelled`` records, errors made safe.

:class:`RecordingOutcome` wraps every step of a call after its ``proposed``
record: whatever escapes it ends the call with its one outcome record. A
RingfenceError is recorded as ``failed`` in its redacted, cut form; another
Exception (a bug or failure inside ringfence) becomes a recorded ``tool_error``
raised from it; a BaseException (cancellation, KeyboardInterrupt) is recorded
as ``cancelled`` and propagates unchanged.

Errors are never rewritten in flight: the redacted, cut form of an error is a
copy (``RingfenceError.with_``, which keeps its class, decision, ``__cause__``
and traceback), raised in its place. The object a tool raised stays as it was,
so an error shared by two calls or sessions (or raised twice) is made safe by
each for itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from ._errors import RingfenceError, ToolError
from ._output import cap_text, escape_surrogates

if TYPE_CHECKING:
    from ._kernel import Kernel

__all__ = ["ERROR_MESSAGE_BYTES", "RecordingOutcome", "fail", "unexpected"]

# An error message is cut (after redaction) to this many bytes, marker included, so a
# tool cannot put megabytes into a reply and an event through its exception text.
ERROR_MESSAGE_BYTES = 8 * 1024
# Room for cap_text's marker: a message cut once fits the limit, so cutting is idempotent.
_MARKER_ROOM = 256


class RecordingOutcome:
    """Whatever escapes the block ends the call with its one outcome record (see above).

    Nesting is safe: the innermost block records, outer ones find the call
    ended. A class, not a generator context manager: it is on every call's path.
    """

    __slots__ = ("_call_id", "_kernel", "_tool", "_trace_id")

    def __init__(self, kernel: Kernel, call_id: str, trace_id: str, tool: str) -> None:
        self._kernel, self._call_id, self._trace_id, self._tool = kernel, call_id, trace_id, tool

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None:
            return False
        kernel, call_id, trace_id, tool = self._kernel, self._call_id, self._trace_id, self._tool
        if isinstance(exc, RingfenceError):
            safe = fail(kernel, call_id, trace_id, tool, exc)
            if safe is not exc:
                # The copy goes on in its place, from the original's cause; `from` also
                # keeps the unredacted original out of any traceback shown of the copy.
                raise safe from exc.__cause__
        elif isinstance(exc, Exception):
            raise fail(kernel, call_id, trace_id, tool, unexpected(tool, exc)) from exc
        else:
            cancel(kernel, call_id, trace_id, tool, exc)
        return False  # the exception propagates


def fail(
    kernel: Kernel, call_id: str, trace_id: str, tool: str, exc: RingfenceError
) -> RingfenceError:
    """Record ``failed`` for ``call_id`` (once) with ``exc`` made safe; return that form.

    Safe means redacted with the session's redactor, message first and cut
    after (a secret straddling the cut is already the marker), then details.
    The result is ``exc`` itself when that changes nothing, else a copy
    (``exc.with_``); ``exc`` is never changed.
    """
    message = escape_surrogates(kernel.redactor.redact(exc.message))
    if len(message.encode("utf-8")) > ERROR_MESSAGE_BYTES:
        message = cap_text(message, ERROR_MESSAGE_BYTES - _MARKER_ROOM).text
    details = kernel.redactor.redact_value(exc.details)
    safe = (
        exc
        if (message, details) == (exc.message, exc.details)
        else exc.with_(message=message, details=details)
    )
    kernel._conclude(call_id, trace_id, "failed", tool=tool, error=safe.to_dict())
    return safe


def cancel(kernel: Kernel, call_id: str, trace_id: str, tool: str, exc: BaseException) -> None:
    """Record ``cancelled`` for a call that ends by cancellation (the caller re-raises)."""
    # Shielded, as trio does its cleanup: the record must not be lost to the same
    # cancellation, and stays right if writing events ever becomes async.
    with trio.CancelScope(shield=True):
        kernel._conclude(call_id, trace_id, "cancelled", tool=tool, reason=type(exc).__name__)


def unexpected(tool: str, exc: Exception) -> ToolError:
    """An exception no layer translated, as the tool_error the caller gets."""
    error = ToolError(f"{tool} failed inside ringfence: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error

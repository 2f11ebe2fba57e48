"""One exception tree for everything ringfence refuses or fails at.

::

    RingfenceError                 (code: str, message: str, field: str | None)
    ├── InvalidArguments           invalid_arguments   bad input, named by field
    ├── NotFound                   not_found           no such tool, file or resource
    ├── Denied                     denied              refused by policy or by a person
    ├── OutsideWorkspace           outside_workspace   a path that leaves the roots
    ├── GitMetadata                git_metadata        a write that touches git metadata
    ├── Unwritable                 unwritable          the target cannot be replaced safely
    ├── ToolTimeout                timeout             a deadline passed; the work was killed
    ├── Unavailable                unavailable         a sandbox layer, daemon or dependency is missing
    └── ToolError                  tool_error          the tool ran and failed

Every error carries a stable ``code`` (the strings above, shared by the CLI,
the event stream, the script bridge and the MCP server) and a message meant for
a person *and* a model: it says what was refused and why, so nobody retries
blindly. Errors from dependencies are translated at the boundary where they
are caught; none leaks through the public API untranslated.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, Self

__all__ = [
    "ERROR_CODES",
    "Denied",
    "GitMetadata",
    "InvalidArguments",
    "NotFound",
    "OutsideWorkspace",
    "RingfenceError",
    "ToolError",
    "ToolTimeout",
    "Unavailable",
    "Unwritable",
    "error_from_code",
]


class _Keep:
    """The type of :data:`_KEEP`: "leave this attribute as it is" (``None`` is a value)."""


_KEEP: Final = _Keep()


class RingfenceError(Exception):
    """Base of every error ringfence raises on purpose."""

    code: ClassVar[str] = "tool_error"

    def __init__(self, message: str, *, field: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.details = details
        # The Gate's Decision when a refusal came from it (kept off the wire form).
        self.decision: Any = None

    def with_decision(self, decision: Any) -> RingfenceError:
        """Attach the Gate's Decision (to an error just made, before it is raised)."""
        self.decision = decision
        return self

    def with_(
        self,
        *,
        message: str | None = None,
        field: str | _Keep | None = _KEEP,
        details: dict[str, Any] | None = None,
    ) -> Self:
        """A copy of this error with ``message``, ``field`` or ``details`` replaced.

        The copy has the same class, code and decision, and carries this
        error's ``__cause__``, ``__context__`` and traceback, so ``raise
        err.with_(field="cwd") from err.__cause__`` changes what the error
        says without losing where it came from. The original is left as it
        was: an error that has been raised (and maybe recorded, or seen by
        another task) is not rewritten in flight. ``field=None`` clears the
        field; leaving it out keeps it.
        """
        cls = type(self)
        copy = cls.__new__(cls)
        copy.__dict__.update(self.__dict__)
        copy.message = self.message if message is None else message
        if not isinstance(field, _Keep):
            copy.field = field
        copy.details = dict(self.details if details is None else details)
        copy.args = (copy.message,)
        copy.__cause__ = self.__cause__
        copy.__context__ = self.__context__
        copy.__suppress_context__ = self.__suppress_context__
        copy.__traceback__ = self.__traceback__
        return copy

    def to_dict(self) -> dict[str, Any]:
        """The wire form used by ``--json``, events, the bridge and ``serve``."""
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            out["field"] = self.field
        if self.details:
            out["details"] = self.details
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class InvalidArguments(RingfenceError):
    code = "invalid_arguments"


class NotFound(RingfenceError):
    code = "not_found"


class Denied(RingfenceError):
    code = "denied"


class OutsideWorkspace(RingfenceError):
    code = "outside_workspace"


class GitMetadata(RingfenceError):
    code = "git_metadata"


class Unwritable(RingfenceError):
    code = "unwritable"


class ToolTimeout(RingfenceError):
    code = "timeout"


class Unavailable(RingfenceError):
    code = "unavailable"


class ToolError(RingfenceError):
    code = "tool_error"


_BY_CODE: dict[str, type[RingfenceError]] = {
    cls.code: cls
    for cls in (
        InvalidArguments,
        NotFound,
        Denied,
        OutsideWorkspace,
        GitMetadata,
        Unwritable,
        ToolTimeout,
        Unavailable,
        ToolError,
    )
}

ERROR_CODES: frozenset[str] = frozenset(_BY_CODE)


def error_from_code(code: str, message: str, **details: Any) -> RingfenceError:
    """Rebuild an error received over a wire (bridge, MCP); unknown codes become ToolError."""
    cls = _BY_CODE.get(code, ToolError)
    return cls(message, **details)

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

from typing import Any, ClassVar

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
        self.decision = decision
        return self

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

"""ringfence.runtime: the Kernel, the Gate and everything every call passes through.

This package imports none of its clients (workspace, backends, bridge,
mcp_host, serve, cli); they register tools into a Kernel.

The surface is what a host uses, in five groups: the kernel and defining a tool
(``Kernel``, ``ToolSpec``, ``Consequence``, ``CallContext``, ``Outcome``,
``ProviderTools``, ``ToolFormat``); posture and policy (``Posture``, ``Verdict``,
``Effect``, ``Rules``, ``Policy``, ``load_policy``, ``load_layers``); the one error
tree and its codes (``RingfenceError``, its subclasses, ``ERROR_CODES``); approvals
and hooks (``Approver``, ``ApprovalRequest``, ``ApprovalAnswer``, ``Choice``, the
three approvers, ``Hook``); the event stream (``EventSink``, ``FileSink``,
``MemorySink``, ``verify_file``); where ringfence keeps its state and finds bubblewrap
(``Places``, ``use_places``). Everything else stays in its private module
(``ringfence.runtime._events``, ``.policy._files``, ...), and ringfence's own
packages import it from there.
"""

from ._approval import (
    ApprovalAnswer as ApprovalAnswer,
    ApprovalRequest as ApprovalRequest,
    Approver as Approver,
    Choice as Choice,
    HeadlessDenyApprover as HeadlessDenyApprover,
    ScriptedApprover as ScriptedApprover,
    TerminalApprover as TerminalApprover,
)
from ._calls import CallContext as CallContext, Outcome as Outcome
from ._errors import (
    ERROR_CODES as ERROR_CODES,
    Denied as Denied,
    GitMetadata as GitMetadata,
    InvalidArguments as InvalidArguments,
    NotFound as NotFound,
    OutsideWorkspace as OutsideWorkspace,
    RingfenceError as RingfenceError,
    ToolError as ToolError,
    ToolTimeout as ToolTimeout,
    Unavailable as Unavailable,
    Unwritable as Unwritable,
)
from ._events import EventSink as EventSink, FileSink as FileSink, MemorySink as MemorySink
from ._files import Places as Places, use_places as use_places
from ._hooks import Hook as Hook
from ._kernel import Kernel as Kernel
from ._providers import ProviderTools as ProviderTools, ToolFormat as ToolFormat
from ._tools import Consequence as Consequence, ToolSpec as ToolSpec
from ._verify import verify_file as verify_file
from .policy._decide import Posture as Posture, Rules as Rules, Verdict as Verdict
from .policy._files import load_layers as load_layers, load_policy as load_policy
from .policy._judge import Policy as Policy
from .policy._rules import Effect as Effect

__all__ = [
    "ERROR_CODES",
    "ApprovalAnswer",
    "ApprovalRequest",
    "Approver",
    "CallContext",
    "Choice",
    "Consequence",
    "Denied",
    "Effect",
    "EventSink",
    "FileSink",
    "GitMetadata",
    "HeadlessDenyApprover",
    "Hook",
    "InvalidArguments",
    "Kernel",
    "MemorySink",
    "NotFound",
    "Outcome",
    "OutsideWorkspace",
    "Places",
    "Policy",
    "Posture",
    "ProviderTools",
    "RingfenceError",
    "Rules",
    "ScriptedApprover",
    "TerminalApprover",
    "ToolError",
    "ToolFormat",
    "ToolSpec",
    "ToolTimeout",
    "Unavailable",
    "Unwritable",
    "Verdict",
    "load_layers",
    "load_policy",
    "use_places",
    "verify_file",
]

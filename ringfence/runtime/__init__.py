"""ringfence.runtime: the Kernel, the Gate and everything every call passes through.

This package imports none of its clients (workspace, backends, bridge,
mcp_host, serve, cli); they register tools into a Kernel.
"""

from ._approval import (
    ApprovalAnswer as ApprovalAnswer,
)
from ._approval import (
    ApprovalRequest as ApprovalRequest,
)
from ._approval import (
    Approver as Approver,
)
from ._approval import (
    Choice as Choice,
)
from ._approval import (
    HeadlessDenyApprover as HeadlessDenyApprover,
)
from ._approval import (
    ScriptedApprover as ScriptedApprover,
)
from ._approval import (
    TerminalApprover as TerminalApprover,
)
from ._approval import (
    default_approver as default_approver,
)
from ._canonical import canonical_json as canonical_json
from ._canonical import digest as digest
from ._caps import CappedText as CappedText
from ._caps import cap_text as cap_text
from ._errors import (
    ERROR_CODES as ERROR_CODES,
)
from ._errors import (
    Denied as Denied,
)
from ._errors import (
    GitMetadata as GitMetadata,
)
from ._errors import (
    InvalidArguments as InvalidArguments,
)
from ._errors import (
    NotFound as NotFound,
)
from ._errors import (
    OutsideWorkspace as OutsideWorkspace,
)
from ._errors import (
    RingfenceError as RingfenceError,
)
from ._errors import (
    ToolError as ToolError,
)
from ._errors import (
    ToolTimeout as ToolTimeout,
)
from ._errors import (
    Unavailable as Unavailable,
)
from ._errors import (
    Unwritable as Unwritable,
)
from ._errors import (
    error_from_code as error_from_code,
)
from ._events import (
    ChainReport as ChainReport,
)
from ._events import (
    EventLog as EventLog,
)
from ._events import (
    EventSink as EventSink,
)
from ._events import (
    FileSink as FileSink,
)
from ._events import (
    MemorySink as MemorySink,
)
from ._events import (
    verify_chain as verify_chain,
)
from ._events import (
    verify_file as verify_file,
)
from ._files import atomic_write as atomic_write
from ._files import ringfence_home as ringfence_home
from ._intents import Intent as Intent
from ._intents import IntentAuthority as IntentAuthority
from ._intents import verify_intent as verify_intent
from ._kernel import (
    Authorization as Authorization,
)
from ._kernel import (
    CallContext as CallContext,
)
from ._kernel import (
    Kernel as Kernel,
)
from ._kernel import (
    Outcome as Outcome,
)
from ._plan import Plan as Plan
from ._plan import StagedCall as StagedCall
from ._policy import (
    Decision as Decision,
)
from ._policy import (
    Posture as Posture,
)
from ._policy import (
    Rules as Rules,
)
from ._policy import (
    Verdict as Verdict,
)
from ._policy import (
    decide as decide,
)
from ._redact import (
    MARKER as MARKER,
)
from ._redact import (
    Redactor as Redactor,
)
from ._redact import (
    StreamRedactor as StreamRedactor,
)
from ._redact import (
    is_secret_name as is_secret_name,
)
from ._tools import Consequence as Consequence
from ._tools import Registry as Registry
from ._tools import ToolSpec as ToolSpec

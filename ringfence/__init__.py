"""ringfence: a governed, sandboxed tool-execution runtime for AI agents.

Embed it::

    import ringfence

    async with ringfence.create_kernel(roots=["./project"], posture="ask") as kernel:
        text = await kernel.call("read_file", {"path": "README.md"})
"""

from ._embed import create_kernel as create_kernel
from .runtime import (
    ApprovalAnswer as ApprovalAnswer,
)
from .runtime import (
    ApprovalRequest as ApprovalRequest,
)
from .runtime import (
    Approver as Approver,
)
from .runtime import (
    Consequence as Consequence,
)
from .runtime import (
    Denied as Denied,
)
from .runtime import (
    GitMetadata as GitMetadata,
)
from .runtime import (
    HeadlessDenyApprover as HeadlessDenyApprover,
)
from .runtime import (
    InvalidArguments as InvalidArguments,
)
from .runtime import (
    Kernel as Kernel,
)
from .runtime import (
    NotFound as NotFound,
)
from .runtime import (
    Outcome as Outcome,
)
from .runtime import (
    OutsideWorkspace as OutsideWorkspace,
)
from .runtime import (
    Posture as Posture,
)
from .runtime import (
    RingfenceError as RingfenceError,
)
from .runtime import (
    Rules as Rules,
)
from .runtime import (
    ScriptedApprover as ScriptedApprover,
)
from .runtime import (
    TerminalApprover as TerminalApprover,
)
from .runtime import (
    ToolError as ToolError,
)
from .runtime import (
    ToolSpec as ToolSpec,
)
from .runtime import (
    ToolTimeout as ToolTimeout,
)
from .runtime import (
    Unavailable as Unavailable,
)
from .runtime import (
    Unwritable as Unwritable,
)

__version__ = "0.1.0"

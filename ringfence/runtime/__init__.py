"""ringfence.runtime: the Kernel, the Gate and everything every call passes through.

This package imports none of its clients (workspace, backends, bridge,
mcp_host, serve, cli); they register tools into a Kernel.
"""

from ._approval import (
    ApprovalAnswer as ApprovalAnswer,
    ApprovalRequest as ApprovalRequest,
    Approver as Approver,
    Choice as Choice,
    HeadlessDenyApprover as HeadlessDenyApprover,
    ScriptedApprover as ScriptedApprover,
    TerminalApprover as TerminalApprover,
    default_approver as default_approver,
)
from ._calls import (
    Authorization as Authorization,
    CallContext as CallContext,
    NoPublicConstructor as NoPublicConstructor,
    Outcome as Outcome,
)
from ._canonical import canonical_json as canonical_json, digest as digest
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
    error_from_code as error_from_code,
)
from ._events import (
    GENESIS as GENESIS,
    EventLog as EventLog,
    EventSink as EventSink,
    FileSink as FileSink,
    MemorySink as MemorySink,
)
from ._files import atomic_write as atomic_write, ringfence_home as ringfence_home
from ._hooks import HOOK_POINTS as HOOK_POINTS, Hook as Hook, HookAnswer as HookAnswer
from ._intents import (
    Intent as Intent,
    IntentAuthority as IntentAuthority,
    check_intent as check_intent,
    key_fingerprint as key_fingerprint,
    load_public_keys as load_public_keys,
    verify_intent as verify_intent,
)
from ._kernel import Kernel as Kernel, RulesHandle as RulesHandle
from ._output import (
    MAX_SPOOL_BYTES as MAX_SPOOL_BYTES,
    CappedText as CappedText,
    OutputBuffer as OutputBuffer,
    cap_text as cap_text,
    escape_surrogates as escape_surrogates,
)
from ._plan import Plan as Plan, StagedCall as StagedCall
from ._providers import ProviderTools as ProviderTools, ToolFormat as ToolFormat
from ._redact import (
    MARKER as MARKER,
    Redactor as Redactor,
    StreamRedactor as StreamRedactor,
    credential_parts as credential_parts,
    is_secret_key as is_secret_key,
    is_secret_name as is_secret_name,
    mask_command_args as mask_command_args,
    script_credential_literals as script_credential_literals,
)
from ._skills import Skill as Skill
from ._tools import Consequence as Consequence, Registry as Registry, ToolSpec as ToolSpec
from ._verify import (
    ChainReport as ChainReport,
    UnsealedSession as UnsealedSession,
    verify_chain as verify_chain,
    verify_file as verify_file,
)
from .policy._decide import (
    Decision as Decision,
    Posture as Posture,
    Rules as Rules,
    Verdict as Verdict,
    decide as decide,
    evaluate_policy as evaluate_policy,
)
from .policy._files import (
    PolicyFileError as PolicyFileError,
    PolicyLayers as PolicyLayers,
    cli_rules as cli_rules,
    load_layers as load_layers,
    load_policy as load_policy,
    load_policy_file as load_policy_file,
    managed_policy_path as managed_policy_path,
    parse_policy_file as parse_policy_file,
)
from .policy._judge import (
    PartVerdict as PartVerdict,
    Policy as Policy,
    PolicyVerdict as PolicyVerdict,
)
from .policy._matchers import normalize_path as normalize_path
from .policy._mcp import (
    McpPolicy as McpPolicy,
    McpServerPolicy as McpServerPolicy,
    McpStatement as McpStatement,
)
from .policy._rules import (
    Effect as Effect,
    Rule as Rule,
    RuleError as RuleError,
    parse_rule as parse_rule,
)
from .shell._words import ShellParse as ShellParse, parse_command as parse_command

__all__ = [
    "ERROR_CODES",
    "GENESIS",
    "HOOK_POINTS",
    "MARKER",
    "MAX_SPOOL_BYTES",
    "ApprovalAnswer",
    "ApprovalRequest",
    "Approver",
    "Authorization",
    "CallContext",
    "CappedText",
    "ChainReport",
    "Choice",
    "Consequence",
    "Decision",
    "Denied",
    "Effect",
    "EventLog",
    "EventSink",
    "FileSink",
    "GitMetadata",
    "HeadlessDenyApprover",
    "Hook",
    "HookAnswer",
    "Intent",
    "IntentAuthority",
    "InvalidArguments",
    "Kernel",
    "McpPolicy",
    "McpServerPolicy",
    "McpStatement",
    "MemorySink",
    "NoPublicConstructor",
    "NotFound",
    "Outcome",
    "OutputBuffer",
    "OutsideWorkspace",
    "PartVerdict",
    "Plan",
    "Policy",
    "PolicyFileError",
    "PolicyLayers",
    "PolicyVerdict",
    "Posture",
    "ProviderTools",
    "Redactor",
    "Registry",
    "RingfenceError",
    "Rule",
    "RuleError",
    "Rules",
    "RulesHandle",
    "ScriptedApprover",
    "ShellParse",
    "Skill",
    "StagedCall",
    "StreamRedactor",
    "TerminalApprover",
    "ToolError",
    "ToolFormat",
    "ToolSpec",
    "ToolTimeout",
    "Unavailable",
    "UnsealedSession",
    "Unwritable",
    "Verdict",
    "atomic_write",
    "canonical_json",
    "cap_text",
    "check_intent",
    "cli_rules",
    "credential_parts",
    "decide",
    "default_approver",
    "digest",
    "error_from_code",
    "escape_surrogates",
    "evaluate_policy",
    "is_secret_key",
    "is_secret_name",
    "key_fingerprint",
    "load_layers",
    "load_policy",
    "load_policy_file",
    "load_public_keys",
    "managed_policy_path",
    "mask_command_args",
    "normalize_path",
    "parse_command",
    "parse_policy_file",
    "parse_rule",
    "ringfence_home",
    "script_credential_literals",
    "verify_chain",
    "verify_file",
    "verify_intent",
]

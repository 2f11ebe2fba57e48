"""The manifest's values: :class:`ServerConfig` (one ``[[server]]``), :class:`Manifest`, their enums.

These are what the rest of ``mcp_host`` reads; the file format is declared in
:mod:`._model` (which builds them) and written by :mod:`._edit`.
A ``ServerConfig`` holds values as written (``$WORKSPACE`` unexpanded) and is
immutable; building one directly (as the CLI and tests do) is not validated,
:func:`~._model.parse_manifest` is.
"""

from __future__ import annotations

import enum
import errno
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType

from ...runtime._errors import InvalidArguments
from ...runtime._files import ringfence_home
from ...runtime.policy._mcp import McpPolicy, McpServerPolicy, McpStatement
from ...runtime.policy._rules import Effect

__all__ = [
    "DEFAULT_APPROVED",
    "KNOWN_CAPABILITIES",
    "MAX_MANIFEST_BYTES",
    "OAUTH_GRANTS",
    "AuthMode",
    "Manifest",
    "Policy",
    "Sandbox",
    "ServerConfig",
    "Transport",
    "Trust",
    "iter_enabled",
    "manifest_bytes",
    "manifest_path",
    "sanitize_part",
    "workspace_manifest_path",
]

DEFAULT_APPROVED = frozenset({"tools", "prompts"})
# Capabilities a server can advertise in its initialize result (2025-11-25), by ledger name.
KNOWN_CAPABILITIES = frozenset({"tools", "prompts", "resources", "logging", "completions", "tasks"})

MAX_OUTPUT_BYTES_LIMIT = 16 * 1024 * 1024
# The largest JSON-RPC message read from a server (checked before it is parsed).
DEFAULT_MAX_MESSAGE_BYTES = 32 * 1024 * 1024
MAX_MESSAGE_BYTES_LIMIT = 1024 * 1024 * 1024
MAX_TIMEOUT_SECONDS = 3600.0


class Transport(enum.StrEnum):
    STDIO = "stdio"
    HTTP = "http"
    SSE = "sse"


class Trust(enum.StrEnum):
    UNTRUSTED = "untrusted"
    TRUSTED = "trusted"


class Sandbox(enum.StrEnum):
    """How a stdio server's process runs: as the user (``none``) or confined (``local``)."""

    NONE = "none"
    LOCAL = "local"


class AuthMode(enum.StrEnum):
    """How an http/sse server is authenticated: nothing, a static bearer token, or OAuth 2.1."""

    NONE = "none"
    BEARER = "bearer"
    OAUTH = "oauth"


OAUTH_GRANTS = ("authorization_code", "client_credentials", "identity_assertion")


# How a server-initiated request (sampling, elicitation) is answered: deny, ask or allow,
# the policy's one Effect (kept under this name for the manifest's users).
Policy = Effect


def sanitize_part(text: str, fallback: str = "x") -> str:
    """One part of a registered name: lower case ``[a-z0-9_]``, runs of ``_`` collapsed.

    ``"Read File!"`` → ``"read_file"``. An empty result becomes ``fallback``.
    """
    out = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")
    return out or fallback


@dataclass(frozen=True)
class ServerConfig:
    """One ``[[server]]`` table, validated. Values are as written (``$WORKSPACE`` unexpanded)."""

    name: str
    transport: Transport
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    inherit_env: tuple[str, ...] = ()
    cwd: str | None = None
    url: str | None = None
    api_key_env: str | None = None
    headers_env: Mapping[str, str] = field(default_factory=dict)
    trust: Trust = Trust.UNTRUSTED
    enabled: bool = True
    approved_capabilities: frozenset[str] = DEFAULT_APPROVED
    allow_tools: tuple[str, ...] | None = None
    deny_tools: tuple[str, ...] = ()
    allow_resources: tuple[str, ...] | None = None
    deny_resources: tuple[str, ...] = ()
    read_only_tools: tuple[str, ...] = ()
    irreversible_tools: tuple[str, ...] = ()
    autonomous_tools: tuple[str, ...] = ()
    subscribe_resources: bool = False
    roots: tuple[str, ...] = ()
    sampling_policy: Policy = Policy.DENY
    sampling_allowed_models: tuple[str, ...] = ()
    sampling_max_tokens: int = 1024
    sampling_total_tokens: int = 8192
    elicitation_policy: Policy = Policy.DENY
    call_timeout_seconds: float = 60.0
    connect_timeout_seconds: float = 30.0
    max_output_bytes: int = 64 * 1024
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    protocol_mode: str = "legacy"
    # stdio only: run the server's process confined ("local"); the workspace read-only unless
    # sandbox_writable (then written through an overlay, each call's writes merged as a change
    # set), no network unless sandbox_network.
    sandbox: Sandbox = Sandbox.NONE
    sandbox_network: bool = False
    sandbox_writable: bool = False
    # OAuth 2.1 (MCP authorization); tokens live sealed in $RINGFENCE_HOME, never here.
    auth: AuthMode = AuthMode.NONE
    client_id: str | None = None
    client_secret_env: str | None = None
    scopes: tuple[str, ...] = ()
    oauth_grant: str = "authorization_code"
    oauth_issuer: str | None = None
    client_metadata_url: str | None = None
    client_key_env: str | None = None
    # SEP-990 (oauth_grant = "identity_assertion"): the enterprise IdP's token endpoint and
    # client, and the variable holding the user's IdP ID token (exchanged there for an ID-JAG).
    idp_token_endpoint: str | None = None
    idp_client_id: str | None = None
    idp_client_secret_env: str | None = None
    idp_id_token_env: str | None = None
    # Where it was defined ("path:line"), for messages; not part of the file format.
    origin: str = field(default="", compare=False)
    # What the policy layers say about it (read tools, trust), set by with_policy; None: only
    # the manifest's own (deprecated) read_only_tools and trust count.
    mcp_policy: McpServerPolicy | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        object.__setattr__(self, "headers_env", MappingProxyType(dict(self.headers_env)))

    def legacy_statements(self) -> tuple[McpStatement, ...]:
        """The manifest's old policy keys as statements of layer ``manifest`` (one more release)."""
        out = []
        if self.read_only_tools:
            out.append(
                McpStatement(
                    self.name, "read_only_tools", self.read_only_tools, "manifest", self.origin
                )
            )
        if self.trust is Trust.TRUSTED:
            out.append(McpStatement(self.name, "trusted", True, "manifest", self.origin))
        return tuple(out)

    def read_only(self, tool: str) -> tuple[bool, str]:
        """Whether the server's ``tool`` is ``read`` by the operator's word, and why (or why not)."""
        policy = self.mcp_policy or McpPolicy().for_server(self.name, self.legacy_statements())
        return policy.read_only(tool)

    def with_policy(self, policy: McpPolicy) -> ServerConfig:
        """This server (as read from the manifest) under the policy layers' ``[mcp.<name>]``.

        ``trust`` becomes what the statements decide (``runtime.policy._mcp``), and
        :meth:`read_only` judges by them; the manifest's old keys are one more statement,
        joined in the one place statements join (``McpPolicy.for_server``).
        """
        combined = policy.for_server(self.name, self.legacy_statements())
        trusted, _ = combined.trusted()
        return replace(
            self, trust=Trust.TRUSTED if trusted else Trust.UNTRUSTED, mcp_policy=combined
        )

    @property
    def part(self) -> str:
        """The server's part of registered names (``mcp.<part>.<tool>``)."""
        return sanitize_part(self.name, "server")

    def expanded(self, workspace: str | os.PathLike[str] | None) -> ServerConfig:
        """``$WORKSPACE`` replaced by ``workspace`` (required if the config uses it)."""

        def sub(value: str, key: str) -> str:
            if "$WORKSPACE" not in value:
                return value
            if workspace is None:
                raise InvalidArguments(
                    f"server {self.name!r}: {key} uses $WORKSPACE but no workspace was given",
                    field=key,
                )
            return value.replace("$WORKSPACE", os.fspath(workspace))

        return replace(
            self,
            command=sub(self.command, "command") if self.command else None,
            args=tuple(sub(a, "args") for a in self.args),
            env={k: sub(v, f"env.{k}") for k, v in self.env.items()},
            cwd=sub(self.cwd, "cwd") if self.cwd else None,
            roots=tuple(sub(r, "roots") for r in self.roots),
        )


@dataclass(frozen=True)
class Manifest:
    """All configured servers, in file order, plus session-wide MCP settings."""

    servers: tuple[ServerConfig, ...] = ()
    tool_discovery: bool = False
    paths: tuple[Path, ...] = ()
    # What the operator should change (keys that moved to the policy file), "file:line: …".
    warnings: tuple[str, ...] = ()

    def get(self, name: str) -> ServerConfig:
        for s in self.servers:
            if s.name == name:
                return s
        raise InvalidArguments(f"no MCP server named {name!r} is configured", field="name")

    def __contains__(self, name: object) -> bool:
        return any(s.name == name for s in self.servers)


def manifest_path() -> Path:
    """The user's manifest: ``$RINGFENCE_HOME/mcp.toml``."""
    return ringfence_home() / "mcp.toml"


def workspace_manifest_path(workspace: str | os.PathLike[str]) -> Path:
    return Path(workspace) / ".ringfence" / "mcp.toml"


def iter_enabled(manifest: Manifest, names: Iterable[str] | None = None) -> list[ServerConfig]:
    """Enabled servers, optionally only those named."""
    wanted = set(names) if names is not None else None
    return [s for s in manifest.servers if s.enabled and (wanted is None or s.name in wanted)]


# A manifest larger than this is refused (a real one is a few kilobytes; a policy file's
# bound is the same).
MAX_MANIFEST_BYTES = 1 << 20


def manifest_bytes(p: Path) -> bytes | None:
    """The file's bytes (None: there is none); InvalidArguments naming it if unreadable or
    larger than :data:`MAX_MANIFEST_BYTES`."""
    try:
        raw = _read_regular(p)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InvalidArguments(
            f"{p}: cannot be read: {exc.strerror}", field="toml", file=str(p)
        ) from None
    if len(raw) > MAX_MANIFEST_BYTES:
        raise InvalidArguments(
            f"{p}: larger than {MAX_MANIFEST_BYTES:,} bytes (the bound for a manifest)",
            field="toml",
            file=str(p),
        )
    return raw


def _read_regular(path: Path) -> bytes:
    """The bytes of ``path``, opened without waiting and read only when it is a regular file:
    a workspace's ``.ringfence/mcp.toml`` is the agent's to write, and a FIFO left there (a
    --no-change-sets command's ``mkfifo``) made ``mcp list`` and every session that reads
    the manifests wait forever. Raises OSError (ENOENT when missing)."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        with os.fdopen(os.dup(fd), "rb") as f:
            # One byte past the bound, never the whole file: the workspace's manifest is the
            # agent's, and a sparse 3 GB one (`truncate -s 3G`) took 6 GB at every session start.
            return f.read(MAX_MANIFEST_BYTES + 1)
    finally:
        os.close(fd)

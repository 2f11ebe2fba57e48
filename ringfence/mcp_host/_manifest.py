"""The MCP manifest: ``mcp.toml``, hand-editable, validated whole or not at all.

Where: ``$RINGFENCE_HOME/mcp.toml`` (``~/.ringfence/mcp.toml``), plus an
optional workspace-level ``<workspace>/.ringfence/mcp.toml``. A workspace file
starts processes just like the user file, so it is read only when the host asks
for it (``load_manifests(workspace=...)``), and a server name defined in both is
an error rather than a silent override.

Format::

    tool_discovery = false            # optional, top level, before any [[server]]

    [[server]]
    name = "files"
    transport = "stdio"               # stdio | http | sse
    command = "/usr/local/bin/mcp-server-filesystem"
    args = ["$WORKSPACE"]
    inherit_env = ["GITHUB_TOKEN"]    # names only; values come from the environment
    approved_capabilities = ["tools", "prompts"]
    read_only_tools = ["read_*", "list_directory"]   # alias: read_tools
    # trust = "trusted"               # believe the server's readOnlyHint annotations
    max_message_bytes = 33554432      # inbound JSON-RPC message cap (default 32 MiB)
    # sandbox = "local"               # confined like run_shell's local backend (stdio only)
    # sandbox_writable = true         # ... with the workspace roots writable
    # sandbox_network = true          # ... and the host's network

    [server.env]                      # literal, non-secret values only
    LOG_LEVEL = "info"

Contract:

- :func:`load_manifest` returns a fully validated :class:`Manifest` or raises
  :class:`~ringfence.runtime.InvalidArguments` whose message names the file, the
  line and the key (``field`` is the key). Nothing is ever half-loaded.
- Unknown keys are errors (a typo must not silently drop a deny list).
- A tool is ``read`` (runs without approval, and under dry run) only when the
  operator says so: ``read_only_tools`` (or its alias ``read_tools``) names it,
  or the server is ``trust = "trusted"`` and the tool claims ``readOnlyHint``.
  A server's own annotations only ever raise caution (see ``_adapter``).
- Secrets never live in the file: ``env`` refuses credential-named variables
  (``*_TOKEN``, ``*_KEY``, …); name them in ``inherit_env``, ``api_key_env`` or
  ``headers_env`` and they are resolved when the server is connected.
- ``$WORKSPACE`` in ``command``, ``args``, ``cwd``, ``env`` values and ``roots`` is
  expanded by :meth:`ServerConfig.expanded`, at connect time.
- :func:`save_server` and :func:`remove_server` edit the file's text in place
  (other servers, comments and layout are kept), check that the result still
  loads, and replace the file atomically.
"""

from __future__ import annotations

import enum
import json
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..runtime import InvalidArguments, atomic_write, is_secret_name, ringfence_home
from ._urls import check_header_name, check_url

__all__ = [
    "DEFAULT_APPROVED",
    "KNOWN_CAPABILITIES",
    "AuthMode",
    "Manifest",
    "Policy",
    "ServerConfig",
    "Transport",
    "Trust",
    "load_manifest",
    "load_manifests",
    "manifest_path",
    "parse_manifest",
    "remove_server",
    "render_server",
    "sanitize_part",
    "save_server",
    "workspace_manifest_path",
]

DEFAULT_APPROVED = frozenset({"tools", "prompts"})
# Capabilities a server can advertise in its initialize result (2025-11-25), by ledger name.
KNOWN_CAPABILITIES = frozenset({"tools", "prompts", "resources", "logging", "completions", "tasks"})
# Experimental capabilities and extensions are approved one by one: "experimental.NAME", "extensions.ID".
_PREFIXED_CAPABILITY = re.compile(r"^(experimental|extensions)\.[^\s]{1,200}$")

_SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

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


class AuthMode(enum.StrEnum):
    """How an http/sse server is authenticated: nothing, a static bearer token, or OAuth 2.1."""

    NONE = "none"
    BEARER = "bearer"
    OAUTH = "oauth"


OAUTH_GRANTS = ("authorization_code", "client_credentials")


class Policy(enum.StrEnum):
    """How a server-initiated request (sampling, elicitation) is answered."""

    DENY = "deny"
    ASK = "ask"
    ALLOW = "allow"


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
    # Confinement of a stdio server's process: "none" or "local" (the confined local backend's).
    sandbox: str = "none"
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
    # Where it was defined ("path:line"), for messages; not part of the file format.
    origin: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        object.__setattr__(self, "headers_env", MappingProxyType(dict(self.headers_env)))

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

    def get(self, name: str) -> ServerConfig:
        for s in self.servers:
            if s.name == name:
                return s
        raise InvalidArguments(f"no MCP server named {name!r} is configured", field="name")

    def __contains__(self, name: object) -> bool:
        return any(s.name == name for s in self.servers)


# -- locating keys in the text, for messages -------------------------------------------------

_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r'^\s*("(?:[^"\\]|\\.)*"|\'[^\']*\'|[A-Za-z0-9_-]+)\s*(=|\.)')


@dataclass
class _Lines:
    """Line numbers of ``[[server]]`` tables and their keys (1-based)."""

    server_starts: list[int] = field(default_factory=list)
    keys: dict[tuple[int, str], int] = field(default_factory=dict)
    top: dict[str, int] = field(default_factory=dict)

    @classmethod
    def scan(cls, text: str) -> _Lines:
        out = cls()
        index = -1  # which [[server]] we are in; -1 = top level
        prefix = ""
        for n, line in enumerate(text.splitlines(), start=1):
            h = _HEADER.match(line)
            if h:
                name = h.group(2).strip()
                if h.group(1) == "[[" and name == "server":
                    out.server_starts.append(n)
                    index, prefix = len(out.server_starts) - 1, ""
                elif name.startswith("server.") and index >= 0:
                    prefix = name[len("server.") :] + "."
                    out.keys.setdefault((index, prefix[:-1]), n)
                else:
                    index, prefix = -2, ""  # some other table
                continue
            k = _KEY.match(line)
            if k:
                key = k.group(1).strip("\"'")
                if index >= 0:
                    out.keys.setdefault((index, prefix + key), n)
                elif index == -1:
                    out.top.setdefault(key, n)
        return out

    def line_of(self, index: int, key: str | None) -> int | None:
        if key is not None:
            for candidate in (key, key.split(".")[0]):
                if (index, candidate) in self.keys:
                    return self.keys[(index, candidate)]
        if 0 <= index < len(self.server_starts):
            return self.server_starts[index]
        return None


class _Located:
    """Raises InvalidArguments that name the file, line and key."""

    def __init__(self, path: str, lines: _Lines) -> None:
        self.path = path
        self.lines = lines

    def error(self, index: int, server: str | None, key: str, message: str) -> InvalidArguments:
        line = self.lines.line_of(index, key)
        where = f"{self.path}:{line}" if line else self.path
        who = f"server {server!r}" if server else f"[[server]] #{index + 1}"
        return InvalidArguments(
            f"{where}: {who}: {key}: {message}",
            field=key,
            file=self.path,
            line=line,
        )

    def top_error(self, key: str, message: str) -> InvalidArguments:
        line = self.lines.top.get(key)
        where = f"{self.path}:{line}" if line else self.path
        return InvalidArguments(f"{where}: {key}: {message}", field=key, file=self.path, line=line)


# -- validation -------------------------------------------------------------------------------

# ``read_tools`` is accepted as another spelling of ``read_only_tools`` (merged into it).
_SERVER_KEYS = (frozenset(f.name for f in fields(ServerConfig)) - {"origin"}) | {"read_tools"}
_TOP_KEYS = frozenset({"server", "tool_discovery"})


class _ServerReader:
    def __init__(self, raw: Mapping[str, Any], index: int, loc: _Located) -> None:
        self.raw = raw
        self.index = index
        self.loc = loc
        name = raw.get("name")
        self.name = name if isinstance(name, str) else None

    def fail(self, key: str, message: str) -> InvalidArguments:
        return self.loc.error(self.index, self.name, key, message)

    def string(self, key: str, default: str | None = None) -> str | None:
        value = self.raw.get(key, default)
        if value is not None and (not isinstance(value, str) or not value):
            raise self.fail(key, "must be a non-empty string")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.raw.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(key, "must be true or false")
        return value

    def strings(self, key: str, *, optional: bool = False) -> tuple[str, ...] | None:
        if key not in self.raw:
            return None if optional else ()
        value = self.raw[key]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(key, "must be a list of strings")
        return tuple(value)

    def table(self, key: str) -> dict[str, str]:
        value = self.raw.get(key, {})
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise self.fail(key, "must be a table of string values")
        return dict(value)

    def number(self, key: str, default: float, *, lo: float, hi: float, integer: bool) -> Any:
        value = self.raw.get(key, default)
        ok_type = isinstance(value, int) if integer else isinstance(value, int | float)
        if isinstance(value, bool) or not ok_type:
            raise self.fail(key, f"must be {'an integer' if integer else 'a number'}")
        if not lo <= value <= hi:
            raise self.fail(key, f"must be between {lo:g} and {hi:g}, not {value}")
        return value

    def choice(self, key: str, enum_cls: type[enum.StrEnum], default: enum.StrEnum) -> Any:
        value = self.raw.get(key, default.value)
        try:
            return enum_cls(value)
        except ValueError:
            options = ", ".join(e.value for e in enum_cls)
            raise self.fail(key, f"must be one of {options}, not {value!r}") from None

    def read(self) -> ServerConfig:
        unknown = sorted(set(self.raw) - _SERVER_KEYS)
        if unknown:
            raise self.fail(
                unknown[0], f"unknown key (known keys: {', '.join(sorted(_SERVER_KEYS))})"
            )
        if self.name is None:
            raise self.fail("name", "every [[server]] needs a name")
        if not _SERVER_NAME.match(self.name):
            raise self.fail(
                "name",
                "must be 1-63 characters of letters, digits, '_' and '-', starting with a letter or digit",
            )
        transport = self.choice("transport", Transport, Transport.STDIO)
        if "transport" not in self.raw:
            raise self.fail("transport", "is required (stdio, http or sse)")
        command = self.string("command")
        url = self.raw.get("url")
        if transport is Transport.STDIO:
            if command is None:
                raise self.fail("command", "a stdio server needs a command")
            for key in ("url", "api_key_env", "headers_env"):
                if key in self.raw:
                    raise self.fail(key, "only applies to http and sse servers")
        else:
            if url is None:
                raise self.fail("url", f"an {transport.value} server needs a url")
            try:
                check_url(url, "url")
            except InvalidArguments as exc:
                raise self.fail("url", exc.message.removeprefix("url ")) from None
            for key in ("command", "args", "env", "inherit_env", "cwd"):
                if key in self.raw:
                    raise self.fail(key, "only applies to stdio servers")

        env = self.table("env")
        for k in env:
            if not _ENV_NAME.match(k):
                raise self.fail(f"env.{k}", "is not a valid environment variable name")
            if is_secret_name(k):
                raise self.fail(
                    f"env.{k}",
                    "looks like a credential; secrets never live in the manifest: "
                    f'list "{k}" in inherit_env and set it in the environment instead',
                )
        inherit = self.strings("inherit_env") or ()
        for k in inherit:
            if not _ENV_NAME.match(k):
                raise self.fail("inherit_env", f"{k!r} is not a valid environment variable name")
        api_key_env = self.string("api_key_env")
        if api_key_env is not None and not _ENV_NAME.match(api_key_env):
            raise self.fail("api_key_env", "must name an environment variable")
        headers_env = self.table("headers_env")
        for header, var in headers_env.items():
            try:
                check_header_name(header, f"headers_env.{header}")
            except InvalidArguments as exc:
                raise self.fail(f"headers_env.{header}", exc.message.split(": ", 1)[-1]) from None
            if not _ENV_NAME.match(var):
                raise self.fail(
                    f"headers_env.{header}", f"{var!r} must name an environment variable"
                )
            if header.lower() == "authorization" and api_key_env is not None:
                raise self.fail(
                    f"headers_env.{header}", "conflicts with api_key_env, which sets Authorization"
                )

        approved = self.strings("approved_capabilities", optional=True)
        if approved is None:
            approved_set = DEFAULT_APPROVED
        else:
            for cap in approved:
                if cap not in KNOWN_CAPABILITIES and not _PREFIXED_CAPABILITY.match(cap):
                    raise self.fail(
                        "approved_capabilities",
                        f"unknown capability {cap!r}; known: {', '.join(sorted(KNOWN_CAPABILITIES))}, "
                        "experimental.NAME, extensions.ID",
                    )
            approved_set = frozenset(approved)

        roots = self.strings("roots") or ()
        for r in roots:
            if not (r.startswith("$WORKSPACE") or os.path.isabs(r)):
                raise self.fail("roots", f"{r!r} is not an absolute path (roots must be absolute)")
        cwd = self.string("cwd")

        sampling_policy = self.choice("sampling_policy", Policy, Policy.DENY)
        models = self.strings("sampling_allowed_models") or ()
        max_tokens = self.number("sampling_max_tokens", 1024, lo=1, hi=1_000_000, integer=True)
        total_tokens = self.number(
            "sampling_total_tokens", 8192, lo=1, hi=100_000_000, integer=True
        )
        if total_tokens < max_tokens:
            raise self.fail("sampling_total_tokens", "must be at least sampling_max_tokens")
        if sampling_policy is Policy.ALLOW and not models:
            raise self.fail(
                "sampling_allowed_models",
                'sampling_policy = "allow" needs the list of models it may use',
            )
        protocol_mode = self.raw.get("protocol_mode", "legacy")
        if protocol_mode not in ("legacy", "auto"):
            raise self.fail(
                "protocol_mode",
                '"legacy" (2025-11-25, the default) or "auto" (the SDK\'s newer negotiation)',
            )
        auth = self._auth(transport, api_key_env, headers_env)
        sandbox = self._sandbox(transport)
        line = self.loc.lines.line_of(self.index, None)
        return ServerConfig(
            name=self.name,
            transport=transport,
            command=command,
            args=self.strings("args") or (),
            env=env,
            inherit_env=inherit,
            cwd=cwd,
            url=url,
            api_key_env=api_key_env,
            headers_env=headers_env,
            trust=self.choice("trust", Trust, Trust.UNTRUSTED),
            enabled=self.boolean("enabled", True),
            approved_capabilities=approved_set,
            allow_tools=self.strings("allow_tools", optional=True),
            deny_tools=self.strings("deny_tools") or (),
            allow_resources=self.strings("allow_resources", optional=True),
            deny_resources=self.strings("deny_resources") or (),
            read_only_tools=(self.strings("read_only_tools") or ())
            + (self.strings("read_tools") or ()),
            irreversible_tools=self.strings("irreversible_tools") or (),
            autonomous_tools=self.strings("autonomous_tools") or (),
            subscribe_resources=self.boolean("subscribe_resources", False),
            roots=roots,
            sampling_policy=sampling_policy,
            sampling_allowed_models=models,
            sampling_max_tokens=max_tokens,
            sampling_total_tokens=total_tokens,
            elicitation_policy=self.choice("elicitation_policy", Policy, Policy.DENY),
            call_timeout_seconds=float(
                self.number(
                    "call_timeout_seconds", 60.0, lo=0.001, hi=MAX_TIMEOUT_SECONDS, integer=False
                )
            ),
            connect_timeout_seconds=float(
                self.number(
                    "connect_timeout_seconds", 30.0, lo=0.001, hi=MAX_TIMEOUT_SECONDS, integer=False
                )
            ),
            max_output_bytes=self.number(
                "max_output_bytes", 64 * 1024, lo=256, hi=MAX_OUTPUT_BYTES_LIMIT, integer=True
            ),
            max_message_bytes=self.number(
                "max_message_bytes",
                DEFAULT_MAX_MESSAGE_BYTES,
                lo=1024,
                hi=MAX_MESSAGE_BYTES_LIMIT,
                integer=True,
            ),
            protocol_mode=protocol_mode,
            **sandbox,
            **auth,
            origin=f"{self.loc.path}:{line}" if line else self.loc.path,
        )

    def _sandbox(self, transport: Transport) -> dict[str, Any]:
        """``sandbox`` ("none" | "local") and its two grants, which mean something only with "local"."""
        sandbox = self.raw.get("sandbox", "none")
        if sandbox not in ("none", "local"):
            raise self.fail(
                "sandbox",
                f'must be "none" or "local" (the confined local backend), not {sandbox!r}',
            )
        if sandbox != "none" and transport is not Transport.STDIO:
            raise self.fail("sandbox", "only applies to stdio servers (ringfence starts those)")
        grants = {k: self.boolean(k, False) for k in ("sandbox_network", "sandbox_writable")}
        for key in grants:
            if key in self.raw and sandbox != "local":
                raise self.fail(key, 'only applies with sandbox = "local"')
        return {"sandbox": sandbox, **grants}

    def _auth(
        self, transport: Transport, api_key_env: str | None, headers_env: Mapping[str, str]
    ) -> dict[str, Any]:
        """The OAuth keys, checked together (they only mean something with ``auth = "oauth"``)."""
        mode = self.choice("auth", AuthMode, AuthMode.NONE)
        oauth_keys = (
            "client_id",
            "client_secret_env",
            "scopes",
            "oauth_grant",
            "oauth_issuer",
            "client_metadata_url",
            "client_key_env",
        )
        if transport is Transport.STDIO and "auth" in self.raw:
            raise self.fail("auth", "only applies to http and sse servers")
        if mode is AuthMode.BEARER and api_key_env is None:
            raise self.fail("auth", '"bearer" needs api_key_env naming the token\'s variable')
        if mode is not AuthMode.OAUTH:
            for key in oauth_keys:
                if key in self.raw:
                    raise self.fail(key, 'only applies with auth = "oauth"')
            return {"auth": mode}
        if api_key_env is not None:
            raise self.fail(
                "api_key_env", 'conflicts with auth = "oauth", which sets Authorization'
            )
        if any(h.lower() == "authorization" for h in headers_env):
            raise self.fail("headers_env", 'Authorization conflicts with auth = "oauth"')
        client_id = self.string("client_id")
        secret_env = self.string("client_secret_env")
        if secret_env is not None and not _ENV_NAME.match(secret_env):
            raise self.fail("client_secret_env", "must name an environment variable")
        if secret_env is not None and client_id is None:
            raise self.fail("client_secret_env", "a client secret needs its client_id")
        key_env = self.string("client_key_env")
        if key_env is not None and not _ENV_NAME.match(key_env):
            raise self.fail("client_key_env", "must name an environment variable")
        if key_env is not None and (client_id is None or secret_env is not None):
            raise self.fail(
                "client_key_env", "a private key (private_key_jwt) needs client_id and no secret"
            )
        scopes = self.strings("scopes") or ()
        for scope in scopes:
            if not scope or any(c.isspace() or c in '"\\' for c in scope):
                raise self.fail("scopes", f"{scope!r} is not a scope token")
        grant = self.raw.get("oauth_grant", "authorization_code")
        if grant not in OAUTH_GRANTS:
            raise self.fail(
                "oauth_grant", f"must be one of {', '.join(OAUTH_GRANTS)}, not {grant!r}"
            )
        if grant == "client_credentials" and secret_env is None and key_env is None:
            raise self.fail(
                "oauth_grant",
                "client_credentials needs client_id and client_secret_env or client_key_env",
            )
        if key_env is not None and grant != "client_credentials":
            raise self.fail(
                "client_key_env", 'only applies with oauth_grant = "client_credentials"'
            )
        issuer = self.string("oauth_issuer")
        if issuer is not None:
            try:
                check_url(issuer, "oauth_issuer")
            except InvalidArguments as exc:
                raise self.fail("oauth_issuer", exc.message.removeprefix("oauth_issuer ")) from None
        metadata_url = self.string("client_metadata_url")
        if metadata_url is not None:
            from mcp.client.auth.utils import is_valid_client_metadata_url

            if not is_valid_client_metadata_url(metadata_url):
                raise self.fail("client_metadata_url", "must be an https URL with a path")
        return {
            "auth": mode,
            "client_metadata_url": metadata_url,
            "client_key_env": key_env,
            "client_id": client_id,
            "client_secret_env": secret_env,
            "scopes": scopes,
            "oauth_grant": grant,
            "oauth_issuer": issuer,
        }


def parse_manifest(text: str, path: str = "<mcp.toml>") -> Manifest:
    """Validate manifest text. Raises InvalidArguments naming ``path``, the line and the key."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # Python 3.11's tomllib puts the position only in the message: "... (at line 3, column 13)".
        found = re.search(r"\s*\(at line (\d+), column (\d+)\)", str(exc))
        line = int(found.group(1)) if found else None
        detail = (
            str(exc).replace(found.group(0), f" (column {found.group(2)})") if found else str(exc)
        )
        where = f"{path}:{line}" if line else path
        raise InvalidArguments(
            f"{where}: not valid TOML: {detail}", field="toml", file=path, line=line
        ) from None
    lines = _Lines.scan(text)
    loc = _Located(path, lines)
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise loc.top_error(unknown[0], "unknown top-level key (servers are [[server]] tables)")
    discovery = data.get("tool_discovery", False)
    if not isinstance(discovery, bool):
        raise loc.top_error("tool_discovery", "must be true or false")
    raw_servers = data.get("server", [])
    if not isinstance(raw_servers, list) or not all(isinstance(s, dict) for s in raw_servers):
        raise loc.top_error("server", "servers must be [[server]] tables")
    servers: list[ServerConfig] = []
    seen: dict[str, str] = {}
    for index, raw in enumerate(raw_servers):
        config = _ServerReader(raw, index, loc).read()
        if config.part in seen:
            raise loc.error(
                index,
                config.name,
                "name",
                f"collides with server {seen[config.part]!r} (both become mcp.{config.part}.*)",
            )
        seen[config.part] = config.name
        servers.append(config)
    return Manifest(tuple(servers), discovery, (Path(path),))


def manifest_path() -> Path:
    """The user's manifest: ``$RINGFENCE_HOME/mcp.toml``."""
    return ringfence_home() / "mcp.toml"


def workspace_manifest_path(workspace: str | os.PathLike[str]) -> Path:
    return Path(workspace) / ".ringfence" / "mcp.toml"


def load_manifest(path: str | os.PathLike[str] | None = None) -> Manifest:
    """Load one manifest file; a missing file is an empty manifest."""
    p = Path(path) if path is not None else manifest_path()
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Manifest(paths=(p,))
    except UnicodeDecodeError:
        raise InvalidArguments(f"{p}: not UTF-8 text", field="toml", file=str(p)) from None
    except OSError as exc:
        raise InvalidArguments(
            f"{p}: cannot be read: {exc.strerror}", field="toml", file=str(p)
        ) from None
    return parse_manifest(text, str(p))


def load_manifests(
    workspace: str | os.PathLike[str] | None = None, user_path: str | os.PathLike[str] | None = None
) -> Manifest:
    """The user manifest, plus ``<workspace>/.ringfence/mcp.toml`` when a workspace is given.

    A server name present in both is an error (neither file silently overrides the other).
    """
    user = load_manifest(user_path)
    if workspace is None:
        return user
    wpath = workspace_manifest_path(workspace)
    if not wpath.exists():
        return user
    ws = load_manifest(wpath)
    names = {s.name: s for s in user.servers}
    for s in ws.servers:
        if s.name in names:
            raise InvalidArguments(
                f"{s.origin}: server {s.name!r} is also defined at {names[s.name].origin}; "
                "rename one of them",
                field="name",
            )
    return Manifest(
        user.servers + ws.servers,
        user.tool_discovery or ws.tool_discovery,
        user.paths + ws.paths,
    )


# -- writing --------------------------------------------------------------------------------


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        # A JSON string is a valid TOML basic string (same escapes).
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple | frozenset | set):
        items = sorted(value) if isinstance(value, frozenset | set) else list(value)
        return "[" + ", ".join(_toml_value(v) for v in items) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def _toml_key(key: str) -> str:
    return key if re.match(r"^[A-Za-z0-9_-]+$", key) else json.dumps(key)


def render_server(config: ServerConfig) -> str:
    """One ``[[server]]`` block: name, transport and the ceiling always; other keys when not default."""
    defaults = ServerConfig(name=config.name, transport=config.transport)
    out = ["[[server]]"]
    tables: list[str] = []
    for f in fields(ServerConfig):
        if f.name == "origin":
            continue
        value = getattr(config, f.name)
        always = f.name in ("name", "transport", "approved_capabilities")
        if not always and value == getattr(defaults, f.name):
            continue
        if value is None:
            continue
        if isinstance(value, Mapping):
            if value:
                tables.append(f"\n[server.{f.name}]")
                tables.extend(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items())
            continue
        if isinstance(value, enum.Enum):
            value = value.value
        out.append(f"{f.name} = {_toml_value(value)}")
    return "\n".join(out + tables) + "\n"


def _server_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) line indexes (0-based, end exclusive) of each [[server]] block."""
    lines = text.splitlines(keepends=True)
    starts: list[int] = []
    ends: list[int] = []
    for i, line in enumerate(lines):
        h = _HEADER.match(line)
        if not h:
            continue
        name = h.group(2).strip()
        if h.group(1) == "[[" and name == "server":
            if len(starts) > len(ends):
                ends.append(i)
            starts.append(i)
        elif not name.startswith("server.") and len(starts) > len(ends):
            ends.append(i)
    if len(starts) > len(ends):
        ends.append(len(lines))
    spans = []
    for s, e in zip(starts, ends, strict=True):
        # Leave comments and blank lines that lead into the next table with that table.
        while e - 1 > s and (not lines[e - 1].strip() or lines[e - 1].lstrip().startswith("#")):
            e -= 1
        spans.append((s, e))
    return spans


def _edit(path: Path, edit: Any) -> Manifest:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    current = parse_manifest(text, str(path))  # refuse to edit a file that does not load
    new_text = edit(text, current)
    result = parse_manifest(new_text, str(path))
    atomic_write(path, new_text.encode("utf-8"))
    return result


def save_server(config: ServerConfig, path: str | os.PathLike[str] | None = None) -> Manifest:
    """Add ``config`` to the manifest, replacing a server of the same name in place."""
    p = Path(path) if path is not None else manifest_path()
    block = render_server(config)

    def edit(text: str, current: Manifest) -> str:
        names = [s.name for s in current.servers]
        lines = text.splitlines(keepends=True)
        if config.name in names:
            s, e = _server_spans(text)[names.index(config.name)]
            return "".join(lines[:s]) + block + "".join(lines[e:])
        if text and not text.endswith("\n"):
            text += "\n"
        return text + ("\n" if text.strip() else "") + block

    return _edit(p, edit)


def remove_server(name: str, path: str | os.PathLike[str] | None = None) -> Manifest:
    """Remove the server ``name``; NotFound-style InvalidArguments if it is not there."""
    p = Path(path) if path is not None else manifest_path()

    def edit(text: str, current: Manifest) -> str:
        names = [s.name for s in current.servers]
        if name not in names:
            raise InvalidArguments(f"no MCP server named {name!r} in {p}", field="name")
        s, e = _server_spans(text)[names.index(name)]
        lines = text.splitlines(keepends=True)
        rest = lines[e:]
        while rest and not rest[0].strip():
            rest = rest[1:]
        return "".join(lines[:s]) + "".join(rest)

    return _edit(p, edit)


def iter_enabled(manifest: Manifest, names: Iterable[str] | None = None) -> list[ServerConfig]:
    """Enabled servers, optionally only those named."""
    wanted = set(names) if names is not None else None
    return [s for s in manifest.servers if s.enabled and (wanted is None or s.name in wanted)]

"""The ``mcp.toml`` format, declared: a pydantic model per ``[[server]]``, and :func:`parse_manifest`.

The model states each key's type, range and choices; :func:`_check` adds the
rules between keys (a stdio server needs a command, OAuth keys need
``auth = "oauth"``, …). Every error becomes one
:class:`~ringfence.runtime.InvalidArguments` whose message starts
``file:line: server 'name': key: `` (``field`` is the key, ``details`` carry
``file`` and ``line``); the line is found with
:func:`~ringfence.runtime._tomllines.toml_key_lines`, so strings and comments that look
like keys or tables never mislead it. The first error is reported; nothing is
half-loaded.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ...runtime._errors import InvalidArguments
from ...runtime._redact import is_secret_name
from ...runtime._tomllines import KeyPath, line_of, load_toml, toml_error_line, toml_key_lines
from .._urls import check_header_name, check_url
from ._config import (
    DEFAULT_APPROVED,
    DEFAULT_MAX_MESSAGE_BYTES,
    KNOWN_CAPABILITIES,
    MAX_MESSAGE_BYTES_LIMIT,
    MAX_OUTPUT_BYTES_LIMIT,
    MAX_TIMEOUT_SECONDS,
    AuthMode,
    Manifest,
    Policy,
    Sandbox,
    ServerConfig,
    Transport,
    Trust,
    sanitize_part,
)

__all__ = ["LEGACY_POLICY_KEYS", "ServerModel", "parse_manifest", "server_table"]

# Experimental capabilities and extensions are approved one by one: "experimental.NAME", "extensions.ID".
_PREFIXED_CAPABILITY = re.compile(r"^(experimental|extensions)\.[^\s]{1,200}\Z")
_SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}\Z")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
# Keys that belong to the policy files now ([mcp.<server>]); read for one more release.
LEGACY_POLICY_KEYS = ("read_only_tools", "read_tools", "trust")

_PolicyChoice = Literal["deny", "ask", "allow"]
# A tool or resource name or glob: an empty one would match nothing and hide the mistake.
_Pattern = Annotated[str, Field(min_length=1)]


class ServerModel(BaseModel):
    """One ``[[server]]`` table as written (strict TOML types, no unknown keys)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: str
    transport: Literal["stdio", "http", "sse"]
    command: str | None = Field(None, min_length=1)
    args: list[str] = []
    env: dict[str, str] = {}
    inherit_env: list[str] = []
    cwd: str | None = Field(None, min_length=1)
    url: str | None = None
    api_key_env: str | None = Field(None, min_length=1)
    headers_env: dict[str, str] = {}
    trust: Literal["untrusted", "trusted"] = "untrusted"
    enabled: bool = True
    approved_capabilities: list[str] | None = None
    allow_tools: list[_Pattern] | None = None
    deny_tools: list[_Pattern] = []
    allow_resources: list[_Pattern] | None = None
    deny_resources: list[_Pattern] = []
    read_only_tools: list[_Pattern] = []
    read_tools: list[_Pattern] = []  # another spelling of read_only_tools (merged into it)
    irreversible_tools: list[_Pattern] = []
    autonomous_tools: list[_Pattern] = []
    subscribe_resources: bool = False
    roots: list[str] = []
    sampling_policy: _PolicyChoice = "deny"
    sampling_allowed_models: list[str] = []
    sampling_max_tokens: int = Field(1024, ge=1, le=1_000_000)
    sampling_total_tokens: int = Field(8192, ge=1, le=100_000_000)
    elicitation_policy: _PolicyChoice = "deny"
    call_timeout_seconds: float = Field(60.0, ge=0.001, le=MAX_TIMEOUT_SECONDS)
    connect_timeout_seconds: float = Field(30.0, ge=0.001, le=MAX_TIMEOUT_SECONDS)
    max_output_bytes: int = Field(64 * 1024, ge=256, le=MAX_OUTPUT_BYTES_LIMIT)
    max_message_bytes: int = Field(DEFAULT_MAX_MESSAGE_BYTES, ge=1024, le=MAX_MESSAGE_BYTES_LIMIT)
    protocol_mode: Literal["legacy", "auto"] = "legacy"
    sandbox: Literal["none", "local"] = "none"
    sandbox_network: bool = False
    sandbox_writable: bool = False
    auth: Literal["none", "bearer", "oauth"] = "none"
    client_id: str | None = Field(None, min_length=1)
    client_secret_env: str | None = Field(None, min_length=1)
    scopes: list[str] = []
    oauth_grant: Literal["authorization_code", "client_credentials", "identity_assertion"] = (
        "authorization_code"
    )
    oauth_issuer: str | None = Field(None, min_length=1)
    client_metadata_url: str | None = Field(None, min_length=1)
    client_key_env: str | None = Field(None, min_length=1)
    idp_token_endpoint: str | None = Field(None, min_length=1)
    idp_client_id: str | None = Field(None, min_length=1)
    idp_client_secret_env: str | None = Field(None, min_length=1)
    idp_id_token_env: str | None = Field(None, min_length=1)

    def config(self, origin: str) -> ServerConfig:
        """The validated value the rest of ``mcp_host`` reads."""
        data = self.model_dump(exclude={"read_tools"})
        data.update(
            transport=Transport(self.transport),
            trust=Trust(self.trust),
            sampling_policy=Policy(self.sampling_policy),
            elicitation_policy=Policy(self.elicitation_policy),
            sandbox=Sandbox(self.sandbox),
            auth=AuthMode(self.auth),
            approved_capabilities=DEFAULT_APPROVED
            if self.approved_capabilities is None
            else frozenset(self.approved_capabilities),
            read_only_tools=(*self.read_only_tools, *self.read_tools),
            call_timeout_seconds=float(self.call_timeout_seconds),
            connect_timeout_seconds=float(self.connect_timeout_seconds),
        )
        for key, value in data.items():
            if isinstance(value, list):
                data[key] = tuple(value)
        return ServerConfig(**data, origin=origin)


class _TopModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    tool_discovery: bool = False
    server: list[dict[str, Any]] = []


def server_table(config: ServerConfig) -> dict[str, Any]:
    """``config`` as the keys of its ``[[server]]`` table: name, transport and the ceiling always,
    other keys only when they differ from the default."""
    defaults = ServerModel(name=config.name, transport="stdio")
    out: dict[str, Any] = {}
    for key in ServerModel.model_fields:
        value = getattr(config, key, None)
        if key == "read_tools" or value is None:
            continue
        if isinstance(value, frozenset):
            value = sorted(value)
        elif isinstance(value, tuple):
            value = list(value)
        elif hasattr(value, "items"):
            value = dict(value)
        elif hasattr(value, "value"):  # an enum
            value = value.value
        always = key in ("name", "transport", "approved_capabilities")
        if always or value != getattr(defaults, key):
            out[key] = value
    return out


# -- errors, named file:line: key -------------------------------------------------------------


class _Bad(Exception):
    """A rule between keys failed: ``key`` (dotted) and the message."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.message = message


_TYPE_WORDS = {
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "list_type": "must be a list of strings",
    "dict_type": "must be a table of string values",
    "string_too_short": "must be a non-empty string",
}


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _choices(model: type[BaseModel], key: str) -> list[str]:
    field = model.model_fields.get(key)
    if field is None:
        return []
    args = get_args(field.annotation)
    return [a for a in args if isinstance(a, str)]


def _describe(model: type[BaseModel], error: Any) -> tuple[tuple[str | int, ...], str]:
    """A pydantic error as (where, message): the key path and words an operator reads."""
    loc = tuple(error["loc"])
    kind = error["type"]
    key = str(loc[0]) if loc else ""
    if kind == "missing":
        if key == "name":
            return loc, "every [[server]] needs a name"
        if key == "transport":
            return loc, "is required (stdio, http or sse)"
        return loc, "is required"
    if kind == "extra_forbidden":
        known = ", ".join(sorted(model.model_fields))
        return loc, f"unknown key (known keys: {known})"
    if kind == "literal_error":
        return loc[:1], f"must be one of {', '.join(_choices(model, key))}, not {error['input']!r}"
    if kind in ("greater_than_equal", "less_than_equal"):
        field = model.model_fields[key]
        bounds = {type(m).__name__: m for m in field.metadata}
        lo, hi = bounds["Ge"].ge, bounds["Le"].le
        return loc[:1], f"must be between {_number(lo)} and {_number(hi)}, not {error['input']}"
    if len(loc) > 1 and isinstance(loc[1], int):  # an element of a list
        if kind == "string_too_short":
            return loc[:1], f"item {loc[1] + 1} is empty (a name or glob is needed)"
        return loc[:1], "must be a list of strings"
    return loc, _TYPE_WORDS.get(kind, error["msg"])


def _located(path: str, lines: dict[KeyPath, int], where: KeyPath, key: str, msg: str) -> Any:
    line = line_of(lines, where)
    at = f"{path}:{line}" if line else path
    return InvalidArguments(f"{at}: {msg}", field=key, file=path, line=line)


def _first_error(model: type[BaseModel], exc: ValidationError) -> Any:
    """The error to report: an unknown key first (a typo must not hide behind another error)."""
    errors = exc.errors()
    order = {"extra_forbidden": 0}
    return _describe(model, min(errors, key=lambda e: order.get(e["type"], 1)))


def parse_manifest(
    text: str, path: str = "<mcp.toml>", *, secret_names: Sequence[str] = ()
) -> Manifest:
    """Validate manifest text. Raises InvalidArguments naming ``path``, the line and the key.

    ``secret_names``: more credential-name globs (as ``Redactor(names=...)``): an ``env``
    entry whose name matches one is refused like a built-in credential name.
    """
    try:
        data = load_toml(text)
    except tomllib.TOMLDecodeError as exc:
        line, detail = toml_error_line(exc)
        where = f"{path}:{line}" if line else path
        raise InvalidArguments(
            f"{where}: not valid TOML: {detail}", field="toml", file=path, line=line
        ) from None
    lines = toml_key_lines(text)
    try:
        top = _TopModel.model_validate(data)
    except ValidationError as exc:
        loc, message = _first_error(_TopModel, exc)
        key = str(loc[0])
        if key == "server":
            message = "servers must be [[server]] tables"
        elif loc and key not in _TopModel.model_fields:
            message = "unknown top-level key (servers are [[server]] tables)"
        raise _located(path, lines, loc[:1], key, f"{key}: {message}") from None
    servers: list[ServerConfig] = []
    seen: dict[str, str] = {}
    warnings: list[str] = []
    for index, raw in enumerate(top.server):
        name = raw.get("name") if isinstance(raw.get("name"), str) else None
        who = f"server {name!r}" if name else f"[[server]] #{index + 1}"
        try:
            try:
                model = ServerModel.model_validate(raw)
            except ValidationError as exc:
                loc, message = _first_error(ServerModel, exc)
                raise _Bad(".".join(str(p) for p in loc if isinstance(p, str)), message) from None
            _check(model, secret_names)
            part = sanitize_part(model.name, "server")
            if part in seen:
                raise _Bad(
                    "name", f"collides with server {seen[part]!r} (both become mcp.{part}.*)"
                )
        except _Bad as bad:
            where: KeyPath = ("server", index, *bad.key.split(".")) if bad.key else ()
            raise _located(
                path, lines, where or ("server", index), bad.key, f"{who}: {bad.key}: {bad.message}"
            ) from None
        seen[part] = model.name
        header = lines.get(("server", index))
        origin = f"{path}:{header}" if header else path
        for key in LEGACY_POLICY_KEYS:
            if key in model.model_fields_set:
                at = line_of(lines, ("server", index, key))
                warnings.append(
                    f"{path}:{at}: server {model.name!r}: {key} moves to the policy file "
                    f"([mcp.{model.name}] {'trusted' if key == 'trust' else 'read_only_tools'} "
                    "in $RINGFENCE_HOME/policy.toml); the manifest's key is read for one more release"
                )
        servers.append(model.config(origin))
    return Manifest(tuple(servers), top.tool_discovery, (Path(path),), tuple(warnings))


def _check(m: ServerModel, secret_names: Sequence[str] = ()) -> None:
    """The rules between keys; raises _Bad(key, message) at the first that fails."""
    given = m.model_fields_set
    if not _SERVER_NAME.match(m.name):
        raise _Bad(
            "name",
            "must be 1-63 characters of letters, digits, '_' and '-', starting with a letter or digit",
        )
    if m.transport == "stdio":
        if m.command is None:
            raise _Bad("command", "a stdio server needs a command")
        for key in ("url", "api_key_env", "headers_env"):
            if key in given:
                raise _Bad(key, "only applies to http and sse servers")
    else:
        if m.url is None:
            raise _Bad("url", f"an {m.transport} server needs a url")
        try:
            check_url(m.url, "url")
        except InvalidArguments as exc:
            raise _Bad("url", exc.message.removeprefix("url ")) from None
        for key in ("command", "args", "env", "inherit_env", "cwd", "sandbox"):
            if key in given:
                raise _Bad(key, "only applies to stdio servers")
    if m.sandbox == "none":
        for key in ("sandbox_network", "sandbox_writable"):
            if getattr(m, key):
                raise _Bad(key, 'only applies with sandbox = "local"')
    for k in m.env:
        if not _ENV_NAME.match(k):
            raise _Bad(f"env.{k}", "is not a valid environment variable name")
        if is_secret_name(k, secret_names):
            raise _Bad(
                f"env.{k}",
                "looks like a credential; secrets never live in the manifest: "
                f'list "{k}" in inherit_env and set it in the environment instead',
            )
    for k in m.inherit_env:
        if not _ENV_NAME.match(k):
            raise _Bad("inherit_env", f"{k!r} is not a valid environment variable name")
    if m.api_key_env is not None and not _ENV_NAME.match(m.api_key_env):
        raise _Bad("api_key_env", "must name an environment variable")
    for header, var in m.headers_env.items():
        try:
            check_header_name(header, f"headers_env.{header}")
        except InvalidArguments as exc:
            raise _Bad(f"headers_env.{header}", exc.message.split(": ", 1)[-1]) from None
        if not _ENV_NAME.match(var):
            raise _Bad(f"headers_env.{header}", f"{var!r} must name an environment variable")
        if header.lower() == "authorization" and m.api_key_env is not None:
            raise _Bad(
                f"headers_env.{header}", "conflicts with api_key_env, which sets Authorization"
            )
    for cap in m.approved_capabilities or ():
        if cap not in KNOWN_CAPABILITIES and not _PREFIXED_CAPABILITY.match(cap):
            raise _Bad(
                "approved_capabilities",
                f"unknown capability {cap!r}; known: {', '.join(sorted(KNOWN_CAPABILITIES))}, "
                "experimental.NAME, extensions.ID",
            )
    for r in m.roots:
        if not (r.startswith("$WORKSPACE") or os.path.isabs(r)):
            raise _Bad("roots", f"{r!r} is not an absolute path (roots must be absolute)")
    if m.sampling_total_tokens < m.sampling_max_tokens:
        raise _Bad("sampling_total_tokens", "must be at least sampling_max_tokens")
    if m.sampling_policy == "allow" and not m.sampling_allowed_models:
        raise _Bad(
            "sampling_allowed_models",
            'sampling_policy = "allow" needs the list of models it may use',
        )
    _check_auth(m, given)


_IDP_KEYS = ("idp_token_endpoint", "idp_client_id", "idp_client_secret_env", "idp_id_token_env")
_OAUTH_KEYS = (
    "client_id",
    "client_secret_env",
    "scopes",
    "oauth_grant",
    "oauth_issuer",
    "client_metadata_url",
    "client_key_env",
    *_IDP_KEYS,
)


def _check_auth(m: ServerModel, given: set[str]) -> None:
    """The OAuth keys, checked together (they only mean something with ``auth = "oauth"``)."""
    if m.transport == "stdio" and "auth" in given:
        raise _Bad("auth", "only applies to http and sse servers")
    if m.auth == "bearer" and m.api_key_env is None:
        raise _Bad("auth", '"bearer" needs api_key_env naming the token\'s variable')
    if m.auth != "oauth":
        for key in _OAUTH_KEYS:
            if key in given:
                raise _Bad(key, 'only applies with auth = "oauth"')
        return
    if m.api_key_env is not None:
        raise _Bad("api_key_env", 'conflicts with auth = "oauth", which sets Authorization')
    if any(h.lower() == "authorization" for h in m.headers_env):
        raise _Bad("headers_env", 'Authorization conflicts with auth = "oauth"')
    secret_env, key_env = m.client_secret_env, m.client_key_env
    if secret_env is not None and not _ENV_NAME.match(secret_env):
        raise _Bad("client_secret_env", "must name an environment variable")
    if secret_env is not None and m.client_id is None:
        raise _Bad("client_secret_env", "a client secret needs its client_id")
    if key_env is not None and not _ENV_NAME.match(key_env):
        raise _Bad("client_key_env", "must name an environment variable")
    if key_env is not None and (m.client_id is None or secret_env is not None):
        raise _Bad(
            "client_key_env", "a private key (private_key_jwt) needs client_id and no secret"
        )
    for scope in m.scopes:
        if not scope or any(c.isspace() or c in '"\\' for c in scope):
            raise _Bad("scopes", f"{scope!r} is not a scope token")
    if m.oauth_grant == "client_credentials" and secret_env is None and key_env is None:
        raise _Bad(
            "oauth_grant",
            "client_credentials needs client_id and client_secret_env or client_key_env",
        )
    if key_env is not None and m.oauth_grant != "client_credentials":
        raise _Bad("client_key_env", 'only applies with oauth_grant = "client_credentials"')
    _check_identity_assertion(m, given)
    if m.oauth_issuer is not None:
        try:
            check_url(m.oauth_issuer, "oauth_issuer")
        except InvalidArguments as exc:
            raise _Bad("oauth_issuer", exc.message.removeprefix("oauth_issuer ")) from None
    if m.client_metadata_url is not None:
        from mcp.client.auth.utils import is_valid_client_metadata_url

        if not is_valid_client_metadata_url(m.client_metadata_url):
            raise _Bad("client_metadata_url", "must be an https URL with a path")


def _check_identity_assertion(m: ServerModel, given: set[str]) -> None:
    """SEP-990: every key it needs, and none of them for another grant."""
    if m.oauth_grant != "identity_assertion":
        for key in _IDP_KEYS:
            if key in given:
                raise _Bad(key, 'only applies with oauth_grant = "identity_assertion"')
        return
    # The authorization server is configuration here, never discovered from the resource
    # server (the SDK's trust model: the ID-JAG and secret go only to this issuer).
    needed = ("client_id", "client_secret_env", "oauth_issuer", *_IDP_KEYS[:2], _IDP_KEYS[3])
    for key in needed:
        if getattr(m, key) is None:
            raise _Bad(key, 'oauth_grant = "identity_assertion" needs it')
    for key in ("idp_client_secret_env", "idp_id_token_env"):
        value = getattr(m, key)
        if value is not None and not _ENV_NAME.match(value):
            raise _Bad(key, "must name an environment variable")
    assert m.idp_token_endpoint is not None
    try:
        check_url(m.idp_token_endpoint, "idp_token_endpoint")
    except InvalidArguments as exc:
        raise _Bad("idp_token_endpoint", exc.message.removeprefix("idp_token_endpoint ")) from None

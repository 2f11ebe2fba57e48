"""Elicitation: a server asks the person at the host for input.

Default deny: with ``elicitation_policy = "deny"`` the client does not
advertise elicitation. Otherwise:

- A request that passes the checks below enters the Gate as a call of its own
  kind, ``mcp.<server>.__elicitation`` (reversible; see
  :meth:`ringfence.runtime.Kernel.invoke_request`), so the session's rules,
  posture, grants, approver and events apply: ``elicitation_policy = "ask"`` is
  an ask rule on that name (whether to show the request at all), ``"allow"`` an
  autonomous rule; a deny rule refuses it (declined). Without an
  :class:`Elicitor` (nobody to show it to) every request is declined.
- Form mode: the schema must be a flat object of primitive fields or
  multi-select string lists (the spec's restricted subset). A form that appears
  to request a password, token, key, payment data or other credential is
  refused outright; such flows belong in URL mode. The whole request is judged
  (:func:`credential_request`): the message, every field's name, title,
  description, format, default and choice labels, and every other string of
  its schema; names and labels word by word, prose for credential phrases, and
  every text for the shapes of well-known tokens (``ghp_``, ``github_pat_``,
  ``sk-``, ``AKIA``, ``xox?-``, a JWT…) and the word ``PAT``; each as a person
  reads it (fullwidth and mathematical letters folded, invisible characters
  removed; a word mixing Latin and look-alike letters counts as asking).
- An accepted answer holding a well-known token shape
  (:func:`ringfence.runtime._redact.looks_like_token`) is not sent, whatever the
  form asked (the request is cancelled): the check is on what would leave, not
  on how the form was worded. Registered secrets are redacted from answers, as
  from every result.
- Answers are validated against the form's schema before they are sent; an
  answer that does not validate is not sent (the request is cancelled). The
  form's ``pattern`` is the server's: it is matched with RE2 (linear time,
  :func:`form_error`), never Python's backtracking ``re`` (a default that is a
  near miss of ``^(a+)+$`` stalled the kernel for seconds); a pattern RE2
  cannot compile cancels the request.
- URL mode: the URL must be https (or loopback http) without embedded
  credentials. ringfence never opens or fetches it; the Elicitor is shown the
  whole URL, its host in IDNA ASCII form when it has any other character (a
  look-alike host shows as ``xn--…``), and answers only with consent.
- Text shown to the person and answers sent back are redacted.
- A request holding more than :data:`MAX_REQUEST_CHARACTERS` (16,384: its message, its
  form schema's keys and strings, its URL) is refused before anything reads it: the
  credential checks are linear but cost ~7 s of the kernel's loop per megabyte.

Not promised: a credential request worded around every list (a form asking for
"the code on the back" or "the string from your settings page") still reaches
the person, who is told plainly that the server, not ringfence, is asking and
that ringfence never asks for credentials in a form; a credential without a
well-known shape typed into such a form is sent. Forms whose text merely
mentions a token ("which token symbol?") are refused too.
"""

from __future__ import annotations

import re
import secrets
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import jsonschema
from mcp import types

from ..runtime._calls import CallContext
from ..runtime._errors import Denied, InvalidArguments
from ..runtime._redact import looks_like_token
from ..runtime._render import as_read
from ..runtime._schema import Uncheckable, linear_validator
from ..runtime._tools import Consequence
from ..runtime.policy._decide import Rules
from ._requests import TOO_MANY, admit_request, request_rules, request_spec
from ._urls import ascii_host_url, check_url
from .manifest._load import ServerConfig

if TYPE_CHECKING:
    from ..runtime._kernel import Kernel
    from ._diagnostics import Diagnostics

__all__ = [
    "ElicitationAnswer",
    "ElicitationGate",
    "ElicitationPrompt",
    "Elicitor",
    "credential_fields",
    "credential_request",
    "form_error",
]

_CREDENTIAL_WORDS = frozenset(
    {
        "password", "passwd", "passphrase", "passcode", "pwd", "secret", "token", "apikey", "key",
        "keys", "credential", "credentials", "auth", "authorization", "otp", "totp", "2fa", "mfa",
        "pin", "cvv", "cvc", "card", "iban", "ssn", "privatekey", "cookie", "apitoken",
        "accesstoken", "authtoken", "secretkey", "accesskey", "mnemonic",
    }
)  # fmt: skip
_CREDENTIAL_PHRASES = re.compile(
    r"pass\s*word|pass\s*phrase|pass\s*code|api[\s_-]*key|private[\s_-]*key|secret|"
    r"access[\s_-]*token|access[\s_-]*key|bearer|\btoken\b|personal[\s_-]*access|"
    r"(?:api|auth|refresh|session|id)[\s_-]*token|credit[\s_-]*card|card[\s_-]*number|"
    r"security[\s_-]*code|social[\s_-]*security|bank[\s_-]*account|routing[\s_-]*number|"
    r"credential|one[\s_-]*time[\s_-]*(?:code|password)|verification[\s_-]*code|"
    r"recovery[\s_-]*(?:code|phrase|key)|seed[\s_-]*phrase|two[\s_-]*factor",
    re.IGNORECASE,
)
# "PAT" (a personal access token) as a word, in capitals: "Pat" is a name. In a field's name
# (an identifier: gh_pat, githubPat) any spelling counts.
_PAT = re.compile(r"\bPATs?\b")
_NAME_WORDS = _CREDENTIAL_WORDS | {"pat", "pats"}
# Mentions of a well-known token format ("paste ghp_…"): the prefixes, not whole tokens.
_TOKEN_PREFIXES = re.compile(
    r"(?<![A-Za-z0-9])(?:gh[pousr]_|github_pat_|glpat-|xox[abposr]-|sk-(?:proj-|ant-)?[A-Za-z0-9]|"
    r"AKIA[0-9A-Z]|AIza[0-9A-Za-z_-]|ya29\.|eyJ[A-Za-z0-9_-]{8,}\.)"
)
_PRIMITIVES = frozenset({"string", "number", "integer", "boolean"})
REQUEST_SUFFIX = "__elicitation"
# What the Gate validates and records for an elicitation (the message already redacted).
ELICITATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "server": {"type": "string"},
        "mode": {"enum": ["form", "url"]},
        "message": {"type": "string"},
        "url": {"type": ["string", "null"]},
        "requested_schema": {"type": ["object", "null"]},
    },
    "required": ["server", "mode", "message", "url", "requested_schema"],
    "additionalProperties": False,
}


def _is_multi_select(prop: Mapping[str, Any]) -> bool:
    """2025-11-25's multi-select enum: an array of strings drawn from a fixed list."""
    items = prop.get("items")
    return (
        prop.get("type") == "array"
        and isinstance(items, Mapping)
        and (items.get("type") == "string" or "anyOf" in items)
        and ("enum" in items or "anyOf" in items)
    )


def _texts(value: Any) -> list[str]:
    """The strings in an answer's value (a multi-select's list included)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


# Scripts whose letters pass for Latin ones (Cyrillic "\u0440", Greek "\u03bf"): a word that
# mixes one of them with Latin letters is disguised ("\u0440\u0430ssword" shows as "password").
_LOOK_ALIKE_SCRIPTS = frozenset({"CYRILLIC", "GREEK", "ARMENIAN", "CHEROKEE", "COPTIC"})


def _mixes_scripts(text: str) -> bool:
    """Some word of ``text`` holds Latin letters and letters of a look-alike script."""
    for word in re.findall(r"[^\W\d_]+", text):
        if word.isascii():
            continue
        scripts = {unicodedata.name(c, "?").split(" ")[0] for c in word if c.isalpha()}
        if "LATIN" in scripts and scripts & _LOOK_ALIKE_SCRIPTS:
            return True
    return False


def _strings(value: Any) -> list[str]:
    """Every string in a schema fragment, keys and values, however deep."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for k, v in value.items() for s in (str(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _words(text: str) -> set[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    return {w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w}


def _asks_in_prose(text: str, *, prose: bool = True) -> bool:
    """The text as a person reads it (:func:`as_read`) names a credential, or (``prose``:
    not a pattern, whose character ranges mix scripts) is disguised."""
    read = as_read(text)
    return bool(
        _CREDENTIAL_PHRASES.search(read)
        or _PAT.search(read)
        or _TOKEN_PREFIXES.search(read)
        or (prose and _mixes_scripts(read))
    )


def _asks_in_label(text: str) -> bool:
    return bool(_words(as_read(text)) & _CREDENTIAL_WORDS) or _asks_in_prose(text)


def _labels(prop: Mapping[str, Any]) -> list[str]:
    """A field's choice values and labels: ``enum``/``enumNames``, ``oneOf``/``anyOf`` consts
    and titles, and the same under a multi-select's ``items``."""
    out: list[str] = []
    for source in (prop, prop.get("items") if isinstance(prop.get("items"), Mapping) else {}):
        for key in ("enum", "enumNames"):
            values = source.get(key)
            if isinstance(values, list):
                out += [str(v) for v in values]
        for key in ("oneOf", "anyOf"):
            options = source.get(key)
            if isinstance(options, list):
                for option in options:
                    if isinstance(option, Mapping):
                        out += [str(option.get(k)) for k in ("const", "title") if k in option]
    return out


def credential_request(message: str, schema: Mapping[str, Any]) -> list[str]:
    """Where a form request appears to ask for credentials or payment data (empty: nowhere).

    The whole request is judged: the ``message`` and, per field, its name, title,
    description, format, default and choice labels, and every other string of the
    field's schema (a ``pattern`` is shown when an answer does not fit). Names, titles
    and labels are checked word by word (``apiKey``, ``pin``, ``PAT``) and for phrases;
    prose (the message, descriptions, defaults) for explicit phrases (``password``,
    ``your token``, ``api key``, ``card number``…); every text for the prefixes of
    well-known tokens (``ghp_``, ``sk-``, ``AKIA``…). Each text is judged as a person
    reads it (:func:`~ringfence.runtime._render.as_read`: fullwidth or mathematical
    letters folded, invisible characters removed), and a word mixing Latin letters
    with look-alike ones (Cyrillic, Greek) counts as asking.
    """
    out = ["the message"] if _asks_in_prose(str(message)) else []
    for name, prop in (schema.get("properties") or {}).items():
        prop = prop if isinstance(prop, Mapping) else {}
        where: list[str] = []
        if _words(as_read(str(name))) & _NAME_WORDS or _asks_in_prose(str(name)):
            where.append("name")
        if _asks_in_label(str(prop.get("title", ""))):
            where.append("title")
        if _asks_in_prose(str(prop.get("description", ""))):
            where.append("description")
        if str(prop.get("format", "")).lower() in ("password", "credit-card"):
            where.append("format")
        default = prop.get("default")
        defaults = default if isinstance(default, list) else [] if default is None else [default]
        if any(_asks_in_prose(str(d)) for d in defaults):
            where.append("default")
        if any(_asks_in_label(label) for label in _labels(prop)):
            where.append("choices")
        if not where and any(_asks_in_prose(text, prose=False) for text in _strings(prop)):
            where.append("another text (a pattern, an example: shown when an answer is wrong)")
        if where:
            out.append(f"field {str(name)!r} ({', '.join(where)})")
    return out


def credential_fields(schema: Mapping[str, Any]) -> list[str]:
    """Names of fields in a form schema that appear to ask for credentials or payment data
    (the fields :func:`credential_request` names)."""
    return [
        str(name)
        for name in (schema.get("properties") or {})
        if credential_request("", {"properties": {name: schema["properties"][name]}})
    ]


@dataclass(frozen=True)
class ElicitationPrompt:
    """What the person is shown. ``url`` is the whole URL (URL mode); it is never opened."""

    server: str
    mode: Literal["form", "url"]
    message: str
    trace_id: str
    requested_schema: Mapping[str, Any] | None = None
    url: str | None = None


@dataclass(frozen=True)
class ElicitationAnswer:
    action: Literal["accept", "decline", "cancel"]
    content: Mapping[str, Any] | None = field(default=None)


# The most characters an elicitation request may hold (its message, every key and string of its
# form schema, its URL), counted before anything else reads it.
MAX_REQUEST_CHARACTERS = 16_384


def _larger_than(params: Any, limit: int) -> bool:
    """Whether the request's strings (and keys) hold more than ``limit`` characters, each
    other value counting one; walked without recursion and stopped as soon as it is over,
    so neither a long text nor deep nesting costs more than the limit."""
    seen = 0
    stack: list[Any] = [
        getattr(params, "message", None),
        getattr(params, "requested_schema", None),
        getattr(params, "url", None),
    ]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            seen += len(value)
        elif isinstance(value, Mapping):
            seen += 1 + len(value)  # each entry counts, before it is looked at
            if seen > limit:
                return True
            for key, item in value.items():
                stack.append(key)
                stack.append(item)
        elif isinstance(value, (list, tuple)):
            seen += 1 + len(value)
            if seen > limit:
                return True
            stack.extend(value)
        else:
            seen += 1
        if seen > limit:
            return True
    return False


@runtime_checkable
class Elicitor(Protocol):
    """Shows an elicitation to a person and returns their answer."""

    async def elicit(self, prompt: ElicitationPrompt) -> ElicitationAnswer: ...


class ElicitationGate:
    """The ``elicitation_callback`` for one server (see the module docstring)."""

    def __init__(
        self,
        config: ServerConfig,
        kernel: Kernel,
        elicitor: Elicitor | None,
        diagnostics: Diagnostics,
    ) -> None:
        self.config = config
        self.kernel = kernel
        self.elicitor = elicitor
        self.diagnostics = diagnostics
        self.spec = request_spec(
            config,
            REQUEST_SUFFIX,
            f"MCP server {config.name!r} asks you for input",
            ELICITATION_SCHEMA,
            self._elicit,
            consequence=Consequence.REVERSIBLE,
            policy=config.elicitation_policy,
        )
        self.name = self.spec.name

    def rules(self) -> Rules:
        """The rules ``elicitation_policy`` means, for the connector to register."""
        return request_rules(self.config.elicitation_policy, self.name)

    def _check_form(self, message: str, schema: Mapping[str, Any]) -> str | None:
        if schema.get("type") != "object" or not isinstance(schema.get("properties"), Mapping):
            return "the form schema must be an object with properties"
        for name, prop in schema["properties"].items():
            if not (
                isinstance(prop, Mapping)
                and (prop.get("type") in _PRIMITIVES or _is_multi_select(prop))
            ):
                return (
                    f"form field {name!r} is not a primitive (string, number, integer, boolean) "
                    "or a multi-select list of strings"
                )
        bad = credential_request(message, schema)
        if bad:
            return (
                f"the form appears to ask for credentials or payment data ({'; '.join(bad)}); "
                "ringfence never collects those in a form (use a URL-mode flow instead)"
            )
        try:
            jsonschema.Draft202012Validator.check_schema(dict(schema))
        except jsonschema.SchemaError as exc:
            return f"the form schema is invalid: {exc.message}"
        return None

    async def __call__(self, context: Any, params: Any) -> Any:
        if not admit_request(self.kernel, self.config, self.diagnostics, "elicitation/create"):
            return types.ErrorData(code=types.INVALID_REQUEST, message=TOO_MANY)
        trace_id = secrets.token_hex(8)
        events = self.kernel.events
        redact = self.kernel.redactor.redact
        mode: Literal["form", "url"] = (
            "url" if isinstance(params, types.ElicitRequestURLParams) else "form"
        )
        events.emit("mcp_elicitation_requested", trace_id, server=self.config.name, mode=mode)
        if _larger_than(params, MAX_REQUEST_CHARACTERS):
            # Judged before anything reads it: the credential checks cost ~7 s of the kernel's
            # loop per megabyte, and nobody reads a form that long.
            message = (
                f"the elicitation request holds more than {MAX_REQUEST_CHARACTERS:,} characters "
                "(its message, form schema or URL); ringfence shows a person at most that, and "
                "did not read it"
            )
            events.emit(
                "mcp_elicitation_refused", trace_id, server=self.config.name, reason=message
            )
            self.diagnostics.fail("elicitation", message)
            return types.ErrorData(code=types.INVALID_REQUEST, message=message)

        def refuse(message: str) -> types.ErrorData:
            events.emit(
                "mcp_elicitation_refused", trace_id, server=self.config.name, reason=message
            )
            self.diagnostics.fail("elicitation", message)
            return types.ErrorData(code=types.INVALID_PARAMS, message=message)

        def answer(
            action: Literal["accept", "decline", "cancel"], content: Any = None
        ) -> types.ElicitResult:
            events.emit(
                "mcp_elicitation_answered", trace_id, server=self.config.name, action=action
            )
            return types.ElicitResult(action=action, content=content)

        schema: Mapping[str, Any] | None = None
        url: str | None = None
        if mode == "form":
            schema = dict(params.requested_schema or {})
            problem = self._check_form(str(params.message), schema)
            if problem is not None:
                return refuse(problem)
        else:
            try:
                # Shown, and so opened, with its host as DNS sees it (no look-alike host).
                url = ascii_host_url(check_url(params.url, "url"))
            except InvalidArguments as exc:
                return refuse(f"the elicitation {exc.message}; ringfence will not offer it")
        if self.elicitor is None:
            return answer("decline")
        arguments = {
            "server": self.config.name,
            "mode": mode,
            "message": redact(params.message),
            "url": url,
            "requested_schema": schema,
        }
        # The one door: decided, asked, signed and recorded like every call.
        outcome = await self.kernel.invoke_request(
            self.spec, arguments, origin="mcp-elicitation", trace_id=trace_id
        )
        if isinstance(outcome.error, Denied):
            # Say why (e.g. no terminal to ask at): a host shows its diagnostics.
            self.diagnostics.fail("elicitation", f"declined: {outcome.error.message}")
            return answer("decline")
        if outcome.error is not None:
            self.diagnostics.fail("elicitation", outcome.error.message)
            return answer("cancel")
        reply = ElicitationAnswer(outcome.value["action"], outcome.value["content"])
        if reply.action != "accept":
            return answer(reply.action)
        if mode == "url":
            # Consent only: nothing was opened or fetched by ringfence.
            return answer("accept")
        content = dict(reply.content or {})  # redacted by the kernel, as every result
        leaked = [k for k, v in content.items() if any(looks_like_token(t) for t in _texts(v))]
        if leaked:
            # Whatever the form said it wanted: a well-known token never leaves in an answer.
            self.diagnostics.fail(
                "elicitation",
                f"the answer to field(s) {', '.join(map(repr, leaked))} looks like an access "
                "token; ringfence does not send it (the request was cancelled)",
            )
            return answer("cancel")
        assert schema is not None
        try:
            error = form_error(schema, content)
        except Uncheckable as exc:
            self.diagnostics.fail(
                "elicitation", f"the answer cannot be checked safely against the form: {exc}"
            )
            return answer("cancel")
        if error is not None:
            self.diagnostics.fail(
                "elicitation", f"the answer did not match the form: {error.message}"
            )
            return answer("cancel")
        return answer("accept", content)

    async def _elicit(self, args: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        """The executor: show what the Gate allowed to the person, return their answer."""
        assert self.elicitor is not None  # checked before the request is proposed
        prompt = ElicitationPrompt(
            server=self.config.name,
            mode=args["mode"],
            message=args["message"],
            trace_id=ctx.trace_id,
            requested_schema=args["requested_schema"],
            url=args["url"],
        )
        reply = await self.elicitor.elicit(prompt)
        content = dict(reply.content) if reply.content is not None else None
        return {"action": reply.action, "content": content}


def form_error(
    schema: Mapping[str, Any], content: Any, *, format_checker: Any = None
) -> jsonschema.ValidationError | None:
    """The error jsonschema ranks first for ``content`` against the form, or None if it fits.

    Every ``pattern`` is matched with RE2 (:func:`~..runtime._schema.linear_validator`):
    the form is the server's. Raises Uncheckable for a pattern RE2 cannot compile.
    """
    validator = linear_validator(dict(schema))
    if format_checker is not None:
        validator = validator.evolve(format_checker=format_checker)
    return jsonschema.exceptions.best_match(validator.iter_errors(content))

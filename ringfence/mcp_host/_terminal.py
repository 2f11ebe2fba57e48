"""Elicitation at the command line: a form on the terminal, or a clear decline without one.

:class:`TerminalElicitor` is the :class:`~._elicitation.Elicitor` a CLI session
uses when stdin and stderr are a terminal. It is reached only through the
Gate (``mcp.<server>.__elicitation``), after :class:`~._elicitation.ElicitationGate`
has checked the form (flat, no credential fields, a valid schema). Per field
it shows the title, the description, the type, the choices of an ``enum``
(numbered) and the default, pre-filled: an empty answer keeps it. Each value is
checked against that field's part of the requested schema (type, bounds,
length, pattern, format, choices) and asked again until it fits, and the whole
answer is checked against the whole schema before it is offered for sending
(the gate checks it once more). The person then sends, declines or cancels.
End of input cancels. Server text (message, titles, descriptions) is shown
with control and bidi characters escaped, so it cannot redraw the terminal, and
the form says first, plainly, that the request is the server's, not ringfence's,
and that ringfence never asks for a password, a token or a key in a form.

URL mode shows the whole URL and asks only for consent; nothing is opened.

:class:`HeadlessElicitor` is used when there is no terminal: it declines every
request and keeps a note saying why (the CLI prints it as a warning).

Not promised: protection against a person pasting a secret into a free-text
field (the gate refuses forms whose fields *ask* for one; answers are redacted
for registered secrets only).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any, TextIO

import jsonschema
import trio

from ..runtime._render import one_line, visible
from ..runtime._schema import Uncheckable
from ._elicitation import ElicitationAnswer, ElicitationPrompt, _is_multi_select, form_error

__all__ = ["HeadlessElicitor", "TerminalElicitor", "cli_elicitor"]

_CANCEL = object()  # end of input: the person went away
_TYPE_WORDS = {"string": "text", "integer": "whole number", "number": "number", "boolean": "yes/no"}


def _shown(text: Any) -> str:
    """Server-written text, escaped and indented for the terminal."""
    return visible(str(text)).replace("\n", "\n    ")


class HeadlessElicitor:
    """Declines every elicitation; ``notes`` says which and why (for the CLI's warnings)."""

    def __init__(self, reason: str = "stdin is not a terminal") -> None:
        self.reason = reason
        self.notes: list[str] = []

    async def elicit(self, prompt: ElicitationPrompt) -> ElicitationAnswer:
        self.notes.append(
            f"MCP server {prompt.server!r} asked for input ({prompt.mode}); declined because "
            f"{self.reason}: run at a terminal to answer it"
        )
        return ElicitationAnswer("decline")


class TerminalElicitor:
    """Asks the person on a terminal (see the module docstring). Prompts never interleave."""

    def __init__(self, input: TextIO | None = None, output: TextIO | None = None) -> None:
        self._input = input if input is not None else sys.stdin
        self._output = output if output is not None else sys.stderr
        self._lock = trio.Lock()
        self.notes: list[str] = []

    def _write(self, text: str) -> None:
        self._output.write(text)
        self._output.flush()

    async def _read(self, question: str) -> str | object:
        self._write(question)
        line = await trio.to_thread.run_sync(self._input.readline, abandon_on_cancel=True)
        if line == "":
            return _CANCEL
        return line.rstrip("\r\n")

    async def elicit(self, prompt: ElicitationPrompt) -> ElicitationAnswer:
        async with self._lock:
            self._write(
                f"\nMCP server '{one_line(prompt.server)}' asks you for input. The request and "
                "every text below are the server's, not ringfence's. ringfence never asks for "
                "a password, a token or a key in a form: do not type one here.\n"
                f"  the server says:\n    {_shown(prompt.message)}\n"
            )
            if prompt.mode == "url":
                return await self._consent(prompt.url or "")
            schema = dict(prompt.requested_schema or {})
            content = await self._form(schema)
            if content is _CANCEL:
                return ElicitationAnswer("cancel")
            assert isinstance(content, dict)
            self._write(f"  answer: {json.dumps(content, ensure_ascii=False)}\n")
            while True:
                choice = await self._read("  [s]end it, [d]ecline, or [c]ancel? ")
                if choice is _CANCEL:
                    return ElicitationAnswer("cancel")
                word = str(choice).strip().lower()
                if word in ("s", "send", "y", "yes"):
                    return ElicitationAnswer("accept", content)
                if word in ("d", "decline", "n", "no"):
                    return ElicitationAnswer("decline")
                if word in ("c", "cancel"):
                    return ElicitationAnswer("cancel")

    async def _consent(self, url: str) -> ElicitationAnswer:
        self._write(
            f"  it asks you to open this URL yourself (ringfence does not open it):\n"
            f"    {_shown(url)}\n"
        )
        while True:
            choice = await self._read("  [a]ccept (I will open it), [d]ecline, or [c]ancel? ")
            if choice is _CANCEL:
                return ElicitationAnswer("cancel")
            word = str(choice).strip().lower()
            if word in ("a", "accept", "y", "yes"):
                return ElicitationAnswer("accept")
            if word in ("d", "decline", "n", "no"):
                return ElicitationAnswer("decline")
            if word in ("c", "cancel"):
                return ElicitationAnswer("cancel")

    async def _form(self, schema: Mapping[str, Any]) -> dict[str, Any] | object:
        properties: Mapping[str, Any] = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        self._write("  (an empty answer keeps the [default]; end of input cancels)\n")
        while True:
            content: dict[str, Any] = {}
            for name, prop in properties.items():
                value = await self._field(str(name), dict(prop), name in required)
                if value is _CANCEL:
                    return _CANCEL
                if value is not None:
                    content[str(name)] = value
            try:
                error = form_error(schema, content)
            except Uncheckable as exc:
                self._write(f"  this form cannot be checked safely: {_shown(str(exc))}\n")
                return _CANCEL
            if error is None:
                return content
            self._write(f"  that does not fit the form: {_shown(error.message)}; again:\n")

    async def _field(self, name: str, prop: dict[str, Any], required: bool) -> Any:
        """One field's value (None: left out), asked until it fits its schema."""
        choices = _choices(prop)
        kind = "choice" if choices else _TYPE_WORDS.get(str(prop.get("type")), "value")
        if _is_multi_select(prop):
            kind = "choices, comma-separated"
        label = prop.get("title") or name
        self._write(f"  {_shown(label)} ({kind}{'' if required else ', optional'})\n")
        if prop.get("description"):
            self._write(f"    {_shown(prop['description'])}\n")
        for k, (_value, title) in enumerate(choices, 1):
            self._write(f"    {k}) {_shown(title)}\n")
        default = prop.get("default")
        shown_default = "" if default is None else f" [{_shown(_as_text(default))}]"
        field_schema = {"type": "object", "properties": {name: prop}}
        formats = jsonschema.FormatChecker()
        while True:
            line = await self._read(f"  {_shown(name)}{shown_default}: ")
            if line is _CANCEL:
                return _CANCEL
            text = str(line).strip()
            if text == "":
                if default is not None:
                    return default
                if not required:
                    return None
                self._write("    this field is required\n")
                continue
            try:
                value = _parse(text, prop, choices)
            except ValueError as exc:
                self._write(f"    {exc}\n")
                continue
            try:  # the server's pattern, matched with RE2 (see form_error)
                error = form_error(field_schema, {name: value}, format_checker=formats)
            except Uncheckable as exc:
                self._write(f"    this field cannot be checked safely: {_shown(str(exc))}\n")
                return _CANCEL
            if error is None:
                return value
            self._write(f"    {_shown(error.message)}\n")


def _choices(prop: Mapping[str, Any]) -> list[tuple[Any, str]]:
    """(value, title) of an enum, a titled ``oneOf``/``anyOf`` of consts, or a multi-select's items."""
    source: Mapping[str, Any] = prop
    if _is_multi_select(prop):
        source = prop.get("items") or {}
    if isinstance(source.get("enum"), list):
        names = source.get("enumNames") or []
        return [
            (v, str(names[k]) if k < len(names) else _as_text(v))
            for k, v in enumerate(source["enum"])
        ]
    options = source.get("oneOf") or source.get("anyOf")
    if isinstance(options, list):
        return [
            (o["const"], str(o.get("title") or o["const"]))
            for o in options
            if isinstance(o, Mapping) and "const" in o
        ]
    return []


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(_as_text(v) for v in value)
    return str(value)


def _pick(text: str, choices: list[tuple[Any, str]]) -> Any:
    if text.isdigit() and 1 <= int(text) <= len(choices):
        return choices[int(text) - 1][0]
    for value, title in choices:
        if text in (str(value), title):
            return value
    raise ValueError(f"answer with a number from 1 to {len(choices)} or one of the values")


def _parse(text: str, prop: Mapping[str, Any], choices: list[tuple[Any, str]]) -> Any:
    """The typed value of one answer; ValueError says what was expected."""
    if _is_multi_select(prop):
        return [_pick(part.strip(), choices) for part in text.split(",") if part.strip()]
    if choices:
        return _pick(text, choices)
    kind = prop.get("type")
    if kind == "boolean":
        word = text.lower()
        if word in ("y", "yes", "true", "1"):
            return True
        if word in ("n", "no", "false", "0"):
            return False
        raise ValueError("answer yes or no")
    if kind == "integer":
        try:
            return int(text)
        except ValueError:
            raise ValueError("answer with a whole number") from None
    if kind == "number":
        try:
            number = float(text)
        except ValueError:
            raise ValueError("answer with a number") from None
        return int(number) if number.is_integer() and "." not in text else number
    return text


def cli_elicitor() -> TerminalElicitor | HeadlessElicitor:
    """A terminal form when stdin and stderr are a terminal, else a declining stand-in."""
    if sys.stdin.isatty() and sys.stderr.isatty():
        return TerminalElicitor()
    return HeadlessElicitor()

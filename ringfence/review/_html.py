"""HTML for the review page, escaped by construction.

Every element is built by :func:`el`: a child that is a plain ``str`` is
HTML-escaped (``& < > " '``), only an :class:`Html` value (made by :func:`el`
itself, or :func:`raw` for the few fixed strings of this module) goes in as
markup. Attribute names are this module's constants; attribute values are
escaped with quotes. So a string an agent or a server wrote can become text
in the page and nothing else: not an element, not an attribute, not a URL
(no value of theirs is ever put in ``href``, ``src`` or ``action``: links are
built by :func:`url` from the page's own base and ids it checked).

Before it is escaped, what an agent or a server wrote passes the one renderer
(:mod:`ringfence.runtime._render`): names and fields through ``one_line``,
values a person must read whole through ``visible`` or ``render_approval``,
lines of a file through ``visible_line`` (by ``render_changes``). So control,
bidi and invisible characters are shown escaped (``\\u202e``) on the page as on
the terminal, and :func:`clip` shows a long value as its head and tail with its size,
rendering only those (a 1 MB argument costs the page ~200 characters).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from urllib.parse import quote

from ..runtime._render import one_line, visible, when_text

__all__ = [
    "Html",
    "block",
    "clip",
    "code_points",
    "el",
    "field",
    "path_field",
    "raw",
    "url",
    "when",
]


class Html(str):
    """Markup: made by :func:`el` (or :func:`raw` for this package's fixed strings)."""

    __slots__ = ()


_NAME = re.compile(r"^[a-z][a-z0-9-]*\Z")
_VOID = frozenset({"br", "hr", "input", "link", "meta", "img"})


def raw(text: str) -> Html:
    """This package's own fixed markup (never a value from elsewhere)."""
    return Html(text)


def _children(children: tuple[object, ...], out: list[str]) -> None:
    for child in children:
        if child is None or child is False:
            continue
        if isinstance(child, Html):
            out.append(child)
        elif isinstance(child, str):
            out.append(html.escape(child, quote=True))
        elif isinstance(child, int | float):
            out.append(html.escape(str(child)))
        else:
            _children(tuple(child), out)  # type: ignore[arg-type]


def el(tag: str, attrs: dict[str, object] | None = None, *children: object) -> Html:
    """``<tag attrs>children</tag>`` with every text child and attribute value escaped."""
    if not _NAME.match(tag):
        raise ValueError(f"not a tag name: {tag!r}")
    parts = [f"<{tag}"]
    for name, value in (attrs or {}).items():
        if not _NAME.match(name):
            raise ValueError(f"not an attribute name: {name!r}")
        if value is None or value is False:
            continue
        if value is True:
            parts.append(f" {name}")
        else:
            parts.append(f' {name}="{html.escape(str(value), quote=True)}"')
    parts.append(">")
    if tag in _VOID:
        return Html("".join(parts))
    _children(children, parts)
    parts.append(f"</{tag}>")
    return Html("".join(parts))


def url(base: str, *segments: str, **query: str) -> str:
    """A link of this page: its base and percent-encoded segments (and query), nothing else."""
    path = base + "".join("/" + quote(s, safe="") for s in segments)
    pairs = [(k, v) for k, v in query.items() if v]
    if pairs:
        path += "?" + "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in pairs)
    return path


def clip(text: str, limit: int, render: Callable[[str], str] = one_line) -> str:
    """``render(text)``, or for a text over ``limit`` characters its rendered head and tail
    around the renderer's own ``⟨… N chars not shown …⟩`` (the middle is never rendered)."""
    if len(text) <= limit:
        return render(text)
    keep = max(limit // 2 - 8, 8)
    hidden = len(text) - 2 * keep
    return f"{render(text[:keep])} ⟨… {hidden:,} of {len(text):,} chars not shown …⟩ {render(text[-keep:])}"


def field(text: object, limit: int = 200) -> str:
    """A name or a short field as shown: ``one_line``, head…tail beyond ``limit``."""
    return clip(text if isinstance(text, str) else str(text), limit)


def block(text: str, limit: int = 20_000) -> str:
    """A value a person reads whole (an output, a message): ``visible``, head…tail beyond it."""
    return clip(text, limit, visible)


def when(ts: float) -> str:
    """A record's time as the page shows it (local, to the millisecond); a time that cannot
    be drawn is shown as its value (:func:`when_text`), never an error that takes the
    view down."""
    return when_text(ts, "%Y-%m-%d %H:%M:%S", local=True, millis=True)


_MARKS = frozenset("\u27e8\u27e9")  # the renderer's own brackets (an agent's are escaped)


def _code_point(char: str) -> str:
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def code_points(shown: str) -> str | None:
    """``shown`` (already rendered) with every character beyond ASCII as ``\\uXXXX``; None
    when it has none. Two texts that look alike (a Cyrillic ``\u0430`` for a Latin ``a``,
    ``e`` and a combining accent for ``\u00e9``) never look alike this way."""
    if shown.isascii() or all(c.isascii() or c in _MARKS for c in shown):
        return None
    return "".join(c if c.isascii() or c in _MARKS else _code_point(c) for c in shown)


def path_field(path: str, limit: int = 120) -> str:
    """A path as the page shows what will be changed: :func:`field`, and when it holds any
    character beyond ASCII, its code points too (``\u0430pp.py`` is not ``app.py``)."""
    shown = field(path, limit)
    points = code_points(shown)
    return shown if points is None else f"{shown} \u27e8as code points: {points}\u27e9"

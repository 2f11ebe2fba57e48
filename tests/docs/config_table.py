"""The configuration page's one table: every flag from the real parser, every ``RINGFENCE_*`` variable.

The flag rows are generated from :func:`ringfence.cli._main.build_parser` (all verbs loaded),
one row per flag and help text, naming the verbs that take it; the variable rows are written by
hand (what a variable means is not in any parser). ``tests/docs/test_docs_config.py`` fails when
the page's flag rows differ from the parser's or a variable found in the code has no row;
``python tests/docs/config_table.py`` rewrites the flag rows in place and keeps the rest.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "configuration.md"
HEADER = "| name | where | what |"
# A variable name in code or docs; a bare prefix (`RINGFENCE_*`, "RINGFENCE_") is not one.
VARIABLE = re.compile(r"\bRINGFENCE_[A-Z0-9_]*[A-Z0-9]\b")


def _walk(parser: argparse.ArgumentParser, words: tuple[str, ...]):
    # argparse has no public walk over subparsers; the suite's other parser walks
    # (tests/cli_helpers.commands) read the same attributes.
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _walk(child, (*words, name))
        elif action.option_strings:
            yield words, action


def _escape(text: str) -> str:
    """Plain text as a Markdown table cell: nothing in it is markup."""
    text = " ".join(text.split())
    for ch in "\\`*_[]|<>":
        text = text.replace(ch, "\\" + ch)
    return text


def _spelling(action: argparse.Action) -> str:
    flags = ", ".join(action.option_strings)
    if action.nargs == 0:
        return f"`{flags}`"
    if action.metavar is not None:
        value = str(action.metavar)
    elif action.choices is not None:
        value = "{" + ",".join(map(str, action.choices)) + "}"
    else:
        value = action.dest.upper()
    if action.nargs == "?":
        value = f"[{value}]"
    return f"`{flags} {value}`"


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    if "%(" in text:
        text = text % {**vars(action), "prog": "ringfence"}
    return text


def flag_rows() -> list[str]:
    """The table rows of every flag of the real parser, in a stable order."""
    from ringfence.cli._main import build_parser

    seen: dict[tuple[str, str], list[str]] = {}
    for words, action in _walk(build_parser(), ()):
        if isinstance(action, argparse._HelpAction | argparse._VersionAction) and words:
            continue  # -h on every verb: one row for the command's own
        key = (_spelling(action), _help(action))
        seen.setdefault(key, []).append(" ".join(words) or "ringfence")
    rows = []
    for (spelling, help_), verbs in sorted(seen.items(), key=lambda kv: (kv[0][0].lower(), kv[1])):
        where = "every verb" if spelling.startswith("`-h") else ", ".join(f"`{v}`" for v in verbs)
        rows.append(f"| {spelling} | {where} | {_escape(help_)} |")
    return rows


def variables_in_code() -> set[str]:
    """Every ``RINGFENCE_*`` variable the package names (``grep -rn RINGFENCE_ ringfence/``)."""
    return {
        name
        for path in (REPO / "ringfence").rglob("*.py")
        for name in VARIABLE.findall(path.read_text())
    }


def variables_anywhere() -> set[str]:
    """Variables named by the package, the tests, CI or the Makefile (a row may name these)."""
    names = variables_in_code()
    for path in [*(REPO / "tests").rglob("*.py"), REPO / ".ci" / "run", REPO / "Makefile"]:
        if "node_modules" not in path.parts:
            names |= set(VARIABLE.findall(path.read_text()))
    return names


def page_table(text: str | None = None) -> tuple[list[str], list[str], list[str]]:
    """The page's table: (lines before it, its rows, lines after it)."""
    lines = (text if text is not None else PAGE.read_text()).splitlines()
    start = lines.index(HEADER)
    end = start + 2
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return lines[: start + 2], lines[start + 2 : end], lines[end:]


def is_flag_row(row: str) -> bool:
    return row.startswith("| `-")


def row_variable(row: str) -> str | None:
    match = re.match(r"\| `(RINGFENCE_[A-Z0-9_]+)`", row)
    return match.group(1) if match else None


def write() -> None:
    before, rows, after = page_table()
    others = [r for r in rows if not is_flag_row(r)]
    PAGE.write_text("\n".join([*before, *flag_rows(), *others, *after]) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    write()
    print(f"rewrote the flag rows of {PAGE.relative_to(REPO)}")

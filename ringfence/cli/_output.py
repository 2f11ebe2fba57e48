"""How every verb prints results and maps errors to exit codes.

Exit codes: 0 ok, 1 tool error, refusal by the tool or an unexpected failure,
2 usage error, 3 denied by policy or approver.

With ``--json`` every verb prints exactly one object on stdout::

    {"ok": true,  "result": …}                 # success
    {"ok": false, "error": {"code", "message", "field"?, "details"?}}
    # plus "warnings": [str, …] when there are any

Errors are one line on stderr without ``--json``. No verb lets a traceback
reach the user: :func:`error_from_exception` turns anything unexpected into a
one-line ``tool_error`` (``RINGFENCE_DEBUG=1`` re-raises it instead, for bugs).

What an agent, a tool or a server wrote is shown through the one renderer
(:mod:`ringfence.runtime._render`): error lines, warnings and table cells
through ``one_line``, ``--json`` through ``json_text``. And whatever a verb
writes, stdout and stderr pass the guard (:mod:`._guard`, ``terminal_text``)
while it runs, so no control, bidi or separator character reaches the terminal raw,
whichever print path wrote it.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TextIO

from ..runtime._errors import Denied, InvalidArguments, RingfenceError, ToolError
from ..runtime._groups import single_error
from ..runtime._render import json_text, one_line
from ._guard import unguarded
from ._verbs import (  # light, for the parser; re-exported for the verbs
    DEBUG_ENV as DEBUG_ENV,
    EXIT_CODES_HELP as EXIT_CODES_HELP,
    UsageError as UsageError,
)

EXIT_OK = 0
EXIT_TOOL_ERROR = 1
EXIT_USAGE = 2
EXIT_DENIED = 3

# An error message or detail string longer than this is shown as head…tail (and its size):
# a 120 KB argument must not come back in the error that refuses it.
MAX_SHOWN_CHARS = 240


# What ``read_input_text`` reads at most unless its caller bounds it tighter (a script's or
# the arguments' text): one byte past it is refused, never read on (`run-script s.py` with
# s.py a link to /dev/zero, or `call --args @/dev/zero`, read until memory ran out).
MAX_INPUT_BYTES = 64 * 1024 * 1024


def read_input_text(
    name: str, *, subject: str, field: str, prefix: str = "", max_bytes: int | None = None
) -> str:
    """UTF-8 text from the file ``name``, or stdin when ``name`` is ``-``, at most
    ``max_bytes`` (default :data:`MAX_INPUT_BYTES`; a file named on the command line is read
    as the person gave it: a pipe, ``<(…)``, is waited for).

    Errors are InvalidArguments naming ``field``: ``{prefix}cannot read {subject}: …``,
    ``{prefix}{subject} is larger than …`` (refused before the rest is read) and
    ``{prefix}{subject} is not UTF-8 text``.
    """
    bound = MAX_INPUT_BYTES if max_bytes is None else max_bytes
    try:
        if name == "-":
            data = sys.stdin.buffer.read(bound + 1)
        else:
            with open(name, "rb") as f:
                data = f.read(bound + 1)
    except OSError as exc:
        raise InvalidArguments(
            f"{prefix}cannot read {subject}: {exc.strerror or exc}", field=field
        ) from None
    if len(data) > bound:
        raise InvalidArguments(
            f"{prefix}{subject} is larger than {bound:,} bytes, the most it may be; "
            "nothing of it was run",
            field=field,
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArguments(f"{prefix}{subject} is not UTF-8 text", field=field) from None


def check_output_file(path: str | None, option: str) -> None:
    """A file a verb will write must not be a directory (refused before anything opens or runs)."""
    if path is not None and os.path.isdir(path):
        raise InvalidArguments(f"{option} {path} is a directory, not a file", field=option)


@contextmanager
def naming_file(path: object) -> Iterator[None]:
    """Inside, an OSError that names no file (a read's EIO) is given ``path`` and re-raised.

    Only open() puts the file name into an OSError; a failed read() does not, and
    :func:`error_from_exception` could only say "cannot use a file".
    """
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)
        raise


def abbreviate(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    """``text`` itself when short; else its head…tail and its size. Never longer than ~limit+40."""
    if len(text) <= limit:
        return text
    keep = max(limit // 2 - 10, 8)
    return f"{text[:keep]}…{text[-keep:]} ({len(text):,} characters)"


# A word this long is an echoed value, cut to head…tail; a path (PATH_MAX is 4096, but a
# real one is rarely past a few hundred characters) is shown whole below it.
_LONG_RUN = re.compile(r"\S{400,}")


def abbreviate_message(text: str) -> str:
    """A message on one line, each very long word (an echoed value) shown as head…tail (size)."""
    one_line = " ".join(text.split())
    return abbreviate(_LONG_RUN.sub(lambda m: abbreviate(m.group(), 60), one_line), 1000)


def error_line(text: str) -> str:
    """A message for the one error line: abbreviated (:func:`abbreviate_message`), then
    rendered so that nothing in it (a server's or an agent's text) acts on the terminal."""
    return one_line(abbreviate_message(text))


def capped(value: Any) -> Any:
    """``value`` with every string abbreviated (dicts and lists walked); for error output."""
    if isinstance(value, str):
        # The same bound as the stderr line: a message names its culprit whole (a path can
        # be long), while an echoed value (a very long word) is cut to head…tail.
        return abbreviate_message(value) if "\n" not in value else abbreviate(value, 1000)
    if isinstance(value, dict):
        return {str(k): capped(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [capped(v) for v in value]
    return value


def exit_code_for(error: RingfenceError) -> int:
    if isinstance(error, Denied):
        return EXIT_DENIED
    if isinstance(error, InvalidArguments):
        return EXIT_USAGE
    return EXIT_TOOL_ERROR


def print_json(obj: Any) -> None:
    """``obj`` as indented JSON: control, bidi and separator characters as ``\\uXXXX``."""
    sys.stdout.write(json_text(obj, indent=2) + "\n")
    sys.stdout.flush()


def envelope(ok: bool, payload: Any, warnings: Iterable[str] = ()) -> dict[str, Any]:
    """The one ``--json`` shape: ``{"ok", "result"|"error", "warnings"?}``."""
    out: dict[str, Any] = {"ok": ok, ("result" if ok else "error"): payload}
    shown = [str(w) for w in warnings]
    if shown:
        out["warnings"] = shown
    return out


def print_warnings(warnings: Iterable[str]) -> None:
    for w in warnings:
        sys.stderr.write(f"ringfence: warning: {one_line(str(w))}\n")


def print_ok(result: Any, as_json: bool, warnings: Iterable[str] = ()) -> int:
    warnings = list(warnings)
    if as_json:
        print_json(envelope(True, result, warnings))
        return EXIT_OK
    if isinstance(result, str):
        sys.stdout.write(result if result.endswith("\n") or not result else result + "\n")
    else:
        print_json(result)
    print_warnings(warnings)
    return EXIT_OK


def error_dict(error: RingfenceError) -> dict[str, Any]:
    """``error.to_dict()`` with long strings abbreviated."""
    return capped(error.to_dict())


def print_error(error: RingfenceError, as_json: bool, warnings: Iterable[str] = ()) -> int:
    warnings = list(warnings)
    if as_json:
        print_json(envelope(False, error_dict(error), warnings))
    else:
        print_warnings(warnings)
        sys.stderr.write(f"ringfence: {error.code}: {error_line(error.message)}\n")
    return exit_code_for(error)


def print_usage_error(message: str, as_json: bool) -> int:
    """An argument-parsing or other command-line mistake: exit 2, JSON too with ``--json``."""
    if as_json:
        print_json(envelope(False, {"code": InvalidArguments.code, "message": abbreviate(message)}))
    else:
        sys.stderr.write(f"ringfence: {error_line(message)}\n")
    return EXIT_USAGE


def leaf_exception(exc: BaseException) -> BaseException:
    """The one real failure inside nurseries' groups (``runtime._groups``' rule), else ``exc``."""
    return single_error(exc) if isinstance(exc, BaseExceptionGroup) else exc


def error_from_exception(exc: BaseException) -> RingfenceError:
    """A ringfence error for anything a verb raised; unexpected ones become ``tool_error``.

    An OSError names its file and the OS's reason (``cannot use /tmp: Is a
    directory``); anything else names its type and says how to see the traceback.
    """
    exc = leaf_exception(exc)
    if isinstance(exc, RingfenceError):
        return exc
    if isinstance(exc, OSError):
        where = exc.filename if exc.filename is not None else "a file"
        reason = exc.strerror or str(exc)
        return ToolError(f"cannot use {where}: {reason}")
    if isinstance(exc, BaseExceptionGroup):
        kinds = ", ".join(sorted({type(e).__name__ for e in exc.exceptions}))
        text = f"{len(exc.exceptions)} errors at once ({kinds})"
    else:
        text = f"{type(exc).__name__}: {exc}"
    return ToolError(
        f"unexpected error: {abbreviate(text)} (set {DEBUG_ENV}=1 to see the traceback)"
    )


# --- terminals: tables and progress ------------------------------------------------------


def is_terminal(stream: TextIO) -> bool:
    """A person is watching ``stream`` (rich output), not a pipe or file (plain lines)."""
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"


def print_table(
    headers: Sequence[str] | None,
    rows: Sequence[Sequence[str]],
    stream: TextIO | None = None,
) -> None:
    """Rows as a table: rich on a terminal, plain two-space-aligned columns otherwise.

    The plain form is stable for scripts: one line per row (headers first when
    given), columns left-aligned, trailing spaces stripped. Every cell is shown
    through ``one_line`` (a newline, a control or a bidi character in a cell
    cannot break the table or act on the terminal); rich is given text, never
    markup.
    """
    stream = stream if stream is not None else sys.stdout
    rows = [[one_line(str(cell)) for cell in row] for row in rows]
    if is_terminal(stream):
        from rich import box
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        table = Table(
            box=box.SIMPLE_HEAD if headers else None,
            show_header=headers is not None,
            pad_edge=False,
        )
        for k, name in enumerate(headers or [""] * (len(rows[0]) if rows else 0)):
            table.add_column(name, overflow="fold", style="bold" if k == 0 else None)
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))
        Console(file=unguarded(stream), highlight=False, soft_wrap=False).print(table)
        return
    lines = ([list(headers)] if headers else []) + [list(r) for r in rows]
    if not lines:
        return
    widths = [max(len(line[k]) for line in lines) for k in range(len(lines[0]))]
    for line in lines:
        cells = [c.ljust(w) for c, w in zip(line, widths, strict=True)]
        stream.write("  ".join(cells).rstrip() + "\n")
    stream.flush()


@contextmanager
def progress_lines(title: str, stream: TextIO | None = None) -> Iterator[Callable[[str], None]]:
    """A ``progress(line)`` callback for long work (image builds, the bench suite).

    On a terminal: each line printed above a spinner that shows ``title`` and
    the elapsed time. Otherwise: each line as it comes, flushed (logs, CI).
    The callback may be called from a worker thread.
    """
    stream = stream if stream is not None else sys.stderr
    if not is_terminal(stream):

        def plain(line: str) -> None:
            stream.write(f"{one_line(line)}\n")
            stream.flush()

        yield plain
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = Console(file=unguarded(stream), highlight=False)
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console
    ) as progress:
        task = progress.add_task(title, total=None)

        def fancy(line: str) -> None:
            line = one_line(line)
            progress.console.print(line, markup=False)
            shown = escape(abbreviate(line.strip(), 60))  # the column reads markup: none of it
            progress.update(task, description=f"{escape(title)}: {shown}")

        yield fancy

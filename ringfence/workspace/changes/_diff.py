"""A change set as a person reviews it (``checkpoints show``, ``plan show``).

Every change is shown, not only changes of content: per path, a line for a
new or deleted entry (with its kind and mode), for a change of kind (``file ->
symlink``) and for a change of mode (``0644 -> 0666 (rw-r--r-- ->
rw-rw-rw-)``, set-id and sticky bits included), then a unified diff of its
text. A link's text is its target (``-> target``); content that is binary (a NUL
byte, as git judges it), and entries that have no text (a FIFO, a device), are
named, not shown. Text that is not all UTF-8 is shown, each byte that is not as
``\\xHH`` under a line that says so: one such byte hid a whole script's change.

What the agent wrote is shown through the one renderer
(:mod:`ringfence.runtime._render`): names through ``one_line`` (a newline in a
name cannot start a line of its own), every line of content through
``visible_line`` (control, bidi and separator characters escaped, long runs of
blanks counted, indentation kept), so nothing a file holds can move the cursor,
erase what is shown, or hide part of a line from the person reviewing it. Lines
are split at ``\\n`` only: a carriage return or a form feed is shown escaped
inside its line, never as a line break.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable

from ...runtime._render import one_line, visible_line
from .._names import escape_name
from ._model import Change, Image

__all__ = ["render_changes"]

# The most lines (old and new together, their common head and tail set aside) that are
# compared line by line. difflib's matching is quadratic on lines that repeat without
# being "popular": 100,000 lines of 105 values (400 KB) took more than 5 minutes; beyond
# this the changed middle is shown whole as one block, every old line deleted and every new
# one added: a true diff, not a minimal one, in linear time.
MAX_COMPARED_LINES = 20_000
CONTEXT = 3


def _mode(mode: int) -> str:
    """``0644 (rw-r--r--)``: the octal permission bits and what they mean."""
    bits = stat.S_IMODE(mode)
    return f"{bits:04o} ({stat.filemode(stat.S_IFREG | bits)[1:]})"


def _block_diff(old: list[str], new: list[str], a: str, b: str) -> list[str] | None:
    """A unified diff of one hunk: the common head and tail as context (at most
    :data:`CONTEXT` lines each), every other old line deleted and new line added; None when
    the lines left are few enough for difflib (:data:`MAX_COMPARED_LINES`)."""
    head = 0
    while head < len(old) and head < len(new) and old[head] == new[head]:
        head += 1
    tail = 0
    while (
        tail < len(old) - head
        and tail < len(new) - head
        and old[len(old) - 1 - tail] == new[len(new) - 1 - tail]
    ):
        tail += 1
    if (len(old) - head - tail) + (len(new) - head - tail) <= MAX_COMPARED_LINES:
        return None
    start = head - min(head, CONTEXT)
    after = min(tail, CONTEXT)
    old_end, new_end = len(old) - tail + after, len(new) - tail + after
    old_n, new_n = old_end - start, new_end - start

    def span(first: int, count: int) -> str:
        return f"{first + 1 if count else first},{count}"

    lines = [f"--- {a}", f"+++ {b}", f"@@ -{span(start, old_n)} +{span(start, new_n)} @@"]
    lines += [" " + line for line in old[start:head]]
    lines += ["-" + line for line in old[head : len(old) - tail]]
    lines += ["+" + line for line in new[head : len(new) - tail]]
    lines += [" " + line for line in old[len(old) - tail : old_end]]
    return lines


def _lines(text: str) -> list[str]:
    """``text`` split at newlines only (``str.splitlines`` also splits at ``\\r``, ``\\f``…)."""
    if not text:
        return []
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def render_changes(
    changes: Iterable[Change],
    read: Callable[[str], bytes],
    *,
    max_text_bytes: int | None = None,
    max_total_bytes: int | None = None,
) -> str:
    """``changes`` as a person reviews them; ``read(digest)`` returns a stored blob's bytes.

    ``max_text_bytes``: a file larger than this (before or after) is named with its
    size and hash, its content neither read nor diffed (the review page's bound).
    ``max_total_bytes``: the most of the set's text read in all (before and after images);
    once a file would pass it, it and every later file are named with their size and
    hash, their content neither read nor diffed (a set of a thousand 1 MiB files is not
    read whole to show the page's first few thousand lines).
    """
    import difflib  # here: a session that never shows a diff does not import it

    undecodable = False

    def text(image: Image | None) -> str | None:
        nonlocal undecodable
        if image is None or image.kind == "dir":
            return ""
        if image.kind == "symlink" and image.digest:
            target = os.fsdecode(read(image.digest)).replace("\n", "\\n")  # one line
            return f"-> {target}\n"
        if image.kind != "file" or image.digest is None:
            return None
        data = read(image.digest)
        if b"\0" in data:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            undecodable = True
            return data.decode("utf-8", "backslashreplace")

    out: list[str] = []
    spent = 0  # bytes of text read so far (max_total_bytes)
    for c in changes:
        name = one_line(escape_name(c.path))
        before, after = c.before, c.after
        kinds = {before.kind if before else None, after.kind if after else None}
        if "dir" in kinds and kinds <= {"dir", None}:
            if before is None and after is not None:
                out.append(f"Directory new {name}/, mode {_mode(after.mode)}")
            elif after is None:
                out.append(f"Directory deleted {name}/")
            elif before is not None:
                out.append(
                    f"Directory mode of {name}/: {_mode(before.mode)} -> {_mode(after.mode)}"
                )
            continue
        if before is None and after is not None:
            out.append(f"New {after.kind} {name}, mode {_mode(after.mode)}")
        elif after is None and before is not None:
            out.append(f"Deleted {before.kind} {name}")
        elif before is not None and after is not None:
            if before.kind != after.kind:
                out.append(f"Type of {name}: {before.kind} -> {after.kind}")
            if stat.S_IMODE(before.mode) != stat.S_IMODE(after.mode) and "symlink" not in kinds:
                out.append(f"Mode of {name}: {_mode(before.mode)} -> {_mode(after.mode)}")
        large = max_text_bytes is not None and any(
            i is not None and i.kind == "file" and i.size > max_text_bytes for i in (before, after)
        )
        cost = sum(
            i.size for i in (before, after) if i is not None and i.kind == "file" and i.digest
        )
        over = not large and max_total_bytes is not None and spent + cost > max_total_bytes
        if over:
            spent = max_total_bytes  # type: ignore[assignment]  # every later file too
        elif not large:
            spent += cost
        undecodable = False
        old, new = (None, None) if large or over else (text(before), text(after))
        if over:
            shown = after if after is not None else before
            out.append(
                f"Text of {name} not shown here (the review reads at most "
                f"{max_total_bytes:,} bytes of a change set's text"
                + (
                    f"; {shown.size:,} bytes, sha256 {shown.digest[:16]}"
                    if shown and shown.digest
                    else ""
                )
                + ")"
            )
            continue
        if old is None or new is None:
            shown = after if after is not None else before
            what = (
                f"{shown.size:,} bytes, sha256 {shown.digest[:16]}"
                if shown and shown.digest
                else ""
            )
            kind = "Large file" if large else "Binary or special entry"
            out.append(f"{kind} {name} changed (content not shown{': ' if what else ''}{what})")
            continue
        if old == new:
            if before is not None and after is not None and before.digest != after.digest:
                # Only text shown with \xHH reads alike from different bytes (a byte against
                # the four characters naming it): the change is said, not hidden.
                out.append(
                    f"Bytes of {name} changed where its text reads the same here (\\xHH against "
                    f"the characters that spell it): sha256 {str(before.digest)[:16]} -> "
                    f"{str(after.digest)[:16]}"
                )
            continue
        if undecodable:
            out.append(f"Text of {name} is not all UTF-8: each byte that is not is shown as \\xHH")
        old_lines, new_lines = _lines(old), _lines(new)
        files = (
            f"a/{name}" if before is not None else "/dev/null",
            f"b/{name}" if after is not None else "/dev/null",
        )
        block = _block_diff(old_lines, new_lines, *files)
        if block is not None:
            out.append(
                f"Text of {name} shown as one changed block (more than "
                f"{MAX_COMPARED_LINES:,} lines to compare line by line)"
            )
        diff = (
            block
            if block is not None
            else difflib.unified_diff(old_lines, new_lines, *files, lineterm="")
        )
        for k, line in enumerate(diff):
            if k < 3:  # ---, +++ and the first @@: ringfence's own words
                out.append(line.rstrip("\n"))
            elif line.startswith("@@"):
                out.append(line)
            else:
                body = line[1:]
                end = "" if body.endswith("\n") else "  ⟨no newline at the end⟩"
                out.append(line[0] + visible_line(body.removesuffix("\n")) + end)
    return "".join(f"{line}\n" for line in out)

"""The review page's content: what each view shows and what each confirmed action does.

:class:`ReviewSite` reads the same stores the command reads: the event stream
(an :class:`EventFeed`), the workspace's change sets (``CheckpointStore``, as
``checkpoints list|show``), plans (``Plan.load``, as ``plan show``), and the
approvals inbox (a :class:`ReviewApprover`). It acts only through the
session's kernel: the Gate decides every call it makes (see :mod:`._actions`
for what it may do at all). Views are built with :mod:`._html` (escaped by
construction) over :mod:`ringfence.runtime._render` (the one renderer).

The HTTP side (tokens, Origin, CSRF, headers) is :mod:`._app`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import hashlib
import os
import re
import secrets
import stat
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

from ..runtime._approval import ApprovalRequest
from ..runtime._canonical import loads
from ..runtime._errors import Denied, InvalidArguments, RingfenceError
from ..runtime._intents import key_fingerprint, load_public_keys
from ..runtime._kernel import Kernel
from ..runtime._plan import AppliedMark, Plan, StagedCall
from ..runtime._render import (
    _RUN_RANK,
    DECISIVE_HEAD_TAIL,
    DECISIVE_SHOWN_WHOLE,
    OTHER_HEAD,
    OTHER_SHOWN_WHOLE,
    OTHER_TAIL,
    RUNS_HEAD_TAIL,
    RUNS_SHOWN_WHOLE,
    _as_text,
    _rank,
    fingerprint,
    json_text,
    one_line,
    render_approval,
    visible,
)
from ..runtime._timeline import CallFilter, CallRow, Timeline
from ._actions import Confirmations, Job, Pending, RateLimit, Views
from ._approver import Question, ReviewApprover, answer_from_page
from ._feed import MAX_HELD_BYTES, MAX_LINE_BYTES, EventFeed, Integrity
from ._html import Html, block, code_points, el, field, path_field, url, when

__all__ = ["PAGE_ROWS", "ReviewSite"]

PAGE_ROWS = 100
# A plan's staged calls drawn on one of its pages (each with its prompt and the diffs of the
# sets it names).
PLAN_ROWS = 50
# The change sets of one staged call (an ``undo`` of a list of ids) drawn with their diffs.
MAX_CALL_SETS = 20
# The change sets an Undo's result names one by one (each with its first 50 paths).
MAX_JOB_SETS = 100
MAX_DIFF_LINES = 4_000
MAX_DIFF_NAMES = 2_000  # lines naming a file (its header, new, deleted, mode)
MAX_SHOWN_PATHS = 6
MAX_JOBS = 100
# Later sets over a set's files named on its page and its Undo's (the rest counted).
MAX_LATER_SETS = 50
# Staged calls that name a change set: shown with that set's diff on a plan's page.
_SET_TOOLS = ("apply_changes", "undo")
VERDICTS = ("allow", "ask", "deny")
STATES = ("finished", "failed", "cancelled", "staged", "denied", "asking", "running")


class PageError(Exception):
    """A request the page answers with an error page (status, text); nothing was done."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# The most of a plan file the page reads (a larger one is refused, naming this; a sparse
# file of gigabytes in the workspace took the page's memory with it).
MAX_PLAN_BYTES = 128 << 20


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _not_regular(mode: int) -> OSError | None:
    """Why a file of this mode is not read as a plan (None: a regular file)."""
    if stat.S_ISREG(mode):
        return None
    kind = (
        "a directory"
        if stat.S_ISDIR(mode)
        else "a pipe"
        if stat.S_ISFIFO(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "a socket"
    )
    return OSError(errno.EINVAL, f"not a regular file: {kind}")


def _read_regular(path: Path, limit: int) -> bytes:
    """The bytes of the regular file at ``path``, at most ``limit`` (else InvalidArguments).

    Checked before it is opened (a FIFO, a device, a directory is never opened: no open's
    side effect, no wait on a writer), opened without waiting, read at most ``limit + 1``
    bytes whatever its size says (a file of ``/proc`` says 0 and may hold more), and
    refused unless the path still names that same file, unchanged, once it was read (one
    swapped in or rewritten meanwhile: InvalidArguments, "changed while it was read").
    """
    before = os.stat(path)
    if (why := _not_regular(before.st_mode)) is not None:
        raise why
    if before.st_size > limit:
        raise _too_large(path, limit)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    with open(fd, "rb") as f:
        opened = os.fstat(fd)
        if (why := _not_regular(opened.st_mode)) is not None:
            raise why
        data = f.read(limit + 1)
        read = os.fstat(fd)
    if len(data) > limit:
        raise _too_large(path, limit)
    try:
        after: tuple[int, ...] | None = _identity(os.stat(path))
    except FileNotFoundError:
        after = None
    if not _identity(before) == _identity(opened) == _identity(read) == after:
        raise _changed(path)
    return data


def _changed(path: Path) -> InvalidArguments:
    return InvalidArguments(
        f"{path} changed while it was read (the plan loaded is not the one whose sha256 "
        "the page checks): nothing ran; look at it again",
        field="plan",
    )


def _too_large(path: Path, limit: int) -> InvalidArguments:
    return InvalidArguments(
        f"{path} is larger than the {limit >> 20} MiB the review page reads of a plan: "
        "nothing of it was loaded (`ringfence plan show` reads it)",
        field="plan",
    )


def read_plan(
    path: Path, *, create_key: bool = True, reuse: dict[str, Plan] | None = None
) -> tuple[Plan, bytes]:
    """The plan at ``path`` as ``Plan.load`` authenticated it, and the bytes it was read from.

    One read, bounded (:data:`MAX_PLAN_BYTES`), of a regular file (:func:`_read_regular`):
    the bytes whose sha256 the page shows and the person confirms are the bytes
    ``Plan.load`` authenticates, so the plan that runs is always the one whose digest was
    confirmed (the loaded plan is still compared with them). A path that cannot be read
    (a directory, a pipe, a device) is InvalidArguments; a missing file is FileNotFoundError.

    ``reuse``: the plan last loaded (and checked) from this path's bytes of this sha256, kept
    there (one entry): the same bytes are not parsed and checked again (a view of a 128 MiB plan took a
    minute of the page's thread, at every reload). Only for showing a plan, never applying.
    """
    try:
        data = _read_regular(path, MAX_PLAN_BYTES)
        digest = f"{path}\0{_digest(data)}" if reuse is not None else ""
        kept = reuse.get(digest) if reuse is not None else None
        if kept is not None:
            return dataclasses.replace(kept, calls=list(kept.calls)), data
        plan = Plan.load(path, create_key=create_key, raw=data)
    except FileNotFoundError:
        raise
    except OSError as exc:  # a directory, a file it may not read: whoever can write its folder
        raise InvalidArguments(
            f"{path} cannot be read as a plan ({exc.strerror or exc})", field="plan"
        ) from None
    if not _same_plan(plan, data):
        raise _changed(path)
    if reuse is not None:
        reuse.clear()
        reuse[digest] = dataclasses.replace(plan, calls=list(plan.calls))
    return plan, data


def _same_plan(plan: Plan, data: bytes) -> bool:
    try:
        doc = loads(data)
        return (
            tuple(str(r) for r in doc["roots"]) == plan.roots
            and [StagedCall(**c) for c in doc["calls"]] == plan.calls
            and {str(k): AppliedMark(**v) for k, v in doc["applied"].items()} == plan.applied
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        return False


_HUNK = re.compile(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def diff_classes(lines: Sequence[str]) -> Iterator[tuple[str, str]]:
    """Each line of ``render_changes``' text with its class: ``meta`` (``---``/``+++``),
    ``hunk``, ``add``/``del``/``ctx`` or ``head`` (ringfence's own lines: new, deleted, mode).

    By structure: after a hunk's ``@@ -a,b +c,d @@`` the next lines are its content, as many
    as it counts (``b`` old, ``d`` new), whatever they begin with: an added line of the file
    that reads ``++ b/other`` is shown ``+++ b/other`` as an added line, not as the header of
    another file (it was classed ``meta``, and what followed looked like that file's).
    """
    old = new = 0
    for line in lines:
        if old > 0 or new > 0:
            mark = line[:1]
            if mark == " " and old > 0 and new > 0:
                old, new = old - 1, new - 1
                yield line, "ctx"
                continue
            if mark == "-" and old > 0:
                old -= 1
                yield line, "del"
                continue
            if mark == "+" and new > 0:
                new -= 1
                yield line, "add"
                continue
            old = new = 0  # not the content counted: the text is not a diff as made; headings
        hunk = _HUNK.match(line)
        if hunk is not None:
            old = int(hunk.group(1) or "1")
            new = int(hunk.group(2) or "1")
            yield line, "hunk"
        elif line.startswith(("--- ", "+++ ")):
            yield line, "meta"
        else:
            yield line, "head"


_OWN = ("meta", "head")  # ringfence's lines of a diff: they name the files


def _with_code_points(line: str) -> str:
    """A line naming a file, and when the name holds any character beyond ASCII, the line
    in code points too (``b/\u0430pp.py``: not ``b/app.py``)."""
    points = code_points(line)
    return line if points is None else f"{line}  \u27e8as code points: {points}\u27e9"


MAX_NOTED = 20
_NOTED_WHOLE = DECISIVE_SHOWN_WHOLE  # a tool's name or a host: the prompt draws it whole


def _noted_limit(name: str) -> int:
    """The characters of an argument ``name``'s value noted in code points: at least what
    the approval prompt shows of it (whole up to its limit, else a head and a tail no
    longer than :func:`clip` keeps of this many)."""
    rank = _rank(name)
    if rank == _RUN_RANK:
        whole, head = RUNS_SHOWN_WHOLE, RUNS_HEAD_TAIL
    elif rank is not None:
        whole, head = DECISIVE_SHOWN_WHOLE, DECISIVE_HEAD_TAIL
    else:
        whole, head = OTHER_SHOWN_WHOLE, max(OTHER_HEAD, OTHER_TAIL)
    return max(whole, 2 * (head + 8))


def _code_point_note(request: ApprovalRequest) -> Html | None:
    """The tool's name and the arguments (names, text values) of a question that hold a
    character beyond ASCII, in code points: a path or a command that looks like another
    (``\u0430pp.py``, ``cafe\u0301``) is told apart before it is approved."""
    items: list[str] = []
    if (tool := code_points(field(request.tool, _NOTED_WHOLE))) is not None:
        items.append(f"tool {tool}")
    if request.runs_on and (host := code_points(field(request.runs_on, _NOTED_WHOLE))):
        items.append(f"runs on {host}")
    # In the prompt's order (its decisive arguments first: what runs, where it writes),
    # so no number of other arguments beyond ASCII can push a path out of the note (until
    # 2026-12-07 the first 20 in the call's own order were noted: 20 notes of a server's
    # made-up fields, then the path, which was "… and more").
    ranked = [(name, value, _rank(str(name))) for name, value in request.arguments.items()]
    decisive = sorted((a for a in ranked if a[2] is not None), key=lambda a: a[2])
    others = [a for a in ranked if a[2] is None]
    left = 0
    for name, value, _ in [*decisive, *others]:
        key = field(name, 200)
        # A value as the prompt draws it: a text itself, anything else (a list of paths, an
        # object of options) as its JSON, so a lookalike nested in it is noted too; and at
        # least as much of it as the prompt shows whole (until 2026-12-07 200 characters:
        # a path of 300 drawn whole in the prompt had its middle, a lookalike there, noted
        # as "not shown").
        shown = field(
            value if isinstance(value, str) else json_text(value), _noted_limit(str(name))
        )
        text = code_points(shown)
        if text is not None or code_points(key) is not None:
            if len(items) >= MAX_NOTED:  # the note stays short, however many arguments
                left += 1
                continue
            items.append(f"{code_points(key) or key} = {text or shown}")
    if left:
        items.append(f"… and {left:,} more arguments beyond ASCII, not noted here")
    if not items:
        return None
    return el(
        "p", {"class": "warn code-points"}, "Beyond ASCII, as code points: " + "; ".join(items)
    )


# The most of a question's arguments a page shows whole beyond what its prompt shows (the
# rest of a larger argument is named with its size and digest, NOT SHOWN, as the prompt does).
MAX_WHOLE_CHARS = 4 << 20


def _clipped(request: ApprovalRequest) -> list[tuple[str, str]]:
    """The arguments of ``request`` its prompt does not show whole (``render_approval``'s
    limits for their rank), as (name, the text the prompt draws of them)."""
    arguments = (
        request.arguments
        if isinstance(request.arguments, Mapping)
        else {"arguments": request.arguments}
    )
    out = []
    for name, value in arguments.items():
        rank = _rank(str(name)) if isinstance(request.arguments, Mapping) else _RUN_RANK
        whole = (
            RUNS_SHOWN_WHOLE
            if rank == _RUN_RANK
            else DECISIVE_SHOWN_WHOLE
            if rank is not None
            else OTHER_SHOWN_WHOLE
        )
        text = _as_text(value)
        if len(text) > whole:
            out.append((str(name), text))
    return out


def _whole_arguments(request: ApprovalRequest, budget: list[int] | None = None) -> Html | None:
    """Every argument the prompt shows only in part, whole (escaped as ``visible`` shows a
    value: bidi and invisible characters as ``\u202e``), up to :data:`MAX_WHOLE_CHARS` in
    all: what an approval lets the call use is on the page before it is confirmed (until
    2026-12-07 a ``content`` over 240 characters was its first 120 and last 80 there,
    whatever its middle held, and nothing on the page showed the rest). ``budget``: the
    characters left to show whole, shared by the calls of one page (a plan's)."""
    clipped = _clipped(request)
    if not clipped:
        return None
    parts: list[Html] = [
        el(
            "p",
            {"class": "warn"},
            "The prompt above shows part of these arguments; here they are whole, as the "
            "call gets them:",
        )
    ]
    left = budget if budget is not None else [MAX_WHOLE_CHARS]
    for name, text in clipped:
        head = f"{field(name, 80)} ({fingerprint(text)})"
        if len(text) > left[0]:
            parts.append(
                el(
                    "p",
                    {"class": "bad", "data-argument": field(name, 80)},
                    f"{head}: more than the {MAX_WHOLE_CHARS >> 20} Mi characters this page "
                    "shows whole: its middle is NOT SHOWN. Deny unless you know what it is.",
                )
            )
            continue
        left[0] -= len(text)
        parts += [
            el("p", {"class": "what"}, head + ":"),
            el("pre", {"class": "whole", "data-argument": field(name, 80)}, visible(text)),
        ]
    return el("section", {"class": "whole-arguments"}, parts)


def _staged_request(call: StagedCall) -> ApprovalRequest:
    """A staged call as the question it would be: drawn (and its code points noted) as the
    Gate's question about the same call is, so a plan's lookalike path is told apart too."""
    return ApprovalRequest(
        call.tool,
        call.arguments,
        call.consequence,
        "",
        "staged by a dry run",
        call.origin,
        call.trace_id,
    )


def _set_ids(call: Any, *, every: bool = False) -> list[str]:
    """The change sets a staged ``apply_changes`` or ``undo`` call names: its ``id``, one id
    or (``undo``) a list of them; anything else in it is no set. The first
    :data:`MAX_CALL_SETS` only, unless ``every``: the sets whose diff and later writes the
    page draws under the call (an ``undo`` of 10,000 ids is still one call of a page)."""
    if call.tool not in _SET_TOOLS:
        return []
    given = call.arguments.get("id")
    items = [given] if isinstance(given, str) else given if isinstance(given, list) else []
    ids = [i for i in items if isinstance(i, str) and _is_id(i)]
    return ids if every else ids[:MAX_CALL_SETS]


def _more_sets(call: Any) -> Html | None:
    """A line naming how many sets of ``call`` the page does not draw, if any."""
    more = len(_set_ids(call, every=True)) - MAX_CALL_SETS
    if more <= 0:
        return None
    return el(
        "p",
        {"class": "muted"},
        f"… and {more:,} more change set(s) this call names, not drawn here "
        "(`ringfence checkpoints show ID`)",
    )


def _is_id(text: str) -> bool:
    return 0 < len(text) <= 64 and all(c in "0123456789abcdef" for c in text)


class ReviewSite:
    """One review page: a kernel's session, its event stream, its approvals inbox."""

    def __init__(
        self,
        kernel: Kernel,
        feed: EventFeed,
        approver: ReviewApprover | None,
        *,
        plans: Sequence[str | Path] = (),
        base: str = "",
    ) -> None:
        self.kernel = kernel
        self.feed = feed
        self.inbox = approver
        self.base = base
        plan_paths = [Path(p) for p in plans]
        if kernel.dry_run and kernel.plan_path is not None:
            plan_paths.append(Path(kernel.plan_path))
        self.plans: list[Path] = list(dict.fromkeys(plan_paths))
        self.confirmations = Confirmations()
        self.views = Views()
        # The plan last shown, by the sha256 of its bytes (:func:`read_plan`'s ``reuse``).
        self._shown_plan: dict[str, Plan] = {}
        self.limit = RateLimit()
        self.jobs: dict[str, Job] = {}
        self.version = 0
        self._changed = trio.Event()
        self._nursery: trio.Nursery | None = None
        feed.on_change(self.touch)
        if approver is not None:
            approver.on_change(self.touch)

    # -- life -------------------------------------------------------------------------------

    def touch(self) -> None:
        """Something the page shows changed: wake the live streams."""
        self.version += 1
        self._changed.set()
        self._changed = trio.Event()

    async def changed(self, since: int) -> int:
        while self.version == since:
            await self._changed.wait()
        return self.version

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Watch the stream's integrity and run confirmed actions, until cancelled."""
        self.feed.attach()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self.feed.watch_integrity)
            nursery.start_soon(self.feed.fold_as_lines_come)
            if not self.feed.live and self.feed.path is not None:
                nursery.start_soon(self.feed.tail, self.feed.path)
            task_status.started()
            await trio.sleep_forever()

    def emit(self, kind: str, **data: Any) -> None:
        """A record of the page's own doing, in the session's event stream."""
        with contextlib.suppress(RuntimeError):  # the log is closed: the session is over
            self.kernel.events.emit(kind, self.kernel.session_id, **data)

    # -- the frame ---------------------------------------------------------------------------

    def link(self, *segments: str, **query: str) -> str:
        return url(self.base, *segments, **query)

    def page(
        self, title: str, body: Html, *, live: bool = True, hold: bool = False, active: str = ""
    ) -> Html:
        """A whole page: head (no inline script or style), nav, the chain's state, ``body``.

        ``live``: the page follows new activity; ``hold``: it only offers to (a banner),
        never reloads itself, so nothing a person may be about to click moves under the
        pointer (questions waiting: one answered or timed out would shift the next up)."""
        pending = len(self.inbox.pending()) if self.inbox is not None else 0
        tabs = [
            ("calls", "Timeline", ""),
            ("approvals", f"Approvals ({pending})" if self.inbox is not None else "", ""),
            ("changes", "Change sets", ""),
            ("plans", f"Plans ({len(self.plans)})", ""),
        ]
        nav = el(
            "nav",
            {},
            [
                el(
                    "a",
                    {
                        "href": self.link(name),
                        "class": " ".join(
                            c
                            for c in (
                                "tab",
                                "active" if name == active else "",
                                "alert" if name == "approvals" and pending else "",
                            )
                            if c
                        ),
                        "id": f"tab-{name}",
                    },
                    label,
                )
                for name, label, _ in tabs
                if label
            ],
        )
        session = el(
            "p",
            {"class": "session"},
            f"session {one_line(self.kernel.session_id)} · posture {self.kernel.posture.value}"
            + (" · dry run" if self.kernel.dry_run else "")
            + f" · roots {json_text(list(self.kernel.roots))} · stream: {one_line(self.feed.label)}",
        )
        head = el(
            "head",
            {},
            el("meta", {"charset": "utf-8"}),
            el("meta", {"name": "viewport", "content": "width=device-width, initial-scale=1"}),
            el("meta", {"name": "referrer", "content": "same-origin"}),
            el("title", {}, f"ringfence review · {title}"),
            el("link", {"rel": "stylesheet", "href": self.link("static", "review.css")}),
            # named here, so the browser never asks for /favicon.ico (no token: refused, recorded)
            el("link", {"rel": "icon", "href": self.link("static", "favicon.svg")}),
            el("script", {"src": self.link("static", "review.js"), "defer": True}),
        )
        body_el = el(
            "body",
            {
                "data-live": "1" if live else "0",
                "data-hold": "1" if hold else None,
                "data-stream": self.link("stream"),
                "data-version": str(self.version),
            },
            el(
                "header", {}, el("h1", {}, "ringfence review"), nav, self.integrity_badge(), session
            ),
            el("div", {"id": "banner", "class": "banner", "hidden": True}),
            el("main", {"id": "main"}, el("h2", {}, title), body),
        )
        return Html("<!DOCTYPE html>\n" + el("html", {"lang": "en"}, head, body_el))

    def integrity_badge(self) -> Html:
        i: Integrity = self.feed.integrity
        label = {
            "empty": "no records yet",
            "checking": "checking the chain…",
            "intact": f"intact: {i.records:,} records, {i.sealed_sessions} sealed session(s)",
            "open": f"open: {i.records:,} records, the last session not sealed yet",
            "tampered": "TAMPERED",
            "partial": "not verified whole",
        }[i.state]
        details: list[Html] = []
        feed = self.feed
        if feed.unreadable is not None:
            details.append(el("li", {"id": "unreadable"}, field(feed.unreadable, 400)))
        if feed.dropped:
            details.append(
                el(
                    "li",
                    {"id": "dropped"},
                    f"lines 1-{feed.dropped:,} ({feed.dropped_bytes:,} bytes) are not shown: "
                    f"the page holds the newest {MAX_HELD_BYTES >> 20} MiB of a stream "
                    "(`ringfence events show` reads them all)",
                )
            )
        if feed.clipped:
            details.append(
                el(
                    "li",
                    {"id": "clipped"},
                    f"{feed.clipped:,} line(s) over {MAX_LINE_BYTES >> 20} MiB are not held "
                    "(shown as not records)",
                )
            )
        if i.why:
            details.append(el("li", {}, field(i.why, 400)))
        if i.state == "open" and i.unauthenticated is not None:
            first, last = i.unauthenticated
            details.append(
                el(
                    "li",
                    {},
                    f"lines {first}-{last}: after the last signed checkpoint (consistent, "
                    "not yet vouched for by the session key)",
                )
            )
        if i.state in ("intact", "open") and (foreign := self._foreign_keys(i.keys)):
            details.append(
                el(
                    "li",
                    {"id": "unpinned"},
                    f"{len(foreign):,} of {len(i.keys):,} session(s) signed by a key this page "
                    "cannot vouch for (not this session's; nothing pins it): a stream "
                    "rewritten whole under a new key reads intact too. Pin the keys: "
                    "`ringfence events verify --public-key PEM_FILE FILE`",
                )
            )
        for problem in i.problems:
            details.append(el("li", {}, field(problem, 300)))
        if i.more_problems:
            details.append(el("li", {}, f"… and {i.more_problems} more problems"))
        return el(
            "div",
            {"class": f"integrity {i.state}", "id": "integrity", "data-state": i.state},
            el("strong", {}, "event stream: "),
            label,
            el("ul", {}, details) if details else None,
        )

    def _foreign_keys(self, keys: Sequence[str]) -> list[str]:
        """The session keys of the stream that are not this page's own session's: the only
        key the page knows is its kernel's (session keys are made per session, kept nowhere)."""
        own = key_fingerprint(load_public_keys(self.kernel.public_key_pem())[0])
        return [k for k in keys if k != own]

    # -- the timeline --------------------------------------------------------------------------

    def timeline_page(self, query: Mapping[str, str]) -> Html:
        timeline = self.feed.timeline()
        flt = CallFilter(
            tool=query.get("tool", "")[:200],
            verdict=query.get("verdict", "") if query.get("verdict") in VERDICTS else "",
            state=query.get("state", "") if query.get("state") in STATES else "",
            origin=query.get("origin", "")[:64],
            text=query.get("q", "")[:200],
        )
        try:
            page_no = max(0, int(query.get("page", "0")))
        except ValueError:
            page_no = 0
        rows: list[CallRow] = []
        total = 0
        skip = page_no * PAGE_ROWS
        for call in timeline.select(flt):
            if skip <= total < skip + PAGE_ROWS:
                rows.append(call)
            total += 1
            if flt.empty and total >= skip + PAGE_ROWS:
                total = len(timeline.calls)  # unfiltered: the count is known without a walk
                break
        form = self._filters(flt)
        table = el(
            "table",
            {"class": "calls", "id": "calls"},
            el(
                "thead",
                {},
                el(
                    "tr",
                    {},
                    [
                        el("th", {}, h)
                        for h in (
                            "time",
                            "tool",
                            "by",
                            "arguments",
                            "decision",
                            "approval",
                            "result",
                            "ms",
                        )
                    ],
                ),
            ),
            el("tbody", {}, [self._call_row(c) for c in rows]),
        )
        pages = []
        if page_no > 0:
            pages.append(el("a", {"href": self._page_link(query, page_no - 1)}, "← newer"))
        if skip + PAGE_ROWS < total:
            pages.append(el("a", {"href": self._page_link(query, page_no + 1)}, "older →"))
        shown = (
            f"calls {skip + 1:,}-{skip + len(rows):,} of {total:,} (newest first)"
            if rows
            else "no calls" + ("" if flt.empty else " match")
        )
        return self.page(
            "Timeline",
            Html(
                self._sessions(timeline)
                + form
                + el("p", {"class": "count", "id": "count"}, shown, " ", pages)
                + table
            ),
            active="calls",
        )

    def _page_link(self, query: Mapping[str, str], page_no: int) -> str:
        keep = {k: query.get(k, "") for k in ("tool", "verdict", "state", "origin", "q")}
        return self.link("calls", **keep, page=str(page_no))

    def _filters(self, flt: CallFilter) -> Html:
        def select(name: str, options: Sequence[str], chosen: str) -> Html:
            return el(
                "select",
                {"name": name, "id": f"filter-{name}"},
                el("option", {"value": ""}, f"any {name}"),
                [el("option", {"value": o, "selected": o == chosen}, o) for o in options],
            )

        return el(
            "form",
            {"method": "get", "action": self.link("calls"), "class": "filters"},
            el(
                "input",
                {"name": "tool", "value": flt.tool, "placeholder": "tool", "id": "filter-tool"},
            ),
            select("verdict", VERDICTS, flt.verdict),
            select("state", STATES, flt.state),
            el("input", {"name": "origin", "value": flt.origin, "placeholder": "origin"}),
            el(
                "input",
                {
                    "name": "q",
                    "value": flt.text,
                    "placeholder": "search id, rule, arguments",
                    "id": "filter-q",
                },
            ),
            el("button", {"type": "submit"}, "filter"),
        )

    def _sessions(self, timeline: Timeline) -> Html:
        shown = timeline.sessions[-5:]
        if not shown:
            return el("p", {"class": "muted"}, "no sessions in this stream yet")
        items = [
            el(
                "li",
                {},
                f"session {field(s.trace_id or '?', 40)} from line {s.line}, {when(s.ts)}, "
                f"posture {field(s.posture or '?', 40)}{', dry run' if s.dry_run else ''}, "
                f"{s.calls:,} call(s), ",
                el(
                    "span",
                    {"class": "ok" if s.sealed else "warn"},
                    "sealed" if s.sealed else "not sealed",
                ),
            )
            for s in reversed(shown)
        ]
        more = len(timeline.sessions) - len(shown)
        return el(
            "details",
            {"class": "sessions"},
            el(
                "summary",
                {},
                f"{len(timeline.sessions)} session(s) in this stream"
                + (f" ({more} older not listed)" if more else ""),
            ),
            el("ul", {}, items),
        )

    def _call_row(self, c: CallRow) -> Html:
        decision = field(c.verdict or "undecided", 20)
        if c.rule:
            decision += f" by {field(c.rule, 80)}"
        if c.source:
            decision += f" ({field(c.source, 80)})"
        result = c.state
        if c.error:
            result += f" {field(str(c.error.get('code')), 40)}"
        if c.checkpoints:
            result += f" · {len(c.checkpoints)} change set(s)"
        return el(
            "tr",
            {"class": f"state-{c.state}", "data-call": c.call_id},
            el("td", {"class": "when"}, when(c.ts)),
            el("td", {}, el("a", {"href": self.link("calls", c.call_id)}, field(c.tool, 80))),
            el("td", {}, field(c.origin or "?", 24)),
            el("td", {"class": "args"}, field(c.arguments_text, 160)),
            el("td", {}, decision),
            el("td", {}, field(c.approval, 20) if c.approval else ""),
            el("td", {}, result),
            el(
                "td", {"class": "num"}, f"{c.duration_ms:.1f}" if c.duration_ms is not None else "-"
            ),
        )

    def call_page(self, call_id: str) -> Html:
        timeline = self.feed.timeline()
        c = timeline.by_id.get(call_id)
        if c is None:
            raise PageError(404, "no call with that id in this stream")
        spec = self.kernel.registry.get(c.tool) if c.tool in self.kernel.registry else None
        arguments = c.arguments  # parsed from its text now, for this view alone
        request = ApprovalRequest(
            tool=c.tool,
            arguments=arguments if isinstance(arguments, Mapping) else {"arguments": arguments},
            consequence=spec.consequence.value if spec is not None else "consequence unknown",
            rule=c.rule or "",
            reason=c.reason or "",
            origin=c.origin or "?",
            trace_id=c.trace_id or "",
        )
        facts = [
            ("call", c.call_id),
            ("trace", c.trace_id or "-"),
            ("parent", c.parent_id or "-"),
            ("proposed", when(c.ts)),
            ("decision", c.verdict or "undecided"),
            ("rule", c.rule or "-"),
            ("rule source", c.source or "-"),
            ("policy layer", c.layer or "-"),
            ("approval", f"{c.approval}: {c.approval_reason}" if c.approval else "-"),
            ("result", c.state),
            ("duration", f"{c.duration_ms:.1f} ms" if c.duration_ms is not None else "-"),
            ("event file line", str(c.line)),
        ]
        parts: list[Html] = [
            el(
                "dl",
                {"class": "facts"},
                [Html(el("dt", {}, k) + el("dd", {}, field(v, 2000))) for k, v in facts],
            ),
            el("h3", {}, "What was asked (as the approval prompt shows it)"),
            el("pre", {"class": "prompt", "id": "call-prompt"}, render_approval(request)),
        ]
        if c.error:
            parts += [
                el("h3", {}, "Error"),
                el(
                    "pre",
                    {"class": "bad", "id": "call-error"},
                    f"{field(str(c.error.get('code')), 60)}: "
                    + block(str(c.error.get("message", "")), 8000),
                ),
            ]
        if c.output is not None:
            parts += [
                el("h3", {}, "Result (as recorded)"),
                el("pre", {"class": "output", "id": "call-output"}, block(c.output, 8000)),
            ]
        if c.checkpoints:
            parts += [
                el("h3", {}, "Change sets"),
                el(
                    "ul",
                    {},
                    [
                        el("li", {}, el("a", {"href": self.link("changes", s)}, s))
                        for s in c.checkpoints
                        if _is_id(s)
                    ],
                ),
            ]
        children = [k for k in timeline.calls if k.parent_id == c.call_id][:200]
        if children:
            parts += [
                el("h3", {}, "Nested calls"),
                el("table", {"class": "calls"}, [self._call_row(k) for k in children]),
            ]
        return self.page(f"Call {field(c.tool, 80)}", Html("".join(parts)), active="calls")

    # -- approvals -------------------------------------------------------------------------------

    def approvals_page(self) -> Html:
        if self.inbox is None:
            body = el(
                "p", {}, "This session's approver is not the review page: nothing waits here."
            )
            return self.page("Approvals", body, active="approvals")
        questions = self.inbox.pending()
        if not questions:
            body = el(
                "p",
                {"class": "muted", "id": "no-questions"},
                "Nothing is waiting. A call the Gate asks about appears here, and waits "
                f"until you answer or {self.inbox.timeout_seconds:g} seconds pass (then it is "
                "denied).",
            )
            return self.page("Approvals", body, active="approvals")
        return self.page(
            "Approvals",
            Html("".join(self._question(q) for q in questions)),
            hold=True,
            active="approvals",
        )

    def question_page(self, question_id: str) -> Html:
        """One waiting question with every argument whole (:func:`_whole_arguments`)."""
        q = self.inbox.get(question_id) if self.inbox is not None else None
        if q is None:
            raise PageError(404, "that question is no longer waiting (answered, or timed out)")
        return self.page("Approval", self._question(q, whole=True), hold=True, active="approvals")

    def _question(self, q: Question, *, whole: bool = False) -> Html:
        left = max(0, int(q.deadline - time.time()))
        # Each name as the prompt draws it (at most 80 characters), at most MAX_NOTED of them:
        # a name is the agent's (until 2026-12-07 each was drawn whole here, so one name of
        # 8 MB made every view of the inbox 8 MB).
        listed = [field(str(n), 80) for n in list(q.request.arguments)[:MAX_NOTED]]
        if len(q.request.arguments) > MAX_NOTED:
            listed.append(f"… and {len(q.request.arguments) - MAX_NOTED:,} more")
        names = ", ".join(listed) or "none"
        return el(
            "section",
            {"class": "question", "id": f"q-{q.id}", "data-question": q.id},
            el(
                "p",
                {"class": "asked"},
                f"asked {when(q.asked_at)}; denied in {left} s without an answer",
            ),
            el("pre", {"class": "prompt"}, q.prompt),
            _code_point_note(q.request),
            (
                _whole_arguments(q.request)
                if whole
                else el(
                    "p",
                    {"class": "warn"},
                    "The prompt shows part of an argument: ",
                    el(
                        "a",
                        {"href": self.link("approvals", q.id), "class": "whole-link"},
                        "see every argument whole",
                    ),
                    " (and on the confirmation).",
                )
                if _clipped(q.request)
                else None
            ),
            el(
                "form",
                {"method": "post", "action": self.link("approvals", q.id, "prepare")},
                el(
                    "button",
                    {"name": "choice", "value": "once", "class": "approve"},
                    "Approve once…",
                ),
                el(
                    "button",
                    {"name": "choice", "value": "session", "class": "approve"},
                    "Approve for this session…",
                ),
                el(
                    "label",
                    {},
                    " pattern (session only, optional): ",
                    el(
                        "input",
                        {
                            "name": "pattern",
                            "placeholder": "NAME=GLOB …",
                            "maxlength": "2000",
                            "class": "pattern",
                        },
                    ),
                ),
                el("button", {"name": "choice", "value": "deny", "class": "deny"}, "Deny…"),
                el(
                    "p",
                    {"class": "hint"},
                    f"a pattern names arguments of this call ({names}), "
                    'e.g. path=src/* or command="git status*"; arguments it does not name must be '
                    "equal (as at the terminal)",
                ),
            ),
        )

    def prepare_answer(self, question_id: str, form: Mapping[str, str]) -> Html:
        if self.inbox is None:
            raise PageError(404, "this page answers no questions")
        q = self.inbox.get(question_id)
        if q is None:
            raise PageError(409, "that question is no longer waiting (answered, or timed out)")
        answer = answer_from_page(q.request, form.get("choice", ""), form.get("pattern", ""))
        if isinstance(answer, str):
            raise PageError(400, answer)
        what = {
            "once": "APPROVE this call ONCE",
            "session": "APPROVE FOR THIS SESSION"
            + (
                " every call of this tool whose arguments match "
                + " ".join(f"{k}={v}" for k, v in answer.pattern.items())
                + " (the other arguments equal to this call's)"
                if answer.pattern
                else " calls of this tool with exactly these arguments"
            ),
            "deny": "DENY this call",
        }[answer.choice.value]
        pending = self.confirmations.make(
            "answer",
            {"question": q.id, "choice": answer.choice.value, "pattern": form.get("pattern", "")},
        )
        return self._confirm_page(
            f"Confirm: {answer.choice.value}",
            Html(
                el("p", {"class": "what"}, f"You are about to {one_line(what)}:")
                + el("pre", {"class": "prompt"}, q.prompt)
                + (_code_point_note(q.request) or "")
                + (_whole_arguments(q.request) or "")
            ),
            pending,
            danger=answer.choice.value != "deny",
        )

    # -- change sets ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _store(self) -> Iterator[Any]:
        from ..workspace._workspace import Workspace
        from ..workspace.changes._store import CheckpointStore

        with Workspace(list(self.kernel.roots)) as workspace:
            store = CheckpointStore(workspace)
            try:
                yield store
            finally:
                store.close()

    def _list_sets(self) -> list[dict[str, Any]]:
        with self._store() as store:
            return store.list()

    async def changes_page(self, query: Mapping[str, str] | None = None) -> Html:
        """The change sets, newest first, :data:`PAGE_ROWS` to a page (``?page=N``): a store
        of thousands (its retention is the operator's) drew every row at each reload."""
        sets = await trio.to_thread.run_sync(self._list_sets)
        if not sets:
            return self.page(
                "Change sets",
                el("p", {"class": "muted"}, "no change sets in this workspace"),
                active="changes",
            )
        try:
            page_no = max(0, int((query or {}).get("page", "0")[:12]))
        except ValueError:
            page_no = 0
        page_no = min(page_no, (len(sets) - 1) // PAGE_ROWS)
        skip = page_no * PAGE_ROWS
        pages = []
        if page_no > 0:
            pages.append(
                el("a", {"href": self.link("changes", page=str(page_no - 1)), "id": "newer"},
                   "\u2190 newer")
            )  # fmt: skip
        if skip + PAGE_ROWS < len(sets):
            pages.append(
                el("a", {"href": self.link("changes", page=str(page_no + 1)), "id": "older"},
                   "older \u2192")
            )  # fmt: skip
        count = el(
            "p",
            {"class": "count", "id": "count"},
            f"change sets {skip + 1:,}-{min(skip + PAGE_ROWS, len(sets)):,} of {len(sets):,} "
            "(newest first)",
            " ",
            pages,
        )
        rows = []
        for s in sets[skip : skip + PAGE_ROWS]:
            paths = s["paths"]
            shown = ", ".join(path_field(p) for p in paths[:MAX_SHOWN_PATHS])
            if len(paths) > MAX_SHOWN_PATHS:
                shown += f" … and {len(paths) - MAX_SHOWN_PATHS:,} more"
            status = []
            if s.get("staged"):
                status.append("staged, not applied")
            if s.get("undoes"):
                status.append(f"undoes {field(s['undoes'], 40)}")
            if s.get("undone_by"):
                status.append(f"undone by {field(s['undone_by'], 40)}")
            rows.append(
                el(
                    "tr",
                    {"data-set": s["id"]},
                    el("td", {}, el("a", {"href": self.link("changes", s["id"])}, s["id"])),
                    el("td", {"class": "when"}, when(s["created"])),
                    el("td", {}, field(s["tool"], 60)),
                    el("td", {}, f"{len(paths):,}"),
                    el("td", {"class": "args"}, shown),
                    el("td", {}, "; ".join(status) or "applied"),
                )
            )
        table = el(
            "table",
            {"class": "sets", "id": "sets"},
            el(
                "thead",
                {},
                el(
                    "tr",
                    {},
                    [el("th", {}, h) for h in ("id", "made", "by", "files", "paths", "state")],
                ),
            ),
            el("tbody", {}, rows),
        )
        return self.page("Change sets", Html(count + table), active="changes")

    def _set_view(
        self, set_id: str
    ) -> tuple[Any, str, dict[str, Any], list[str], list[dict[str, Any]]]:
        """The set, its diff, its summary, the id of every set in the store as read, and
        the later sets over its files (:func:`_later_over`)."""
        with self._store() as store:
            cs = store.load(set_id)
            from ..workspace.changes._diff import render_changes

            diff = render_changes(
                cs.changes,
                store.get,
                max_text_bytes=MAX_TEXT_BYTES,
                max_total_bytes=MAX_DIFF_TEXT_BYTES,
            )
            listed = store.list()
            summary = next(s for s in listed if s["id"] == set_id)
        later = _later_over(listed, [summary])
        return cs, diff, summary, [s["id"] for s in listed], later

    async def change_page(self, set_id: str) -> Html:
        if not _is_id(set_id):
            raise PageError(404, "not a change set id")
        try:
            cs, diff, summary, listed, later = await trio.to_thread.run_sync(self._set_view, set_id)
        except RingfenceError as exc:
            raise PageError(404, exc.message) from None
        record = self.feed.timeline().sets.get(set_id)
        facts = [
            ("id", cs.id),
            ("made", when(cs.created)),
            ("by", cs.tool),
            ("call", cs.call_id or "-"),
            ("files", f"{len(cs.changes):,}"),
            (
                "state",
                "staged (a dry run's; not applied)"
                if cs.staged
                else f"undone by {summary['undone_by']}"
                if summary.get("undone_by")
                else f"undoes {cs.undoes}"
                if cs.undoes
                else "applied",
            ),
        ]
        parts: list[Html] = [
            el(
                "dl",
                {"class": "facts"},
                [Html(el("dt", {}, k) + el("dd", {}, field(v, 400))) for k, v in facts],
            )
        ]
        if cs.call_id and cs.call_id in self.feed.timeline().by_id:
            parts.append(
                el(
                    "p",
                    {},
                    el("a", {"href": self.link("calls", cs.call_id)}, "the call that made it"),
                )
            )
        if record is not None and record.refused:
            parts += [
                el("h3", {"class": "bad"}, "What the merge refused"),
                el(
                    "ul",
                    {"id": "refused"},
                    [
                        el("li", {}, field(json_text(r) if not isinstance(r, str) else r, 600))
                        for r in record.refused[:200]
                    ],
                ),
            ]
        parts += [el("h3", {}, "Diff"), self._diff(diff)]
        can_undo = not cs.staged and not cs.undoes and not summary.get("undone_by")
        if can_undo:
            if later:
                parts += [
                    el("h3", {"class": "warn"}, "Changed again since, by later change sets"),
                    el(
                        "p",
                        {"class": "hint"},
                        "An Undo of this set refuses a file changed since (a conflict); "
                        "with force it overwrites these later writes:",
                    ),
                    self._later_list(later, "later"),
                ]
            parts.append(self._undo_forms(set_id, self.views.make(set_id, listed)))
        elif cs.staged:
            parts.append(
                el(
                    "p",
                    {"class": "muted"},
                    "a staged set is applied from its plan (Plans), not undone",
                )
            )
        return self.page(f"Change set {cs.id}", Html("".join(parts)), active="changes")

    def _diff(self, diff: str) -> Html:
        """``render_changes``' text as the page shows it: each line classed by where it stands
        in the diff (:func:`diff_classes`), never by how it begins, and wrapped (CSS), so no
        line of content passes for a file's header and no part of a line is out of view.

        Bounded: at most :data:`MAX_DIFF_LINES` lines of content in all, but every file's
        own lines (header, new, deleted, mode) up to :data:`MAX_DIFF_NAMES`, each file's
        lines not shown counted under it: a change hidden behind 4,000 lines of another
        file is still named (it was "… N more lines", the file unnamed)."""
        lines = diff.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        out: list[Html] = []
        content = names = skipped = 0
        rest = 0  # lines after the last file named (MAX_DIFF_NAMES reached)

        def counted() -> None:
            nonlocal skipped
            if skipped:
                out.append(
                    el(
                        "span",
                        {"class": "d-head d-skipped"},
                        f"… {skipped:,} more lines of this file not shown here "
                        "(`ringfence checkpoints show`)",
                    )
                )
                skipped = 0

        for line, cls in diff_classes(lines):
            if rest:
                rest += 1
            elif cls in _OWN:
                counted()
                if names >= MAX_DIFF_NAMES:
                    rest = 1
                    continue
                names += 1
                out.append(el("span", {"class": f"d-{cls}"}, _with_code_points(line)))
            elif content < MAX_DIFF_LINES:
                content += 1
                out.append(el("span", {"class": f"d-{cls}"}, line))
            else:
                skipped += 1
        counted()
        if rest:
            out.append(
                el(
                    "span",
                    {"class": "d-head d-skipped"},
                    f"… {rest:,} more lines, of more files, not shown here "
                    "(`ringfence checkpoints show`)",
                )
            )
        return el("pre", {"class": "diff", "id": "diff"}, out)

    def _later_list(self, later: list[dict[str, Any]], list_id: str) -> Html:
        """The later sets over a set's files, each with the files it shares, as a list."""
        items = [
            el(
                "li",
                {"data-set": s["id"]},
                el("a", {"href": self.link("changes", s["id"])}, s["id"]),
                f" ({when(s['created'])}, by {field(s['tool'], 60)}"
                + ("; an undo" if s.get("undoes") else "")
                + ("; undone since" if s.get("undone_by") else "")
                + "): ",
                ", ".join(path_field(p) for p in s["shared"][:20]),
                f" … and {len(s['shared']) - 20:,} more" if len(s["shared"]) > 20 else "",
            )
            for s in later[:MAX_LATER_SETS]
        ]
        if len(later) > MAX_LATER_SETS:
            items.append(
                el("li", {}, f"… and {len(later) - MAX_LATER_SETS:,} more later change sets")
            )
        return el("ul", {"id": list_id}, items)

    def _undo_forms(self, set_id: str, view: str) -> Html:
        """Undo this set, or back to it: each form names the view it was drawn from (the
        sets the page read, kept here: :class:`Views`), so the undo is bound to what the
        person read, not to the store as it stands when they click."""

        def form(mode: str, label: str) -> Html:
            return el(
                "form",
                {
                    "method": "post",
                    "action": self.link("changes", set_id, "prepare"),
                    "class": "inline",
                },
                el("input", {"type": "hidden", "name": "mode", "value": mode}),
                el("input", {"type": "hidden", "name": "view", "value": view}),
                el(
                    "label",
                    {},
                    el("input", {"type": "checkbox", "name": "force", "value": "1"}),
                    " also restore files changed since (force)",
                ),
                el("button", {"class": "danger", "id": f"undo-{mode}"}, label),
            )

        return el(
            "section",
            {"class": "actions"},
            form("set", "Undo this change set…"),
            form("back", "Undo back to here (this and every later set)…"),
        )

    def _undo_targets(
        self, set_id: str, mode: str, known: list[str]
    ) -> tuple[list[dict[str, Any]], str | None, list[dict[str, Any]]]:
        """The sets to undo, among those the page showed (``known``, the ids of its view),
        why the store is no longer as shown (a set made since over their paths) or None,
        and the later sets (not targets) over their files: what a force overwrites."""
        sets = self._list_sets()
        seen = set(known)
        live = [
            s
            for s in sets
            if not s["undone_by"] and not s["undoes"] and not s.get("staged") and s["id"] in seen
        ]
        chosen = next((s for s in live if s["id"] == set_id), None)
        if chosen is None:
            raise PageError(409, "that change set cannot be undone (staged, an undo, or undone)")
        targets = [chosen] if mode == "set" else [s for s in live if s["id"] >= set_id]
        chosen_ids = {t["id"] for t in targets}
        later = _later_over(
            [s for s in sets if s["id"] in seen and s["id"] not in chosen_ids], targets
        )
        return targets, self._changed_since([t["id"] for t in targets], known), later

    def _changed_since(self, ids: list[str], known: list[str]) -> str | None:
        """Why the sets confirmed for an undo are no longer as the page showed them, or None.

        The confirmation is bound to the store as it was shown: every target still there
        and not undone, and no set made since over any of their paths (another call, a
        person at the terminal). Otherwise a forced undo would overwrite what nobody saw.
        """
        sets = {s["id"]: s for s in self._list_sets()}
        paths: set[str] = set()
        for set_id in ids:
            s = sets.get(set_id)
            if s is None or s["undone_by"] or s["undoes"] or s.get("staged"):
                return f"change set {set_id} was undone or removed since the page showed it"
            paths.update(s["paths"])
        seen = set(known)
        for s in sets.values():
            if s["id"] not in seen and paths.intersection(s["paths"]):
                return (
                    f"change set {s['id']} ({field(s['tool'], 60)}) changed "
                    + ", ".join(path_field(p) for p in sorted(paths.intersection(s["paths"]))[:5])
                    + " since the page showed them"
                )
        return None

    async def prepare_undo(self, set_id: str, form: Mapping[str, str]) -> Html:
        if not _is_id(set_id):
            raise PageError(404, "not a change set id")
        mode = form.get("mode", "")
        if mode not in ("set", "back"):
            raise PageError(400, "mode must be set or back")
        force = form.get("force", "") == "1"
        known = self.views.get(form.get("view", ""), set_id)
        if known is None:
            raise PageError(
                409,
                "the page this Undo came from is no longer known (too old, or not this "
                "page's): nothing was done; open the change set again",
            )
        targets, changed, later = await trio.to_thread.run_sync(
            self._undo_targets, set_id, mode, list(known)
        )
        if changed is not None:
            raise PageError(409, f"{changed}: nothing was undone; look again")
        from ..workspace.changes._undo import MAX_UNDO_IDS

        if len(targets) > MAX_UNDO_IDS:
            raise PageError(
                409,
                f"{len(targets):,} change sets: one undo restores at most {MAX_UNDO_IDS:,}; "
                "nothing was undone: undo back to a newer set first",
            )
        items = [
            el(
                "li",
                {},
                f"{t['id']} ({when(t['created'])}, by {field(t['tool'], 60)}): ",
                ", ".join(path_field(p) for p in t["paths"][:20]),
                f" … and {len(t['paths']) - 20:,} more" if len(t["paths"]) > 20 else "",
            )
            for t in targets
        ]
        pending = self.confirmations.make(
            "undo", {"ids": [t["id"] for t in targets], "force": force, "known": list(known)}
        )
        note = (
            " FORCE: files changed since will be overwritten with their before-image."
            if force
            else " A file that changed since is a conflict: that undo is refused, nothing of it changes."
        )
        return self._confirm_page(
            f"Confirm: undo {len(targets)} change set(s)",
            Html(
                el(
                    "p",
                    {"class": "what"},
                    "You are about to restore the before-images of these "
                    f"change sets, newest first, as one `undo` call through the Gate (stopped "
                    f"midway by a crash, the next start puts back the whole of it).{note}",
                )
                + el("ul", {"id": "undo-targets"}, items)
                + (
                    el(
                        "p",
                        {"class": "what"},
                        "Later change sets changed these files since: "
                        + (
                            "FORCE overwrites their writes:"
                            if force
                            else "without force, a file they left changed is a conflict and the undo is refused:"
                        ),
                    )
                    + self._later_list(later, "undo-overwrites")
                    if later
                    else ""
                )
            ),
            pending,
            danger=True,
        )

    # -- plans ---------------------------------------------------------------------------------------

    def _plan_index(self, number: str) -> Path:
        try:
            index = int(number)
        except ValueError:
            raise PageError(404, "no such plan") from None
        if not 0 <= index < len(self.plans):
            raise PageError(404, "no such plan")
        return self.plans[index]

    def plans_page(self) -> Html:
        if not self.plans:
            body = el(
                "p",
                {"class": "muted"},
                "no plans: give one with --plan FILE, or run the session with --dry-run",
            )
            return self.page("Plans", body, active="plans")
        items = [
            el("li", {}, el("a", {"href": self.link("plans", str(i))}, field(str(p), 300)))
            for i, p in enumerate(self.plans)
        ]
        return self.page("Plans", el("ul", {"id": "plans"}, items), active="plans")

    def _load_plan(
        self, path: Path, *, show: bool = True, window: slice | None = None
    ) -> tuple[Plan, str, dict[str, str], dict[str, list[dict[str, Any]]], int, AppliedMark | None]:
        """The plan, its sha256, (``show``) the diffs of the sets it applies or undoes, all
        of them reading at most :data:`MAX_DIFF_TEXT_BYTES` of text (then each set is named
        only), and for each set a staged ``undo`` names, the later sets over its files
        (:func:`_later_over`: what a forced undo overwrites).

        ``window``: only these calls are shown (a page of the plan's, :data:`PLAN_ROWS`):
        the plan's ``calls`` are then those alone, and the diffs theirs. Last, of the whole
        plan: how many calls it stages, and (``show``) its first applied mark."""
        plan, data = read_plan(
            path, create_key=False, reuse=self._shown_plan if window is not None else None
        )
        # Of the whole plan, before a window narrows it: its size, and whether it was applied.
        total, first = len(plan.calls), plan.first_applied() if show else None
        if window is not None:
            plan.calls = plan.calls[window]
        # Shown as the calls' records showed them: each call's own secrets redacted (the
        # plan that runs is read again from the file's bytes, never this one).
        names = self.kernel.redactor.names
        plan.calls = [
            dataclasses.replace(c, arguments=c.shown_arguments(names)) for c in plan.calls
        ]
        diffs: dict[str, str] = {}
        later: dict[str, list[dict[str, Any]]] = {}
        undone = {i for c in plan.calls if c.tool == "undo" for i in _set_ids(c)}
        if undone:
            listed = self._list_sets()
            for s in listed:
                if s["id"] in undone:
                    later[s["id"]] = _later_over(listed, [s])
        budget = MAX_DIFF_TEXT_BYTES
        for set_id in (i for call in plan.calls for i in _set_ids(call)) if show else ():
            if set_id in diffs:
                continue
            if budget <= 0:
                diffs[set_id] = (
                    f"(change set {set_id} not shown here: the page reads at most "
                    f"{MAX_DIFF_TEXT_BYTES:,} bytes of a plan's diffs; "
                    f"`ringfence checkpoints show {set_id}`)\n"
                )
                continue
            try:
                with self._store() as store:
                    from ..workspace.changes._diff import render_changes

                    cs = store.load(set_id)
                    diffs[set_id] = render_changes(
                        cs.changes,
                        store.get,
                        max_text_bytes=MAX_TEXT_BYTES,
                        max_total_bytes=budget,
                    )
                budget -= len(diffs[set_id])
            except RingfenceError as exc:
                diffs[set_id] = f"(change set {set_id} cannot be shown: {exc.message})\n"
        return plan, _digest(data), diffs, later, total, first

    def _set_parts(
        self,
        tool: str,
        set_id: str,
        diffs: Mapping[str, str],
        later: Mapping[str, list[dict[str, Any]]],
        later_id: str,
    ) -> list[Html]:
        """What a staged call does to the change set ``set_id`` it names: its diff and, for
        an ``undo``, that it reverses it and the later sets a force overwrites."""
        parts: list[Html] = []
        if tool == "undo" and set_id in diffs:
            # What the undo restores: the set it reverses (until 2026-12-07 a staged
            # undo was "undo id: …" alone, its set and what a force overwrites unseen).
            parts.append(
                el(
                    "p",
                    {"class": "what"},
                    f"Undoing restores the before-images of change set {set_id}, "
                    "reversing this diff:",
                )
            )
        if set_id in diffs:
            parts.append(self._diff(diffs[set_id]))
        if tool == "undo" and later.get(set_id):
            parts += [
                el(
                    "p",
                    {"class": "warn"},
                    f"Later change sets changed the files of {set_id} since "
                    "(an undo with force overwrites their writes):",
                ),
                self._later_list(later[set_id], later_id),
            ]
        return parts

    async def plan_page(self, number: str, query: Mapping[str, str] | None = None) -> Html:
        """A plan's staged calls, :data:`PLAN_ROWS` to a page (``?page=N``): a plan of
        20,000 calls drew every one, with its ledger mark, at each view and live reload
        (25 s a view, a 4 MB page; 100 calls of 1 MB: 630 MB of the page's memory)."""
        path = self._plan_index(number)
        try:
            page_no = max(0, int((query or {}).get("page", "0")[:12]))
        except ValueError:
            page_no = 0
        skip = page_no * PLAN_ROWS
        try:
            plan, digest, diffs, later, total, first = await trio.to_thread.run_sync(
                functools.partial(self._load_plan, path, window=slice(skip, skip + PLAN_ROWS)),
                abandon_on_cancel=True,
            )
        except FileNotFoundError:
            return self.page(
                "Plan",
                el(
                    "p",
                    {"class": "muted"},
                    f"{field(str(path), 300)}: nothing staged yet (no file)",
                ),
                active="plans",
            )
        except RingfenceError as exc:
            raise PageError(409, f"{path}: {exc.message}") from None
        parts: list[Html] = [
            el(
                "p",
                {},
                f"{field(str(path), 300)}: {total:,} staged call(s) under the "
                f"roots {json_text(list(plan.roots))}; sha256 {digest[:16]}",
            ),
            self._plan_pages(number, page_no, skip, len(plan.calls), total),
        ]
        whole = [MAX_WHOLE_CHARS]  # what the prompts clip, shown whole (one budget a page)
        for i, c in enumerate(plan.calls, skip + 1):
            mark = plan.applied.get(c.call_id)
            request = _staged_request(c)
            parts.append(
                el(
                    "section",
                    {"class": "staged"},
                    el(
                        "h3",
                        {},
                        f"{i}. {field(c.tool, 80)} · posture {field(c.posture, 30)}"
                        + (f" · applied {mark.describe()}" if mark else ""),
                    ),
                    el("pre", {"class": "prompt"}, render_approval(request)),
                    _code_point_note(request),
                    _whole_arguments(request, whole),
                )
            )
            for k, set_id in enumerate(_set_ids(c)):
                parts += self._set_parts(
                    c.tool, set_id, diffs, later, f"later-{i}" + (f"-{k}" if k else "")
                )
            if (more := _more_sets(c)) is not None:
                parts.append(more)
        if first is not None:
            parts.append(
                el(
                    "p",
                    {"class": "muted"},
                    f"applied: {one_line(first.describe())} (a plan applies once)",
                )
            )
        elif self.kernel.dry_run:
            parts.append(
                el(
                    "p",
                    {"class": "muted"},
                    "this session is a dry run: apply the plan "
                    "from a session that is not (`ringfence plan apply`, or `ringfence "
                    "review --plan FILE`)",
                )
            )
        elif total:
            parts.append(
                el(
                    "form",
                    {"method": "post", "action": self.link("plans", number, "prepare")},
                    el("input", {"type": "hidden", "name": "sha256", "value": digest}),
                    el("button", {"class": "danger", "id": "apply-plan"}, "Apply this plan…"),
                )
            )
        return self.page("Plan", Html("".join(parts)), active="plans")

    def _plan_pages(self, number: str, page_no: int, skip: int, shown: int, total: int) -> Html:
        """Which calls of the plan this page shows, and links to the pages before and after."""
        pages = []
        if page_no > 0:
            back = min(page_no - 1, max(0, (total - 1) // PLAN_ROWS))
            pages.append(
                el("a", {"href": self.link("plans", number, page=str(back)), "id": "plan-prev"},
                   "\u2190 earlier calls")
            )  # fmt: skip
        if skip + shown < total:
            pages.append(
                el("a", {"href": self.link("plans", number, page=str(page_no + 1)),
                         "id": "plan-next"}, "later calls \u2192")
            )  # fmt: skip
        text = (
            f"calls {skip + 1:,}-{skip + shown:,} of {total:,}"
            if shown
            else f"no calls here (the plan stages {total:,})"
        )
        return el("p", {"class": "count", "id": "plan-count"}, text, " ", pages)

    async def prepare_apply(self, number: str, form: Mapping[str, str]) -> Html:
        path = self._plan_index(number)
        if self.kernel.dry_run:
            raise PageError(409, "this session is a dry run: it would stage the calls again")
        try:
            plan, digest, _, later, _, _ = await trio.to_thread.run_sync(
                functools.partial(self._load_plan, path, show=False), abandon_on_cancel=True
            )
        except (OSError, RingfenceError) as exc:
            raise PageError(409, f"{path}: {getattr(exc, 'message', None) or exc}") from None
        if form.get("sha256") != digest:
            raise PageError(409, "the plan file changed since the page showed it: look again")
        pending = self.confirmations.make("apply", {"plan": number, "sha256": digest})
        whole = [MAX_WHOLE_CHARS]  # what `field` clips below, shown whole (one budget)
        items = [
            el(
                "li",
                {},
                f"{field(c.tool, 80)} {field(json_text(c.arguments), 300)}",
                _code_point_note(_staged_request(c)),
                _whole_arguments(_staged_request(c), whole),
                *(
                    Html(
                        el(
                            "p",
                            {"class": "warn"},
                            f"later change sets over the files of {set_id} "
                            "(force overwrites their writes):",
                        )
                        + self._later_list(
                            later[set_id], f"apply-later-{n}" + (f"-{k}" if k else "")
                        )
                    )
                    for k, set_id in enumerate(_set_ids(c))
                    if c.tool == "undo" and later.get(set_id)
                ),
                _more_sets(c) if c.tool == "undo" else None,
            )
            for n, c in enumerate(plan.calls)
        ]
        return self._confirm_page(
            f"Confirm: apply {len(plan.calls)} staged call(s)",
            Html(
                el(
                    "p",
                    {"class": "what"},
                    "You are about to re-enter every staged call of "
                    f"{field(str(path), 300)} into this session's Gate, in order, once "
                    "(as `ringfence plan apply`): the policy decides each again, and may ask.",
                )
                + el("ol", {}, items)
            ),
            pending,
            danger=True,
        )

    # -- confirm and run -----------------------------------------------------------------------------

    def _confirm_page(self, title: str, what: Html, pending: Pending, *, danger: bool) -> Html:
        body = Html(
            what
            + el(
                "form",
                {"method": "post", "action": self.link("confirm"), "class": "confirm"},
                el("input", {"type": "hidden", "name": "nonce", "value": pending.nonce}),
                el(
                    "button",
                    {
                        "class": "danger" if danger else "approve",
                        "id": "confirm",
                        "data-arm": "600",
                    },
                    "Confirm",
                ),
                " ",
                el(
                    "a",
                    {
                        "href": self.link("approvals" if pending.action == "answer" else "calls"),
                        "id": "cancel",
                    },
                    "Cancel",
                ),
            )
            + el("p", {"class": "hint"}, "This confirmation is good once, for two minutes.")
        )
        return self.page(title, body, live=False)

    def confirm(self, nonce: str, client: str) -> str:
        """Spend a confirmation and start its action; the job's id (PageError if refused)."""
        taken = self.confirmations.take(nonce)
        if isinstance(taken, str):
            raise PageError(409, taken)
        wait = self.limit.take()
        if wait:
            self.emit(
                "review_refused",
                status=429,
                reason="rate limit",
                action=taken.action,
                client=client,
            )
            raise PageError(429, f"too many actions: wait {wait:.0f} s, then prepare it again")
        if self._nursery is None:
            raise PageError(503, "the page is not running")
        job = Job(secrets.token_hex(8), taken.action, taken.action, time.time())
        while len(self.jobs) >= MAX_JOBS:
            self.jobs.pop(next(iter(self.jobs)))
        self.jobs[job.id] = job
        self.emit(
            "review_action",
            action=taken.action,
            job=job.id,
            client=client,
            **_recorded(taken.params),
        )
        if taken.action == "answer":
            self._answer(job, taken.params)
        else:
            self._nursery.start_soon(self._run_job, job, taken)
        self.touch()
        return job.id

    def _answer(self, job: Job, params: Mapping[str, Any]) -> None:
        job.title = f"answer: {params['choice']}"
        q = self.inbox.get(params["question"]) if self.inbox is not None else None
        if q is None:
            job.done, job.ok = True, False
            job.lines.append(("bad", "that question is no longer waiting: nothing was answered"))
            return
        answer = answer_from_page(q.request, params["choice"], params["pattern"])
        if isinstance(answer, str) or self.inbox is None:
            job.done, job.ok = True, False
            job.lines.append(("bad", str(answer)))
            return
        delivered = self.inbox.answer(q.id, answer)
        job.done, job.ok = True, delivered
        job.lines.append(
            ("ok", f"{answer.choice.value}: {answer.reason} — {one_line(q.request.tool)}")
            if delivered
            else ("bad", "that question is no longer waiting: nothing was answered")
        )

    async def _run_job(self, job: Job, taken: Pending) -> None:
        try:
            if taken.action == "undo":
                await self._undo(
                    job, taken.params["ids"], taken.params["force"], taken.params["known"]
                )
            elif taken.action == "apply":
                await self._apply(job, taken.params)
        except RingfenceError as exc:
            job.ok = False
            job.lines.append(("bad", f"{exc.code}: {block(exc.message, 4000)}"))
        except (
            OSError
        ) as exc:  # a file gone or changed under the action: it fails, the page goes on
            job.ok = False
            job.lines.append(("bad", f"{block(str(exc), 4000)}: nothing more was done"))
        finally:
            job.done = True
            if job.ok is None:
                job.ok = all(status == "ok" for status, _ in job.lines)
            self.touch()

    async def _undo(self, job: Job, ids: list[str], force: bool, known: list[str]) -> None:
        """One ``undo`` call over every set confirmed (``id`` their list): one operation in
        the journal, so ``ringfence review`` killed midway is rolled back whole by the next
        start. Until 2026-12-07 it made one call per set, and a kill between two left the sets
        undone before it undone: a tree neither before nor after the undo."""
        job.title = f"undo {len(ids)} change set(s)"
        seen = list(known)
        # The sets to undo as shown (the view), nothing made since over their files.
        changed = await trio.to_thread.run_sync(self._changed_since, ids, seen)
        if changed is not None:
            job.ok = False
            job.lines.append(("bad", f"{changed}: nothing was undone; look again"))
            return
        # And in the tool itself, under the writers' lock right before each set's merge: no
        # set newer than the newest seen over these files (a write made while this undo's
        # own question waited on the page: until 2026-12-07 only the check above ran, before
        # the question, and a forced undo overwrote such a write unseen).
        since = {"since": max(seen)} if seen else {}
        target: str | list[str] = ids[0] if len(ids) == 1 else list(ids)
        outcome = await self.kernel.invoke(
            "undo", {"id": target, "force": force, **since}, origin="review"
        )
        if outcome.error is not None:
            job.lines.append(
                ("bad", f"undo: {outcome.error.code}: " + block(outcome.error.message, 4000))
            )
            job.ok = False
            return
        done = list(outcome.value or [])
        for item in done[:MAX_JOB_SETS]:
            job.lines.append(
                (
                    "ok",
                    f"undid {item['undone']} as change set "
                    f"{item['checkpoint']}: "
                    + ", ".join(path_field(p, 200) for p in item["paths"][:50]),
                )
            )
        if len(done) > MAX_JOB_SETS:
            job.lines.append(
                (
                    "ok",
                    f"… and {len(done) - MAX_JOB_SETS:,} more change sets undone "
                    "(`ringfence checkpoints list`)",
                )
            )
        self.touch()

    async def _apply(self, job: Job, params: Mapping[str, Any]) -> None:
        path = self._plan_index(params["plan"])
        job.title = f"apply {path.name}"
        plan, data = await trio.to_thread.run_sync(read_plan, path, abandon_on_cancel=True)
        if _digest(data) != params["sha256"]:
            job.ok = False
            job.lines.append(("bad", "the plan file changed since it was confirmed: nothing ran"))
            return
        try:
            outcomes = await self.kernel.apply_plan(plan)
        except Denied as exc:
            job.ok = False
            job.lines.append(("bad", f"{exc.code}: {block(exc.message, 4000)}"))
            return
        for o in outcomes:
            if o.ok:
                job.lines.append(("ok", f"{field(o.tool, 80)}: ok"))
            else:
                assert o.error is not None
                job.lines.append(
                    ("bad", f"{field(o.tool, 80)}: {o.error.code}: " + block(o.error.message, 4000))
                )
        if len(outcomes) < len(plan.calls):
            job.lines.append(
                ("bad", f"stopped: {len(plan.calls) - len(outcomes)} call(s) not attempted")
            )

    def job_page(self, job_id: str) -> Html:
        job = self.jobs.get(job_id)
        if job is None:
            raise PageError(404, "no such action")
        state = "running…" if not job.done else ("done" if job.ok else "FAILED")
        items = [el("li", {"class": status}, text) for status, text in job.lines]
        hint = None
        if not job.done and self.inbox is not None and self.inbox.pending():
            hint = el(
                "p",
                {"class": "warn"},
                "The Gate asks about a call: answer it under ",
                el("a", {"href": self.link("approvals")}, "Approvals"),
                ".",
            )
        body = Html(
            el(
                "p",
                {
                    "id": "job-state",
                    "data-done": "1" if job.done else "0",
                    "data-ok": "1" if job.ok else "0",
                },
                f"{job.title}: {state}",
            )
            + (hint or "")
            + el("ul", {"id": "job-lines"}, items)
        )
        return self.page("Action", body)


# Undo reads no more than this of a file's text to show its diff (larger: size and hash).
MAX_TEXT_BYTES = 1 << 20
# Nor more than this of a change set's (or a plan's sets') text in all: the page shows at
# most MAX_DIFF_LINES lines of it; the files after are named with their size and hash.
# (A set of 150 files of 700 KB took 50 s and 730 MB to draw; one of 1 GiB, the store's
# bound, would have taken minutes and gigabytes, again at every reload.)
MAX_DIFF_TEXT_BYTES = 4 << 20


def _later_over(
    sets: Sequence[dict[str, Any]], targets: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The sets of ``sets`` (store summaries) made after the oldest of ``targets`` that
    changed any of the targets' files, oldest first, each with ``shared``: those files.

    What a forced undo of ``targets`` overwrites: the page names them where the Undo is
    offered and where it is confirmed (until 2026-12-07 a set made before the page was
    drawn, or before it reloaded, over the same file was named nowhere on it, and a
    forced Undo overwrote that write unseen)."""
    if not targets:
        return []
    first = min(t["id"] for t in targets)
    ids = {t["id"] for t in targets}
    paths = set().union(*(t["paths"] for t in targets))
    later = []
    for s in sorted(sets, key=lambda s: s["id"]):
        if s["id"] <= first or s["id"] in ids or s.get("staged"):
            continue
        shared = sorted(paths.intersection(s["paths"]))
        if shared:
            later.append({**s, "shared": shared})
    return later


def _recorded(params: Mapping[str, Any]) -> dict[str, Any]:
    """An action's parameters for its event record (the pattern as typed, ids, digests)."""
    return {
        k: v
        for k, v in params.items()
        if k in ("question", "choice", "pattern", "ids", "force", "plan", "sha256")
    }


def error_page(site: ReviewSite | None, status: int, text: str) -> Html:
    """An error as a page (the site's frame when there is one)."""
    body = el("p", {"class": "bad", "id": "error"}, f"{status}: {one_line(text)}")
    if site is None:
        return Html("<!DOCTYPE html>\n" + el("html", {}, el("body", {}, body)))
    return site.page("Refused", body, live=False)

"""``ringfence events verify FILE`` and ``ringfence events show FILE``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..runtime._canonical import loads
from ..runtime._errors import InvalidArguments, NotFound, ToolError
from ..runtime._files import read_named_file
from ..runtime._intents import load_public_keys
from ..runtime._lines import BoundedLines, Oversize
from ..runtime._render import one_line, when_text
from ..runtime._timeline import CallRow, SessionRow, Timeline
from ..runtime._verify import MAX_LINE_BYTES, READ_CHUNK_BYTES, UnsealedSession, verify_file
from ._output import abbreviate, error_line, naming_file, print_error, print_ok
from ._verbs import add_verb_parser


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb_parser(sub, "events")
    esub = p.add_subparsers(dest="events_verb", required=True, metavar="ACTION")
    v = esub.add_parser(
        "verify",
        help="check an event file's hash chain, signed checkpoints and seals, and that every "
        "call that started was allowed",
        description="Exit 0 only when every line, call and session checks out: the hash "
        "chain, each checkpoint's and seal's signature by the session key, and each started "
        "call against an allowed decision for it earlier in the chain. A session without a "
        "seal (its process was killed or crashed, or it is still being written) is reported "
        "with the lines after its last checkpoint, which no signature of its own proves, and "
        "verdict NOT SEALED (exit 1) unless --allow-open accepts it; a record a checkpoint "
        "covers that was removed or edited is TAMPERED (exit 1) either way.",
    )
    v.add_argument("file", metavar="FILE", help="the event file (JSONL, as --events writes it)")
    v.add_argument(
        "--public-key",
        action="append",
        default=[],
        metavar="PEM_FILE",
        help="pin session keys: every session in FILE must use one of the keys in PEM_FILE "
        "(repeatable; a file may hold several PEM keys, e.g. one per run appended to FILE)",
    )
    v.add_argument(
        "--allow-open",
        action="store_true",
        help="accept sessions without a seal: the last one may still be being written, an "
        "earlier one ended when its process was killed or crashed (a shared file the next run "
        "appended to); their records after the last checkpoint are reported as unauthenticated",
    )
    v.add_argument(
        "--json",
        action="store_true",
        help='print one JSON object: {"ok": true, "result": report} or {"ok": false, "error"}',
    )
    v.set_defaults(func=run_verify)

    s = esub.add_parser(
        "show",
        help="a readable timeline: who asked, the decision and its rule, duration, failures",
        description="Read FILE as a timeline of sessions and calls. It does not verify the "
        "chain: run `ringfence events verify FILE` before trusting what it shows.",
    )
    s.add_argument("file", metavar="FILE", help="the event file (JSONL, as --events writes it)")
    s.add_argument(
        "--trace",
        metavar="ID",
        help="only the session or call with this trace id (or call id), with its nested calls",
    )
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=run_show)


def _event_file(path: str) -> Path:
    if not Path(path).exists():
        raise NotFound(f"no event file at {path}", field="FILE")
    if not Path(path).is_file():
        raise InvalidArguments(f"{path} is not a regular file", field="FILE")
    return Path(path)


# A key file holds PEM public keys (about 110 bytes each): a megabyte is thousands of them.
MAX_KEY_FILE_BYTES = 1 << 20


def _read_keys(paths: list[str]) -> list[str] | None:
    if not paths:
        return None
    texts = []
    for path in paths:
        try:
            texts.append(read_named_file(path, MAX_KEY_FILE_BYTES).decode("utf-8"))
        except (OSError, ValueError) as exc:
            if isinstance(exc, UnicodeDecodeError):
                reason = "not UTF-8"
            elif isinstance(exc, OSError):
                reason = exc.strerror or str(exc)
            else:
                reason = str(exc)
            raise InvalidArguments(
                f"--public-key: cannot read {path}: {reason}", field="--public-key"
            ) from None
    return texts


def _looks_like_events(path: Path) -> None:
    """Refuse a file whose first line is no JSON object (a binary, a script): not an event file.

    An event file that *was* one and got damaged still goes to the verifier.
    """
    with naming_file(path), open(path, "rb") as f:
        first = f.readline(1 << 20).strip()
    if not first:
        return
    try:
        ok = isinstance(loads(first), dict)
    except ValueError:
        ok = False
    if not ok:
        raise InvalidArguments(
            f"{path} is not an event file (line 1 is not a JSON record)", field="FILE"
        )


async def run_verify(args: argparse.Namespace) -> int:
    path = _event_file(args.file)
    _looks_like_events(path)
    keys = _read_keys(args.public_key)
    try:  # the keys alone: a ValueError of the verification is no key's fault
        for text in keys or ():
            load_public_keys(text)
    except ValueError as exc:
        raise InvalidArguments(f"--public-key: {exc}", field="--public-key") from None
    report = verify_file(path, keys, allow_open=args.allow_open)
    summary = {
        "file": args.file,
        "intact": report.ok,
        "tampered": report.tampered,
        "records": report.records,
        "sealed_sessions": report.sealed_sessions,
        "unsealed_sessions": report.unsealed_sessions,
        "session_keys": list(report.session_keys),
        "problems": list(report.problems),
        "problems_not_shown": report.problems_not_kept,
        "unsealed": [session.to_dict() for session in report.unsealed],
        "unauthenticated_records": report.unauthenticated_records,
        "unauthenticated_lines": list(report.unauthenticated) if report.unauthenticated else None,
    }
    if args.json:
        if report.ok:
            return print_ok(summary, True)
        first = report.problems[0] if report.problems else "not intact"
        return print_error(
            ToolError(f"{args.file} does not verify: {first}", field="FILE", report=summary), True
        )
    # Every problem, except that a session without a seal is said once, with its tail, below.
    tampering = set(report.tampering)
    unsealed = tuple(f"line {session.line}: session " for session in report.unsealed)
    for problem in report.problems:
        if problem in tampering or not problem.startswith(unsealed):
            sys.stdout.write(f"{one_line(str(problem))}\n")
    if report.problems_not_kept:
        sys.stdout.write(
            f"… and {report.problems_not_kept:,} more problem(s), not shown (the first "
            f"{len(report.problems):,} are)\n"
        )
    for session in report.unsealed:
        sys.stdout.write(_unsealed_line(session, accepted=args.allow_open) + "\n")
    verdict = "intact" if report.ok else "TAMPERED" if report.tampered else "NOT SEALED"
    sys.stdout.write(
        f"{args.file}: {verdict}: {report.records} records, "
        f"{report.sealed_sessions} sealed session(s), {report.unsealed_sessions} unsealed\n"
    )
    return 0 if report.ok else 1


def _unsealed_line(session: UnsealedSession, *, accepted: bool) -> str:
    """One session without a seal, as ``events verify`` prints it."""
    if session.next_session_line is not None:
        what = (
            f"line {session.line}: session ended without a seal (its process was killed or "
            "crashed, or its end was cut off, before the next session began at line "
            f"{session.next_session_line})"
        )
    else:
        what = f"line {session.line}: session is not sealed (still being written, or killed)"
    unproven = session.unproven
    if unproven is None:
        tail = "a checkpoint covers every record of it"
    else:
        first, last = unproven
        count = last - first + 1
        which = (
            f"{count} records after its last checkpoint, line {session.proven_through}"
            if session.proven_through is not None
            else f"{count} records, and no checkpoint of its own"
        )
        tail = (
            f"unauthenticated tail: lines {first}-{last} ({which}: consistent, "
            "not proven written by the session key)"
        )
    hint = "" if accepted else "; --allow-open accepts it"
    return f"{what}; {tail}{hint}"


# --- events show -------------------------------------------------------------------------


def _call_dict(c: CallRow) -> dict[str, Any]:
    out = {
        "call_id": c.call_id,
        "trace_id": c.trace_id,
        "parent_id": c.parent_id,
        "tool": c.tool,
        "origin": c.origin,
        "ts": c.ts,
        "arguments": "" if c.arguments_json is None else abbreviate(c.arguments_text, 120),
        "decision": {"verdict": c.verdict, "rule": c.rule, "reason": c.reason},
        "approval": c.approval,
        "outcome": c.outcome or "unfinished",
        "duration_ms": c.duration_ms,
    }
    if c.error is not None:
        out["error"] = c.error
    return out


def _session_dict(s: SessionRow, calls: list[CallRow]) -> dict[str, Any]:
    return {
        "trace_id": s.trace_id,
        "ts": s.ts,
        "posture": s.posture,
        "dry_run": s.dry_run,
        "sealed": s.sealed,
        "calls": [_call_dict(c) for c in calls],
    }


def read_records(path: Path) -> Iterator[tuple[dict[str, Any], int]]:
    """Each record of an event file with its line number, read a chunk at a time (one line
    of at most ``MAX_LINE_BYTES`` held, as ``events verify`` holds it: the file was read whole,
    every record kept); InvalidArguments naming the first line that is not one."""
    splitter = BoundedLines(MAX_LINE_BYTES)
    lineno = 0
    with naming_file(path), open(path, "rb") as f:
        while True:
            chunk = f.read(READ_CHUNK_BYTES)
            lines = splitter.feed(chunk) if chunk else [splitter.end()]
            for line in lines:
                if line is None:
                    continue
                lineno += 1
                if isinstance(line, bytes) and not line.strip():
                    continue
                yield _record(path, lineno, line), lineno
            if not chunk:
                return


def _record(path: Path, lineno: int, line: bytes | Oversize) -> dict[str, Any]:
    if isinstance(line, Oversize):
        raise InvalidArguments(
            f"{path} line {lineno} is longer than {MAX_LINE_BYTES >> 20} MiB "
            f"({line.size:,} bytes): not an event record",
            field="FILE",
        )
    try:
        record = loads(line)
    except ValueError:
        raise InvalidArguments(
            f"{path} line {lineno} is not a JSON event record (not an event file?)",
            field="FILE",
        ) from None
    if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
        raise InvalidArguments(
            f"{path} line {lineno} is not an event record (no 'kind')", field="FILE"
        )
    return record


Sessions = list[tuple[SessionRow, list[CallRow]]]


def timeline(records: Iterator[tuple[dict[str, Any], int]]) -> Sessions:
    """Sessions in file order, each with its calls in the order they were proposed (the one
    fold, :class:`ringfence.runtime._timeline.Timeline`, the review page's too); ``records``
    are folded as they are read, none kept."""
    folded = Timeline()
    folded.add_all(records)
    sessions: Sessions = [(s, []) for s in folded.sessions]
    for call in folded.calls:
        sessions[call.session][1].append(call)
    return sessions


def select_trace(sessions: Sessions, trace: str) -> Sessions:
    """The session with this trace id, or the calls with this trace/call id and their children."""
    whole = [(s, calls) for s, calls in sessions if s.trace_id == trace]
    if whole:
        return whole
    chosen: Sessions = []
    for s, calls in sessions:
        ids = {c.call_id for c in calls if trace in (c.trace_id, c.call_id)}
        grew = True
        while grew:  # nested calls name their parent
            more = {c.call_id for c in calls if c.parent_id in ids} - ids
            ids |= more
            grew = bool(more)
        if ids:
            chosen.append((s, [c for c in calls if c.call_id in ids]))
    return chosen


def _clock(ts: float) -> str:
    return when_text(ts, "%H:%M:%S", millis=True)


def _render(sessions: Sessions) -> str:
    """The timeline as text. Whatever a record holds (a tool's name, an origin, a rule, an
    error message an agent or a server wrote) is shown through the one renderer
    (``one_line``), so a record cannot draw on the terminal or pose as another line."""
    lines = []
    for s, calls in sessions:
        day = when_text(s.ts, "%Y-%m-%d %H:%M:%S UTC")
        state = "sealed" if s.sealed else "NOT SEALED"
        dry = ", dry run" if s.dry_run else ""
        trace, posture = one_line(str(s.trace_id or "?")), one_line(str(s.posture or "?"))
        lines.append(
            f"session {trace}  {day}  posture {posture}{dry}  {len(calls)} call(s)  {state}"
        )
        depth: dict[str, int] = {}
        for c in calls:  # a nested call is indented under its parent
            depth[c.call_id] = depth.get(c.parent_id, -1) + 1 if c.parent_id else 0
        labels = {c.call_id: "  " * depth[c.call_id] + one_line(c.tool) for c in calls}
        width = max((len(label) for label in labels.values()), default=4)
        for c in calls:
            decided = (
                f"{one_line(str(c.verdict))} by {one_line(str(c.rule))}"
                if c.verdict
                else "not decided"
            )
            if c.approval:
                decided += f", approver: {one_line(c.approval)}"
            took = f"{c.duration_ms:.1f} ms" if c.duration_ms is not None else "-"
            result = c.outcome or "unfinished"
            if c.error:
                message = abbreviate(str(c.error.get("message")), 160)
                result += f" {one_line(str(c.error.get('code')))}: {error_line(message)}"
            lines.append(
                f"  {_clock(c.ts)} {labels[c.call_id]:<{width}}  by {one_line(str(c.origin or '?')):<6} "
                f"{decided:<32} {took:>9}  {result}"
            )
    return "\n".join(lines) + "\n" if lines else "no sessions\n"


async def run_show(args: argparse.Namespace) -> int:
    path = _event_file(args.file)
    sessions = timeline(read_records(path))
    if args.trace is not None:
        sessions = select_trace(sessions, args.trace)
        if not sessions:
            raise NotFound(
                f"no session or call with id {args.trace} in {args.file}", field="--trace"
            )
    if args.json:
        return print_ok(
            {"file": args.file, "sessions": [_session_dict(s, calls) for s, calls in sessions]},
            True,
        )
    sys.stdout.write(_render(sessions))
    return 0

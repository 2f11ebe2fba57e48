"""Conformance suite for execution backends, in the spirit of ``trio.testing.check_one_way_stream``.

A backend author (or ringfence's own tests) calls::

    await check_backend(start, workspace, processes=probe)

where ``start(spec)`` starts a :class:`~ringfence.backends.BackendSession`,
``workspace`` is an empty directory the commands may use (it becomes the
session's root) and ``probe(session)`` lists the command lines of the
processes that could belong to the session (host processes for ``local``,
``docker top`` for ``docker``). Every check raises ``AssertionError`` naming
what the backend got wrong. Real processes only; nothing is mocked.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import trio

from ..runtime._errors import InvalidArguments
from ._types import BackendSession, SessionSpec, ShellResult

__all__ = ["CHECKS", "check_backend", "find_processes"]

Starter = Callable[[SessionSpec], Awaitable[BackendSession]]
Probe = Callable[[BackendSession], Awaitable[list[str]]]

HOST_SECRET = "RINGFENCE_CONFORMANCE_SECRET_TOKEN"
TIMEOUT = 1.0
GRACE = 0.5


class _Ctx:
    def __init__(
        self,
        session: BackendSession,
        workspace: Path,
        probe: Probe,
        change_sets: bool = False,
        persistent: bool = False,
    ) -> None:
        self.change_sets = change_sets
        self.persistent = persistent  # the session option persist_shell_state
        self.session = session
        self.workspace = workspace
        self.probe = probe
        self.tag = secrets.randbelow(80000) + 10000  # unique sleep lengths to find leftovers

    async def run(self, command: Any, **kw: Any) -> ShellResult:
        kw.setdefault("cwd", self.workspace)
        kw.setdefault("env", {})
        kw.setdefault("timeout", 20.0)
        kw.setdefault("output_cap", 4096)
        return await self.session.run(command, **kw)

    async def leftovers(self, *needles: str) -> list[str]:
        return find_processes(await self.probe(self.session), *needles)


def find_processes(command_lines: list[str], *needles: str) -> list[str]:
    """The command lines that hold one of ``needles`` (``sleep N``) as whole words.

    Not as a substring: the docker backend's container runs ``sleep 2147483647``,
    which a command's ``sleep 21474`` would match one run in 80,000.
    """
    found = [re.compile(rf"(?:^|[\s/]){re.escape(n)}(?![\w.])") for n in needles]
    return [line for line in command_lines if any(f.search(line) for f in found)]


def _check(ok: object, message: str) -> None:
    if not ok:
        raise AssertionError(message)


async def exit_codes(c: _Ctx) -> None:
    for code in (0, 1, 3, 255):
        r = await c.run(f"exit {code}")
        _check(r.exit_code == code and r.signal is None, f"exit {code} gave {r}")
        _check(r.status == "exited" and not r.timed_out, f"exit {code}: status {r.status}")
    r = await c.run("kill -TERM $$")
    _check(r.exit_code == 143 and r.signal == 15, f"a shell killed by SIGTERM gave {r}")
    _check(r.status == "signaled", f"killed by SIGTERM: status {r.status}")


async def stdout_and_stderr(c: _Ctx) -> None:
    r = await c.run("echo out; echo err >&2; echo out2")
    _check(r.stdout == "out\nout2\n", f"stdout {r.stdout!r}")
    _check(r.stderr == "err\n", f"stderr {r.stderr!r}")


async def argv_is_not_shell(c: _Ctx) -> None:
    r = await c.run(["printf", "%s|", "a b", "c'd", "$HOME", "*", "; exit 7"])
    _check(r.exit_code == 0, f"argv printf failed: {r}")
    _check(r.stdout == "a b|c'd|$HOME|*|; exit 7|", f"argv was reinterpreted: {r.stdout!r}")
    r = await c.run([f"ringfence-no-such-program-{c.tag}"])
    _check(r.exit_code == 127, f"a missing program should exit 127, got {r}")


async def unicode(c: _Ctx) -> None:
    text = "héllo wörld ✓ 日本語 🙂"
    r = await c.run(["printf", "%s", text])
    _check(r.stdout == text, f"unicode argv came back as {r.stdout!r}")
    r = await c.run(f"printf '%s\\n' '{text}' >&2")
    _check(r.stderr == text + "\n", f"unicode stderr came back as {r.stderr!r}")
    r = await c.run("printf 'a\\377b'")
    _check(r.stdout == "a\ufffdb", f"invalid UTF-8 should be replaced, got {r.stdout!r}")


async def large_output(c: _Ctx) -> None:
    r = await c.run("seq 1 100000; echo tail-of-stderr >&2", output_cap=2000)
    full = "".join(f"{i}\n" for i in range(1, 100001))
    _check(r.stdout_truncated and not r.stderr_truncated, f"truncation flags wrong: {r}")
    _check(r.stdout_bytes == len(full), f"stdout_bytes {r.stdout_bytes} != {len(full)}")
    _check(r.stdout.startswith("1\n2\n3\n"), f"head missing: {r.stdout[:40]!r}")
    _check(r.stdout.endswith("99999\n100000\n"), f"tail missing: {r.stdout[-40:]!r}")
    _check(len(r.stdout.encode()) < 2400, f"capped output is {len(r.stdout.encode())} bytes")
    _check(r.stdout_spool is not None, "the full output was not spooled")
    spooled = Path(r.stdout_spool).read_text()  # type: ignore[arg-type]
    _check(spooled == full, "the spool does not hold the full output")
    _check(r.stderr == "tail-of-stderr\n", f"stderr {r.stderr!r}")


async def redaction_before_spool(c: _Ctx) -> None:
    secret = f"s3cr3t-{c.tag}"
    r = await c.run(
        f"i=0; while [ $i -lt 300 ]; do echo line $i {secret}; i=$((i+1)); done",
        output_cap=500,
        redact=lambda s: s.replace(secret, "[R]"),
    )
    _check(secret not in r.stdout and "[R]" in r.stdout, "output was not redacted")
    _check(r.stdout_spool is not None, "no spool")
    spooled = Path(r.stdout_spool).read_text()  # type: ignore[arg-type]
    _check(secret not in spooled and spooled.count("[R]") == 300, "the spool holds the secret")


async def streams_incrementally(c: _Ctx) -> None:
    # The command waits for a file that the test creates only after it has *seen* the first
    # line through the callback: without incremental streaming this times out.
    flag = c.workspace / f"go-{c.tag}"
    seen: list[tuple[str, str]] = []

    first_at: list[float] = []

    def on_output(stream: str, text: str) -> None:
        seen.append((stream, text))
        if "first" in "".join(t for s, t in seen if s == "stdout"):
            first_at.append(trio.current_time())
            flag.touch()

    # Under change sets the root is an overlay's lower layer, which must not change while it
    # is mounted (the command would not see the flag): there the arrival is timed instead.
    wait = "sleep 1" if c.change_sets else f"while [ ! -e go-{c.tag} ]; do sleep 0.02; done"
    r = await c.run(
        f"echo first; echo e1 >&2; {wait}; echo second", on_output=on_output, timeout=10
    )
    ended = trio.current_time()
    _check(not r.timed_out, "output was not streamed before the command ended")
    if c.change_sets:
        _check(first_at and first_at[0] < ended - 0.5, "output was not streamed before the end")
    _check(r.stdout == "first\nsecond\n", f"stdout {r.stdout!r}")
    _check("".join(t for s, t in seen if s == "stdout") == r.stdout, f"streamed {seen!r}")
    _check("".join(t for s, t in seen if s == "stderr") == "e1\n", f"streamed {seen!r}")


async def cwd_and_files(c: _Ctx) -> None:
    sub = c.workspace / "sub dir"
    sub.mkdir(exist_ok=True)
    (sub / "note.txt").write_text("from the host\n")
    r = await c.run("pwd; cat note.txt", cwd=sub)
    lines = r.stdout.splitlines()
    _check(r.exit_code == 0 and lines[-1] == "from the host", f"cwd run gave {r}")
    _check(lines[0].endswith("/sub dir"), f"pwd was {lines[0]!r}")
    try:
        await c.run("true", cwd=Path("relative"))
    except InvalidArguments as exc:
        _check(exc.field == "cwd", f"wrong field {exc.field}")
    else:
        raise AssertionError("a relative cwd was accepted")


async def environment(c: _Ctx) -> None:
    r = await c.run("env", env={"GIVEN": "a value with spaces 'and quotes'"})
    seen = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    _check(seen.get("GIVEN") == "a value with spaces 'and quotes'", f"GIVEN missing: {r.stdout!r}")
    _check(HOST_SECRET not in seen, "a host secret leaked into the command's environment")
    expected = c.session.environment({"GIVEN": "x"})
    for name in ("PATH", "HOME", "LANG"):
        if name in expected:
            _check(seen.get(name) == expected[name], f"{name}: {seen.get(name)!r}")
    allowed = set(expected) | {"PWD", "OLDPWD", "SHLVL", "_", "RINGFENCE_RUN_ID", "GIVEN"}
    extra = sorted(set(seen) - allowed)
    _check(not extra, f"variables not in the allowlist reached the command: {extra}")
    for bad in ({"1BAD": "x"}, {"A": "nul\0byte"}):
        try:
            await c.run("true", env=bad)
        except InvalidArguments:
            continue
        raise AssertionError(f"env {bad!r} was accepted")


async def stdin_is_empty(c: _Ctx) -> None:
    r = await c.run("cat; echo done", timeout=5)
    _check(r.stdout == "done\n" and not r.timed_out, f"stdin was not empty: {r}")


async def nothing_but_files_persists(c: _Ctx) -> None:
    """Files persist; cwd and exports do not (under persist_shell_state: exports do, and the
    shell's cwd is where a command that follows the shell starts; a given cwd still wins)."""
    first = await c.run(f"echo kept > kept-{c.tag}; export LEAK_{c.tag}=1; cd /")
    if c.persistent:
        r = await c.run("pwd", follow_shell=True)
        _check(r.stdout == "/\n" and r.shell is not None, f"the shell's cwd was not kept: {r}")
        _check(r.shell.status == "saved", f"shell state {r.shell}")  # type: ignore[union-attr]
    r = await c.run(f'echo "[$LEAK_{c.tag}]"; pwd; cat kept-{c.tag}')
    lines = r.stdout.splitlines()
    leaked = f"[{'1' if c.persistent else ''}]"
    _check(lines[0] == leaked, f"exported variable: {r.stdout!r}, expected {leaked}")
    _check(lines[1] != "/", "cd persisted into a command given its own cwd")
    if c.change_sets:
        # The write is the caller's to merge: in the first command's upper, not in the root,
        # and gone from the upper once the next command started.
        _check([u.root for u in first.uppers] == [c.workspace], f"uppers {first.uppers}")
        upper = first.uppers[0].path
        _check(not (upper / f"kept-{c.tag}").exists(), "the upper was not emptied by the next run")
        _check(r.exit_code != 0 and lines[2:] == [], f"an unmerged write was visible: {r}")
        _check(not (c.workspace / f"kept-{c.tag}").exists(), "a change-set write reached the root")
        return
    _check(not first.uppers, f"uppers without change sets: {first.uppers}")
    _check(lines[2:] == ["kept"], f"a file did not persist: {r}")
    _check((c.workspace / f"kept-{c.tag}").read_text() == "kept\n", "the file is not on the host")


async def background_jobs_die_with_the_command(c: _Ctx) -> None:
    marker = f"sleep {c.tag + 1}"
    r = await c.run(f"{marker} & {marker} >/dev/null 2>&1 & echo started", timeout=10)
    _check(r.stdout == "started\n" and r.duration < 5, f"the command waited for its jobs: {r}")
    _check(not await c.leftovers(marker), f"background jobs outlived the command: {marker}")


async def timeout_kills_the_whole_tree(c: _Ctx) -> None:
    child, escapee, parent = (f"sleep {c.tag + i}" for i in (2, 3, 4))
    script = (
        f"(trap '' TERM; exec {child}) & "  # a grandchild-in-group that ignores SIGTERM
        f"setsid sh -c \"trap '' TERM; exec {escapee}\" & "  # one that left the group, too
        f"echo started; exec {parent}"
    )
    started = trio.current_time()
    r = await c.run(script, timeout=TIMEOUT)
    elapsed = trio.current_time() - started
    _check(r.timed_out and r.status == "timeout", f"no timeout reported: {r}")
    _check(r.stdout == "started\n", f"partial output lost: {r.stdout!r}")
    _check(elapsed >= TIMEOUT, f"returned after {elapsed:.2f}s, before the {TIMEOUT}s timeout")
    left = await c.leftovers(child, escapee, parent)
    _check(not left, f"processes survived the timeout: {left}")
    r = await c.run("echo still-alive")
    _check(r.stdout == "still-alive\n", f"the session did not survive a timeout: {r}")


async def cancellation_kills_and_propagates(c: _Ctx) -> None:
    marker = f"sleep {c.tag + 5}"
    with trio.CancelScope() as scope:

        def on_output(stream: str, text: str) -> None:
            if "running" in text:
                scope.cancel()

        await c.run(f"echo running; exec {marker}", on_output=on_output)
        raise AssertionError("run() returned instead of propagating cancellation")
    _check(scope.cancelled_caught, "cancellation did not propagate")
    _check(not await c.leftovers(marker), "a cancelled command kept running")
    r = await c.run("echo after-cancel")
    _check(r.stdout == "after-cancel\n", f"the session did not survive a cancellation: {r}")


async def concurrent_calls_queue(c: _Ctx) -> None:
    results: dict[int, ShellResult] = {}

    async def one(i: int) -> None:
        results[i] = await c.run(f"echo {i}")

    async with trio.open_nursery() as nursery:
        for i in range(4):
            nursery.start_soon(one, i)
    _check(all(results[i].stdout == f"{i}\n" for i in range(4)), f"concurrent runs: {results}")


async def bad_arguments(c: _Ctx) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"command": ""}, "command"),
        ({"command": []}, "command"),
        ({"command": ["echo", 3]}, "command.1"),
        ({"command": "true", "timeout": 0}, "timeout"),
        ({"command": "true", "timeout": float("inf")}, "timeout"),
        ({"command": "true", "output_cap": 0}, "output_cap"),
    ]
    for kw, field in cases:
        command = kw.pop("command")
        try:
            await c.run(command, **kw)
        except InvalidArguments as exc:
            _check(exc.field == field, f"{command!r} {kw}: field {exc.field!r}, not {field!r}")
        else:
            raise AssertionError(f"{command!r} {kw} was accepted")


async def metadata_says_what_the_sandbox_is(c: _Ctx) -> None:
    """The declared ``metadata``: a JSON-serializable mapping with its three promised keys."""
    meta = getattr(c.session, "metadata", None)  # a session without it fails here, named
    _check(isinstance(meta, Mapping), f"metadata is {meta!r}, not a mapping")
    for key, kind in (("confined", bool), ("sandbox", str), ("network", bool)):
        _check(isinstance(meta.get(key), kind), f"metadata[{key!r}] is {meta.get(key)!r}")
    try:
        json.dumps(dict(meta))
    except (TypeError, ValueError) as exc:
        raise AssertionError(f"metadata is not JSON-serializable: {exc}") from None


CHECKS: list[Callable[[_Ctx], Awaitable[None]]] = [
    metadata_says_what_the_sandbox_is,
    exit_codes,
    stdout_and_stderr,
    argv_is_not_shell,
    unicode,
    large_output,
    redaction_before_spool,
    streams_incrementally,
    cwd_and_files,
    environment,
    stdin_is_empty,
    nothing_but_files_persists,
    background_jobs_die_with_the_command,
    timeout_kills_the_whole_tree,
    cancellation_kills_and_propagates,
    concurrent_calls_queue,
    bad_arguments,
]


async def check_backend(
    start: Starter,
    workspace: Path,
    *,
    processes: Probe,
    options: Mapping[str, Any] | None = None,
    spool_dir: Path | None = None,
    change_sets: bool = False,
) -> None:
    """Run every conformance check against one session of the backend ``start`` makes.

    The session gets ``workspace`` as its only root, a ``kill_grace`` of
    0.5 s and ``options``. A host variable with a secret-looking name is set
    while the session starts, to prove it never reaches a command. Ends with
    the close contract: ``aclose`` is idempotent and ``run`` afterwards raises
    ``trio.ClosedResourceError``. With ``change_sets`` the session is started
    with ``SessionSpec.change_sets`` and a command's writes must stay in its
    upper directory until the next command empties it. With the option
    ``persist_shell_state`` exported variables must carry over, and the
    shell's cwd too for a command run with ``follow_shell``.
    """
    spec = SessionSpec(
        roots=(workspace,),
        kill_grace=GRACE,
        spool_dir=spool_dir or workspace.parent / f"{workspace.name}-spool",
        options=dict(options or {}),
        change_sets=change_sets,
    )
    previous = os.environ.get(HOST_SECRET)
    os.environ[HOST_SECRET] = "do-not-leak-" + secrets.token_hex(8)
    try:
        session = await start(spec)
    finally:
        if previous is None:
            os.environ.pop(HOST_SECRET, None)
        else:
            os.environ[HOST_SECRET] = previous
    os.environ[HOST_SECRET] = "do-not-leak-either"
    try:
        persistent = bool(spec.options.get("persist_shell_state"))
        ctx = _Ctx(session, workspace, processes, change_sets, persistent)
        for check in CHECKS:
            try:
                await check(ctx)
            except AssertionError as exc:
                raise AssertionError(f"{session.name}: {check.__name__}: {exc}") from None
    finally:
        os.environ.pop(HOST_SECRET, None)
        with trio.CancelScope(shield=True):
            await session.aclose()
    await session.aclose()  # a second close succeeds silently
    with contextlib.suppress(trio.ClosedResourceError):
        await session.run("true", cwd=workspace, env={}, timeout=5, output_cap=100)
        raise AssertionError(f"{session.name}: run() after aclose() did not raise")

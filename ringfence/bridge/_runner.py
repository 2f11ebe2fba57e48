"""The script runner: the child process of one ``run_tool_script`` call.

Started by :mod:`ringfence._confine.boot` (``python -I -S -c <boot>
ringfence.bridge._runner <this file> <boot JSON>``, which calls :func:`main`), so
that it needs nothing from the environment, from ``site`` or from an installed
``ringfence`` (the same file runs inside a container, reached over a Unix
socket). Its siblings ``_wire``, ``_sandbox``, ``_allowlist``, ``_restricted``, ``_typed``
and the Linux primitives (:mod:`ringfence._confine`) come from this package's own
directories (what a container mounts); RestrictedPython's directory comes in
``boot["sys_path"]``, and only RestrictedPython is imported from it (:func:`_import_package`:
it is never put on ``sys.path``).

The order of work, and why:

1. arm ``PR_SET_PDEATHSIG`` and check the parent is still the host, so a host
   that dies from here on takes the child with it;
2. import RestrictedPython (outside the standard library, which is all the
   sandbox lets the runner read); a *warm* runner, started ahead of need,
   also imports every module a script may import, so no run waits for them;
   a runner started for a waiting run imports each when the script asks;
3. read the per-run secret and the run's config from the inherited pipe
   (``boot["secret_fd"]``) until the host closes it: the secret is never in
   argv or the environment. A *spare* runner, started ahead of need, waits
   here; an empty pipe means it was not needed, and it exits. The host writes
   the activation only once it moved this process into its cgroup (it starts
   before the move); the runner checks ``/proc/self/cgroup`` against the one
   the activation names and stops if it is elsewhere;
4. connect to the bridge and run the handshake (``_wire``);
5. apply the OS sandbox (``_sandbox.apply``, which also starts the watchdog
   thread that exits when the host's end of the bridge closes) and report it;
6. only then receive the script, compile it with RestrictedPython, and run it
   with ``call_tool``, ``ToolError`` and a ``print`` that writes straight to
   stdout (a pipe the host reads, so output survives a kill);
7. report the outcome: ``result`` (the value of a top-level variable named
   ``result``, if the script set one) or the error with a traceback in script
   line numbers.

This module is the runner's loop and its end of the wire. The language layer
(the restricted compile, the guarded globals, ``ToolError``, ``print``) is
``_restricted``; what a script may import is ``_allowlist``.

Exit codes: 0 the script ran (it may have raised; that is in the report),
3 the sandbox could not be applied, 4 protocol or bridge failure, 70 the host
was already gone.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import select
import socket
import sys
from collections import deque
from typing import Any

from . import _allowlist, _restricted, _sandbox, _typed, _wire

EXIT_SANDBOX = 3
EXIT_BRIDGE = 4
TRACEBACK_KEPT = 50  # the first and the last this many entries of a script's traceback


class Channel:
    """A blocking, framed, sequenced connection to the host (the child's side)."""

    def __init__(self, sock: socket.socket, max_frame: int) -> None:
        self.sock = sock
        self.codec = _wire.Codec(_wire.TO_HOST, _wire.TO_CHILD, max_frame)

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(self.codec.encode(message))

    def recv(self) -> dict[str, Any]:
        while (message := self.codec.next_message()) is None:
            data = self.sock.recv(max(65536, self.codec.missing))
            if not data:
                raise _wire.ProtocolError("closed", "the host closed the bridge")
            self.codec.receive_data(data)
        return message

    def handshake(self, secret: bytes) -> None:
        nc = _wire.new_nonce()
        self.send({"type": "hello", "protocol": _wire.PROTOCOL, "nonce": nc.hex()})
        challenge = self.codec.expect(self.recv(), "challenge")
        nh = _wire.decode_nonce(challenge.get("nonce"))
        _wire.check_proof(_wire.host_proof(secret, nc, nh), challenge.get("proof"))
        self.send({"type": "auth", "proof": _wire.child_proof(secret, nc, nh).hex()})
        self.codec.key = _wire.session_key(secret, nc, nh)
        self.codec.expect(self.recv(), "welcome")


def _connect(where: list[Any]) -> socket.socket:
    if where[0] == "tcp":
        sock = socket.create_connection((where[1], int(where[2])))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    if where[0] == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(where[1])
        return sock
    if where[0] == "fd":  # a socket inherited from the remote engine's relay (_relay)
        return socket.socket(fileno=int(where[1]))
    raise ValueError(f"unknown bridge transport {where[0]!r}")


def _read_activation(fd: int) -> tuple[bytes, dict[str, Any]] | None:
    """The secret and the run's config from the inherited pipe; None when it closed empty."""
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    data = b"".join(chunks)
    if not data:
        return None  # a spare runner that was never needed
    secret, rest = data[: _wire.SECRET_BYTES], data[_wire.SECRET_BYTES :]
    if len(secret) != _wire.SECRET_BYTES:
        raise _wire.ProtocolError("malformed", "the secret pipe did not hold a bridge secret")
    return secret, json.loads(rest)


def _traceback(exc: BaseException, source: str) -> dict[str, Any]:
    """The error as script lines only: the runner's own frames are left out.

    Total: reading a script's exception may run the script's code (a ``cached_property``
    on its subclass) or meet values of any type (``e.lineno = "x"`` on a SyntaxError
    subclass), and what that raises is reported as the error's own outcome, never the
    runner's end. Until 2026-12-07 such a script ended the runner, and the runner's
    traceback (this host's file paths) was the tool's error message. A bridge failure met
    on the way (the script's code called a tool) still ends the run.
    """
    try:
        return _describe(exc, source)
    except _wire.ProtocolError:
        raise
    except BaseException as failure:
        name = _type_name(exc)
        message = f"<the error cannot be shown: reading it raised {_type_name(failure)}>"
        return {"type": name, "message": message, "line": None, "traceback": f"{name}: {message}"}


def _type_name(value: object) -> str:
    """The name of ``value``'s class (a class statement's identifier: always a str)."""
    name = type(value).__name__
    return _encodable(name) if type(name) is str else "object"


class _Frames:
    """A traceback's script frames, bounded: a line repeated in a row is one entry with its
    count (as CPython's own traceback says), and only the first and the last
    :data:`TRACEBACK_KEPT` entries are kept. Raising one exception object again and again
    grows its traceback by a frame each time: a million raises made the report 43 MB, over
    the bridge's frame, so the script's error came as "its result is too large"."""

    def __init__(self) -> None:
        self.head: list[list[Any]] = []
        self.tail: deque[list[Any]] = deque(maxlen=TRACEBACK_KEPT)
        self.omitted = 0
        self.last: int | None = None

    def add(self, lineno: int, func: str) -> None:
        self.last = lineno
        newest = self.tail[-1] if self.tail else self.head[-1] if self.head else None
        if newest is not None and newest[0] == lineno and newest[1] == func:
            newest[2] += 1
            return
        entry = [lineno, func, 0]
        if len(self.head) < TRACEBACK_KEPT:
            self.head.append(entry)
            return
        if len(self.tail) == TRACEBACK_KEPT:
            self.omitted += 1
        self.tail.append(entry)

    def lines(self, source: list[str]) -> list[str]:
        out = []
        for i, (lineno, func, repeated) in enumerate([*self.head, *self.tail]):
            if i == len(self.head) and self.omitted:
                out.append(f"  [{self.omitted} more frames not shown]")
            out.append(f"  script line {lineno}, in {func}")
            if 0 < lineno <= len(source):
                out.append(f"    {source[lineno - 1].strip()}")
            if repeated:
                out.append(f"  [previous line repeated {repeated} more times]")
        return out


def _describe(exc: BaseException, source: str) -> dict[str, Any]:
    lines = source.splitlines()
    frames = _Frames()
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename == _restricted.SCRIPT_FILENAME:
            frames.add(tb.tb_lineno, code.co_name)
        tb = tb.tb_next
    if isinstance(exc, SyntaxError):  # its place only as the compiler reports one: str, int
        filename, lineno = exc.filename, exc.lineno
        ours = type(filename) is str and filename == _restricted.SCRIPT_FILENAME
        if ours and type(lineno) is int and lineno > 0:
            frames.add(lineno, "<module>")
    text = ["Traceback (most recent call last):", *frames.lines(lines)]
    try:
        message = _encodable(str(exc))
    except _wire.ProtocolError:
        raise
    except BaseException as failure:  # its args may not print (a huge int, a deep list)
        message = f"<its message cannot be shown: {_type_name(failure)}>"
    name = _type_name(exc)
    text.append(f"{name}: {message}" if message else name)
    out: dict[str, Any] = {
        "type": name,
        "message": message,
        "line": frames.last,
        "traceback": "\n".join(text),
    }
    if isinstance(exc, _restricted.ToolError):  # a script's subclass may hold anything
        out["code"] = _as_text(exc.code)
        out["tool"] = _as_text(exc.tool)
        if exc.field is not None:
            out["field"] = _as_text(exc.field)
    return out


def _unreported(message: str) -> dict[str, Any]:
    """The outcome of a run whose own outcome cannot be sent (the script's doing)."""
    error = {"type": "ResultTooLarge", "message": message, "line": None, "traceback": message}
    return {"status": "error", "error": error}


def _exc_text(exc: BaseException) -> str:
    """``Name: message`` of the runner's own failure, whatever it holds (never raises)."""
    name = _type_name(exc)
    try:
        detail = _as_text(str(exc))
    except _wire.ProtocolError:
        raise
    except BaseException:
        detail = ""
    return f"{name}: {detail}" if detail else name


def _encodable(text: str) -> str:
    """``text`` as the bridge can carry it (UTF-8): a lone surrogate written as its escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _as_text(value: Any) -> str:
    """A string as is (encodable), anything else as its repr, or what it is when even that
    fails (a huge int, a deep list): what the script made never ends the runner."""
    try:
        if type(value) is str:
            return _encodable(value)  # may need more memory than is left
        return _encodable(str.__str__(repr(value)))
    except _wire.ProtocolError:
        raise
    except BaseException as failure:  # repr may run the script's code (UserDict.data)
        return f"<{_type_name(value)} object that cannot be shown: {_type_name(failure)}>"


def _jsonable(value: Any) -> tuple[Any, bool]:
    """``(value, False)`` when the bridge can carry it as JSON, else ``(its text, True)``.

    JSON has no NaN or infinity: a result holding one (``math.inf``, a mean of nothing)
    comes as its text. Until 2026-12-07 it crossed as ``Infinity``/``NaN``, so
    ``run-script --json`` printed what no strict JSON parser reads, and an MCP client of
    ``serve`` got ``null`` for it in the structured content.

    Returned as JSON read back from the text, never the script's own objects: encoding
    may run the script's code (a dict subclass's ``items``), which could raise anything or
    answer differently when the outcome is encoded again to be sent. Until 2026-12-07 a
    ``result`` whose ``items()`` raised ended the runner with its traceback as the error.
    """
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")
        return json.loads(text), False
    except _wire.ProtocolError:
        raise
    except BaseException:
        return _as_text(value), True


class PendingCall:
    """A call collected by ``parallel``: sent with the others once the generator is done.

    It has no value yet; using it as one says so.
    """

    __slots__ = ("_arguments", "_tool")

    def __init__(self, tool: str, arguments: dict[str, Any]) -> None:
        self._tool = tool
        self._arguments = arguments

    def _not_yet(self, *args: Any) -> Any:
        raise TypeError(
            f"the call to {self._tool} has no result yet: inside parallel(...) calls are only "
            "collected, and their results are the list parallel() returns"
        )

    __getitem__ = __iter__ = __bool__ = __len__ = __contains__ = _not_yet

    def __repr__(self) -> str:
        return f"<pending call to {self._tool}>"


class ScriptCalls:
    """The script's calls over the bridge: one at a time, or many at once (``parallel``).

    :meth:`call` sends one ``call`` and waits for its ``reply``. While
    :meth:`parallel` collects its generator, every call returns a
    :class:`PendingCall` instead; the collected calls then go in one
    ``calls`` message, the host runs them concurrently (each through the
    Gate) and answers with ``replies``.
    """

    def __init__(self, channel: Channel, max_calls: int | None = None) -> None:
        self.channel = channel
        self.max_calls = max_calls
        self.next_id = 0
        self.collecting: list[PendingCall] | None = None

    def refuse(self, tool: str, message: str, field: str | None = None) -> _restricted.ToolError:
        """A call refused in the script, before any hop (nothing sent, nothing recorded)."""
        return _restricted.ToolError("invalid_arguments", message, tool, None, field)

    def _send(self, message: dict[str, Any], what: str, tool: str = "") -> None:
        try:
            # The script's objects are encoded once, here, before the message takes a
            # sequence number: encoding may run the script's code (a dict subclass's
            # items()), and a call that code made took the number this message then
            # carried too, so the host stopped the run as a replay (until 2026-12-07).
            plain = json.loads(json.dumps(message, ensure_ascii=False))
            self.channel.send(plain)
        except (TypeError, ValueError) as exc:
            raise _restricted.ToolError(
                "invalid_arguments", f"arguments for {what} must be JSON values: {exc}", tool
            ) from None
        except _wire.ProtocolError as exc:
            if exc.reason != "oversized":
                raise
            raise _restricted.ToolError(
                "invalid_arguments",
                f"arguments for {what} are too large for the bridge: {exc.message}",
                tool,
            ) from None

    def call(self, tool: Any, arguments: dict[str, Any]) -> Any:
        if not isinstance(tool, str):
            raise self.refuse("", "call_tool needs the tool's name as a string")
        if self.collecting is not None:
            pending = PendingCall(tool, arguments)
            self.collecting.append(pending)
            return pending
        self.next_id += 1
        call_no = self.next_id
        self._send(
            {"type": "call", "id": call_no, "tool": tool, "arguments": arguments}, tool, tool
        )
        reply = self.channel.codec.expect(self.channel.recv(), "reply")
        if reply.get("id") != call_no:
            raise _wire.ProtocolError("unexpected", "a reply for another call arrived")
        return _value(reply, tool)

    def parallel(self, calls: Any, /, *, return_exceptions: bool = False) -> list[Any]:
        """Run the calls ``calls`` yields at once; their results, in order.

        ``calls`` is evaluated here, collecting instead of calling. A failed
        call raises its ToolError once every call has ended (``.results``
        holds them all), unless ``return_exceptions``: then it is in the list.
        """
        if self.collecting is not None:
            raise TypeError("parallel() cannot be called inside another parallel()")
        collected: list[PendingCall] = []
        self.collecting = collected
        try:
            items = list(calls)
        finally:
            self.collecting = None
        mine = {id(p) for p in collected}
        for item in items:
            if id(item) not in mine:
                raise TypeError(
                    "parallel() takes tool calls written as a generator, e.g. "
                    "parallel(tools.read_file(path=p) for p in paths) (no square brackets: "
                    "a list's calls run one by one before parallel() sees them); "
                    f"got {type(item).__name__}"
                )
        yielded = {id(item) for item in items}
        for pending in collected:
            if id(pending) not in yielded:
                raise TypeError(
                    f"a call to {pending._tool} was made while parallel() collected its calls "
                    "but is not one of them: inside parallel(...) a call only runs if the "
                    "generator yields it"
                )
        if not items:
            return []
        if self.max_calls is not None and len(items) > self.max_calls:
            raise _restricted.ToolError(
                "denied",
                f"parallel() of {len(items)} calls is larger than the run's budget of "
                f"{self.max_calls} calls (max_calls); nothing was sent",
                "",
                None,
                "max_calls",
            )
        first = self.next_id + 1
        batch = []
        for i, pending in enumerate(items):
            batch.append({"id": first + i, "tool": pending._tool, "arguments": pending._arguments})
        self.next_id += len(items)
        self._send({"type": "calls", "calls": batch}, f"{len(items)} parallel calls")
        replies: dict[int, dict[str, Any]] = {}
        while len(replies) < len(items):
            message = self.channel.codec.expect(self.channel.recv(), "replies")
            for reply in message.get("replies") or ():
                call_no = reply.get("id") if isinstance(reply, dict) else None
                if type(call_no) is not int or not first <= call_no < first + len(items):
                    raise _wire.ProtocolError("unexpected", "a reply for another call arrived")
                replies[call_no] = reply
        results: list[Any] = []
        failed: _restricted.ToolError | None = None
        for i, pending in enumerate(items):
            try:
                results.append(_value(replies[first + i], pending._tool))
            except _restricted.ToolError as exc:
                results.append(exc)
                failed = failed or exc
        if failed is not None and not return_exceptions:
            failed.results = results
            raise failed
        return results


def _value(reply: dict[str, Any], tool: str) -> Any:
    """A reply's value, or its ToolError raised."""
    if reply.get("ok"):
        return reply.get("value")
    error = reply.get("error") or {}
    field = error.get("field")
    raise _restricted.ToolError(
        str(error.get("code", "tool_error")),
        str(error.get("message", "")),
        tool,
        reply.get("decision"),
        field if isinstance(field, str) else None,
    )


def run_script(
    channel: Channel, script: dict[str, Any], modules: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Compile and run one script; the outcome as the ``done`` message (without ``type``)."""
    budget = script.get("max_calls")
    calls = ScriptCalls(channel, budget if type(budget) is int else None)

    def call_tool(tool: str, /, **arguments: Any) -> Any:
        return calls.call(tool, arguments)

    def parallel(calls_: Any, /, *, return_exceptions: bool = False) -> list[Any]:
        return calls.parallel(calls_, return_exceptions=return_exceptions)

    manifest = script.get("tools")
    tools = _typed.build_namespace(
        manifest if isinstance(manifest, list) else (), calls.call, calls.refuse
    )
    extra = {"tools": tools, "parallel": parallel}
    source = script.get("source")
    if not isinstance(source, str):
        raise _wire.ProtocolError("malformed", "the script message has no source")
    if script.get("mode") == "plain":
        try:
            code = compile(source, _restricted.SCRIPT_FILENAME, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            line = getattr(exc, "lineno", None)
            why = getattr(exc, "msg", None) or exc
            return {"status": "compile_error", "errors": [f"Line {line}: {why}"]}
        except (RecursionError, MemoryError) as exc:
            return {"status": "compile_error", "errors": [_restricted.too_complex(exc)]}
        glb = _restricted.plain_globals(call_tool, extra)
    else:
        errors, restricted = _restricted.compile_script(source)
        if errors or restricted is None:
            return {"status": "compile_error", "errors": errors}
        code = restricted
        glb = _restricted.restricted_globals(call_tool, modules, extra)
    try:
        exec(code, glb)
    except _wire.ProtocolError:
        raise
    except BaseException as exc:  # the script's own failure, reported with its lines
        return {"status": "error", "error": _traceback(exc, source)}
    if "result" in glb:
        value, as_repr = _jsonable(glb["result"])
        return {"status": "ok", "has_result": True, "result": value, "result_repr": as_repr}
    return {"status": "ok", "has_result": False}


def _cgroup_problem(expected: Any) -> str | None:
    """Why this process is not in the cgroup its activation names, or None (none named: the
    launcher checks nothing here, as in a container).

    The host writes the activation only after it moved the runner into that cgroup (the
    runner starts before the move, :mod:`ringfence.bridge._launch`); this is the runner's
    own look at ``/proc/self/cgroup`` before it connects or runs anything of the run.
    """
    if expected is None:
        return None
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        return f"cannot read /proc/self/cgroup to check its cgroup ({exc})"
    here = next((line[3:] for line in lines if line.startswith("0::")), None)
    if here != expected:
        return f"not in its cgroup {expected!r} but in {here!r} (the host's move did not take)"
    return None


def _activation_waiting(fd: int) -> bool:
    """Whether the host has already written this runner's activation (a run is waiting)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    return bool(poller.poll(0))


def _import_package(name: str, where: Any) -> None:
    """Import the top package ``name`` from the directories ``where`` and nowhere else.

    The directories are never put on ``sys.path``: a local runner's is the kernel's
    site-packages, which may be a directory the agent can write (a project's ``.venv`` in
    the workspace), and every module the runner imports before its sandbox closes the file
    system (RestrictedPython's ``platform``, a script's ``statistics``) resolves through
    ``sys.path``. Until 2026-12-07 they were prepended, so a ``platform.py`` planted there
    ran in the runner before its sandbox, with the bridge secret in memory. The package's
    own submodules resolve through its ``__path__``; every other name through ``sys.path``,
    the standard library's directories alone (``ringfence._confine.boot``).
    """
    dirs = [d for d in where if isinstance(d, str)] if isinstance(where, (list, tuple)) else []
    spec = importlib.machinery.PathFinder.find_spec(name, dirs)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        raise ImportError(f"the package {name} is not in {dirs!r}", name=name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise


def main(argv: list[str]) -> int:
    boot = json.loads(argv[1])
    parent = int(boot.get("parent_pid") or 0)
    if parent:
        _sandbox.set_pdeathsig(parent)
    # Landlock may grant reading the interpreter's own library (lazy imports), nothing else.
    stdlib = [
        p for p in sys.path if p.startswith((sys.base_prefix, sys.prefix)) and os.path.isdir(p)
    ]
    # RestrictedPython lives outside the standard library, which is all the sandbox lets a
    # runner read: it is imported now, from its directory alone (never on sys.path).
    import operator  # noqa: F401  (the guarded globals)

    _import_package("RestrictedPython", boot.get("sys_path", ()))

    fd = int(boot["secret_fd"])
    modules = _allowlist.ModuleCopies()
    # A spare (started ahead of need) is told so; else (the container's launcher) it looks.
    spare = boot.get("spare")
    warm = spare if isinstance(spare, bool) else not _activation_waiting(fd)
    if warm:
        # A warm runner, waiting for a run: it imports what a script may import now, so no
        # run waits for it.
        modules.load_all()
    activation = _read_activation(fd)
    if activation is None:
        return 0
    secret, config = activation
    problem = _cgroup_problem(config.get("cgroup"))
    if problem is not None:
        sys.stderr.write(f"ringfence runner: {problem}; nothing of the run was done\n")
        return EXIT_SANDBOX
    if not warm:
        # A run is waiting: only the allowed modules its script names are imported, before
        # the sandbox closes the file system (see ModuleCopies).
        modules.preload(config.get("preload") or ())
    policy = {**config["policy"], "read_paths": stdlib, "parent_pid": parent}
    try:
        sock = _connect(config["connect"])
        channel = Channel(sock, int(config.get("max_frame") or _wire.DEFAULT_MAX_FRAME))
        channel.handshake(secret)
    except (OSError, _wire.ProtocolError) as exc:
        sys.stderr.write(f"ringfence runner: bridge handshake failed: {exc}\n")
        return EXIT_BRIDGE
    del secret
    try:
        report = _sandbox.apply(policy, watch_fd=sock.fileno())
    except _sandbox.LayerUnavailable as exc:
        channel.send({"type": "sandbox_failed", "layer": exc.layer, "reason": exc.message})
        return EXIT_SANDBOX
    try:
        channel.send({"type": "sandboxed", "report": report})
        script = channel.codec.expect(channel.recv(), "script")
        try:
            outcome = run_script(channel, script, modules)
        except (OSError, _wire.ProtocolError):
            raise
        except BaseException as exc:  # the runner's own reading of what the script made
            outcome = _unreported(f"the script's outcome cannot be reported: {_exc_text(exc)}")
        outcome["type"] = "done"
        try:
            channel.send(outcome)
        except OSError:
            raise
        except BaseException as exc:  # not JSON, too large or deep, out of memory
            if isinstance(exc, _wire.ProtocolError) and exc.reason != "oversized":
                raise
            if isinstance(exc, _wire.ProtocolError):
                message = f"the script's result is too large to return: {exc.message}"
            else:
                message = f"the script's outcome cannot cross the bridge: {_exc_text(exc)}"
            channel.send({"type": "done", **_unreported(message)})
        channel.codec.expect(channel.recv(), "bye")
    except (OSError, _wire.ProtocolError) as exc:
        sys.stderr.write(f"ringfence runner: bridge failed: {exc}\n")
        return EXIT_BRIDGE
    return 0

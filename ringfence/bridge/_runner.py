"""The script runner: the child process of one ``run_tool_script`` call.

Started by :mod:`ringfence._confine.boot` (``python -I -S -c <boot>
ringfence.bridge._runner <this file> <boot JSON>``, which calls :func:`main`), so
that it needs nothing from the environment, from ``site`` or from an installed
``ringfence`` (the same file runs inside a container, reached over a Unix
socket). Its siblings ``_wire``, ``_sandbox``, ``_allowlist`` and ``_restricted``
and the Linux primitives (:mod:`ringfence._confine`) come from this package's own
directories (what a container mounts); RestrictedPython's directory comes in
``boot["sys_path"]``.

The order of work, and why:

1. arm ``PR_SET_PDEATHSIG`` and check the parent is still the host, so a host
   that dies from here on takes the child with it;
2. import everything the script may use (RestrictedPython, the allowed
   modules): after the sandbox there may be no filesystem access left to
   import with;
3. read the per-run secret and the run's config from the inherited pipe
   (``boot["secret_fd"]``) until the host closes it: the secret is never in
   argv or the environment. A *spare* runner, started ahead of need, waits
   here; an empty pipe means it was not needed, and it exits;
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

import json
import os
import socket
import sys
from typing import Any

from . import _allowlist, _restricted, _sandbox, _wire

EXIT_SANDBOX = 3
EXIT_BRIDGE = 4


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
    """The error as script lines only: the runner's own frames are left out."""
    lines = source.splitlines()
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename == _restricted.SCRIPT_FILENAME:
            frames.append((tb.tb_lineno, code.co_name))
        tb = tb.tb_next
    if isinstance(exc, SyntaxError) and exc.filename == _restricted.SCRIPT_FILENAME and exc.lineno:
        frames.append((exc.lineno, "<module>"))
    text = ["Traceback (most recent call last):"]
    for lineno, func in frames:
        text.append(f"  script line {lineno}, in {func}")
        if 0 < lineno <= len(lines):
            text.append(f"    {lines[lineno - 1].strip()}")
    message = str(exc)
    text.append(f"{type(exc).__name__}: {message}" if message else type(exc).__name__)
    out: dict[str, Any] = {
        "type": type(exc).__name__,
        "message": message,
        "line": frames[-1][0] if frames else None,
        "traceback": "\n".join(text),
    }
    if isinstance(exc, _restricted.ToolError):
        out["code"] = exc.code
    return out


def _jsonable(value: Any) -> tuple[Any, bool]:
    try:
        json.dumps(value)
        return value, False
    except (TypeError, ValueError, RecursionError):
        return repr(value), True


def run_script(
    channel: Channel, script: dict[str, Any], modules: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Compile and run one script; the outcome as the ``done`` message (without ``type``)."""
    next_id = 0

    def call_tool(tool: str, /, **arguments: Any) -> Any:
        nonlocal next_id
        if not isinstance(tool, str):
            raise _restricted.ToolError(
                "invalid_arguments", "call_tool needs the tool's name as a string"
            )
        next_id += 1
        try:
            channel.send({"type": "call", "id": next_id, "tool": tool, "arguments": arguments})
        except (TypeError, ValueError) as exc:
            raise _restricted.ToolError(
                "invalid_arguments", f"arguments for {tool} must be JSON values: {exc}", tool
            ) from None
        except _wire.ProtocolError as exc:
            if exc.reason != "oversized":
                raise
            raise _restricted.ToolError(
                "invalid_arguments",
                f"arguments for {tool} are too large for the bridge: {exc.message}",
                tool,
            ) from None
        reply = channel.codec.expect(channel.recv(), "reply")
        if reply.get("id") != next_id:
            raise _wire.ProtocolError("unexpected", "a reply for another call arrived")
        if reply.get("ok"):
            return reply.get("value")
        error = reply.get("error") or {}
        raise _restricted.ToolError(
            str(error.get("code", "tool_error")),
            str(error.get("message", "")),
            tool,
            reply.get("decision"),
        )

    source = script.get("source")
    if not isinstance(source, str):
        raise _wire.ProtocolError("malformed", "the script message has no source")
    if script.get("mode") == "plain":
        try:
            code = compile(source, _restricted.SCRIPT_FILENAME, "exec", dont_inherit=True)
        except SyntaxError as exc:
            return {"status": "compile_error", "errors": [f"Line {exc.lineno}: {exc.msg}"]}
        glb = _restricted.plain_globals(call_tool)
    else:
        errors, restricted = _restricted.compile_script(source)
        if errors or restricted is None:
            return {"status": "compile_error", "errors": errors}
        code = restricted
        glb = _restricted.restricted_globals(call_tool, modules)
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


def main(argv: list[str]) -> int:
    boot = json.loads(argv[1])
    parent = int(boot.get("parent_pid") or 0)
    if parent:
        _sandbox.set_pdeathsig(parent)
    # Landlock may grant reading the interpreter's own library (lazy imports), nothing else.
    stdlib = [
        p for p in sys.path if p.startswith((sys.base_prefix, sys.prefix)) and os.path.isdir(p)
    ]
    sys.path[:0] = [p for p in boot.get("sys_path", ()) if p not in sys.path]
    for name in (
        *_allowlist.ALLOWED_MODULES,
        *_allowlist.LAZY_IMPORTS,
        "RestrictedPython",
        "operator",
        "types",
    ):
        try:
            __import__(name)
        except ImportError:
            if name == "RestrictedPython":
                raise
    from RestrictedPython import compile_restricted_exec  # noqa: F401  (loaded now, used later)

    modules = _allowlist.module_copies()
    # Ready: a fresh runner finds its activation waiting; a spare blocks here until it is used.
    activation = _read_activation(int(boot["secret_fd"]))
    if activation is None:
        return 0
    secret, config = activation
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
        outcome = run_script(channel, script, modules)
        outcome["type"] = "done"
        try:
            channel.send(outcome)
        except _wire.ProtocolError as exc:
            if exc.reason != "oversized":
                raise
            message = f"the script's result is too large to return: {exc.message}"
            error = {
                "type": "ResultTooLarge",
                "message": message,
                "line": None,
                "traceback": message,
            }
            channel.send({"type": "done", "status": "error", "error": error})
        channel.codec.expect(channel.recv(), "bye")
    except (OSError, _wire.ProtocolError) as exc:
        sys.stderr.write(f"ringfence runner: bridge failed: {exc}\n")
        return EXIT_BRIDGE
    return 0

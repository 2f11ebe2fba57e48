"""The script runner's relay inside a remote engine's container: the bridge over ``docker exec``.

A remote engine shares no file system with the host, so there is no socket to
mount. The host starts this program with ``docker exec`` (stdin and stdout
attached over the Docker API connection it already has, TLS to a remote
engine) and the exec's stream *is* the bridge's transport. Started by
:mod:`ringfence._confine.boot` (``python -I -S``, standard library only), it:

1. spawns the runner (this interpreter with the arguments in ``spec["runner"]``
   and its boot JSON) in a session of its
   own, with the secret pipe, one end of a ``socketpair`` as its bridge socket
   (``["fd", n]``), its stdout a pipe to here, its stderr this process's stderr
   (Docker's stream 2), its stdin ``/dev/null`` (never the exec's stream), and
   this process as its parent (``PR_SET_PDEATHSIG``: the runner dies with it);
2. reads frames (:data:`HEADER`: kind, length) from its stdin: ``ACTIVATE`` (the
   run's secret and config, written to the runner's secret pipe, which is then
   closed), ``BRIDGE`` (bytes for the runner's end), ``KILL``; end of file is a
   kill too (the host, or its connection, is gone);
3. writes frames to its stdout: ``BRIDGE`` (bytes from the runner's end), ``OUT``
   (the runner's stdout) and, last, ``EXIT`` (the runner's status, negative: the
   signal).

It only moves bytes: the bridge's frames are authenticated end to end (HMAC
with the per-run secret, sequence numbers, size and depth limits), checked by
the host, so neither this relay nor the stream needs to be trusted.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import struct
import sys
from typing import Any

from ._wire import SECRET_BYTES

__all__ = ["ACTIVATE", "BRIDGE", "EXIT", "HEADER", "KILL", "OUT", "main"]

HEADER = struct.Struct(">BI")
BRIDGE = 0  # both ways: the bridge's bytes
ACTIVATE = 1  # to the relay: the run's secret and config
KILL = 2  # to the relay: SIGKILL the runner's session
OUT = 3  # from the relay: the runner's stdout
EXIT = 4  # from the relay, last: the runner's status
_CHUNK = 65536


def _frame(kind: int, payload: bytes) -> None:
    data = HEADER.pack(kind, len(payload)) + payload
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def _spawn(spec: dict[str, Any], secret_fd: int, bridge_fd: int, out_fd: int) -> int:
    boot = {"secret_fd": secret_fd, "parent_pid": os.getpid(), "sys_path": spec["sys_path"]}
    # The runner's interpreter is this one (the host's python3 started both).
    argv = [sys.executable, *spec["runner"], json.dumps(boot, separators=(",", ":"))]
    os.set_inheritable(secret_fd, True)
    os.set_inheritable(bridge_fd, True)
    return os.posix_spawn(
        argv[0],
        argv,
        spec["env"],  # the host's child_env(), exactly
        file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, out_fd, 1),
        ],
        setsid=True,
    )


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    secret_r, secret_w = os.pipe()
    mine, theirs = socket.socketpair()
    out_r, out_w = os.pipe()
    pid = _spawn(spec, secret_r, theirs.fileno(), out_w)
    bridge_fd = theirs.fileno()
    for fd in (secret_r, out_w):
        os.close(fd)
    theirs.close()
    killed = False
    reading: dict[int, str] = {0: "host", mine.fileno(): "bridge", out_r: "out"}
    pending = b""
    try:
        while "bridge" in reading.values() or "out" in reading.values():
            ready, _, _ = select.select(list(reading), [], [])
            for fd in ready:
                what = reading[fd]
                data = mine.recv(_CHUNK) if what == "bridge" else os.read(fd, _CHUNK)
                if what == "bridge":
                    if data:
                        _frame(BRIDGE, data)
                    else:
                        del reading[fd]
                elif what == "out":
                    if data:
                        _frame(OUT, data)
                    else:
                        del reading[fd]
                elif not data:  # the host, or its connection, is gone
                    del reading[fd]
                    killed = True
                    _kill(pid)
                else:
                    pending += data
                    while len(pending) >= HEADER.size:
                        kind, size = HEADER.unpack_from(pending)
                        if len(pending) < HEADER.size + size:
                            break
                        payload = pending[HEADER.size : HEADER.size + size]
                        pending = pending[HEADER.size + size :]
                        if kind == BRIDGE:
                            with contextlib.suppress(OSError):  # the runner has exited
                                mine.sendall(payload)
                        elif kind == ACTIVATE and secret_w >= 0:
                            config = json.loads(payload[SECRET_BYTES:])
                            config["connect"] = ["fd", bridge_fd]
                            body = payload[:SECRET_BYTES] + json.dumps(config).encode()
                            view = memoryview(body)
                            while view:
                                view = view[os.write(secret_w, view) :]
                            os.close(secret_w)
                            secret_w = -1
                        elif kind == KILL and not killed:
                            killed = True
                            _kill(pid)
                if secret_w >= 0 and killed:
                    os.close(secret_w)
                    secret_w = -1
    except OSError as exc:  # the exec's stream broke (EPIPE): nobody is left to serve
        _kill(pid)
        sys.stderr.write(f"ringfence relay: {exc}\n")
    _, status = os.waitpid(pid, 0)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    try:
        _frame(EXIT, str(code).encode())
    except OSError:
        return 1
    return 0

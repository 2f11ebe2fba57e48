"""The first ``initialize`` over stdio, answered before the MCP SDK is loaded.

A client that starts ``ringfence serve`` waits for its ``initialize`` answer;
importing the SDK (``import mcp`` builds hundreds of pydantic models: ~0.35 s on a
quiet machine) and building the kernel took most of the ~0.7 s a client waited
(issue 31, friction 6). What the answer says is known from the command line
alone: the server's name, version, title, description and instructions, and its
capabilities (``tools``; ``logging``; ``resources`` when ringfence's own tools are
exposed). So the command reads the first line itself, and when it is a well-formed
``initialize`` of the handshake era answers it at once, then builds the kernel
and loads the SDK.

The SDK still sees that ``initialize`` first (the line is handed to the wire
reader before anything else), so its session records the client's
capabilities and protocol version as always; its own answer, which the client
already has, is dropped on the way out (:class:`EarlyWriter`) and compared with
the early one: a difference (an SDK that negotiates otherwise) is said on stderr.
Anything else first (a ``server/discover`` probe, a malformed line, nothing within
:data:`WAIT_SECONDS`, a terminal on stdin) takes the ordinary path unchanged.

This module imports nothing of the SDK, the kernel or trio: the command loads it
before either.
"""

from __future__ import annotations

import json
import os
import select
import stat
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DESCRIPTION",
    "HANDSHAKE_VERSIONS",
    "INSTRUCTIONS",
    "SERVER_NAME",
    "TITLE",
    "EarlyInitialize",
    "EarlyWriter",
    "answer_initialize_early",
    "initialize_result",
]

SERVER_NAME = "ringfence"
TITLE = "ringfence"
DESCRIPTION = "Governed, sandboxed tools: every call passes ringfence's Gate"
INSTRUCTIONS = (
    "Tools run under ringfence: each call is checked by a policy gate (posture, rules, "
    "approvals), confined to the workspace, and audited. A refused call returns an error "
    "whose text starts with its code (denied, outside_workspace, git_metadata, ...) and says "
    "why; do not retry a refused call unchanged."
)
# The protocol revisions of the handshake era, oldest first: the SDK's
# ``mcp_types.version.HANDSHAKE_PROTOCOL_VERSIONS`` (a test keeps them equal). A client
# asking for another revision is answered with the latest.
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
# How long the first line may take to arrive before the ordinary path is taken.
WAIT_SECONDS = 0.5
# The most read while looking for the first line (an initialize is a few hundred bytes).
MAX_FIRST_LINE = 64 * 1024


def initialize_result(protocol_version: str, *, resources: bool, logging: bool) -> dict[str, Any]:
    """What ``ringfence serve`` answers to ``initialize`` (as the SDK's server would)."""
    capabilities: dict[str, Any] = {"tools": {"listChanged": False}}
    if logging:
        capabilities["logging"] = {}
    if resources:
        capabilities["resources"] = {"subscribe": False, "listChanged": False}
    version = protocol_version if protocol_version in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1]
    from .. import __version__

    return {
        "protocolVersion": version,
        "capabilities": capabilities,
        "serverInfo": {
            "name": SERVER_NAME,
            "title": TITLE,
            "version": __version__,
            "description": DESCRIPTION,
        },
        "instructions": INSTRUCTIONS,
    }


@dataclass(frozen=True)
class EarlyInitialize:
    """What was read off the wire before the SDK started, and what was answered.

    ``consumed``: every byte read (the ``initialize`` line first), for the wire
    reader to hand to the SDK before reading on. ``request_id`` / ``result``: the
    request answered early, or None when nothing was (then ``consumed`` still
    goes first).
    """

    consumed: bytes
    request_id: Any = None
    result: dict[str, Any] | None = None

    @property
    def answered(self) -> bool:
        return self.result is not None


def _pipe_or_socket(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _read_first_line(fd: int, wait: float) -> bytes:
    """Bytes from ``fd`` up to and including the first newline (or what came in ``wait``)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    data = bytearray()
    while b"\n" not in data and len(data) < MAX_FIRST_LINE:
        if not poller.poll(int(wait * 1000)):
            break  # nothing more within the wait: the ordinary path reads on
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return bytes(data)


def _initialize_request(line: bytes) -> tuple[Any, str] | None:
    """(id, requested protocol version) of a well-formed handshake ``initialize``, else None."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        return None
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return None
    request_id = message.get("id")
    params = message.get("params")
    if message.get("method") != "initialize" or not isinstance(request_id, int | str):
        return None
    if isinstance(request_id, bool) or not isinstance(params, dict):
        return None
    version, info = params.get("protocolVersion"), params.get("clientInfo")
    if not isinstance(version, str) or not isinstance(params.get("capabilities"), dict):
        return None
    if not isinstance(info, dict) or not all(
        isinstance(info.get(k), str) for k in ("name", "version")
    ):
        return None
    return request_id, version


def answer_initialize_early(
    expose: Iterable[str], *, logging: bool, fd_in: int = 0, fd_out: int = 1
) -> EarlyInitialize | None:
    """Read the first line of stdin; answer it on stdout when it is an ``initialize``.

    None when stdin is no pipe or socket (a terminal, a file: the ordinary path
    reads it). ``expose`` is the command's ``--expose`` words (``resources`` comes
    with ``native``); ``logging``: whether the server offers the logging capability.
    """
    if not _pipe_or_socket(fd_in):
        return None
    consumed = _read_first_line(fd_in, WAIT_SECONDS)
    line, newline, _rest = consumed.partition(b"\n")
    request = _initialize_request(line) if newline else None
    if request is None:
        return EarlyInitialize(consumed)
    request_id, version = request
    result = initialize_result(version, resources="native" in set(expose), logging=logging)
    answer = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}) + "\n"
    data = answer.encode("utf-8")
    while data:
        data = data[os.write(fd_out, data) :]
    return EarlyInitialize(consumed, request_id, result)


class EarlyWriter:
    """The wire writer, less the SDK's own answer to the ``initialize`` answered early.

    The SDK's stdio transport writes one whole message per ``write``; the first
    response with the early request's id is dropped (compared with the early
    answer first: a difference is said on stderr), everything else passes.
    """

    def __init__(self, out: Any, early: EarlyInitialize) -> None:
        self._out = out
        self._early = early
        self._pending = early.answered

    async def write(self, text: str) -> None:
        if self._pending and self._is_the_answer(text):
            self._pending = False
            return
        await self._out.write(text)

    async def flush(self) -> None:
        await self._out.flush()

    def _is_the_answer(self, text: str) -> bool:
        try:
            message = json.loads(text)
        except ValueError:
            return False
        if not isinstance(message, dict) or message.get("id") != self._early.request_id:
            return False
        if "result" not in message and "error" not in message:
            return False
        if message.get("result") != self._early.result:
            sys.stderr.write(
                "ringfence serve: the initialize answered early differs from the SDK's "
                f"(early {json.dumps(self._early.result)}, SDK {text.strip()[:2000]})\n"
            )
            sys.stderr.flush()
        return True

    def close(self) -> None:
        self._out.close()

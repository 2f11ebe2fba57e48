"""Bridge test helpers: real tools of each consequence, a run helper, a raw bridge client."""

from __future__ import annotations

import json
import os
from typing import Any

import psutil
import trio
from kernel_helpers import TOOLS, Ledger, events, kinds, make_tool, register_standard_tools

from ringfence.bridge import ScriptConfig, ScriptResult
from ringfence.bridge._host import run_script
from ringfence.bridge._launch import RUNNER_PATH
from ringfence.bridge._wire import (
    PROTOCOL,
    TO_CHILD,
    TO_HOST,
    Codec,
    check_proof,
    child_proof,
    decode_nonce,
    host_proof,
    new_nonce,
    session_key,
)
from ringfence.runtime import Kernel

__all__ = [
    "TOOLS",
    "WRONG",
    "Ledger",
    "RawClient",
    "dumps",
    "events",
    "kinds",
    "make_tool",
    "register_tools",
    "run",
    "runner_processes",
]

WRONG = b"\x01" * 32  # a secret that is not the run's
register_tools = register_standard_tools


async def run(
    kernel: Kernel, source: str, *, timeout: float = 20, launcher: Any = None, **config: Any
) -> ScriptResult:
    return await run_script(
        kernel,
        source,
        timeout=timeout,
        trace_id="trace-test",
        parent_id="parent-test",
        config=ScriptConfig(**config),
        launcher=launcher,
    )


def runner_processes() -> list[psutil.Process]:
    """Live script runners started from this checkout by this test process, or orphaned
    (their parent gone). Another pytest worker's runners (make test: pytest-xdist) are its own."""
    me = os.getpid()
    found = []
    for proc in psutil.process_iter(["cmdline", "status", "ppid"]):
        cmd = proc.info["cmdline"] or []
        if str(RUNNER_PATH) not in cmd or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            ancestors = {p.pid for p in proc.parents()}
        except psutil.Error:
            continue
        if me in ancestors or proc.info["ppid"] == 1:
            found.append(proc)
    return found


class RawClient:
    """A bridge client written against the protocol, for attacking the host."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.codec = Codec(TO_HOST, TO_CHILD)

    @classmethod
    async def connect(cls, address: list[Any]) -> RawClient:
        if address[0] == "tcp":
            return cls(await trio.open_tcp_stream(address[1], address[2]))
        return cls(await trio.open_unix_socket(address[1]))

    async def send(self, message: dict[str, Any]) -> bytes:
        frame = self.codec.encode(message)
        await self.stream.send_all(frame)
        return frame

    async def recv(self) -> dict[str, Any] | None:
        """The next message, or None when the host closed the connection."""
        while (message := self.codec.next_message()) is None:
            try:
                chunk = await self.stream.receive_some(65536)
            except trio.BrokenResourceError:
                return None
            if not chunk:
                return None
            self.codec.receive_data(chunk)
        return message

    async def handshake(self, secret: bytes) -> dict[str, Any] | None:
        """Run the child's side; return the host's answer to ``auth`` (None: refused)."""
        nc = new_nonce()
        await self.send({"type": "hello", "protocol": PROTOCOL, "nonce": nc.hex()})
        challenge = await self.recv()
        assert challenge is not None and challenge["type"] == "challenge"
        nh = decode_nonce(challenge["nonce"])
        if secret is WRONG:
            await self.send({"type": "auth", "proof": child_proof(secret, nc, nh).hex()})
            return await self.recv()
        check_proof(host_proof(secret, nc, nh), challenge["proof"])
        await self.send({"type": "auth", "proof": child_proof(secret, nc, nh).hex()})
        self.codec.key = session_key(secret, nc, nh)
        return await self.recv()


def dumps(value: Any) -> str:
    return json.dumps(value)

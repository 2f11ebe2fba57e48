"""Bridge test helpers: real tools of each consequence, a run helper, a raw bridge client."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import psutil
import trio

from ringfence.bridge import ScriptConfig, ScriptResult, run_script
from ringfence.bridge._host import RUNNER_PATH
from ringfence.bridge._wire import (
    HEADER,
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
from ringfence.runtime import CallContext, Consequence, Kernel, MemorySink, ToolSpec

SCHEMA = {
    "type": "object",
    "properties": {"x": {"type": "string"}, "n": {"type": "integer", "minimum": 0}},
    "additionalProperties": False,
}
TOOLS = ("peek", "touch", "launch", "run_shell")
WRONG = b"\x01" * 32  # a secret that is not the run's


@dataclass
class Ledger:
    """Every executor run, in order: the proof that something did (or did not) run."""

    runs: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def names(self) -> list[str]:
        return [name for name, _ in self.runs]


def make_tool(
    name: str, consequence: Consequence, ledger: Ledger, *, residual: bool = False
) -> ToolSpec:
    async def run(args: dict[str, Any], ctx: CallContext) -> Any:
        ledger.runs.append((name, args))
        return {"tool": name, "args": args}

    return ToolSpec(
        name, f"test tool {name}", SCHEMA, run, consequence=consequence, residual=residual
    )


def register_tools(kernel: Kernel, ledger: Ledger) -> None:
    kernel.register(make_tool("peek", Consequence.READ, ledger))
    kernel.register(make_tool("touch", Consequence.REVERSIBLE, ledger))
    kernel.register(make_tool("launch", Consequence.IRREVERSIBLE, ledger))
    kernel.register(make_tool("run_shell", Consequence.IRREVERSIBLE, ledger, residual=True))


def events(kernel: Kernel) -> list[dict[str, Any]]:
    sink = kernel.events._sink
    assert isinstance(sink, MemorySink)
    return sink.records()


def kinds(kernel: Kernel, kind: str) -> list[dict[str, Any]]:
    return [e for e in events(kernel) if e["kind"] == kind]


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
    """Live script runners started from this checkout (orphans included)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmd = proc.info["cmdline"] or []
        if str(RUNNER_PATH) in cmd and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


class RawClient:
    """A bridge client written against the protocol, for attacking the host."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.codec = Codec(TO_HOST, TO_CHILD)
        self.buf = bytearray()

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
        while True:
            if len(self.buf) >= HEADER.size:
                (n,) = HEADER.unpack(self.buf[: HEADER.size])
                if len(self.buf) >= HEADER.size + n:
                    payload = bytes(self.buf[HEADER.size : HEADER.size + n])
                    del self.buf[: HEADER.size + n]
                    return self.codec.decode(payload)
            try:
                chunk = await self.stream.receive_some(65536)
            except trio.BrokenResourceError:
                return None
            if not chunk:
                return None
            self.buf += chunk

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

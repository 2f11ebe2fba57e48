"""Fixtures for the MCP host tests: real SDK test peers, the npm reference servers, kernels."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from ringfence.mcp_host import Manifest, parse_manifest
from ringfence.runtime import ApprovalAnswer, Kernel, MemorySink, ScriptedApprover

HERE = Path(__file__).parent
SERVERS = HERE / "servers"
NPM_BIN = HERE.parent / "npm" / "node_modules" / ".bin"
PYTHON = sys.executable


def npm_bin(name: str) -> Path:
    """The path of an npm-installed server; skip (or fail under RINGFENCE_REQUIRE_NPM=1) if absent."""
    path = NPM_BIN / name
    if path.exists() and shutil.which("node"):
        return path
    message = f"{name} is not installed; run `npm ci --prefix tests/npm` (`make test` does it when npm exists)"
    if os.environ.get("RINGFENCE_REQUIRE_NPM") == "1":
        pytest.fail(f"RINGFENCE_REQUIRE_NPM=1 but {message}")
    pytest.skip(message)


@pytest.fixture
def everything_bin() -> Path:
    """server-everything's executable, checked in a sync fixture so a skip keeps its reason."""
    return npm_bin("mcp-server-everything")


@pytest.fixture
def filesystem_bin() -> Path:
    return npm_bin("mcp-server-filesystem")


def toml_str(value: str | Path) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


# The tools each in-repo peer annotates readOnlyHint: true. A server's annotation alone no
# longer makes a tool read (untrusted servers cannot lower caution), so the peers' blocks list
# them in ``read_only_tools`` as an operator would; pass ``reads=()`` to test the annotations alone.
PEER_READS: dict[str, tuple[str, ...]] = {
    "annotated": (
        "read_note",
        "pid",
        "request_headers",
        "big",
        "image",
        "inject",
        "fail",
        "sample",
        "ask_form",
        "ask_url",
        "roots",
    ),
    "dies": ("pid",),
    "hang": ("hang", "quick"),
    "paging": ("*",),
    "secrets_echo": ("*",),
    "unapproved": ("hello",),
}


def reads_line(script: str, extra: str = "", reads: tuple[str, ...] | None = None) -> str:
    """``read_only_tools = [...]`` for a peer (its read-only tools), unless ``extra`` sets it."""
    if reads is None:
        reads = PEER_READS.get(Path(script).stem, ())
    if not reads or "read_only_tools" in extra or "read_tools" in extra:
        return ""
    return "read_only_tools = [" + ", ".join(toml_str(r) for r in reads) + "]\n"


def py_server(
    name: str,
    script: str,
    *args: str,
    extra: str = "",
    state: Path | None = None,
    reads: tuple[str, ...] | None = None,
) -> str:
    """A [[server]] block running one of the in-repo SDK test peers over stdio."""
    argv = ", ".join(toml_str(a) for a in [str(SERVERS / script), *args])
    env = f"\n[server.env]\nRF_STATE_DIR = {toml_str(state)}\n" if state is not None else ""
    return (
        f'[[server]]\nname = {toml_str(name)}\ntransport = "stdio"\ncommand = {toml_str(PYTHON)}\n'
        f"args = [{argv}]\n{reads_line(script, extra, reads)}{extra}\n{env}"
    )


def manifest(*blocks: str) -> Manifest:
    return parse_manifest("\n".join(blocks), "test-mcp.toml")


@pytest.fixture
def state(tmp_path: Path) -> Path:
    d = tmp_path / "state"
    d.mkdir()
    return d


class WaitableSink(MemorySink):
    """A MemorySink a test can wait on: ``await sink.wait_for("mcp_notification")``."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = trio.Event()

    def write(self, line: str) -> None:
        super().write(line)
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, kind: str, timeout: float = 10) -> dict:
        with trio.fail_after(timeout):
            while True:
                found = [r for r in self.records() if r["kind"] == kind]
                if found:
                    return found[0]
                await self._changed.wait()


@pytest.fixture
def sink() -> WaitableSink:
    return WaitableSink()


@pytest.fixture
def make_kernel(sink: MemorySink, tmp_path: Path) -> Callable[..., Kernel]:
    def make(answers: list[ApprovalAnswer] | None = None, **kw) -> Kernel:
        approver = kw.pop("approver", None) or ScriptedApprover(list(answers or []))
        return Kernel(approver=approver, events_sink=sink, spool_dir=tmp_path / "spool", **kw)

    return make


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _read_line(stream: trio.abc.ReceiveStream, marker: bytes | None = None) -> bytes:
    """Read until a line (containing ``marker``) arrives; the process's readiness signal
    (within 120 s: a peer importing the SDK took over 30 s at load 20)."""
    buffer = b""
    with trio.fail_after(120):
        while True:
            chunk = await stream.receive_some(4096)
            if not chunk:
                raise RuntimeError(f"server exited before it was ready: {buffer[-500:]!r}")
            buffer += chunk
            for line in buffer.split(b"\n")[:-1]:
                if marker is None or marker in line:
                    return line


async def _stop(proc: trio.Process) -> None:
    with trio.CancelScope(shield=True):
        proc.kill()
        await proc.wait()


@asynccontextmanager
async def stdlib_peers(script: str, state: Path) -> AsyncIterator[Callable[..., Any]]:
    """Start the stdlib HTTP peer ``servers/<script>`` (its arguments given to the returned
    ``start``, which returns its URL: the peer prints its port); every one is killed after."""
    procs: list[trio.Process] = []

    async def start(*args: object) -> str:
        proc = await trio.lowlevel.open_process(
            [PYTHON, str(SERVERS / script), *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "RF_STATE_DIR": str(state)},
        )
        procs.append(proc)
        port = int((await _read_line(proc.stdout)).strip())
        return f"http://127.0.0.1:{port}/mcp"

    try:
        yield start
    finally:
        for p in procs:
            await _stop(p)


@pytest.fixture
async def sdk_http() -> AsyncIterator[Callable[[str], object]]:
    """Start an SDK test peer over Streamable HTTP (hypercorn under trio); returns its URL."""
    procs: list[trio.Process] = []

    async def start(module: str, state: Path | None = None) -> str:
        env = dict(os.environ)
        if state is not None:
            env["RF_STATE_DIR"] = str(state)
        proc = await trio.lowlevel.open_process(
            [PYTHON, str(SERVERS / "http_serve.py"), module],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        procs.append(proc)
        port = int((await _read_line(proc.stdout)).strip())
        return f"http://127.0.0.1:{port}/mcp"

    start.procs = procs  # type: ignore[attr-defined]  # so a test can kill a server
    try:
        yield start
    finally:
        for p in procs:
            await _stop(p)


async def _drain(stream: trio.abc.ReceiveStream) -> None:
    with trio.move_on_after(600):
        while await stream.receive_some(65536):
            pass


@pytest.fixture
async def everything_http(everything_bin: Path) -> AsyncIterator[Callable[[str], object]]:
    """Start @modelcontextprotocol/server-everything in ``streamableHttp`` or ``sse`` mode on a free PORT."""
    binary = everything_bin
    procs: list[trio.Process] = []
    async with trio.open_nursery() as nursery:

        async def start(mode: str = "streamableHttp") -> int:
            port = free_port()
            proc = await trio.lowlevel.open_process(
                [str(binary), mode],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env={**os.environ, "PORT": str(port)},
            )
            procs.append(proc)
            await _read_line(proc.stderr, str(port).encode())
            nursery.start_soon(_drain, proc.stderr)  # keep its stderr pipe from filling
            return port

        try:
            yield start
        finally:
            for p in procs:
                await _stop(p)
            nursery.cancel_scope.cancel()


def events_of(sink: MemorySink, kind: str) -> list[dict]:
    return [r for r in sink.records() if r["kind"] == kind]


def non_loopback_address() -> str:
    """An IPv4 address of this machine that is not loopback (skip the test without one)."""
    import ipaddress

    import psutil

    for addresses in psutil.net_if_addrs().values():
        for a in addresses:
            if a.family.name == "AF_INET" and not ipaddress.ip_address(a.address).is_loopback:
                return a.address
    pytest.skip("this machine has no non-loopback IPv4 address")

"""Serve test helpers: a recording elicitation answerer, real SDK clients, real servers.

Servers are real: ``ringfence serve`` in a subprocess (through serve_peer.py,
which only adds the serve_tools test tools to the kernel the command builds)
over stdio or Streamable HTTP, or :func:`ringfence.serve.serve_http` in this
process when a test needs to look inside the kernel. Clients are the official
SDK's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import trio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from serve_tools import TOOL_NAMES

import ringfence

HERE = Path(__file__).resolve().parent
RINGFENCE_ROOT = Path(ringfence.__file__).resolve().parents[1]
PEER = HERE / "serve_peer.py"
GIT_CONFIG = "[core]\n\trepositoryformatversion = 0\n"
HELLO = "hello from the workspace\n"
SECRET = "a secret that lives outside the workspace\n"


@dataclass
class Asker:
    """An elicitation callback that records each question and answers from a script."""

    answer: Callable[[types.ElicitRequestFormParams], types.ElicitResult] = field(
        default=lambda _p: types.ElicitResult(action="accept", content={"decision": "once"})
    )
    asked: list[types.ElicitRequestFormParams] = field(default_factory=list)

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        self.asked.append(params)
        return self.answer(params)

    @staticmethod
    def choosing(decision: str) -> Asker:
        return Asker(lambda _p: types.ElicitResult(action="accept", content={"decision": decision}))

    @staticmethod
    def acting(action: str) -> Asker:
        return Asker(lambda _p: types.ElicitResult(action=action))  # type: ignore[arg-type]

    def tools_asked(self) -> list[str]:
        return [p.message.splitlines()[1].split(" ", 1)[0] for p in self.asked]


def subprocess_env(**extra: str) -> dict[str, str]:
    """What a server subprocess needs: this test's RINGFENCE_HOME, and the same ringfence."""
    env = {
        "RINGFENCE_HOME": os.environ["RINGFENCE_HOME"],
        "PYTHONUNBUFFERED": "1",
        # Import the ringfence these tests imported, whatever the child's cwd.
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(RINGFENCE_ROOT), os.environ.get("PYTHONPATH", "")) if p
        ),
    }
    env.update(extra)
    return env


def real_command(workspace: Path, events: Path, *args: str) -> list[str]:
    """``python -m ringfence serve`` itself: the real tools, nothing added."""
    return [
        "-m",
        "ringfence",
        "serve",
        "--workspace",
        str(workspace),
        "--events",
        str(events),
        *args,
    ]


def peer_args(workspace: Path, events: Path, *args: str) -> list[str]:
    return [str(PEER), "serve", "--workspace", str(workspace), "--events", str(events), *args]


@asynccontextmanager
async def stdio_session(
    workspace: Path,
    events: Path,
    *args: str,
    asker: Asker | None = None,
    mode: str = "auto",
    errlog: Path | None = None,
    command: list[str] | None = None,
) -> AsyncIterator[Client]:
    """``ringfence serve`` (stdio) in a subprocess and an SDK client connected to it."""
    argv = command if command is not None else peer_args(workspace, events, *args)
    params = StdioServerParameters(command=sys.executable, args=argv, env=subprocess_env())
    log_path = errlog if errlog is not None else events.with_suffix(".stderr")
    with log_path.open("w") as log:
        transport = stdio_client(params, errlog=log)
        async with Client(
            transport,
            mode=mode,  # type: ignore[arg-type]
            elicitation_callback=asker,
            cache=None,
            read_timeout_seconds=30.0,
        ) as client:
            yield client


def bearer_client(token: str | None, **headers: str) -> httpx2.AsyncClient:
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0))


@asynccontextmanager
async def http_session(
    url: str, token: str, *, asker: Asker | None = None, mode: str = "auto"
) -> AsyncIterator[Client]:
    async with (
        bearer_client(token) as http,
        Client(
            streamable_http_client(url, http_client=http),
            mode=mode,  # type: ignore[arg-type]
            elicitation_callback=asker,
            cache=None,
            read_timeout_seconds=30.0,
        ) as client,
    ):
        yield client


@dataclass
class ServeProcess:
    """``ringfence serve --transport http`` running in a subprocess."""

    process: trio.Process
    url: str
    token: str | None
    stderr_lines: list[str]

    async def stop(self) -> int:
        """SIGTERM (graceful: drain, close the kernel, seal events) and the exit status."""
        self.process.send_signal(signal.SIGTERM)
        with trio.fail_after(20):
            return await self.process.wait()


@asynccontextmanager
async def http_serve_process(
    argv: list[str], env: dict[str, str] | None = None
) -> AsyncIterator[ServeProcess]:
    """Start the command, wait for its JSON announcement on stdout, stop it afterwards.

    stdout and stderr share one pipe: ``stderr_lines`` holds both, in order.
    """
    process = await trio.lowlevel.open_process(
        [sys.executable, *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, **subprocess_env(), **(env or {})},
    )
    lines: list[str] = []
    buffer = b""
    announced: dict[str, Any] | None = None
    try:
        with trio.fail_after(30):
            assert process.stdout is not None
            while announced is None:
                chunk = await process.stdout.receive_some(4096)
                if not chunk:
                    raise AssertionError(f"server exited before announcing: {lines}")
                buffer += chunk
                *done, buffer = buffer.split(b"\n")
                for raw in done:
                    line = raw.decode(errors="replace")
                    lines.append(line)
                    if line.startswith('{"ok": true'):
                        announced = json.loads(line)["result"]
        yield ServeProcess(process, announced["url"], announced["token"], lines)
    finally:
        if process.returncode is None:
            process.kill()
            with trio.move_on_after(10):
                await process.wait()


def records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def text_of(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


def error_code(result: types.CallToolResult) -> str | None:
    """The ringfence error code of a tool error, checked to agree between text and structure."""
    if not result.is_error:
        return None
    code = result.structured_content["error"]["code"]
    assert text_of(result).startswith(f"{code}: "), text_of(result)
    return code


async def check_test_tools_scenario(client: Client, workspace: Path, asker: Asker) -> None:
    """The issue's Done-when list, against the serve_tools test tools, through one client.

    Expects posture ``ask`` and an asker that approves once.
    """
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(TOOL_NAMES) <= set(tools)  # the real tools may be served alongside
    read, write, erase, batch = (
        tools[n] for n in ("peek_file", "note_file", "erase_file", "batch")
    )
    assert read.annotations.read_only_hint is True
    assert write.annotations.read_only_hint is False
    assert write.annotations.destructive_hint is False
    assert erase.annotations.read_only_hint is False
    assert erase.annotations.destructive_hint is True
    assert batch.annotations.destructive_hint is True
    assert batch.meta == {
        "dev.ringfence/consequence": "irreversible",
        "dev.ringfence/residual": True,
    }
    assert read.input_schema["required"] == ["path"]

    # Read a file: runs without asking under posture ask.
    result = await client.call_tool("peek_file", {"path": "hello.txt"})
    assert not result.is_error and text_of(result) == HELLO
    assert asker.asked == []

    # A path outside the workspace: refused, and the secret next to it is not returned.
    result = await client.call_tool("peek_file", {"path": "../secret.txt"})
    assert error_code(result) == "outside_workspace"
    assert SECRET.strip() not in text_of(result)

    # A .git/config write: the person approves, the tool still refuses; the file is unchanged.
    result = await client.call_tool("note_file", {"path": ".git/config", "content": "[evil]\n"})
    assert error_code(result) == "git_metadata"
    assert (workspace / ".git" / "config").read_text() == GIT_CONFIG
    assert asker.tools_asked() == ["note_file"]

    # A "script" whose inner write asks through this client, from a task the outer call spawned.
    asker.asked.clear()
    inner = {"tool": "note_file", "arguments": {"path": "out/made.txt", "content": "made"}}
    result = await client.call_tool("batch", {"calls": [inner]})
    assert not result.is_error, text_of(result)
    assert asker.tools_asked() == ["batch", "note_file"]
    assert "via script" in asker.asked[1].message
    assert (workspace / "out" / "made.txt").read_text() == "made"
    decision = result.structured_content["result"][0]["decision"]
    assert decision["rule"] == "approved:once"


@dataclass
class Served:
    """:func:`ringfence.serve.serve_http` running in this process, with its kernel in reach."""

    url: str
    token: str
    kernel: Any
    sink: Any

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/", 1)[0])

    def proposed(self) -> list[dict[str, Any]]:
        return [r for r in self.sink.records() if r["kind"] == "proposed"]


@asynccontextmanager
async def serve_in_process(
    workspace: Path, *, posture: str = "allow-all", approver: Any = None, **options: Any
) -> AsyncIterator[Served]:
    from functools import partial

    from serve_tools import register_tools

    from ringfence.runtime import Kernel, MemorySink
    from ringfence.serve import ClientApprover, HttpOptions, serve_http

    sink = MemorySink()
    approver = approver if approver is not None else ClientApprover()
    async with Kernel(posture=posture, approver=approver, events_sink=sink) as kernel:
        register_tools(kernel, workspace)
        http = HttpOptions(token=HttpOptions.generate_token(), port=0, **options)
        async with trio.open_nursery() as nursery:
            url = await nursery.start(partial(serve_http, kernel, http))
            yield Served(url, http.token, kernel, sink)
            nursery.cancel_scope.cancel()

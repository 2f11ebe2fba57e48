"""Streamable HTTP (SDK peer under hypercorn/trio, server-everything) and legacy SSE, on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from mcp_host_helpers import PEER_READS, manifest, reads_line

from ringfence.mcp_host import connect_servers
from ringfence.runtime import ApprovalAnswer, Consequence


def http_block(
    name: str, url: str, transport: str = "http", extra: str = "", peer: str = "annotated"
) -> str:
    """A [[server]] block for an HTTP peer; its read-only tools listed as an operator would."""
    reads = reads_line(peer, extra, PEER_READS.get(peer, ()))
    return (
        f'[[server]]\nname = "{name}"\ntransport = "{transport}"\nurl = "{url}"\n{reads}{extra}\n'
    )


async def test_sdk_server_over_streamable_http(make_kernel, sdk_http, state: Path) -> None:
    url = await sdk_http("annotated", state)
    kernel = make_kernel([ApprovalAnswer.once()])
    async with kernel, connect_servers(kernel, manifest(http_block("remote", url))) as cs:
        c = cs["remote"]
        assert c.identity["protocol_version"] == "2025-11-25"
        assert c.config.transport.value == "http"
        assert kernel.registry.get("mcp.remote.delete_note").consequence is Consequence.IRREVERSIBLE
        pids = {(await kernel.call("mcp.remote.pid", {}))["text"].splitlines()[1] for _ in range(3)}
        assert len(pids) == 1  # one pooled session, one server process
        out = await kernel.invoke("mcp.remote.append_note", {"name": "h", "text": "over http"})
        assert out.ok and (state / "note-h.txt").read_text() == "over http\n"


async def test_http_call_deadline(make_kernel, sdk_http) -> None:
    url = await sdk_http("hang")
    block = http_block("slow", url, extra="call_timeout_seconds = 0.5", peer="hang")
    async with make_kernel() as kernel, connect_servers(kernel, manifest(block)):
        with trio.fail_after(10):
            out = await kernel.invoke("mcp.slow.hang", {})
        assert out.error.code == "timeout"
        assert (await kernel.invoke("mcp.slow.quick", {})).ok


async def test_an_unreachable_http_server_is_unavailable_without_repeating_the_url(
    make_kernel,
) -> None:
    from mcp_host_helpers import free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp?token=hidden-query-value"
    async with (
        make_kernel() as kernel,
        connect_servers(kernel, manifest(http_block("gone", url))) as cs,
    ):
        error = cs.failures["gone"]
        assert error.code in ("unavailable", "timeout")
        # host:port is named (what to check); the path and query (which may hold secrets) are not.
        assert "hidden-query-value" not in error.message and "/mcp" not in error.message
        assert f"127.0.0.1:{port}" in error.message


@pytest.mark.npm
async def test_server_everything_over_streamable_http(make_kernel, everything_http) -> None:
    port = await everything_http("streamableHttp")
    block = http_block(
        "everything", f"http://127.0.0.1:{port}/mcp", extra='read_only_tools = ["echo", "get-sum"]'
    )
    async with make_kernel() as kernel, connect_servers(kernel, manifest(block)) as cs:
        c = cs["everything"]
        assert c.identity["name"] == "mcp-servers/everything"
        assert c.identity["protocol_version"] == "2025-11-25"
        out = await kernel.call("mcp.everything.echo", {"message": "over streamable http"})
        assert "Echo: over streamable http" in out["text"]
        total = await kernel.call("mcp.everything.get_sum", {"a": 2, "b": 3})
        assert "5" in total["text"]


@pytest.mark.npm
async def test_server_everything_over_legacy_sse(make_kernel, everything_http) -> None:
    port = await everything_http("sse")
    block = http_block(
        "everything", f"http://127.0.0.1:{port}/sse", "sse", 'read_only_tools = ["echo"]'
    )
    async with make_kernel() as kernel, connect_servers(kernel, manifest(block)) as cs:
        assert cs["everything"].config.transport.value == "sse"
        out = await kernel.call("mcp.everything.echo", {"message": "over sse"})
        assert "Echo: over sse" in out["text"]


async def test_a_dead_http_server_fails_fast_and_is_not_replayed(
    make_kernel, sdk_http, state: Path
) -> None:
    url = await sdk_http("annotated", state)
    kernel = make_kernel(posture="allow-all")
    async with kernel, connect_servers(kernel, manifest(http_block("remote", url))) as cs:
        assert (await kernel.invoke("mcp.remote.pid", {})).ok
        proc = sdk_http.procs[-1]
        proc.kill()
        await proc.wait()
        with trio.fail_after(10):
            first = await kernel.invoke("mcp.remote.append_note", {"name": "gone", "text": "x"})
            second = await kernel.invoke("mcp.remote.pid", {})
        assert first.error.code == "unavailable" and "not replayed" in first.error.message
        # The broken session was discarded; the next call tried a fresh connection.
        assert second.error.code == "unavailable" and "could not be reached" in second.error.message
        assert any(
            "discarded connection #1" in f["message"] for f in cs["remote"].diagnostics.failures
        )
    assert not (state / "note-gone.txt").exists()


def test_the_shared_tls_context_verifies_and_is_made_once() -> None:
    """One CA-bundle load per process (it costs ~60 ms), never a weaker context to get it."""
    import ssl

    from ringfence.mcp_host.transport._http import tls_context

    context = tls_context()
    assert context is tls_context()
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] > 0

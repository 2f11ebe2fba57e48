"""``ringfence serve``: workspace files as read-only resources, with the SDK client over HTTP.

Every read is a Gate call of ``read_file`` on the confined walk: a URI outside
the root, ``..``, and a symbolic link out of the workspace read nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

import mcp_types as types
import pytest
from mcp import MCPError
from serve_helpers import HELLO, SECRET, http_serve_process, http_session, real_command


async def test_workspace_files_are_listed_paged_and_read(workspace: Path, events: Path) -> None:
    for k in range(120):
        (workspace / f"f{k:03}.txt").write_text(f"file {k}\n")
    argv = real_command(workspace, events, "--transport", "http", "--port", "0", "--json")
    async with (
        http_serve_process(argv) as served,
        http_session(served.url, served.token or "", mode="legacy") as client,
    ):
        assert client.server_capabilities.resources is not None
        first = await client.list_resources()
        assert len(first.resources) == 100 and first.next_cursor
        second = await client.list_resources(cursor=first.next_cursor)
        assert second.next_cursor is None
        uris = [str(r.uri) for r in [*first.resources, *second.resources]]
        root = workspace.resolve()
        hello = (root / "hello.txt").as_uri()
        assert hello in uris and len(uris) == len(set(uris)) >= 121
        read = await client.read_resource(hello)
        assert read.contents[0].text == HELLO
        # A cursor this server did not sign is refused, not trusted.
        _, _, mac = first.next_cursor.partition(".")
        # Nor is one whose offset is no ASCII number (each was a Python error with code 0).
        odd = ("\u00b2." + mac, "9" * 5_000 + "." + mac, "\u0661." + mac, "1.\u00e9")
        for forged in (f"0.{mac}", "5", first.next_cursor + "x", *odd):
            with pytest.raises(MCPError) as caught:
                await client.list_resources(cursor=forged)
            assert caught.value.code == types.INVALID_PARAMS
        with pytest.raises(MCPError) as caught:
            await client.read_resource((root / "nope.txt").as_uri())
        assert caught.value.code == -32002


async def test_reads_outside_the_workspace_are_refused(workspace: Path, events: Path) -> None:
    os.symlink(workspace.parent / "secret.txt", workspace / "link.txt")
    root = workspace.resolve()
    argv = real_command(workspace, events, "--transport", "http", "--port", "0", "--json")
    async with (
        http_serve_process(argv) as served,
        http_session(served.url, served.token or "", mode="legacy") as client,
    ):
        attempts = {
            (root.parent / "secret.txt").as_uri(): types.INVALID_PARAMS,
            f"file://{root}/../secret.txt": types.INVALID_PARAMS,
            f"file://{root}/%2e%2e/secret.txt": types.INVALID_PARAMS,
            f"file://evil.example{root}/hello.txt": types.INVALID_PARAMS,
            "https://example.com/hello.txt": types.INVALID_PARAMS,
            (root / "link.txt").as_uri(): types.INTERNAL_ERROR,  # the walk refuses the link
            # No URL parser can split these: urlsplit's ValueError escaped as code 0.
            "http://[::1/": types.INVALID_PARAMS,
            f"file://[{root}/hello.txt": types.INVALID_PARAMS,
        }
        for uri, code in attempts.items():
            with pytest.raises(MCPError) as caught:
                await client.read_resource(uri)
            assert caught.value.code == code, (uri, caught.value)
            assert SECRET.strip() not in str(caught.value)
    assert SECRET.strip() not in events.read_text()


async def test_no_resources_under_the_unrestricted_posture(workspace: Path, events: Path) -> None:
    argv = real_command(workspace, events, "--transport", "http", "--port", "0", "--json")
    argv += ["--posture", "unrestricted"]
    async with (
        http_serve_process(argv) as served,
        http_session(served.url, served.token or "", mode="legacy") as client,
    ):
        with pytest.raises(MCPError) as caught:
            await client.list_resources()
        assert caught.value.code == types.INVALID_PARAMS and "unrestricted" in str(caught.value)

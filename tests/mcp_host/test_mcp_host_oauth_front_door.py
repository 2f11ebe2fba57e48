"""MCP OAuth from the command line as a new user meets it (issue 31, friction 5).

The real OAuth test peer (``servers/oauth_serve.py``) over Streamable HTTP, the
command as a subprocess, the test as the browser.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx2
import trio
from mcp_host_helpers import _read_line
from test_mcp_host_oauth import home, oauth_server  # noqa: F401
from test_mcp_host_oauth_cli import CLI, cli


async def _login_playing_the_browser(where: Path, name: str) -> tuple[int, str]:
    """``mcp login NAME --no-browser``, the test following the authorization URL; (rc, stdout)."""
    env = {**os.environ, "RINGFENCE_HOME": str(where), "RINGFENCE_NO_KEYRING": "1"}
    proc = await trio.lowlevel.open_process(
        [*CLI, "mcp", "login", name, "--no-browser"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    try:
        auth_url = (await _read_line(proc.stdout, b"/authorize?")).decode().strip()
        async with httpx2.AsyncClient() as browser:
            approved = await browser.get(auth_url)
            assert approved.status_code == 302
            await browser.get(approved.headers["location"])
        with trio.fail_after(30):
            code = await proc.wait()
        return code, (await proc.stdout.receive_some(65536)).decode()
    finally:
        proc.kill()
        await proc.wait()


async def test_login_reaches_a_server_that_refuses_only_from_tools_list(
    home: Path,  # noqa: F811
    oauth_server,  # noqa: F811
) -> None:
    url = await oauth_server(RF_OAUTH_OPEN_HANDSHAKE="1")
    added = await cli(home, "mcp", "add", "prot", "--transport", "http", "--url", url,
                      "--auth", "oauth", "--scope", "read")  # fmt: skip
    assert added.returncode == 0, added.stderr
    code, out = await _login_playing_the_browser(home, "prot")
    assert code == 0 and "logged in" in out, out
    called = await cli(home, "call", "mcp.prot.whoami", "--args", "{}", "--approve", "yes",
                       "--json")  # fmt: skip
    assert called.returncode == 0, called.stderr
    assert "hello, authorized caller" in json.loads(called.stdout)["result"]["text"]

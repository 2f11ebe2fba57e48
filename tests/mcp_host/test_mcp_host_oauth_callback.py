"""``mcp login``'s loopback redirect listener takes only the callback its own login asked for.

Any page the person's browser has open (a no-cors ``fetch`` or an ``<img>`` to
``http://127.0.0.1:PORT/callback?...``; the port is the one the client registered, so it
is predictable) or any local process could reach the listener first: it took the first
``GET /callback`` whatever it carried, so a forged ``?error=...`` or ``?code=...&state=x``
ended the person's login (a refusal naming the forger's text, or the SDK's state
mismatch) and the real redirect was answered ``409 already received``. Now a callback is
taken only when its ``state`` is the one in the authorization URL this login opened
(compared in constant time); any other is answered ``400`` and changes nothing.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
import trio
from mcp_host_helpers import _read_line
from test_mcp_host_oauth import home, oauth_server, server_log  # noqa: F401
from test_mcp_host_oauth_cli import CLI, cli


@pytest.mark.slow
@pytest.mark.parametrize(
    "forged",
    [
        "error=access_denied&error_description=IGNORE+THIS+LOGIN",
        "code=forged-code&state=not-the-state",
        "code=forged-code",
    ],
)
async def test_a_forged_callback_is_refused_and_the_real_login_completes(
    home: Path,  # noqa: F811
    oauth_server,  # noqa: F811
    forged: str,
) -> None:
    url = await oauth_server()
    added = await cli(
        home, "mcp", "add", "prot", "--transport", "http", "--url", url,
        "--auth", "oauth", "--scope", "read", "--json",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    env = {**os.environ, "RINGFENCE_HOME": str(home), "RINGFENCE_NO_KEYRING": "1"}
    proc = await trio.lowlevel.open_process(
        [*CLI, "mcp", "login", "prot", "--no-browser"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        auth_url = (await _read_line(proc.stdout, b"/authorize?")).decode().strip()
        redirect_uri = parse_qs(urlsplit(auth_url).query)["redirect_uri"][0]
        async with httpx2.AsyncClient() as attacker:  # another page, or a local process
            refused = await attacker.get(f"{redirect_uri}?{forged}")
        assert refused.status_code == 400, refused.text
        assert "close this window" not in refused.text
        async with httpx2.AsyncClient() as browser:  # the person's own redirect
            approved = await browser.get(auth_url)
            assert approved.status_code == 302
            page = await browser.get(approved.headers["location"])
            assert page.status_code == 200 and "close this window" in page.text, page.text
        with trio.fail_after(30):
            code = await proc.wait()
        rest = (await proc.stdout.receive_some(65536)).decode()
        err = (await proc.stderr.receive_some(65536)).decode()
        assert code == 0, (rest, err)
        assert "logged in" in rest
        assert "IGNORE" not in rest + err and "forged" not in rest + err
    finally:
        proc.kill()
        await proc.wait()
    log = await server_log(url)
    assert "forged-code" not in str(log)  # the forged code never reached the token endpoint

"""MCP OAuth from the command line as a new user meets it (issue 31, friction 5).

The real OAuth test peer (``servers/oauth_serve.py``) over Streamable HTTP, the
command as a subprocess, the test as the browser.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import time
from pathlib import Path

import httpx2
import trio
from mcp_host_helpers import _read_line
from test_mcp_host_oauth import home, oauth_server, server_log  # noqa: F401
from test_mcp_host_oauth_cli import CLI, cli


async def _login_playing_the_browser(where: Path, name: str, *extra: str) -> tuple[int, str]:
    """``mcp login NAME --no-browser``, the test following the authorization URL; (rc, stdout)."""
    env = {**os.environ, "RINGFENCE_HOME": str(where), "RINGFENCE_NO_KEYRING": "1"}
    proc = await trio.lowlevel.open_process(
        [*CLI, "mcp", "login", name, "--no-browser", *extra],
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


async def test_login_on_a_refused_resource_says_why_in_one_line_without_a_traceback(
    home: Path,  # noqa: F811
    oauth_server,  # noqa: F811
) -> None:
    # protected-resource metadata that names another resource: the SDK refuses it
    url = await oauth_server(RF_OAUTH_PRM_RESOURCE="https://elsewhere.example/mcp")
    added = await cli(home, "mcp", "add", "prot", "--transport", "http", "--url", url,
                      "--auth", "oauth")  # fmt: skip
    assert added.returncode == 0, added.stderr
    with trio.fail_after(60):
        out = await cli(home, "mcp", "login", "prot", "--no-browser")
    err = out.stderr.decode()
    assert out.returncode != 0
    assert "Traceback" not in err, err
    assert "does not match" in err and "elsewhere.example" in err
    assert "logging in again will not help" in err
    assert "run `ringfence mcp login prot`" not in err  # not sent back here in a loop


def _call_on_a_terminal(
    where: Path, cwd: Path, tool: str, arguments: dict, answer: bytes
) -> tuple[int, str]:
    """``ringfence call TOOL`` on a pty: answer the login offer with ``answer`` and, on yes,
    play the browser for the URL it prints. (rc, everything the terminal showed)."""
    master, slave = os.openpty()
    env = {
        **os.environ,
        "RINGFENCE_HOME": str(where),
        "RINGFENCE_NO_KEYRING": "1",
        "BROWSER": "true",  # webbrowser.open runs `true`: the test is the browser
    }
    proc = subprocess.Popen(
        [*CLI, "call", tool, "--args", json.dumps(arguments), "--approve", "yes"],
        stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env, start_new_session=True,
    )  # fmt: skip
    os.close(slave)
    seen, offered, browsed = b"", False, False
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
            if not offered and b"[y/N]" in seen:
                os.write(master, answer)
                offered = True
            found = re.search(rb"(http://127\.0\.0\.1:\d+/authorize\?\S+)", seen)
            if found and not browsed:
                browsed = True
                approved = httpx2.get(found.group(1).decode())
                assert approved.status_code == 302
                httpx2.get(approved.headers["location"])
        return proc.wait(timeout=30), seen.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)


async def test_a_step_up_during_call_on_a_terminal_offers_the_login(
    home: Path,  # noqa: F811
    oauth_server,  # noqa: F811
    tmp_path: Path,
) -> None:
    url = await oauth_server()
    work = tmp_path / "work"
    work.mkdir()
    added = await cli(home, "mcp", "add", "prot", "--transport", "http", "--url", url,
                      "--auth", "oauth", "--scope", "read")  # fmt: skip
    assert added.returncode == 0, added.stderr
    code, out = await _login_playing_the_browser(home, "prot")
    assert code == 0, out
    # write_note needs scope write: a step-up. Declined at the terminal: refused, not run.
    code, shown = await trio.to_thread.run_sync(
        _call_on_a_terminal, home, work, "mcp.prot.write_note", {"text": "no"}, b"n\n"
    )
    assert code != 0 and "log in now in a browser?" in shown
    assert "declined at the terminal" in shown and "wrote no" not in shown
    # Accepted: the browser step, then the call goes on in the same session and runs.
    code, shown = await trio.to_thread.run_sync(
        _call_on_a_terminal, home, work, "mcp.prot.write_note", {"text": "yes"}, b"y\n"
    )
    assert code == 0, shown
    assert "wrote yes" in shown
    log = await server_log(url)
    assert [g["scopes"] for g in log["grants"]] == [["read"], ["read", "write"]]
    assert len(log["registrations"]) == 1  # the same client: the login landed where it was


async def test_without_a_terminal_a_step_up_names_the_login_that_ends_it(
    home: Path,  # noqa: F811
    oauth_server,  # noqa: F811
    tmp_path: Path,
) -> None:
    url = await oauth_server()
    work = tmp_path / "work"
    work.mkdir()
    await cli(home, "mcp", "add", "prot", "--transport", "http", "--url", url,
              "--auth", "oauth", "--scope", "read")  # fmt: skip
    assert (await _login_playing_the_browser(home, "prot"))[0] == 0
    env = {**os.environ, "RINGFENCE_HOME": str(home), "RINGFENCE_NO_KEYRING": "1"}
    args = ["call", "mcp.prot.write_note", "--args", '{"text": "x"}', "--approve", "yes"]
    refused = await trio.run_process(
        [*CLI, *args], capture_stdout=True, capture_stderr=True, env=env, cwd=work,
        check=False, stdin=b"",
    )  # fmt: skip
    err = refused.stderr.decode()
    assert refused.returncode != 0
    assert "run this same command on a terminal" in err, err
    assert "wrote x" not in refused.stdout.decode()
    # and on a terminal it is offered, and ends the refusal (the test is the browser)
    code, shown = await trio.to_thread.run_sync(
        _call_on_a_terminal, home, work, "mcp.prot.write_note", {"text": "x"}, b"y\n"
    )
    assert code == 0 and "wrote x" in shown, shown


async def test_add_takes_a_private_key_and_a_client_metadata_url(home: Path) -> None:  # noqa: F811
    key = await cli(home, "mcp", "add", "m2m", "--transport", "http",
                    "--url", "https://mcp.example.com/mcp", "--auth", "oauth",
                    "--oauth-grant", "client_credentials", "--client-id", "svc",
                    "--client-key-env", "SVC_KEY")  # fmt: skip
    assert key.returncode == 0, key.stderr
    cimd = await cli(home, "mcp", "add", "cimd", "--transport", "http",
                     "--url", "https://mcp.example.com/mcp", "--auth", "oauth",
                     "--client-metadata-url", "https://app.example.com/oauth/client.json")  # fmt: skip
    assert cimd.returncode == 0, cimd.stderr
    text = (home / "mcp.toml").read_text()
    assert 'client_key_env = "SVC_KEY"' in text and 'oauth_grant = "client_credentials"' in text
    assert 'client_metadata_url = "https://app.example.com/oauth/client.json"' in text
    login = await cli(home, "mcp", "login", "m2m")
    assert login.returncode == 2 and b"client_key_env, SVC_KEY" in login.stderr
    # the manifest's own checks, named: a key needs a client id; a metadata URL is https
    no_id = await cli(home, "mcp", "add", "k2", "--transport", "http",
                      "--url", "https://mcp.example.com/mcp", "--auth", "oauth",
                      "--oauth-grant", "client_credentials", "--client-key-env", "K")  # fmt: skip
    assert no_id.returncode == 2 and b"client_key_env" in no_id.stderr
    plain = await cli(home, "mcp", "add", "c2", "--transport", "http",
                      "--url", "https://mcp.example.com/mcp", "--auth", "oauth",
                      "--client-metadata-url", "http://app.example.com/c.json")  # fmt: skip
    assert plain.returncode == 2 and b"client_metadata_url" in plain.stderr
    assert b"Traceback" not in no_id.stderr + plain.stderr

"""Connections a user can see: every failure's cause on stderr and in ``--json`` warnings.

Through the CLI (``ringfence call`` / ``tools list``) against real servers: an
SDK Streamable HTTP server that requires a bearer token (a subprocess), a port
with nothing listening, a name that does not resolve, and a stdio server that
offers a protocol version nobody speaks.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from mcp_host_helpers import PYTHON, SERVERS, free_port

from ringfence.cli import main

TOKEN = "right-token-0123456789"


@pytest.fixture
def bearer_server(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Start the annotated SDK peer over Streamable HTTP behind a bearer check; returns its URL."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(**env: str) -> str:
        state = tmp_path / f"state{len(procs)}"
        state.mkdir()
        proc = subprocess.Popen(
            [PYTHON, str(SERVERS / "http_serve.py"), "annotated"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "RF_STATE_DIR": str(state), "RF_REQUIRE_BEARER": TOKEN, **env},
        )
        procs.append(proc)
        assert proc.stdout is not None
        port = proc.stdout.readline().strip().decode()
        assert port, "the test server did not start"
        return f"http://127.0.0.1:{port}/mcp"

    yield start
    for p in procs:
        p.kill()
        p.wait()
        if p.stdout is not None:
            p.stdout.close()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, object, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if "--json" in argv else out), err


def add_http(capsys, name: str, url: str, *extra: str) -> None:
    code, _, err = run(capsys, "mcp", "add", name, "--transport", "http", "--url", url, *extra)
    assert code == 0, err


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.setenv("RINGFENCE_WORKSPACE_ROOTS", str(ws))
    return ws


def test_a_wrong_token_names_the_variable(
    capsys, ringfence_home: Path, workspace: Path, bearer_server, monkeypatch
) -> None:
    url = bearer_server()
    add_http(capsys, "remote", url, "--api-key-env", "REMOTE_TOKEN")
    monkeypatch.setenv("REMOTE_TOKEN", "wrong-token-0123456789")
    code, out, err = run(capsys, "call", "mcp.remote.read_note", "--args", '{"name": "a"}')
    assert code == 1
    assert "HTTP 401 Unauthorized" in err and "$REMOTE_TOKEN (api_key_env)" in err
    assert "-32603" not in err and "wrong-token" not in err
    code, out, _ = run(capsys, "call", "mcp.remote.read_note", "--args", '{"name": "a"}', "--json")
    assert isinstance(out, dict) and out["ok"] is False
    assert out["error"]["code"] == "unavailable" and out["error"]["field"] == "api_key_env"
    assert out["error"]["details"]["status"] == 401
    # tools list --mcp lists the server with its reason, on stdout's table and as a warning.
    code, text, err = run(capsys, "tools", "list", "--mcp")
    assert code == 0
    assert "mcp.remote.*" in str(text) and "$REMOTE_TOKEN" in str(text)
    assert "ringfence: warning:" in err and "HTTP 401" in err
    code, out, _ = run(capsys, "tools", "list", "--mcp", "--json")
    assert isinstance(out, dict)
    assert any("$REMOTE_TOKEN" in w and "401" in w for w in out["warnings"])


def test_a_forbidden_answer_and_a_missing_credential_say_what_to_fix(
    capsys, ringfence_home: Path, workspace: Path, bearer_server, monkeypatch
) -> None:
    add_http(capsys, "closed", bearer_server(RF_FORBID="1"), "--api-key-env", "CLOSED_TOKEN")
    add_http(capsys, "bare", bearer_server())
    monkeypatch.setenv("CLOSED_TOKEN", TOKEN)
    _, out, _ = run(capsys, "tools", "list", "--mcp", "--json")
    assert isinstance(out, dict)
    warnings = "\n".join(out["warnings"])
    assert "HTTP 403 Forbidden" in warnings and "$CLOSED_TOKEN" in warnings
    assert "HTTP 401" in warnings and "no credential is configured" in warnings
    assert "ringfence mcp login bare" in warnings  # the server challenged with Bearer


def test_call_connects_the_named_server_without_mcp_and_only_it(
    capsys, ringfence_home: Path, workspace: Path, bearer_server, monkeypatch
) -> None:
    add_http(
        capsys, "remote", bearer_server(), "--api-key-env", "REMOTE_TOKEN",
        "--read-only-tool", "read_note",
    )  # fmt: skip
    add_http(capsys, "down", f"http://127.0.0.1:{free_port()}/mcp")
    monkeypatch.setenv("REMOTE_TOKEN", TOKEN)
    code, out, err = run(
        capsys, "call", "mcp.remote.read_note", "--args", '{"name": "a"}', "--json"
    )
    assert code == 0, err
    assert isinstance(out, dict) and out["ok"] is True
    assert "warnings" not in out  # "down" was never tried: only the named server connects
    # Without --mcp a native call connects nothing.
    code, out, _ = run(capsys, "tools", "list", "--json")
    assert isinstance(out, dict) and "warnings" not in out
    assert not [t for t in out["result"] if t["name"].startswith("mcp.")]


def test_a_server_that_is_down_is_named_with_host_and_port(
    capsys, ringfence_home: Path, workspace: Path
) -> None:
    port = free_port()
    add_http(capsys, "down", f"http://127.0.0.1:{port}/mcp?key=hidden-query")
    code, _, err = run(capsys, "call", "mcp.down.anything")
    assert code == 1
    assert f"127.0.0.1:{port}" in err and "connection was refused" in err
    assert "hidden-query" not in err
    add_http(capsys, "nowhere", "https://no-such-host.invalid/mcp")
    code, out, _ = run(capsys, "tools", "list", "--mcp", "--json")
    assert isinstance(out, dict)
    warnings = "\n".join(out["warnings"])
    assert "no-such-host.invalid:443" in warnings and "does not resolve" in warnings
    assert f"127.0.0.1:{port}" in warnings


def test_a_protocol_version_mismatch_is_named(
    capsys, ringfence_home: Path, workspace: Path
) -> None:
    code, _, err = run(
        capsys, "mcp", "add", "old", "--transport", "stdio", "--command", PYTHON,
        "--arg", str(SERVERS / "old_protocol.py"),
    )  # fmt: skip
    assert code == 0, err
    code, _, err = run(capsys, "call", "mcp.old.tool")
    assert code == 1
    assert "protocol version '1999-01-01'" in err and "2025-11-25" in err


def test_run_script_with_mcp_warns_about_a_server_that_is_down(
    capsys, ringfence_home: Path, workspace: Path, tmp_path: Path
) -> None:
    port = free_port()
    add_http(capsys, "down", f"http://127.0.0.1:{port}/mcp")
    script = tmp_path / "s.py"
    script.write_text("print('hi')\n")
    _, out, _ = run(capsys, "run-script", str(script), "--mcp", "--approve", "no", "--json")
    assert isinstance(out, dict)
    assert any(f"127.0.0.1:{port}" in w and "refused" in w for w in out["warnings"])

"""The client the MCP conformance suite drives: ``conformance_client.py SERVER_URL``.

Reads ``MCP_CONFORMANCE_SCENARIO`` (and ``MCP_CONFORMANCE_CONTEXT`` for
pre-registered and client-credentials scenarios), configures one ringfence
``[[server]]`` for the URL, connects it through ``connect_servers`` (the same
path as a session) with a programmatic browser installed as the login flow
(it follows the authorization URL to the suite's auto-approving server and
reads the redirect), lists the tools and calls ``test-tool`` when there is
one. Exit status 0 when every step worked; the error on stderr otherwise.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx2
import trio
from mcp.shared.auth import AuthorizationCodeResult

REDIRECT = "http://localhost:3000/callback"  # never contacted: the browser stops at the redirect
CIMD_URL = "https://conformance-test.local/client-metadata.json"


def server_block(url: str, scenario: str, context: dict) -> str:
    lines = ["[[server]]", 'name = "conf"', 'transport = "http"', f"url = {json.dumps(url)}"]
    if scenario.startswith("elicitation"):
        lines.append('elicitation_policy = "allow"')
    if scenario.startswith("auth/"):
        lines.append('auth = "oauth"')
        if "client_id" in context:
            lines.append(f"client_id = {json.dumps(context['client_id'])}")
        if "client_secret" in context:
            os.environ["CONFORMANCE_CLIENT_SECRET"] = context["client_secret"]
            lines.append('client_secret_env = "CONFORMANCE_CLIENT_SECRET"')
        if "private_key_pem" in context:
            os.environ["CONFORMANCE_CLIENT_KEY"] = context["private_key_pem"]
            lines.append('client_key_env = "CONFORMANCE_CLIENT_KEY"')
        if scenario.startswith("auth/client-credentials"):
            lines.append('oauth_grant = "client_credentials"')
        if "idp_token_endpoint" in context:
            # SEP-990: the authorization server is configuration (what an administrator
            # provisions); the harness reads it once from the scenario's resource metadata.
            os.environ["CONFORMANCE_IDP_ID_TOKEN"] = context["idp_id_token"]
            lines += [
                'oauth_grant = "identity_assertion"',
                f"oauth_issuer = {json.dumps(authorization_server(url))}",
                f"idp_token_endpoint = {json.dumps(context['idp_token_endpoint'])}",
                f"idp_client_id = {json.dumps(context['idp_client_id'])}",
                'idp_id_token_env = "CONFORMANCE_IDP_ID_TOKEN"',
            ]
        if "client_id" not in context:
            lines.append(f"client_metadata_url = {json.dumps(CIMD_URL)}")
    return "\n".join(lines) + "\n"


def authorization_server(url: str) -> str:
    """The first authorization server the resource's RFC 9728 metadata names."""
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}"
    for path in (
        f"/.well-known/oauth-protected-resource{parts.path}",
        "/.well-known/oauth-protected-resource",
    ):
        r = httpx2.get(origin + path)
        if r.status_code == 200:
            return str(r.json()["authorization_servers"][0])
    raise RuntimeError("the scenario serves no protected-resource metadata")


class DefaultsElicitor:
    """A person who accepts every form as pre-filled with its defaults."""

    async def elicit(self, prompt):  # -> ElicitationAnswer
        from ringfence.mcp_host._elicitation import ElicitationAnswer

        properties = (prompt.requested_schema or {}).get("properties", {})
        content = {k: p["default"] for k, p in properties.items() if "default" in p}
        return ElicitationAnswer("accept", content)


class Browser:
    def __init__(self) -> None:
        self.url = ""

    async def redirect(self, url: str) -> None:
        self.url = url

    async def callback(self) -> AuthorizationCodeResult:
        async with httpx2.AsyncClient() as c:
            r = await c.get(self.url)
        q = parse_qs(urlsplit(r.headers.get("location", "")).query)
        if "code" not in q:
            raise RuntimeError(f"authorization answered {r.status_code} without a code")
        return AuthorizationCodeResult(
            code=q["code"][0], state=q.get("state", [None])[0], iss=q.get("iss", [None])[0]
        )


async def main(url: str) -> int:
    from ringfence.mcp_host import connect_servers, parse_manifest
    from ringfence.mcp_host.oauth._provider import LoginFlow, login_flow
    from ringfence.runtime import ApprovalAnswer, Kernel, MemorySink, ScriptedApprover

    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    manifest = parse_manifest(server_block(url, scenario, context), "conformance.toml")
    browser = Browser()
    approver = ScriptedApprover([ApprovalAnswer.once() for _ in range(4)])
    with tempfile.TemporaryDirectory() as spool:
        kernel = Kernel(approver=approver, events_sink=MemorySink(), spool_dir=Path(spool))
        with login_flow(LoginFlow(REDIRECT, browser.redirect, browser.callback)):
            async with kernel, connect_servers(kernel, manifest, elicitor=DefaultsElicitor()) as cs:
                if cs.failures:
                    raise cs.failures["conf"]
                names = [s.name for s in kernel.registry if s.name.startswith("mcp.conf.")]
                # What each scenario's server waits for (the suite's own test tools).
                calls = {
                    "mcp.conf.test_tool": {},
                    "mcp.conf.add_numbers": {"a": 2, "b": 3},
                    "mcp.conf.test_reconnection": {},
                    "mcp.conf.test_client_elicitation_defaults": {},
                }
                for name, arguments in calls.items():
                    if name in names:
                        await kernel.call(name, arguments)
    return 0


if __name__ == "__main__":
    from ringfence import use_places

    home = os.environ.get("RINGFENCE_HOME") or tempfile.mkdtemp(prefix="rf-conformance-")
    try:
        with use_places(home=home):  # the library reads no environment: its home, passed
            sys.exit(trio.run(main, sys.argv[1]))
    except Exception as exc:
        sys.stderr.write(f"conformance client: {type(exc).__name__}: {exc}\n")
        sys.exit(1)

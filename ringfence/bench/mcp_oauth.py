"""MCP over OAuth: the first call with a cached (sealed) OAuth token vs a static bearer token.

One in-repo server (``tests/mcp_host/servers/oauth_serve.py``: the SDK's
server auth, Streamable HTTP on 127.0.0.1) serves both arms. Before measuring,
the suite logs in once the way ``ringfence mcp login`` does (authorization
code + PKCE; a scripted browser follows the auto-approving authorization URL),
so the token is sealed at rest under the run's scratch ``RINGFENCE_HOME``.
The same access token is then also put in an environment variable for the
bearer arm, so both arms send identical requests to an identical server and
differ only in how the client gets its ``Authorization`` header.

First call (the goal row): each sample is a fresh ``Kernel`` and a fresh
connection (``connect_servers``) up to the result of ``mcp.bench.whoami``:
initialize, tool listing and the call, timed to the result (closing is not
timed). The OAuth arm reads the sealed record, opens it (key file + AES-GCM),
restores expiry and discovery results and attaches the token; the bearer arm
reads ``api_key_env``. Rounds interleave the two arms, alternating which goes
first. Per call (informational): the same call again on each arm's
long-lived connection. Unseal (informational): one ``SealedStore.load``.

The scenario checks what it measured: after the run the server must have
seen no new grant, no registration and no metadata discovery request (the
cached token was used as it was), else the scenario fails rather than report
a number for another path. The OS keyring is never touched
(``RINGFENCE_NO_KEYRING=1`` for the run): the key file backend is measured.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import trio
from mcp.shared.auth import AuthorizationCodeResult

from ringfence.mcp_host._connect import connect_servers
from ringfence.mcp_host.manifest._load import Manifest, parse_manifest
from ringfence.mcp_host.oauth._login import login
from ringfence.mcp_host.oauth._provider import LoginFlow
from ringfence.mcp_host.oauth._tokens import SealedStore, key_backend
from ringfence.runtime._events import FileSink
from ringfence.runtime._files import ringfence_home
from ringfence.runtime._kernel import Kernel
from ringfence.runtime._redact import Redactor

from ._harness import Arm, SyncArm, format_seconds, interleave, interleave_blocking
from ._source import source_file
from ._suite import Row, Scenario
from .mcp_host import _toml

SERVER = "tests/mcp_host/servers/oauth_serve.py"
GOAL_RATIO = 1.1
TOKEN_VAR = "RINGFENCE_BENCH_MCP_TOKEN"
NAME = "bench"
TOOL = "whoami"
OAUTH, BEARER = "cached OAuth token", "static bearer token"
_REDIRECT = "http://127.0.0.1:9/callback"  # never contacted: the scripted browser stops at it


@contextlib.contextmanager
def _environ(**values: str) -> Iterator[None]:
    """Set environment variables for the block, restoring what was there before."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.asynccontextmanager
async def _oauth_server(script: Path) -> AsyncIterator[str]:
    """Run the OAuth-protected peer; yields its MCP URL. Killed on exit (shielded)."""
    proc = await trio.lowlevel.open_process(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        assert proc.stdout is not None
        line = b""
        with trio.fail_after(30):
            while not line.endswith(b"\n"):
                chunk = await proc.stdout.receive_some(64)
                if not chunk:
                    raise RuntimeError(f"{script.name} exited before printing its port")
                line += chunk
        yield f"http://127.0.0.1:{int(line)}/mcp"
    finally:
        with trio.CancelScope(shield=True):
            proc.kill()
            await proc.wait()


async def _server_log(url: str) -> dict[str, Any]:
    async with httpx2.AsyncClient(trust_env=False) as c:
        return (await c.get(url.replace("/mcp", "/test/log"))).json()


async def _log_in(manifest: Manifest) -> None:
    """``mcp login``'s path with a scripted browser: the server approves at once."""
    shown: list[str] = []

    async def show(url: str) -> None:
        shown.append(url)

    async def callback() -> AuthorizationCodeResult:
        async with httpx2.AsyncClient(trust_env=False) as c:
            r = await c.get(shown[-1])
        q = parse_qs(urlsplit(r.headers["location"]).query)
        return AuthorizationCodeResult(code=q["code"][0], state=q["state"][0])

    await login(
        manifest.servers[0], Redactor(), LoginFlow(_REDIRECT, show, callback), store=_store()
    )


def _store() -> SealedStore:
    """The token store, its key in a file: what is measured does not depend on a keyring."""
    return SealedStore(ringfence_home(), keyring=False)


def _manifest(url: str, auth: str) -> Manifest:
    return parse_manifest(
        f'[[server]]\nname = "{NAME}"\ntransport = "http"\nurl = {_toml(url)}\n{auth}\n'
        f"read_only_tools = [{_toml(TOOL)}]\n",
        "bench.toml",
    )


async def run(quick: bool) -> list[Row]:
    script = source_file(SERVER, what="the OAuth-protected MCP test server")
    first_rounds = 24 if quick else 60
    call_rounds, batch = (6, 20) if quick else (20, 50)
    with tempfile.TemporaryDirectory() as tmp:
        async with _oauth_server(script) as url:
            oauth = _manifest(url, 'auth = "oauth"')
            await _log_in(oauth)
            before = await _server_log(url)
            (token,) = {h[7:] for h in before["authorization"] if h and h.startswith("Bearer ")}
            with _environ(**{TOKEN_VAR: token}):
                bearer = _manifest(url, f'auth = "bearer"\napi_key_env = "{TOKEN_VAR}"')
                numbers = itertools.count()

                def sink() -> FileSink:
                    return FileSink(Path(tmp) / f"events-{next(numbers)}.jsonl")  # one per kernel

                # This process's CPU seconds per first call (the server is another process):
                # far less sensitive to a loaded machine than wall time, so it shows what the
                # OAuth path itself costs when the wall-time ratio is noisy.
                cpu: dict[str, list[float]] = {OAUTH: [], BEARER: []}

                def first_call(name: str, manifest: Manifest) -> Any:
                    async def arm() -> list[float]:
                        start, cpu_start = time.perf_counter(), time.process_time()
                        async with (
                            Kernel(events_sink=sink()) as kernel,
                            connect_servers(kernel, manifest, token_store=_store()) as cs,
                        ):
                            if cs.failures:
                                raise RuntimeError(f"connect failed: {cs.failures}")
                            await kernel.call(f"mcp.{NAME}.{TOOL}", {})
                            cpu[name].append(time.process_time() - cpu_start)
                            return [time.perf_counter() - start]  # closing is not timed

                    return arm

                first = await interleave(
                    [
                        Arm(OAUTH, first_call(OAUTH, oauth), self_timed=True),
                        Arm(BEARER, first_call(BEARER, bearer), self_timed=True),
                    ],
                    rounds=first_rounds,
                    warmup=1,
                )
                async with (
                    Kernel(events_sink=sink()) as k_oauth,
                    connect_servers(k_oauth, oauth, token_store=_store()),
                    Kernel(events_sink=sink()) as k_bearer,
                    connect_servers(k_bearer, bearer),
                ):

                    async def call_oauth() -> Any:
                        return await k_oauth.call(f"mcp.{NAME}.{TOOL}", {})

                    async def call_bearer() -> Any:
                        return await k_bearer.call(f"mcp.{NAME}.{TOOL}", {})

                    calls = await interleave(
                        [
                            Arm(OAUTH, call_oauth, batch),
                            Arm(BEARER, call_bearer, batch),
                        ],
                        rounds=call_rounds,
                        warmup=1,
                    )
            after = await _server_log(url)
        _check_cached_path(before, after)
        store = _store()
        unseal = interleave_blocking(
            [SyncArm("unseal", lambda: store.load(NAME), 20)], rounds=first_rounds
        )["unseal"]
        backend = key_backend(keyring=False)
    f_oauth, f_bearer = first[OAUTH], first[BEARER]
    c_oauth, c_bearer = calls[OAUTH], calls[BEARER]
    ratio = f_oauth.median / f_bearer.median
    cpu_oauth, cpu_bearer = (statistics.median(cpu[n][1:]) for n in (OAUTH, BEARER))  # [0]: warm-up
    # Each round's two samples ran back to back: their ratio cancels slower drift.
    paired = statistics.median(o / b for o, b in zip(f_oauth.per_op, f_bearer.per_op, strict=True))
    return [
        Row(
            "mcp-oauth",
            "first call (fresh kernel + connection): cached OAuth token",
            f_oauth,
            f_bearer,
            f"<= {GOAL_RATIO:g}x static bearer token",
            ratio <= GOAL_RATIO,
            {
                "overhead_s": f_oauth.median - f_bearer.median,
                "samples": first_rounds,
                "paired_ratio": paired,
                "client_cpu_s": {"oauth": cpu_oauth, "bearer": cpu_bearer},
                "key_backend": backend,
                "note": "first call = Kernel + connect (initialize, tools/list) + whoami, not "
                f"closing; median of per-round ratios {paired:.2f}x; client CPU per first call "
                f"{format_seconds(cpu_oauth)} (OAuth) vs {format_seconds(cpu_bearer)} (bearer); "
                "the server saw no discovery, grant or registration from them",
            },
        ),
        Row(
            "mcp-oauth",
            "each later call on the connection: cached OAuth token",
            c_oauth,
            c_bearer,
            "informational (static bearer token is the baseline)",
            None,
            {"overhead_s": c_oauth.median - c_bearer.median, "calls": call_rounds * batch},
        ),
        Row(
            "mcp-oauth",
            "unseal the cached token (SealedStore.load)",
            unseal,
            None,
            "informational",
            None,
            {"key_backend": backend},
        ),
    ]


def _check_cached_path(before: dict[str, Any], after: dict[str, Any]) -> None:
    """Refuse to report numbers for a path that was not the cached token's (see the module doc)."""
    for key in ("grants", "registrations", "discovery"):
        if len(after.get(key, [])) != len(before.get(key, [])):
            raise RuntimeError(
                f"the measured connections made {key} requests at the server "
                f"({after.get(key, [])[len(before.get(key, [])) :]}): not the cached-token path"
            )
    if None in after["authorization"][len(before["authorization"]) :]:
        raise RuntimeError("a measured request reached /mcp without a token")


SCENARIO = Scenario(
    "mcp-oauth",
    "first MCP call with a cached OAuth token vs a static bearer token (Streamable HTTP)",
    f"<= {GOAL_RATIO:g}x static bearer token",
    run,
)
SCENARIOS = [SCENARIO]

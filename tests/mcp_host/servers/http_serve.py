"""Serve one of the SDK test peers over Streamable HTTP on 127.0.0.1 with hypercorn under trio.

``python http_serve.py MODULE`` binds a free port, prints it on stdout once it is
listening, and serves until killed. ``RF_JSON_RESPONSE=1`` makes it answer with JSON bodies.
``RF_REQUIRE_BEARER=TOKEN`` answers every request without ``Authorization: Bearer TOKEN`` with
401 (``WWW-Authenticate: Bearer``); ``RF_FORBID=1`` answers every request with 403 instead.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from pathlib import Path

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

warnings.simplefilter("ignore")
sys.path.insert(0, str(Path(__file__).parent))


def guarded(app):
    """The app behind a bearer check (RF_REQUIRE_BEARER) or a blanket 403 (RF_FORBID)."""
    token = os.environ.get("RF_REQUIRE_BEARER")
    forbid = os.environ.get("RF_FORBID") == "1"
    if not token and not forbid:
        return app

    async def guard(scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            status = 403 if forbid else None
            if status is None and headers.get(b"authorization") != f"Bearer {token}".encode():
                status = 401
            if status is not None:
                extra = [(b"www-authenticate", b'Bearer realm="test"')] if status == 401 else []
                await send(
                    {
                        "type": "http.response.start",
                        "status": status,
                        "headers": [(b"content-type", b"text/plain"), *extra],
                    }
                )
                await send({"type": "http.response.body", "body": b"no\n"})
                return
        await app(scope, receive, send)

    return guard


async def main(module: str) -> None:
    mcp = importlib.import_module(module).mcp
    config = Config()
    config.bind = ["127.0.0.1:0"]  # hypercorn binds a free port and reports it
    config.accesslog = None
    config.errorlog = None

    async def run(task_status=trio.TASK_STATUS_IGNORED) -> None:
        # RF_JSON_RESPONSE=1: answer requests with one JSON body instead of an SSE stream.
        json_response = os.environ.get("RF_JSON_RESPONSE") == "1"
        app = mcp.streamable_http_app(json_response=json_response)
        await serve(guarded(app), config, task_status=task_status)

    async with trio.open_nursery() as n:
        binds = await n.start(run)
        print(binds[0].rsplit(":", 1)[1], flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1])

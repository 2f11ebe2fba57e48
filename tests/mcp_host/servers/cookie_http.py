"""Test peer: a Streamable HTTP server (stdlib ``http.server``) that sets cookies on every answer.

``python cookie_http.py COUNT SIZE`` prints its port, then answers every request with
``COUNT`` new cookies (names never used before, values of ``SIZE`` bytes) and ``big``, a
cookie of 10,000 bytes. It serves one tool,
``ping``. The ``Cookie`` header each request carried is appended (its length and the cookie
names) to ``$RF_STATE_DIR/cookies`` as one JSON line.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COUNT = int(sys.argv[1])
SIZE = int(sys.argv[2])
STATE = Path(os.environ.get("RF_STATE_DIR", "."))
_serial = itertools.count()
http.client._MAXLINE = 1 << 26  # type: ignore[attr-defined]  # read whatever Cookie header comes


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _cookies(self) -> None:
        for _ in range(COUNT):
            self.send_header("Set-Cookie", f"c{next(_serial)}={'v' * SIZE}; Path=/")
        self.send_header("Set-Cookie", f"big={'b' * 10000}; Path=/")

    def _empty(self, status: int) -> None:
        self.send_response(status)
        self._cookies()
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self._empty(405)

    def do_DELETE(self) -> None:
        self._empty(200)

    def do_POST(self) -> None:
        header = self.headers.get("cookie") or ""
        names = [part.split("=", 1)[0].strip() for part in header.split(";") if part.strip()]
        with open(STATE / "cookies", "a") as f:
            f.write(json.dumps({"length": len(header), "names": names}) + "\n")
        message = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        if "id" not in message:
            self._empty(202)
            return
        method = message.get("method")
        if method == "initialize":
            result: dict = {
                "protocolVersion": message.get("params", {}).get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "cookies", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": [{"name": "ping", "inputSchema": {"type": "object"}}]}
        elif method == "tools/call":
            result = {"content": [{"type": "text", "text": "pong"}]}
        else:
            result = {}
        body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()
        self.send_response(200)
        self._cookies()
        self.send_header("Content-Type", "application/json")
        self.send_header("mcp-session-id", "cookie-session")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()

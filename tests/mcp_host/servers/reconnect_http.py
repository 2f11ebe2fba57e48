"""Test peer: a Streamable HTTP server (stdlib ``http.server``) whose event stream never stays.

``python reconnect_http.py`` prints its port, then answers ``initialize``, ``tools/list`` and
``tools/call`` (one tool, ``ping``) with JSON, and every GET (the stream a client opens for the
server's own messages) with an event stream holding only ``retry: 0`` that ends at once: a
client that obeys reconnects at once, for ever. Each GET appends a line to
``$RF_STATE_DIR/gets``.
"""

from __future__ import annotations

import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

STATE = Path(os.environ.get("RF_STATE_DIR", "."))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, status: int, body: bytes, content_type: str | None = None) -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("mcp-session-id", "reconnect-session")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        with open(STATE / "gets", "a") as f:
            f.write("get\n")
        self._send(200, b"retry: 0\n\n", "text/event-stream")

    def do_DELETE(self) -> None:
        self._send(200, b"")

    def do_POST(self) -> None:
        message = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        if "id" not in message:
            self._send(202, b"")
            return
        method = message.get("method")
        if method == "initialize":
            result: dict = {
                "protocolVersion": message.get("params", {}).get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "reconnect", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": [{"name": "ping", "inputSchema": {"type": "object"}}]}
        elif method == "tools/call":
            result = {"content": [{"type": "text", "text": "pong"}]}
        else:
            result = {}
        body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()
        self._send(200, body, "application/json")


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()

"""Test peer: a Streamable HTTP server (stdlib ``http.server``) that gzips its answers.

``python gzip_http.py SIZE`` prints its port, then answers ``initialize`` plainly and
``tools/list`` gzipped whatever the request's ``Accept-Encoding`` says: one tool whose
description is ``SIZE`` bytes of ``a`` (a gzip body ~1,000 times smaller than that).
Each ``Accept-Encoding`` a request carried is appended to ``$RF_STATE_DIR/encodings``.
"""

from __future__ import annotations

import json
import os
import sys
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SIZE = int(sys.argv[1])
STATE = Path(os.environ.get("RF_STATE_DIR", "."))


def gzipped_listing(msg_id: object) -> bytes:
    tool = {"name": "t", "inputSchema": {"type": "object"}, "description": "@@"}
    text = json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": {"tools": [tool]}})
    before, after = text.split("@@")
    gz = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    out = [gz.compress(before.encode())]
    step = b"a" * min(SIZE, 1 << 20)
    left = SIZE
    while left > 0:
        out.append(gz.compress(step[:left]))
        left -= len(step)
    out += [gz.compress(after.encode()), gz.flush()]
    return b"".join(out)


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _empty(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self._empty(405)

    def do_DELETE(self) -> None:
        self._empty(200)

    def do_POST(self) -> None:
        with open(STATE / "encodings", "a") as f:
            f.write(f"{self.headers.get('accept-encoding')}\n")
        message = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        if "id" not in message:
            self._empty(202)
            return
        gzip = message.get("method") == "tools/list"
        if gzip:
            body = gzipped_listing(message["id"])
        else:
            result = {
                "protocolVersion": message.get("params", {}).get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "gzip", "version": "1"},
            }
            body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("mcp-session-id", "gzip-session")
        if gzip:
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()

"""Test peer: a Streamable HTTP endpoint whose every answer is a same-origin redirect with a
large body labelled ``text/event-stream`` (stdlib ``http.server``).

``python redirect_body.py SIZE`` prints its port. A POST to ``/mcp`` is answered ``307``
to ``/next`` with ``SIZE`` bytes of body, sent a MiB at a time; after each write the bytes
the client took so far are written to ``$RF_STATE_DIR/sent``. ``/next`` is ``404``. The SDK
drains a redirect's body whole before following it: only ringfence's bound stops it.
"""

from __future__ import annotations

import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SIZE = int(sys.argv[1])
STATE = Path(os.environ.get("RF_STATE_DIR", "."))
CHUNK = b"data: x\n" * (1 << 17)  # 1 MiB


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
        self._empty(405)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.path != "/mcp":
            self._empty(404)
            return
        self.send_response(307)
        self.send_header("Location", "/next")
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(SIZE))
        self.end_headers()
        sent = 0
        try:
            while sent < SIZE:
                piece = CHUNK[: SIZE - sent]
                self.wfile.write(piece)
                sent += len(piece)
                # Whole or not at all: the test reads it while this peer still writes.
                (STATE / "sent.part").write_text(str(sent))
                os.replace(STATE / "sent.part", STATE / "sent")
        except OSError:
            pass  # the client stopped reading and closed


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()

"""Test peer: a stdio "server" that answers initialize with a protocol version nobody speaks."""

from __future__ import annotations

import json
import sys

for line in sys.stdin:
    message = json.loads(line)
    if message.get("method") == "initialize":
        result = {
            "protocolVersion": "1999-01-01",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "old", "version": "0"},
        }
        sys.stdout.write(
            json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n"
        )
        sys.stdout.flush()

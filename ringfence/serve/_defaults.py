"""Defaults the CLI needs for its help text, in a module that imports nothing heavy."""

from __future__ import annotations

TOKEN_ENV = "RINGFENCE_SERVE_TOKEN"
DEFAULT_PORT = 8765
MIN_TOKEN_LENGTH = 16
# Which ``--expose`` words exist; each selects tools by ToolSpec.source.
EXPOSE_CHOICES = ("native", "connectors")
# How long one approval question to a client may wait before it counts as a deny.
DEFAULT_APPROVAL_TIMEOUT_SECONDS = 600.0
# The largest JSON-RPC message a client may send (a stdio line, an HTTP body): what the host
# side allows a server by default (mcp_host max_message_bytes). Larger ones are not parsed.
MAX_REQUEST_BYTES = 32 * 1024 * 1024
# Streamable HTTP: a request's line and headers must arrive within this many seconds (and an
# idle keep-alive connection is closed after it).
HEADERS_SECONDS = 5.0
# Streamable HTTP: an admitted request's body must arrive whole within this many seconds of its
# headers (a client trickling its body would otherwise hold a connection and what it sent for as
# long as it likes); 32 MiB in that time is ~1.1 MB/s.
BODY_SECONDS = 30.0
# Streamable HTTP: what all the bodies being read at once may hold together (a declared
# Content-Length is counted before a byte is read), and how many may be read at once; past
# either, a request is answered 503 at once, unread.
MAX_PENDING_BODY_BYTES = 4 * MAX_REQUEST_BYTES
MAX_PENDING_BODIES = 64
# Streamable HTTP: what the bodies of admitted requests still running (a call waiting for its
# approval, or running) may hold together, counted from when each was read whole until its
# request ends; past it a request is answered 503, unread. Each byte of a body costs the
# server about six more while its call waits (parsed, validated, recorded, asked about):
# 42 waiting calls of 3 MiB took ~770 MB. (The SDK reads no body over 4 MiB: eight at once.)
MAX_HELD_BODY_BYTES = MAX_REQUEST_BYTES
# A body this small is never refused for it (only counted): a client holding the bound with
# calls it never approves keeps other clients' large requests out for a while, not their calls.
SMALL_BODY_BYTES = 64 * 1024
# Streamable HTTP: a session with no request in flight this long (no GET stream open, so its
# client is gone or never listens) ends, in the SDK and in ringfence (the SDK's own default
# is 30 minutes). A live SDK client holds its GET stream open and is never idle.
DEFAULT_SESSION_IDLE_SECONDS = 300.0
# Streamable HTTP: at most this many MCP sessions at once (the SDK answers 503 past it; its own
# default is 10,000). One whose client vanished holds ~136 KiB until it goes idle (above).
MAX_SESSIONS = 1024
# Streamable HTTP: at most this many admitted requests (calls running, GET streams, bodies being
# read) at once, and never more than half the process's open-file limit, so clients cannot take
# the file descriptors the kernel needs (its journal, checkpoints, events); past it, 503 at once.
MAX_OPEN_REQUESTS = 4096

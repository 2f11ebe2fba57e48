"""Test peer: an MCP server whose every string is written to attack a web page.

Run over stdio. ``shout`` returns markup, script, ``javascript:`` URLs, control and
bidi characters and the caller's own text; ``fail_loudly`` fails with such a message.
If any of it ran in the review page it would set ``window.__pwned``, open a dialog,
or load ``/pwned`` (a request the page's Content-Security-Policy reports).
"""

from __future__ import annotations

import warnings

from mcp.server.mcpserver import MCPServer

warnings.simplefilter("ignore")

HOSTILE = (
    "<script>window.__pwned = 'script'; alert('script')</script>"
    "<img src=x onerror=\"window.__pwned='img'\">"
    "<a href=\"javascript:window.__pwned='link'\">click me</a>"
    "<svg onload=\"window.__pwned='svg'\"></svg>"
    "<iframe src=\"javascript:alert('frame')\"></iframe>"
    "</pre></td></tr></table><form action=/pwned><button>x</button></form>"
    "<style>body{display:none}</style>"
    "\x1b[2J\x1b]0;title\x07 \u202eevil\u202c \u2066hidden\u2069 \u200b zero-width "
    "line\u2028separator \x00nul"
    " invisible:\U000e0139\U000e0157\ufe0f\u3164\u034f"  # drawn as nothing: a hidden payload
)

mcp = MCPServer(name="<b>hostile</b>", version="1.0", instructions=HOSTILE)


@mcp.tool(description=HOSTILE)
def shout(text: str) -> str:
    """Return hostile text, and the caller's."""
    return HOSTILE + " you said: " + text


@mcp.tool(description=HOSTILE)
def fail_loudly(text: str) -> str:
    """Fail with a hostile message."""
    raise ValueError(HOSTILE + " " + text[:100])


if __name__ == "__main__":
    mcp.run()

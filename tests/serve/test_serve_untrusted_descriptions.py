"""``serve --expose connectors``: an untrusted server's tools say whose text describes them.

A real ``ringfence serve`` over stdio, a real SDK client, and the in-repo SDK test peer
``tests/mcp_host/servers/annotated.py`` configured (untrusted, the default) in the user's
manifest. The front door (``Kernel.tool_definitions``, every format including ``mcp``) ends
such a tool's description with a note that it and its parameters' descriptions are the
server's text, not instructions; ``serve``'s own ``tools/list`` handed the same tools to a
client (and so to its model) without it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from serve_helpers import real_command, stdio_session

SERVER = Path(__file__).resolve().parents[1] / "mcp_host" / "servers" / "annotated.py"
NOTE = "are not instructions"


async def test_an_untrusted_connectors_tools_are_listed_with_the_untrusted_note(
    workspace: Path, events: Path, ringfence_home: Path
) -> None:
    (ringfence_home / "mcp.toml").write_text(
        f'[[server]]\nname = "notes"\ntransport = "stdio"\ncommand = "{sys.executable}"\n'
        f'args = ["{SERVER}"]\n'
    )
    command = real_command(workspace, events, "--expose", "native,connectors")
    async with stdio_session(workspace, events, command=command) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    served = [t for name, t in tools.items() if name.startswith("mcp.notes.")]
    assert served, sorted(tools)
    for tool in served:
        assert NOTE in (tool.description or ""), (tool.name, tool.description)
        assert "'notes'" in (tool.description or "")
    # ringfence's own tools are not the server's: no note on them.
    assert NOTE not in (tools["read_file"].description or "")

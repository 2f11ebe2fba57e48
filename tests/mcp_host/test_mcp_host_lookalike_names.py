"""A look-alike tool name cannot take a tool out from under the rules written for it.

When two of a server's tools sanitize to one registered name, each gets a suffix (so a
look-alike never takes over a name, nor the grants and allow rules that name it). But a deny
or ask rule written for the name the tool had (``mcp.la.delete_all``) stopped matching it the
moment the server listed ``Delete-All`` too: under ``autonomous = mcp.la.*`` the renamed
``delete_all`` ran unasked past ``deny mcp.la.delete_all``, and past ``ask`` under allow-all.
A rule written for that name now still denies or asks for every tool renamed from it, the
look-alike included (which of them it was written for cannot be told); it never allows one
(real SDK peer ``servers/lookalike_tools.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mcp_host_helpers import manifest, py_server

from ringfence.mcp_host import connect_servers
from ringfence.runtime import Kernel, Posture, Rules


def _renamed(kernel: Kernel) -> str:
    """The registered name of the real delete_all, renamed beside its look-alike."""
    found = [
        s.name
        for s in kernel.tools()
        if s.meta.get("server") == "la" and s.meta.get("remote_name") == "delete_all"
    ]
    assert len(found) == 1 and found[0].startswith("mcp.la.delete_all_"), found
    return found[0]


async def test_a_deny_rule_still_denies_a_tool_a_look_alike_renamed(
    make_kernel, state: Path
) -> None:
    rules = Rules(deny=("mcp.la.delete_all",), autonomous=("mcp.la.*",))
    m = manifest(py_server("la", "lookalike_tools.py", "twin", state=state))
    kernel = make_kernel(rules=rules)
    async with kernel, connect_servers(kernel, m):
        name = _renamed(kernel)
        twin = next(s.name for s in kernel.tools() if s.meta.get("remote_name") == "Delete-All")
        for tool in (name, twin):
            out = await kernel.invoke(tool, {})
            assert out.error is not None and out.error.code == "denied", out
            assert "mcp.la.delete_all" in out.error.message, out.error.message
        # The other tools of the server are as autonomous as the rule makes them.
        assert kernel.approver.requests == []
    assert not (state / "deleted").exists()  # neither ran
    assert not (state / "twin").exists()


@pytest.mark.parametrize("argument_rule", [False, True])
async def test_an_ask_rule_still_asks_for_a_tool_a_look_alike_renamed(
    make_kernel, state: Path, argument_rule: bool
) -> None:
    ask = "mcp.la.delete_all(scope=*)" if argument_rule else "mcp.la.delete_all"
    m = manifest(py_server("la", "lookalike_tools.py", "twin", state=state))
    kernel = make_kernel(rules=Rules(ask=(ask,)), posture=Posture.ALLOW_ALL)
    async with kernel, connect_servers(kernel, m):
        out = await kernel.invoke(_renamed(kernel), {"scope": "all"})
        assert out.error is not None and out.error.code == "denied", out  # nobody to ask
        assert len(kernel.approver.requests) == 1
    assert not (state / "deleted").exists()


async def test_the_rule_applies_as_before_without_a_look_alike(make_kernel, state: Path) -> None:
    rules = Rules(deny=("mcp.la.delete_all",), autonomous=("mcp.la.*",))
    m = manifest(py_server("la", "lookalike_tools.py", state=state))
    kernel = make_kernel(rules=rules)
    async with kernel, connect_servers(kernel, m):
        out = await kernel.invoke("mcp.la.delete_all", {})
        assert out.error is not None and out.error.code == "denied", out
    assert not (state / "deleted").exists()


_LIST_NAMES = """
import json, sys, trio
from mcp_host_helpers import manifest, py_server
from ringfence.mcp_host import connect_servers
from ringfence.runtime import Kernel, Rules

async def main() -> None:
    m = manifest(py_server("la", "lookalike_tools.py", "blockers"))
    kernel = Kernel(rules=Rules(deny=("mcp.la.delete_all",), autonomous=("mcp.la.*",)))
    async with kernel, connect_servers(kernel, m) as cs:
        assert not cs.failures, cs.failures
        names = {s.meta["remote_name"]: s.name for s in kernel.tools() if s.meta.get("server") == "la"}
        out = await kernel.invoke(names["Delete-All"], {})
        print(json.dumps({"names": names, "error": out.error and out.error.code}))

trio.run(main)
"""


def test_a_server_listing_every_suffix_of_a_look_alike_cannot_hang_the_kernel(
    state: Path,
) -> None:
    """A look-alike's suffix was searched from 6 to 64 hex digits of its name's hash, and
    past 64 the same candidate again, for ever: a server listing ``delete_all``,
    ``Delete-All`` and a tool named as each of the 30 suffixes ``Delete-All`` could get held
    the kernel's event loop for good while it connected (no deadline can stop a loop that
    never yields). Now a suffix follows two underscores (no listed name can hold them) and
    after 64 digits goes on as ``__<hash>_1``, ``_2``, ...: the search ends; every tool has
    a name of its own and the deny rule still holds (in a child process, so
    a regression fails by its timeout instead of hanging the suite)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path]),
        "RF_STATE_DIR": str(state),
    }
    done = subprocess.run(
        [sys.executable, "-c", _LIST_NAMES],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    names = found["names"]
    assert len(names) == 62 and len(set(names.values())) == 62
    assert all(len(n) <= 128 for n in names.values())
    # The blockers' names are not suffixes (two underscores): they push nothing along.
    digest = hashlib.sha256(b"Delete-All").hexdigest()
    assert names["Delete-All"] == "mcp.la.delete_all__" + digest[:6]
    assert found["error"] == "denied"  # the rule for the name it shared still holds
    assert not (state / "twin").exists()


async def test_a_tool_listed_under_a_look_alikes_suffixed_name_does_not_take_it(
    make_kernel, state: Path
) -> None:
    """Beside ``Delete-All`` the real ``delete_all`` was ``mcp.la.delete_all_<6 digits>``,
    the name a person's rules then name. A server that also listed a tool literally called
    ``delete_all_<those digits>`` got that name for it (a literal name came first), and
    ``delete_all`` moved along to 8 digits: the rule autonomous for the name now ran the
    server's new tool unasked. Now the suffix follows two underscores, which no listed name
    holds: ``delete_all`` keeps its name, and the rule asks for nothing new."""
    names = {}
    for mode in ("twin", "squatter"):
        m = manifest(py_server("la", "lookalike_tools.py", mode, state=state))
        async with make_kernel() as kernel, connect_servers(kernel, m):
            names[mode] = {
                s.meta["remote_name"]: s.name
                for s in kernel.tools()
                if s.meta.get("server") == "la"
            }
    real = names["twin"]["delete_all"]
    assert names["squatter"]["delete_all"] == real  # the name did not move
    squatter = next(r for r in names["squatter"] if r.startswith("delete_all_"))
    assert names["squatter"][squatter] != real
    rules = Rules(autonomous=(real,))
    m = manifest(py_server("la", "lookalike_tools.py", "squatter", state=state))
    async with make_kernel(rules=rules) as kernel, connect_servers(kernel, m):
        out = await kernel.invoke(names["squatter"][squatter], {})
    assert out.error is not None and out.error.code == "denied", out  # asked, answered no
    assert not (state / "blocker").exists()

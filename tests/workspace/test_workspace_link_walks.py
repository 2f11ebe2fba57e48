"""Attacks on "a link a writer makes resolves inside the roots" with long chains of links.

The promise is stated with ``os.path.realpath``'s walk as the oracle. The kernel stops a
walk after 40 links (``ELOOP``); ``os.path.realpath`` and ``Path.resolve`` do not, so a
person's tool that resolves a path in user space and opens what it names reads where that
walk ends. Each test performs its attack through the command line (in-process ``main``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import isolated  # noqa: F401 (an autouse fixture)
from tree_helpers import exact_state

from ringfence.cli._main import main

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed"
)


def _cli(capsys: pytest.CaptureFixture[str], root: Path, *words: str) -> dict[str, Any]:
    main([*words, "--workspace", str(root), "--approve", "no", "--json",
          "--posture", "allow-reversible"])  # fmt: skip
    return json.loads(capsys.readouterr().out)


def _links_resolve_inside(root: Path) -> list[tuple[str, str]]:
    """Every link below ``root`` whose ``os.path.realpath`` leaves it: (link, where)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if path.is_symlink():
                real = Path(os.path.realpath(path))
                if real != root and root not in real.parents:
                    out.append((str(path), str(real)))
    return out


@needs_bwrap
def test_a_link_leaving_the_roots_past_forty_links_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``E -> p1/…/p9/L/../../../../../../etc`` where ``L`` reaches the root through 41
    links: the check's walk stopped at 40 and judged the rest by its spelling (inside,
    ``p1/p2/p3/p4/etc``); ``os.path.realpath`` goes on to ``/etc``. The set was merged."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "keep").write_text("mine\n")
    ups = "/".join([".."] * (len(root.parts) + 2))  # past the file system's top
    command = (
        "mkdir -p p1/p2/p3/p4/p5/p6/p7/p8/p9 && cd p1/p2/p3/p4/p5/p6/p7/p8/p9 && ln -s c1 L && "
        "i=1; while [ $i -le 40 ]; do ln -s c$((i+1)) c$i; i=$((i+1)); done; "
        "ln -s ../../../../../../../../.. c41 && cd - >/dev/null && "
        f"ln -s p1/p2/p3/p4/p5/p6/p7/p8/p9/L/{ups}/etc E"
    )
    before = exact_state(root)
    out = _cli(capsys, root, "call", "run_shell", "--args", json.dumps({"command": command}))
    assert not out["ok"] and out["error"]["code"] == "invalid_arguments", out
    assert "more than 40 links" in out["error"]["message"], out
    assert exact_state(root) == before
    assert _links_resolve_inside(root) == []


@needs_bwrap
def test_a_chain_of_forty_links_stays_usable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The kernel follows 40 links in one walk: such a chain inside the root is merged."""
    root = tmp_path / "ws"
    root.mkdir()
    command = (
        "mkdir d && cd d && i=1; while [ $i -le 39 ]; do ln -s c$((i+1)) c$i; i=$((i+1)); done; "
        "ln -s .. c40 && echo kept > ../keep.txt"
    )
    out = _cli(capsys, root, "call", "run_shell", "--args", json.dumps({"command": command}))
    assert out["ok"] and out["result"]["changes"]["refused"] == [], out
    assert (root / "d" / "c1").is_symlink()
    assert Path(os.path.realpath(root / "d" / "c1")) == root
    assert _links_resolve_inside(root) == []

"""A deny rule with ``**`` inside, judged against a long command, through ``ringfence call``.

The matcher tried every end for each ``**`` cell and built its table again for every place a
reading started (past the program's leading options, after its flags): ``ssh -o a -o a …``
(600 pairs) took 6 s of the kernel's time under ``run_shell(ssh -o ** ProxyCommand*)``, and
cubic beyond. Now each table is filled once, from the ends.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def test_a_long_command_is_judged_in_linear_time(tmp_path: Path) -> None:
    """3,000 option pairs (18 KB of command) against rules with ``**`` inside: the call is
    refused (the approver says no, nothing runs) well within a minute; it took hours."""
    ws = tmp_path / "ws"
    ws.mkdir()
    line = "ssh " + "-o a " * 3000 + "x"
    args = json.dumps({"command": line})
    env = {**os.environ, "RINGFENCE_HOME": str(tmp_path / "home")}
    out = subprocess.run(
        [sys.executable, "-m", "ringfence", "call", "run_shell", "--args", args,
         "--workspace", str(ws), "--approve", "no", "--json",
         "--deny", "run_shell(ssh -o ** ProxyCommand*)", "--deny", "run_shell(ssh ** -F x *)"],
        capture_output=True, text=True, timeout=90, env=env,
    )  # fmt: skip
    answer = json.loads(out.stdout)
    assert answer["ok"] is False and answer["error"]["code"] == "denied", answer
    assert list(ws.iterdir()) == []

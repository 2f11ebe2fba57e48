"""A module a script writes into the workspace never runs in the kernel, through ``python -m ringfence``.

``python -m`` puts the working directory first on the import path, and the workspace
is the working directory by default: every module the kernel imported after start-up
(RestrictedPython's optional ``DateTime`` at the first script, ``typing`` at once) was
looked up there first. A script's ``write_file`` of ``DateTime.py`` ran that file in
the next session's kernel, unconfined, as the user (until 2026-12-07).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PLANTED = """\
with open({marker!r}, "a") as f:
    f.write({name!r} + "\\n")
raise ImportError("not here")
"""


def ringfence(ws: Path, under_tmp: Path, *args: str) -> dict:
    """``python -m ringfence ARGS`` run from the workspace, as a user would."""
    done = subprocess.run(
        [sys.executable, "-m", "ringfence", *args, "--workspace", str(ws), "--json"],
        cwd=ws,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "TMPDIR": str(under_tmp)},
        check=False,
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    return json.loads(done.stdout)["result"]


def test_a_module_a_script_writes_in_the_workspace_never_runs_in_the_kernel(
    tmp_path: Path, under_tmp: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    marker = tmp_path / "ran-in-the-kernel"
    writes = "\n".join(
        f"tools.write_file(path={name + '.py'!r}, content={PLANTED.format(marker=str(marker), name=name)!r})"
        for name in ("DateTime", "typing")
    )
    first = tmp_path / "plant.py"
    first.write_text(writes + "\nresult = 'planted'\n")
    value = ringfence(ws, under_tmp, "run-script", str(first), "--approve", "yes")
    assert value["status"] == "ok" and value["result"] == "planted", value
    assert (ws / "DateTime.py").is_file() and (ws / "typing.py").is_file()

    # The next session in that workspace runs a script (RestrictedPython is imported on
    # the host then): neither planted module runs, and the session works.
    second = tmp_path / "next.py"
    second.write_text("result = sum(range(4))\n")
    value = ringfence(ws, under_tmp, "run-script", str(second), "--approve", "yes")
    assert value["status"] == "ok" and value["result"] == 6, value
    assert not marker.exists(), marker.read_text()

"""Docker on a workspace its command uid cannot write says so (issue 31, friction 9).

Commands never run as root in the docker backend; on a root-owned workspace they ran as
65534 and every write failed with "Permission denied" inside a result the command line
reported with exit 0 and no word of why. Now each result carries a note naming the cause
and the fixes, the command line prints it, and the first fix it names works.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from backends_helpers import TEST_IMAGE
from cli_helpers import ringfence_process

pytestmark = pytest.mark.docker


def call(work: Path, *extra: str) -> tuple[int, dict, str]:
    proc = ringfence_process(
        "call", "run_shell", "--backend", "docker", "--approve", "yes", "--workspace", str(work),
        "--args", json.dumps({"command": "echo hi > made.txt"}), "--json", *extra,
        env={"RINGFENCE_DOCKER_IMAGE": TEST_IMAGE},
        unset=("RINGFENCE_WORKSPACE_ROOTS", "RINGFENCE_POSTURE"),
        stdin="",
    )  # fmt: skip
    return proc.returncode, json.loads(proc.stdout), proc.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="a root-owned workspace needs root to make")
def test_a_root_owned_workspace_is_named_as_the_cause_and_the_fix_works(
    docker_client, tmp_path: Path
) -> None:
    work = tmp_path / "root-owned"
    work.mkdir(mode=0o755)
    code, body, _ = call(work)
    assert code == 0 and body["ok"]
    result = body["result"]
    assert "Permission denied" in result["stderr"] and not (work / "made.txt").exists()
    (note,) = result["notes"]
    assert str(work) in note and "uid 65534" in note and "--change-sets" in note
    assert note in body["warnings"]
    # the fix it names first: writes merged by ringfence, as the host's root
    code, body, _ = call(work, "--change-sets")
    assert code == 0 and body["result"]["exit_code"] == 0, body
    assert "notes" not in body["result"]
    assert (work / "made.txt").read_text() == "hi\n"

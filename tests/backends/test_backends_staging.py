"""A dry run stages only what applying would do: what the writers refuse is refused at staging.

Through the CLI (``--dry-run PLAN``): a script's ``write_file`` of ``.git/config``
gets the refusal (the script does not see success), ``run_shell`` under a dry run
refuses its set's git metadata when it is staged, and nothing reaches the plan.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_helpers import cli_json, isolated  # noqa: F401 (an autouse fixture)
from test_backends_changesets import tree_state


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / ".git" / "objects").mkdir(parents=True)
    (root / ".git" / "refs").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / ".git" / "config").write_text("[core]\n")
    (root / "a.txt").write_text("a\n")
    return root


def staged_calls(plan: Path) -> list[dict]:
    return json.loads(plan.read_text())["calls"] if plan.exists() else []


def test_a_script_s_git_write_is_refused_at_staging_not_staged(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "s.py"
    script.write_text(
        "try:\n"
        "    call_tool('write_file', path='.git/config', content='[core]\\n\\tfsmonitor = x\\n')\n"
        "    print('STAGED')\n"
        "except ToolError as e:\n"
        "    print('REFUSED', e.code)\n"
        "call_tool('write_file', path='ok.txt', content='fine\\n')\n"
    )
    plan = tmp_path / "plan.json"
    before = tree_state(ws)
    code, out = cli_json(
        capsys, "run-script", str(script), "--workspace", str(ws), "--approve", "yes",
        "--dry-run", str(plan),
    )  # fmt: skip
    assert code == 0, out
    printed = out["result"]["output"]
    assert "REFUSED git_metadata" in printed and "STAGED" not in printed
    assert [c["tool"] for c in staged_calls(plan)] == ["write_file"]  # only ok.txt
    assert staged_calls(plan)[0]["arguments"]["path"] == "ok.txt"
    assert tree_state(ws) == before


def test_a_write_file_dry_run_of_git_metadata_is_refused(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.json"
    args = json.dumps({"path": ".git/hooks/pre-commit", "content": "#!/bin/sh\n"})
    code, out = cli_json(
        capsys, "call", "write_file", "--args", args, "--workspace", str(ws), "--approve", "yes",
        "--dry-run", str(plan),
    )  # fmt: skip
    assert code != 0 and out["error"]["code"] == "git_metadata", out
    assert staged_calls(plan) == []


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_a_shell_dry_run_refuses_git_metadata_at_staging(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.json"
    before = tree_state(ws)
    command = json.dumps(
        {"command": "printf '\\tfsmonitor = x\\n' >> .git/config && echo b > b.txt"}
    )
    code, out = cli_json(
        capsys, "call", "run_shell", "--args", command, "--workspace", str(ws),
        "--posture", "allow-reversible", "--approve", "no", "--dry-run", str(plan),
    )  # fmt: skip
    assert code != 0 and out["error"]["code"] == "git_metadata", out
    assert "refused at staging" in out["error"]["message"]
    assert staged_calls(plan) == []
    assert tree_state(ws) == before


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
@pytest.mark.parametrize("where", ["a bare repository", "a common directory"])
def test_a_shell_dry_run_refuses_writing_a_git_directory_of_any_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """No ``.git`` in the path: ``b.git`` a bare repository, or ``common`` the directory a
    git directory's ``commondir`` names. Applying the set refuses the write (at the write);
    its dry run staged it as success. The dry run now refuses it at staging too."""
    ws = tmp_path / "ws"
    repo = ws / ("b.git" if where == "a bare repository" else "common")
    (repo / "objects").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "config").write_text("[core]\n")
    if where == "a bare repository":
        (repo / "HEAD").write_text("ref: refs/heads/main\n")
    else:
        (ws / "gd").mkdir()
        (ws / "gd" / "HEAD").write_text("ref: refs/heads/main\n")
        (ws / "gd" / "commondir").write_text("../common\n")
    plan = tmp_path / "plan.json"
    before = tree_state(ws)
    name = repo.name
    command = json.dumps({"command": f"echo b > b.txt && printf 'x' >> {name}/config"})
    code, out = cli_json(
        capsys, "call", "run_shell", "--args", command, "--workspace", str(ws),
        "--posture", "allow-reversible", "--approve", "no", "--dry-run", str(plan),
    )  # fmt: skip
    assert code != 0 and out["error"]["code"] == "git_metadata", out
    assert f"{name}/config is inside {name}" in out["error"]["message"], out
    assert staged_calls(plan) == []
    assert tree_state(ws) == before


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_a_link_to_a_git_directory_replaced_by_a_directory_is_merged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control: the check before the first write looks at a directory as the set leaves
    it, so ``d -> b.git`` made a real directory (``d/f`` written there) is no write into
    ``b.git``."""
    ws = tmp_path / "ws"
    (ws / "b.git" / "objects").mkdir(parents=True)
    (ws / "b.git" / "refs").mkdir()
    (ws / "b.git" / "HEAD").write_text("ref: refs/heads/main\n")
    (ws / "d").symlink_to("b.git")
    command = json.dumps({"command": "rm d && mkdir d && echo hi > d/f"})
    code, out = cli_json(
        capsys, "call", "run_shell", "--args", command, "--workspace", str(ws),
        "--posture", "allow-reversible", "--approve", "no",
    )  # fmt: skip
    assert code == 0, out
    assert not (ws / "d").is_symlink() and (ws / "d" / "f").read_text() == "hi\n"
    assert sorted(p.name for p in (ws / "b.git").iterdir()) == ["HEAD", "objects", "refs"]

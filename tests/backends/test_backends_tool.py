"""``run_shell`` as wired by ``create_kernel``: real Workspace, real Gate, real backends."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import docker
import pytest
from backends_helpers import DOCKER_OPTIONS, chown_like_workspace
from kernel_helpers import event_records

from ringfence import create_kernel
from ringfence.runtime import (
    ApprovalAnswer,
    Posture,
    ScriptedApprover,
)


def approve_all() -> ScriptedApprover:
    return ScriptedApprover(lambda _r: ApprovalAnswer.once("test approves"))


def kernel(ws: Path, **kw):
    kw.setdefault("posture", Posture.ASK)
    kw.setdefault("approver", approve_all())
    return create_kernel(roots=[ws], **kw)


async def test_run_shell_is_residual_and_asks_even_when_reversible_calls_are_allowed(
    workspace: Path,
) -> None:
    marker = workspace / "ran"
    approver = ScriptedApprover([])  # runs out at once: every question is denied
    async with kernel(
        workspace, posture=Posture.ALLOW_ALL, approver=approver, change_sets=False
    ) as k:
        spec = k.registry.get("run_shell")
        assert spec.residual and spec.consequence.value == "irreversible"
        outcome = await k.invoke("run_shell", {"command": f"touch {marker}"})
    assert outcome.error is not None and outcome.error.code == "denied"
    assert len(approver.requests) == 1
    assert not marker.exists()


async def test_runs_in_a_workspace_directory_with_a_relative_cwd(workspace: Path) -> None:
    (workspace / "sub").mkdir()
    async with kernel(workspace) as k:
        result = await k.call("run_shell", {"command": "pwd; echo hi >&2; exit 4", "cwd": "sub"})
    assert result["exit_code"] == 4 and result["status"] == "exited"
    assert result["stdout"] == f"{(workspace / 'sub').resolve()}\n" and result["stderr"] == "hi\n"
    assert result["backend"] == "local" and result["cwd"] == str((workspace / "sub").resolve())


async def test_cwd_outside_the_workspace_is_refused_unless_unrestricted(
    workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    async with kernel(workspace) as k:
        outcome = await k.invoke("run_shell", {"command": "touch ran", "cwd": str(outside)})
        assert outcome.error.code == "outside_workspace" and outcome.error.field == "cwd"
        outcome = await k.invoke("run_shell", {"command": "touch ran", "cwd": "../outside"})
        assert outcome.error.code == "outside_workspace"
        missing = await k.invoke("run_shell", {"command": "true", "cwd": "nope"})
        assert missing.error.code == "not_found" and missing.error.field == "cwd"
    assert not (outside / "ran").exists()
    # The posture lifts the Gate's workspace check; only the unconfined backend can act there.
    async with kernel(workspace, posture=Posture.UNRESTRICTED, backend="host") as k:
        result = await k.call("run_shell", {"command": "touch ran", "cwd": str(outside)})
    assert result["exit_code"] == 0 and (outside / "ran").exists()


async def test_secret_env_values_are_redacted_everywhere(workspace: Path, tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    token = "ghp_" + "x" * 30
    async with kernel(workspace, events_path=events) as k:
        result = await k.call(
            "run_shell",
            {"command": "echo token=$GH_TOKEN; echo $GH_TOKEN >&2", "env": {"GH_TOKEN": token}},
        )
    assert token not in json.dumps(result) and "[REDACTED SECRET]" in result["stdout"]
    records = event_records(events)
    # Credential-named argument values are registered before `proposed` is written.
    leaked = [r["kind"] for r in records if token in json.dumps(r)]
    assert leaked == []
    outputs = [r for r in records if r["kind"] == "output"]
    # A stream's records, joined: the redactor sends on what no later text can change, so a
    # line's end may come in a record of its own.
    streams = {
        s: "".join(r["text"] for r in outputs if r["stream"] == s) for s in ("stdout", "stderr")
    }
    assert {r["stream"] for r in outputs} == {"stdout", "stderr"}
    assert streams == {"stdout": "token=[REDACTED SECRET]\n", "stderr": "[REDACTED SECRET]\n"}, (
        streams
    )
    assert "backend_started" in {r["kind"] for r in records}


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"command": "true", "env": {"LD_PRELOAD": "/tmp/x.so"}}, "env"),
        ({"command": "true", "env": {"RINGFENCE_RUN_ID": "x"}}, "env"),
        ({"command": "true", "timeout_seconds": 0}, "timeout_seconds"),
        ({"command": "true", "timeout_seconds": 100000}, "timeout_seconds"),
        ({"command": []}, "command"),
        ({"command": "true", "shell": "bash"}, "shell"),
    ],
)
async def test_bad_arguments_are_refused_before_anything_runs(workspace: Path, args, field):
    async with kernel(workspace) as k:
        outcome = await k.invoke("run_shell", args)
    assert outcome.error.code == "invalid_arguments" and outcome.error.field == field


async def test_timeout_is_a_result_that_says_timeout(workspace: Path) -> None:
    async with kernel(workspace) as k:
        result = await k.call(
            "run_shell", {"command": "echo before; sleep 30", "timeout_seconds": 0.3}
        )
    assert result["status"] == "timeout" and result["timed_out"] and result["stdout"] == "before\n"


async def test_dry_run_stages_run_shell_without_running_it(workspace: Path, tmp_path) -> None:
    marker = workspace / "ran"
    plan = tmp_path / "plan.json"
    async with kernel(workspace, dry_run=True, plan_path=plan, change_sets=False) as k:
        value = await k.call("run_shell", {"command": f"touch {marker}"})
    assert value["staged"] is True and not marker.exists()


async def test_the_session_starts_lazily_and_only_once(workspace: Path, tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"

    def started() -> int:
        return events.read_text().count('"kind":"backend_started"')

    async with kernel(workspace, events_path=events) as k:
        assert started() == 0
        for _ in range(3):
            await k.call("run_shell", {"command": ["true"]})
    assert started() == 1


@pytest.mark.docker
async def test_docker_run_shell_mounts_git_directories_read_only(docker_client, workspace) -> None:
    git = workspace / ".git"
    (git / "hooks").mkdir(parents=True)
    (git / "config").write_text("[core]\n")
    (workspace / "src").mkdir()
    chown_like_workspace(workspace, git, git / "hooks", git / "config", workspace / "src")
    # Without change sets (their default on docker refuses the write at the merge instead:
    # test_the_docker_backend_s_uppers_are_merged_by_the_same_gate).
    async with kernel(
        workspace, backend="docker", backend_options=DOCKER_OPTIONS, change_sets=False
    ) as k:
        result = await k.call(
            "run_shell",
            {
                "command": "echo evil >> /workspace/.git/config; echo ok > x; pwd",
                "cwd": "src",
            },
        )
        owner = f"ringfence.owner={socket.gethostname()}:{os.getpid()}"
        container_ids = [c.id for c in docker_client.containers.list(filters={"label": owner})]
        assert len(container_ids) == 1
    assert "Read-only file system" in result["stderr"]
    assert result["stdout"] == "/workspace/src\n" and result["backend"] == "docker"
    assert (git / "config").read_text() == "[core]\n"
    assert (workspace / "src" / "x").read_text() == "ok\n"
    for cid in container_ids:  # closing the kernel removed this session's container
        with pytest.raises(docker.errors.NotFound):
            docker_client.containers.get(cid)


async def test_docker_run_shell_without_a_daemon_is_unavailable_and_runs_nothing(
    workspace: Path, monkeypatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{workspace.parent}/no-daemon.sock")
    marker = workspace / "ran-on-host"
    async with kernel(workspace, backend="docker") as k:
        outcome = await k.invoke("run_shell", {"command": f"touch {marker}"})
        tools = {s.name for s in k.tools()}
    assert outcome.error.code == "unavailable"
    assert "not reachable" in outcome.error.message and "dockerd" in outcome.error.message
    assert not marker.exists()
    assert "run_shell" in tools  # the tool is there; only its backend is missing


async def test_unknown_backend_fails_before_anything_opens(workspace: Path) -> None:
    from ringfence.runtime import InvalidArguments

    with pytest.raises(InvalidArguments) as info:
        create_kernel(roots=[workspace], backend="podman")
    assert info.value.field == "backend"

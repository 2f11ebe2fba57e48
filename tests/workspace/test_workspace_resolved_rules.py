"""Path rules judge the file a tool opens, not the spelling: a link does not get round them.

``--deny 'read_file(path=.env)'`` once let ``read_file x`` read ``.env`` when ``x -> .env``
(a link the agent made with ``run_shell`` or the repository held): rules compared names.
The file tools now hand the policy the workspace name their resolver reached (every link
inside the roots followed) and the call is judged again with it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import trio
from cli_helpers import isolated, ringfence_process  # noqa: F401  (isolated: autouse)

from ringfence import (
    ApprovalAnswer,
    HeadlessDenyApprover,
    Posture,
    Rules,
    ScriptedApprover,
    create_kernel,
)
from ringfence.cli._main import main

SECRET = "SECRET=hunter2-resolved-rules"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A workspace with ``.env``, ``secrets/key`` and links ``x -> .env``, ``s -> secrets``."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / ".env").write_text(SECRET + "\n")
    (root / "secrets").mkdir()
    (root / "secrets" / "key").write_text(SECRET + "\n")
    (root / "notes.txt").write_text("plain\n")
    os.symlink(".env", root / "x")
    os.symlink("secrets", root / "s")
    os.symlink("notes.txt", root / "n")
    return root


def _events_hold_no_secret(events: Path) -> None:
    text = events.read_text()
    assert "hunter2" not in text
    assert main(["events", "verify", str(events)]) == 0


def test_cli_read_file_through_a_link_to_a_denied_file_is_refused(
    repo: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    proc = ringfence_process(
        "call", "read_file", "--args", json.dumps({"path": "x"}), "--workspace", str(repo),
        "--deny", "read_file(path=.env)", "--events", str(events), "--json",
        env={"HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert proc.returncode != 0, proc.stdout
    assert "hunter2" not in proc.stdout + proc.stderr
    body = json.loads(proc.stdout)
    error = body["error"]
    assert error["code"] == "denied" and error["field"] == "path"
    assert "resolves to '.env'" in error["message"]
    assert error["details"]["rule"] == "deny:read_file(path=.env)"
    _events_hold_no_secret(events)
    records = [json.loads(line) for line in events.read_text().splitlines()]
    assert any(r.get("rejudged", {}).get("verdict") == "deny" for r in records)


def test_cli_write_file_through_a_link_to_a_denied_file_leaves_it_unchanged(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = tmp_path / "events.jsonl"
    code = main(["call", "write_file", "--args", json.dumps({"path": "x", "content": "pwned\n"}),
                 "--workspace", str(repo), "--posture", "allow-reversible",
                 "--deny", "write_file(path=.env)", "--events", str(events), "--json"])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert code != 0 and out["error"]["code"] == "denied"
    assert (repo / ".env").read_text() == SECRET + "\n"
    assert os.readlink(repo / "x") == ".env"
    assert main(["events", "verify", str(events)]) == 0


async def _invoke(
    repo: Path,
    tool: str,
    args: dict[str, Any],
    *,
    approver: Any = None,
    events: Path | None = None,
    **rules: Any,
) -> Any:
    async with create_kernel(
        roots=[repo],
        posture=Posture.ALLOW_REVERSIBLE,
        rules=Rules(**rules),
        approver=approver or HeadlessDenyApprover(),
        events_path=events,
    ) as kernel:
        return await kernel.invoke(tool, args)


@pytest.mark.parametrize(
    ("tool", "args", "rule"),
    [
        ("read_file", {"path": "x"}, "read_file(path=.env)"),
        ("read_file", {"path": "s/key"}, "read_file(path=secrets/**)"),
        ("edit_file", {"path": "x", "old": "hunter2", "new": "gone"}, "edit_file(path=.env)"),
        ("write_file", {"path": "s/key", "content": "gone\n"}, "write_file(path=secrets/**)"),
        ("write_file", {"path": "s/new", "content": "new\n"}, "write_file(path=secrets/**)"),
        ("list_directory", {"path": "s"}, "list_directory(path=secrets/**)"),
        ("glob_files", {"path": "s", "pattern": "*"}, "glob_files(path=secrets/**)"),
        ("grep_files", {"path": "s", "pattern": "hunter2"}, "grep_files(path=secrets/**)"),
    ],
)
def test_kernel_refuses_a_path_that_resolves_to_a_denied_file(
    repo: Path, tool: str, args: dict[str, Any], rule: str
) -> None:
    outcome = trio.run(lambda: _invoke(repo, tool, args, deny=(rule,)))
    assert not outcome.ok and outcome.error.code == "denied"
    assert "resolves to" in outcome.error.message and rule in outcome.error.message
    assert "hunter2" not in json.dumps(outcome.to_dict())
    assert (repo / ".env").read_text() == SECRET + "\n"
    assert (repo / "secrets" / "key").read_text() == SECRET + "\n"
    assert sorted(p.name for p in (repo / "secrets").iterdir()) == ["key"]


def test_an_ask_rule_on_the_resolved_file_goes_to_the_approver(repo: Path, tmp_path: Path) -> None:
    approver = ScriptedApprover([ApprovalAnswer.deny("not the secrets")])
    events = tmp_path / "events.jsonl"
    outcome = trio.run(
        lambda: _invoke(
            repo,
            "read_file",
            {"path": "x"},
            approver=approver,
            events=events,
            ask=("read_file(path=.env)",),
        )
    )
    _events_hold_no_secret(events)
    kinds = [json.loads(line)["kind"] for line in events.read_text().splitlines()]
    assert "approval_asked" in kinds and "approval_answered" in kinds
    assert not outcome.ok and outcome.error.code == "denied"
    assert "hunter2" not in json.dumps(outcome.to_dict())
    [request] = approver.requests
    assert request.arguments["path"] == ".env" and "read_file(path=.env)" in request.rule
    approver = ScriptedApprover([ApprovalAnswer.once("fine")])
    outcome = trio.run(
        lambda: _invoke(
            repo, "read_file", {"path": "x"}, approver=approver, ask=("read_file(path=.env)",)
        )
    )
    assert outcome.ok and SECRET in outcome.value and len(approver.requests) == 1


def test_an_allow_rule_for_the_spelling_does_not_carry_over_to_the_linked_file(
    repo: Path,
) -> None:
    async def write() -> Any:
        async with create_kernel(
            roots=[repo],
            posture=Posture.ASK,
            rules=Rules(allow=("write_file(path=x)",)),
            approver=HeadlessDenyApprover(),
        ) as kernel:
            return await kernel.invoke("write_file", {"path": "x", "content": "pwned\n"})

    outcome = trio.run(write)
    assert not outcome.ok and outcome.error.code == "denied"
    assert (repo / ".env").read_text() == SECRET + "\n"


def test_a_link_to_a_file_no_rule_names_still_works(repo: Path) -> None:
    outcome = trio.run(
        lambda: _invoke(repo, "read_file", {"path": "n"}, deny=("read_file(path=.env)",))
    )
    assert outcome.ok and outcome.value.startswith("plain")
    outcome = trio.run(
        lambda: _invoke(repo, "read_file", {"path": ".env"}, deny=("read_file(path=.env)",))
    )
    assert not outcome.ok and outcome.error.code == "denied"


def test_a_link_into_a_second_root_given_through_a_symlink_meets_its_rule(tmp_path: Path) -> None:
    first, real = tmp_path / "ws", tmp_path / "real2"
    (real / "secrets").mkdir(parents=True)
    (real / "secrets" / "key").write_text(SECRET + "\n")
    first.mkdir()
    os.symlink(real, tmp_path / "other")
    os.symlink(tmp_path / "other" / "secrets" / "key", first / "l")

    async def read() -> Any:
        async with create_kernel(
            roots=[first, tmp_path / "other"],
            rules=Rules(deny=("read_file(path=secrets/**)",)),
            approver=HeadlessDenyApprover(),
        ) as kernel:
            return await kernel.invoke("read_file", {"path": "l"})

    outcome = trio.run(read)
    assert not outcome.ok and outcome.error.code == "denied"
    assert "hunter2" not in json.dumps(outcome.to_dict())


def test_an_absolute_spelling_meets_a_path_rule_given_only_in_rules(tmp_path: Path) -> None:
    """``create_kernel(rules=Rules(deny=("read_file(path=secrets/**)",)))`` gave its policy no
    roots: ``read_file /abs/ws/secrets/key`` was judged as an absolute path and read."""
    root = Path(os.path.realpath(tmp_path)) / "ws"
    (root / "secrets").mkdir(parents=True)
    (root / "secrets" / "key").write_text(SECRET + "\n")
    outcome = trio.run(
        lambda: _invoke(
            root,
            "read_file",
            {"path": str(root / "secrets" / "key")},
            deny=("read_file(path=secrets/**)",),
        )
    )
    assert not outcome.ok and outcome.error.code == "denied"
    assert "hunter2" not in json.dumps(outcome.to_dict())

"""Attacks on "a killed writer leaves the workspace wholly before or wholly after".

Each test runs a real ``python -m ringfence`` and SIGKILLs it at a chosen system call
(``strace --inject``, as in ``test_workspace_undo_attacks.py``), then asserts the tree,
byte for byte with modes (:func:`tree_helpers.exact_state`), after the next start.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import isolated  # noqa: F401 (an autouse fixture)
from test_workspace_undo_attacks import killed_at, needs_bwrap, needs_strace
from tree_helpers import exact_state

from ringfence.cli._main import main
from ringfence.runtime._canonical import canonical_json

# ``python -m ringfence`` with SIGXFSZ at its default action (Python ignores it): a write past
# RLIMIT_FSIZE is then cut at the limit and the process killed at its next write, exactly
# what a SIGKILL landing between two pages of one large write leaves.
_KILLED_PAST_LIMIT = (
    "import runpy, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_DFL); "
    "sys.argv = ['ringfence', *sys.argv[1:]]; runpy.run_module('ringfence', run_name='__main__')"
)


def _cli(capsys: pytest.CaptureFixture[str], root: Path, *words: str) -> dict[str, Any]:
    main([*words, "--workspace", str(root), "--approve", "no", "--json",
          "--posture", "allow-reversible"])  # fmt: skip
    return json.loads(capsys.readouterr().out)


def _three_sets(capsys: pytest.CaptureFixture[str], root: Path) -> list[str]:
    """``a`` written twice, then ``b``: three sets, two over the same file."""
    ids = []
    for path, content in (("a", "a1\n"), ("a", "a2\n"), ("b", "b1\n")):
        out = _cli(capsys, root, "call", "write_file", "--args",
                   json.dumps({"path": path, "content": content}))  # fmt: skip
        assert out["ok"], out
        ids.append(out["result"]["checkpoint"])
    return ids


@needs_strace
@pytest.mark.parametrize("when", [2, 3])
def test_an_undo_of_several_sets_killed_between_them_is_rolled_back_whole(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str], when: int
) -> None:
    """``undo --last 3`` killed at its second or third file write (after the undo of ``b``,
    or after that of the newer ``a`` too): the next start put back only the set in flight,
    and left the ones undone before it undone, a tree that was neither before nor after
    the undo (``b`` undone, ``a`` not). Now the undo is one operation in the journal: the
    next start rolls every set of it back, newest first, and the three sets are there to
    undo again."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a").write_text("old\n")
    (root / "b").write_text("old\n")
    ids = _three_sets(capsys, root)
    before = exact_state(root)
    killed_at(root, ringfence_home, ["undo", "--last", "3"], "renameat", root, when=when)
    assert exact_state(root) != before  # killed midway: the tree is mixed until the next start
    assert main(["recover", "--workspace", str(root), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["result"]
    assert {s["record"] for s in report["sets"]} == {"dropped"}, report
    assert exact_state(root) == before
    assert main(["checkpoints", "list", "--workspace", str(root), "--json"]) == 0
    listed = {s["id"]: s for s in json.loads(capsys.readouterr().out)["result"]}
    assert sorted(listed) == sorted(ids), listed  # the undo's own sets are gone
    assert not any(s["undone_by"] for s in listed.values()), listed
    out = _cli(capsys, root, "undo", "--last", "3")  # and the undo runs whole now
    assert out["ok"], out
    assert exact_state(root) == {"a": ("file", 0o644, b"old\n"), "b": ("file", 0o644, b"old\n")}


def test_a_session_killed_as_it_appends_its_records_leaves_a_verifiable_stream(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A session killed inside the one ``write`` of a call's records (100 KB of arguments,
    cut at a page by the kill) leaves a last line without its newline. ``events verify``
    checked that part of a line as a record and called the log ``TAMPERED`` ("not a
    ringfence event record"), as for a forged line; a killed session is ``NOT SEALED``,
    the records before it verified, and ``--allow-open`` accepts it."""
    root = tmp_path / "ws"
    root.mkdir()
    events = tmp_path / "events.jsonl"
    args = ["--workspace", str(root), "--events", str(events), "--approve", "no", "--json"]
    main(["call", "write_file", "--args", json.dumps({"path": "a", "content": "a\n"}),
          "--posture", "allow-reversible", *args])  # fmt: skip
    assert json.loads(capsys.readouterr().out)["ok"]
    size = events.stat().st_size
    big = json.dumps({"path": "b", "content": "y" * 100_000})

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 16384, resource.RLIM_INFINITY))

    proc = subprocess.run(
        [sys.executable, "-c", _KILLED_PAST_LIMIT, "call", "write_file", "--args", big,
         "--posture", "ask", *args],
        env={**os.environ, "RINGFENCE_HOME": str(ringfence_home)}, preexec_fn=limit,
        capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode < 0, (proc.returncode, proc.stderr[-2000:])  # killed, by SIGXFSZ
    data = events.read_bytes()
    assert size + 4096 <= len(data) <= size + 16384 and not data.endswith(b"\n")
    assert sorted(os.listdir(root)) == ["a"]
    assert main(["events", "verify", str(events), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)["error"]["details"]["report"]
    assert report["tampered"] is False and report["unsealed_sessions"] == 1, report
    assert report["records"] == data.count(b"\n"), report
    assert any("cut mid-write" in p for p in report["problems"]), report
    assert main(["events", "verify", str(events), "--allow-open", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["result"]
    assert report["intact"] and not report["tampered"], report


@contextlib.contextmanager
def _read_only(where: Path) -> Iterator[None]:
    """``where`` bind-mounted read-only onto itself (mounting needs root: skipped otherwise)."""
    made = subprocess.run(["mount", "--bind", str(where), str(where)], capture_output=True,
                          check=False)  # fmt: skip
    if made.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {made.stderr.decode(errors='replace')}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(where)], check=True,
                       capture_output=True)  # fmt: skip
        yield
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@needs_bwrap
def test_a_read_only_checkpoint_store_is_named_and_nothing_is_written(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The checkpoint store on a read-only mount: ``write_file`` over a file whose old bytes
    the store holds answered "write_file failed: OSError: [Errno 30] Read-only file system"
    (a ``tool_error`` naming nothing), ``run_shell`` the same of a pack's temporary file.
    Each is now ``unwritable`` naming the store, and nothing of it reaches the workspace."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "f").write_text("old\n")
    for content in ("new\n", "old\n"):  # the store holds both images
        out = _cli(capsys, root, "call", "write_file", "--args",
                   json.dumps({"path": "f", "content": content}))  # fmt: skip
        assert out["ok"], out
    before = exact_state(root)
    calls = [
        ("write_file", {"path": "f", "content": "new\n"}),
        ("write_file", {"path": "d/g", "content": "g\n"}),
        ("edit_file", {"path": "f", "old": "old", "new": "x"}),
        ("run_shell", {"command": "echo z > z; rm f"}),
    ]
    with _read_only(ringfence_home / "checkpoints"):
        for tool, args in calls:
            out = _cli(capsys, root, "call", tool, "--args", json.dumps(args))
            assert not out["ok"], (tool, out)
            assert out["error"]["code"] == "unwritable", (tool, out)
            assert "checkpoint store" in out["error"]["message"], (tool, out)
            assert exact_state(root) == before, tool
        out = _cli(capsys, root, "undo")
        assert out["error"]["code"] == "unwritable", out
        assert exact_state(root) == before
    out = _cli(capsys, root, "undo", "--last", "2")  # writable again: all there, undoable
    assert out["ok"], out
    assert exact_state(root) == {"f": ("file", 0o644, b"old\n")}


@needs_strace
@needs_bwrap
def test_a_plan_apply_killed_as_it_marks_a_call_never_shows_it_applied_unnamed(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``plan apply`` killed as it writes a call's ledger entry (made, then written): the
    entry was left empty, which reads as "applied (unknown)" with no call and no end, so
    ``plan show`` said the call was applied, named nothing, and ``plan apply`` never ran it:
    a call that never ran, spent for good. The entry now appears whole or not at all, so
    the call is either still to apply or named as never ended."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a").write_text("old\n")
    plan = tmp_path / "plan.json"
    out = _cli(capsys, root, "call", "write_file", "--args",
               json.dumps({"path": "a", "content": "new\n"}), "--dry-run", str(plan))  # fmt: skip
    assert out["ok"], out
    assert main(["plan", "show", str(plan), "--json"]) == 0
    (call,) = (c["call_id"] for c in json.loads(capsys.readouterr().out)["result"]["calls"])
    ledger = ringfence_home / "plans" / "applied" / call
    ledger.parent.mkdir(parents=True, exist_ok=True)
    # Killed at the first write to, or link onto, the call's ledger entry.
    killed_at(root, ringfence_home, ["plan", "apply", str(plan)], "write,link,linkat", ledger)
    assert (root / "a").read_text() == "old\n"
    assert main(["plan", "show", str(plan), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["result"]
    assert call not in shown["applied"] or call in shown["unended"], shown
    out = _cli(capsys, root, "plan", "apply", str(plan))
    if call not in shown["applied"]:  # still to apply: it runs now
        assert out["ok"], out
        assert (root / "a").read_text() == "new\n"


@needs_strace
def test_a_session_killed_as_it_makes_the_plan_key_leaves_no_forgeable_key(
    tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first dry run killed as it writes the plan key (made, then written): the key file
    was left empty, and every later session used it, the empty key, to sign and check
    plans, so anyone could write a plan ``plan apply`` runs (its MAC an HMAC under no
    secret). The key now appears whole or not at all, and a key file of the wrong size is
    refused, never used."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a").write_text("old\n")
    key = ringfence_home / "keys" / "plan.key"
    key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    stage = ["call", "write_file", "--args", json.dumps({"path": "a", "content": "new\n"}),
             "--dry-run", str(tmp_path / "first.json")]  # fmt: skip
    killed_at(root, ringfence_home, stage, "write,link,linkat", key)
    plan = tmp_path / "plan.json"
    out = _cli(capsys, root, "call", "write_file", "--args",
               json.dumps({"path": "a", "content": "new\n"}), "--dry-run", str(plan))  # fmt: skip
    assert out["ok"], out
    # The forger's plan: another content, signed with the empty key.
    data = json.loads(plan.read_text())
    data["calls"][0]["arguments"]["content"] = "forged\n"
    body = {k: data[k] for k in ("ringfence_plan", "roots", "calls", "applied")}
    data["mac"] = hmac.new(b"", canonical_json(body), hashlib.sha256).hexdigest()
    plan.write_text(json.dumps(data))
    out = _cli(capsys, root, "plan", "apply", str(plan))
    assert not out["ok"] and out["error"]["code"] == "invalid_arguments", out
    assert (root / "a").read_text() == "old\n"
    assert len(key.read_bytes()) == 32
    # A key file cut short some other way (an older version killed) is refused, not used.
    key.write_bytes(b"")
    out = _cli(capsys, root, "call", "write_file", "--args",
               json.dumps({"path": "a", "content": "x\n"}), "--dry-run", str(tmp_path / "p2.json"))  # fmt: skip
    assert not out["ok"] and str(key) in out["error"]["message"], out
    assert not (tmp_path / "p2.json").exists()

"""The crash oracle: SIGKILL at random points while ringfence writes the workspace.

Each operation that writes the workspace — a shell command's merge, ``undo``,
``plan apply`` and a checkpointed ``write_file`` — runs as the real CLI in a
process of its own and is killed at a random moment after its journal says it
began (so most kills land inside the merge). Then the next start
(``ringfence checkpoints list``) must leave the tree exactly the before tree or
exactly the after tree (every byte, mode and link), no ringfence file in the
workspace, no journal of the dead process, a ``checkpoints list`` that says
what is true, and ``undo`` working from there.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tree_helpers import exact_state as state

from ringfence.workspace import Workspace
from ringfence.workspace.changes._store import workspace_id

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
    pytest.mark.slow,
]

KILLS = int(os.environ.get("RINGFENCE_CRASH_KILLS", "8"))
# 600 rewrites, 100 creations, 50 deletions, 50 renames into a new directory, a chmod.
COMMAND = (
    "for i in $(seq 1 600); do echo new-$i > r/f$i; done; "
    "mkdir -p made && for i in $(seq 1 100); do echo made-$i > made/m$i; done; "
    "for i in $(seq 1 50); do rm d/g$i; done; "
    "mkdir ren2 && for i in $(seq 1 50); do mv m/h$i ren2/h$i; done; chmod 600 r/f1"
)


def make_tree(ws: Path) -> None:
    for sub, name, count in (("r", "f", 600), ("d", "g", 50), ("m", "h", 50)):
        (ws / sub).mkdir(parents=True)
        for i in range(1, count + 1):
            (ws / sub / f"{name}{i}").write_text(f"old-{sub}-{i}\n")
    (ws / "link").symlink_to("r/f1")


class Env:
    """A workspace and a RINGFENCE_HOME of their own, and the CLI run against them."""

    def __init__(self, base: Path) -> None:
        self.ws = base / "ws"
        self.home = base / "home"
        self.ws.mkdir(parents=True)
        self.home.mkdir()
        self.env = {**os.environ, "RINGFENCE_HOME": str(self.home)}
        self.env.pop("RINGFENCE_WORKSPACE_ROOTS", None)
        self.args = ["--workspace", str(self.ws), "--approve", "no", "--json"]

    def argv(self, *words: str) -> list[str]:
        return [sys.executable, "-m", "ringfence", *words]

    def run(self, *words: str, posture: str = "allow-reversible") -> dict[str, Any]:
        out = subprocess.run(
            self.argv(*words, *self.args, "--posture", posture),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return json.loads(out.stdout)

    def listing(self) -> list[dict[str, Any]]:
        out = subprocess.run(
            self.argv("checkpoints", "list", "--workspace", str(self.ws), "--json"),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return json.loads(out.stdout)["result"]

    @property
    def journal(self) -> Path:
        with Workspace([self.ws]) as ws:
            return self.home / "checkpoints" / workspace_id(ws) / "journal"

    def journals(self) -> set[str]:
        try:
            return set(os.listdir(self.journal))
        except FileNotFoundError:
            return set()

    def kill_during(self, words: list[str], delay: float) -> tuple[bool, float]:
        """Run the CLI; ``delay`` seconds after its journal appears, SIGKILL it.
        (whether it was killed before it ended, seconds from journal to exit if not)."""
        known = self.journals()
        proc = subprocess.Popen(
            self.argv(*words, *self.args, "--posture", "allow-reversible"),
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        began = None
        while proc.poll() is None:
            if self.journals() - known:
                began = time.monotonic()
                break
            time.sleep(0.0002)
        if began is None:  # ended before its journal was seen: nothing to kill
            return False, 0.0
        deadline = began + delay
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.0005)
        killed = proc.poll() is None
        if killed:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        return killed, time.monotonic() - began


def assert_recovered(env: Env, before: dict, after: dict) -> tuple[str, list[dict[str, Any]]]:
    """The next start leaves exactly ``before`` or ``after``; which one."""
    listed = env.listing()  # the next start: recovery runs here
    now = state(env.ws)
    assert now in (before, after), sorted(
        k
        for k in set(now) | set(before) | set(after)
        if now.get(k) not in (before.get(k), after.get(k))
    )[:10]
    assert not [p for p in env.ws.rglob("*") if p.name.startswith((".ringfence-", ".rf-rm-"))]
    assert env.journals() == set(), env.journals()  # the dead process's journal is gone
    return ("before" if now == before else "after"), listed


def reference(tmp_path: Path, setup: Any, op: Any) -> tuple[dict, dict, float]:
    """Before and after states of ``op`` run whole, and how long its journal was open."""
    env = Env(tmp_path / "reference")
    make_tree(env.ws)
    setup(env)
    before = state(env.ws)
    killed, took = env.kill_during(op(env), delay=1e9)
    assert not killed
    after = state(env.ws)
    assert after != before
    return before, after, took


def crash_loop(tmp_path: Path, setup: Any, op: Any, check: Any) -> dict[str, int]:
    """``op(env)``: the CLI words of the operation killed; ``setup(env)`` runs before it."""
    before, after, took = reference(tmp_path, setup, op)
    outcomes = {"before": 0, "after": 0, "killed": 0}
    rng = random.Random(int(os.environ.get("RINGFENCE_CRASH_SEED", "1")))
    limit = took * 1.1
    for i in range(KILLS):
        env = Env(tmp_path / f"kill{i}")
        make_tree(env.ws)
        setup(env)
        assert state(env.ws) == before
        killed, _ = env.kill_during(op(env), delay=rng.uniform(0, limit))
        outcomes["killed"] += killed
        if not killed:  # the machine ran faster than the reference: aim earlier
            limit *= 0.6
        which, listed = assert_recovered(env, before, after)
        outcomes[which] += 1
        check(env, which, listed, before, after)
        # The next session swept the spool (outputs, overlay uppers) the killed one left.
        assert env.run("call", "list_directory", "--args", '{"path": "."}')["ok"]
        spool = env.home / "spool"
        assert not spool.exists() or not [p for p in spool.iterdir() if (p / ".alive").exists()]
    assert outcomes["killed"] >= KILLS // 2, outcomes  # most kills landed inside
    return outcomes


def test_a_killed_merge_is_rolled_back_whole(tmp_path: Path) -> None:
    def check(env: Env, which: str, listed: list, before: dict, after: dict) -> None:
        applied = [s for s in listed if not s["staged"]]
        if which == "after":
            assert len(applied) == 1 and applied[0]["tool"] == "run_shell"
            assert env.run("undo", posture="allow-reversible")["ok"]
            assert state(env.ws) == before
        else:  # rolled back: the command's set is kept, staged, and applies whole
            assert applied == []
            staged = [s for s in listed if s["staged"]]
            if staged:
                out = env.run(
                    "call", "apply_changes", "--args", json.dumps({"id": staged[0]["id"]})
                )
                assert out["ok"], out
                assert state(env.ws) == after

    shell = ["call", "run_shell", "--args", json.dumps({"command": COMMAND})]
    crash_loop(tmp_path, lambda env: None, lambda env: shell, check)


def test_a_killed_undo_is_rolled_back_whole(tmp_path: Path) -> None:
    def setup(env: Env) -> None:
        out = env.run("call", "run_shell", "--args", json.dumps({"command": COMMAND}))
        assert out["ok"], out

    def check(env: Env, which: str, listed: list, before: dict, after: dict) -> None:
        # "before" is the command's result (the undo rolled back), "after" the first tree.
        if which == "before":
            assert [s for s in listed if s["tool"] == "undo"] == []  # no phantom undo
            assert env.run("undo", posture="allow-reversible")["ok"]
            assert state(env.ws) == after
        else:  # the undo happened: it is listed, and can itself be undone
            undone = [s for s in listed if s["tool"] == "undo"]
            assert len(undone) == 1
            out = env.run("undo", undone[0]["id"], posture="allow-reversible")
            assert out["ok"], out
            assert state(env.ws) == before

    crash_loop(tmp_path, setup, lambda env: ["undo"], check)


def test_a_killed_plan_apply_is_rolled_back_whole(tmp_path: Path) -> None:
    def setup(env: Env) -> None:
        plan = env.ws.parent / "plan.json"
        out = env.run(
            "call", "run_shell", "--args", json.dumps({"command": COMMAND}), "--dry-run", str(plan)
        )
        assert out["ok"], out

    def check(env: Env, which: str, listed: list, before: dict, after: dict) -> None:
        if which == "after":
            assert env.run("undo", posture="allow-reversible")["ok"]
            assert state(env.ws) == before

    crash_loop(
        tmp_path, setup, lambda env: ["plan", "apply", str(env.ws.parent / "plan.json")], check
    )


def test_a_killed_write_file_leaves_no_phantom_set(tmp_path: Path) -> None:
    content = tmp_path / "args.json"
    content.write_text(json.dumps({"path": "big.txt", "content": "x" * (32 << 20)}))

    def check(env: Env, which: str, listed: list, before: dict, after: dict) -> None:
        written = [s for s in listed if s["tool"] == "write_file"]
        assert len(written) == (
            1 if which == "after" else 0
        )  # a set only for a write that happened
        if which == "after":
            assert env.run("undo", posture="allow-reversible")["ok"]
            assert state(env.ws) == before

    write = ["call", "write_file", "--args", f"@{content}"]
    crash_loop(tmp_path, lambda env: None, lambda env: write, check)

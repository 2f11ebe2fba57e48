"""The cost ``run_shell``'s git metadata check adds to every command (issue 11, escape 1).

Per command the tool scans the roots before the command and again after it,
then compares (``scan_git_metadata`` + ``enforce_git_metadata``); on docker
the second scan also ``lstat``s every file for setuid/setgid bits. Measured
over a generated tree against a bare ``os.walk`` of the same tree (names
only), interleaved. Goal (local): within 3x that walk — the check walks the
tree twice (measured on the reference machine: about 14 ms per command for
10,000 files). The docker rows add an ``lstat`` per file (informational).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

from ringfence.workspace import enforce_git_metadata, scan_git_metadata

from ._harness import SyncArm, interleave_blocking
from ._suite import Row, Scenario

GOAL_RATIO = 3.0
GIT_ENV = {
    "GIT_AUTHOR_NAME": "b",
    "GIT_AUTHOR_EMAIL": "b@example.com",
    "GIT_COMMITTER_NAME": "b",
    "GIT_COMMITTER_EMAIL": "b@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def _tree(root: Path, files: int) -> None:
    for d in range(files // 100):
        sub = root / f"d{d:03}"
        sub.mkdir()
        for f in range(100):
            (sub / f"f{f:03}.txt").write_text(f"{d} {f}\n")


def _git(root: Path, *args: str) -> None:
    env = {**os.environ, **GIT_ENV, "HOME": str(root.parent)}
    subprocess.run(["git", "-C", str(root), *args], check=True, env=env, capture_output=True)


def _walk(root: Path) -> None:
    for _ in os.walk(root):
        pass


async def run(quick: bool) -> list[Row]:
    files, rounds = (2000, 5) if quick else (10000, 15)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="ringfence-bench-") as tmp:
        root = Path(tmp) / "ws"
        root.mkdir()
        _tree(root, files)
        _git(root, "init", "-q")
        _git(root, "config", "gc.auto", "0")  # keep the loose objects for the second row
        quarantine = Path(tmp) / "quarantine"
        roots = [root]

        def check(setid: bool) -> None:
            since = time.time_ns()
            before = scan_git_metadata(roots)
            after = scan_git_metadata(roots, since=since, setid=setid)
            enforce_git_metadata(before, after, quarantine)

        for label in ("fresh .git", f"{files:,} loose objects"):
            if "loose" in label:
                _git(root, "add", "-A")
                _git(root, "commit", "-qm", "all")
            s = interleave_blocking(
                [
                    SyncArm("os.walk", lambda: _walk(root)),
                    SyncArm("local", lambda: check(False)),
                    SyncArm("docker", lambda: check(True)),
                ],
                rounds=rounds,
                warmup=1,
            )
            note = {"files": files, "git": label}
            local = s["local"]
            rows.append(
                Row(
                    "gitscan",
                    f"git check per command, {files:,} files, {label} (local)",
                    local,
                    s["os.walk"],
                    f"within {GOAL_RATIO:g}x os.walk",
                    local.median / s["os.walk"].median < GOAL_RATIO,
                    note,
                )
            )
            rows.append(
                Row(
                    "gitscan",
                    f"git check per command, {files:,} files, {label} (docker: + setid lstat)",
                    s["docker"],
                    s["os.walk"],
                    "informational",
                    None,
                    note,
                )
            )
    return rows


SCENARIO = Scenario(
    "gitscan",
    "run_shell's git metadata check per command vs a bare os.walk",
    f"within {GOAL_RATIO:g}x os.walk (local)",
    run,
)
SCENARIOS = [SCENARIO]

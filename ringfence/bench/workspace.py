"""Workspace overhead: confined resolve+open vs a plain open, grep_files vs bare ripgrep.

Goals (issue 3): resolve+open of a 6-deep path under 3x a plain
``os.open``; ``grep_files`` within 1.5x of bare ripgrep over a 20k-file tree.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import tempfile
from pathlib import Path

from ringfence.workspace._resolver import openat2_available
from ringfence.workspace._workspace import Workspace

from ._harness import SyncArm, interleave_blocking
from ._suite import Row, Scenario, Skip

OPEN_GOAL = 3.0
GREP_GOAL = 1.5
DEEP = ("d1", "d2", "d3", "d4", "d5", "file.txt")  # six components below the root
NEEDLE = "NEEDLE_7f3a"


async def run_open(quick: bool) -> list[Row]:
    rounds, n = (5, 500) if quick else (15, 2000)
    with tempfile.TemporaryDirectory(prefix="ringfence-bench-") as tmp:
        root = Path(tmp)
        (root / Path(*DEEP[:-1])).mkdir(parents=True)
        (root / Path(*DEEP)).write_text("x\n")
        absolute = str(root / Path(*DEEP))
        rel = "/".join(DEEP)
        fast = Workspace([root])
        walk = Workspace([root])
        walk.use_openat2 = False
        try:
            arms = [
                SyncArm("os.open", lambda: os.close(os.open(absolute, os.O_RDONLY)), n),
                SyncArm("open()", lambda: open(absolute, "rb").close(), n),
                SyncArm("component walk", lambda: os.close(walk.open_fd(rel)), n),
            ]
            if openat2_available():
                arms.append(SyncArm("openat2", lambda: os.close(fast.open_fd(rel)), n))
            s = interleave_blocking(arms, rounds=rounds, warmup=1)
        finally:
            fast.close()
            walk.close()
    plain, builtin, walked = s["os.open"], s["open()"], s["component walk"]
    confined = s.get("openat2", walked)
    ratio = confined.median / plain.median
    rows = [
        Row(
            "workspace-open",
            f"resolve+open, 6-deep path ({confined.name})",
            confined,
            plain,
            f"< {OPEN_GOAL:g}x os.open",
            ratio < OPEN_GOAL,
            {"ratio_vs_builtin_open": confined.median / builtin.median},
        )
    ]
    if confined is not walked:
        rows.append(
            Row(
                "workspace-open",
                "resolve+open, 6-deep path (component walk, no openat2)",
                walked,
                plain,
                "informational (kernels without openat2)",
                None,
            )
        )
    return rows


def make_tree(root: Path, files: int) -> int:
    """``files`` small Python-ish files in 20 x 25 x 2 directories; about 1% hold the needle."""
    rng = random.Random(3)
    per_dir = max(1, files // 1000)
    hits = 0
    for a in range(20):
        for b in range(25):
            for c in range(2):
                d = root / f"pkg{a}" / f"mod{b}" / f"part{c}"
                d.mkdir(parents=True)
                for i in range(per_dir):
                    lines = [
                        f"value_{j} = {rng.randint(0, 10**6)}  # some text here\n"
                        for j in range(40)
                    ]
                    if rng.random() < 0.01:
                        lines.insert(rng.randrange(40), f"print('{NEEDLE}')\n")
                        hits += 1
                    (d / f"file{i}.py").write_text("".join(lines))
    return hits


async def run_grep(quick: bool) -> list[Row]:
    rg = shutil.which("rg")
    if rg is None:
        raise Skip("ripgrep (rg) is not on PATH: apt-get install ripgrep")
    rounds, files = (3, 2000) if quick else (7, 20000)
    scaled = "quick mode: 2,000-file tree, 3 rounds (full run: 20,000 files)" if quick else None
    with tempfile.TemporaryDirectory(prefix="ringfence-bench-") as tmp:
        root = Path(tmp)
        hits = make_tree(root, files)
        ws = Workspace([root])
        python_ws = Workspace([root])
        python_ws.ripgrep = None
        try:
            s = interleave_blocking(
                [
                    SyncArm(
                        "bare rg",
                        lambda: subprocess.run(
                            [rg, NEEDLE, str(root)], stdout=subprocess.PIPE, check=False
                        ),
                    ),
                    SyncArm("grep_files", lambda: ws.grep(NEEDLE, max_results=100)),
                    SyncArm("grep_files, all matches", lambda: ws.grep(NEEDLE, max_results=10000)),
                    SyncArm("python fallback", lambda: python_ws.grep(NEEDLE, max_results=100)),
                ],
                rounds=rounds,
                warmup=1,
            )
        finally:
            ws.close()
            python_ws.close()
    bare = s["bare rg"]
    grep = s["grep_files"]
    tree = {"files": files, "files_with_needle": hits}
    return [
        Row(
            "workspace-grep",
            f"grep_files over {files:,} files",
            grep,
            bare,
            f"within {GREP_GOAL:g}x bare rg",
            grep.median / bare.median <= GREP_GOAL,
            {**tree, "note": scaled} if scaled else tree,
        ),
        Row(
            "workspace-grep",
            f"grep_files, all matches, {files:,} files",
            s["grep_files, all matches"],
            bare,
            "informational",
            None,
            tree,
        ),
        Row(
            "workspace-grep",
            f"grep_files without rg (pure Python), {files:,} files",
            s["python fallback"],
            bare,
            "informational (hosts without rg)",
            None,
            tree,
        ),
    ]


OPEN = Scenario(
    "workspace-open", "confined resolve+open vs plain open", f"< {OPEN_GOAL:g}x os.open", run_open
)
GREP = Scenario(
    "workspace-grep",
    "grep_files vs bare ripgrep over a 20k-file tree",
    f"within {GREP_GOAL:g}x bare rg",
    run_grep,
)
SCENARIOS = [OPEN, GREP]

"""Workspace overhead: confined resolve+open vs a plain open, grep_files vs bare ripgrep.

Run as ``python -m benchmarks.workspace`` (``--quick`` for a smaller run). A and
B are interleaved within every round so machine noise hits both alike; the
report gives per-call medians over rounds and their ratios.

Goals (issue 3): resolve+open of a 6-deep path under 3x a plain open;
grep_files within 1.5x of bare ripgrep over a 20k-file tree.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ringfence.workspace import Workspace, openat2_available

DEEP = ("d1", "d2", "d3", "d4", "d5", "file.txt")  # six components below the root
NEEDLE = "NEEDLE_7f3a"


def per_call(fn: Callable[[], None], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n


def interleave(cases: dict[str, Callable[[], None]], rounds: int, n: int) -> dict[str, float]:
    """Median seconds per call of each case; the order rotates every round."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    names = list(cases)
    for name in names:  # warm up
        per_call(cases[name], max(1, n // 10))
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            samples[name].append(per_call(cases[name], n))
    return {name: statistics.median(v) for name, v in samples.items()}


def bench_open(base: Path, rounds: int, n: int) -> dict[str, float]:
    root = base / "open-root"
    (root / Path(*DEEP[:-1])).mkdir(parents=True)
    (root / Path(*DEEP)).write_text("x\n")
    absolute = str(root / Path(*DEEP))
    rel = "/".join(DEEP)
    fast = Workspace([root])
    walk = Workspace([root])
    walk.use_openat2 = False

    def plain_os_open() -> None:
        os.close(os.open(absolute, os.O_RDONLY))

    def plain_builtin_open() -> None:
        open(absolute, "rb").close()

    def confined_openat2() -> None:
        os.close(fast.open_fd(rel))

    def confined_walk() -> None:
        os.close(walk.open_fd(rel))

    cases = {"os.open": plain_os_open, "open()": plain_builtin_open, "walk": confined_walk}
    if openat2_available():
        cases["openat2"] = confined_openat2
    try:
        return interleave(cases, rounds, n)
    finally:
        fast.close()
        walk.close()


def make_tree(root: Path, files: int) -> int:
    """``files`` small Python-ish files in 20 x 25 x 2 directories; about 1% hold the needle."""
    rng = random.Random(3)
    per_dir = max(1, files // 1000)
    made = hits = 0
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
                    made += 1
    return hits


def bench_grep(base: Path, rounds: int, files: int) -> dict[str, float]:
    rg = shutil.which("rg")
    if rg is None:
        raise SystemExit("ripgrep (rg) is needed for the grep benchmark")
    root = base / "grep-root"
    root.mkdir()
    make_tree(root, files)
    ws = Workspace([root])
    python_ws = Workspace([root])
    python_ws.ripgrep = None

    def bare_rg() -> None:
        subprocess.run([rg, NEEDLE, str(root)], stdout=subprocess.PIPE, check=False)

    def grep_default() -> None:
        ws.grep(NEEDLE, max_results=100)

    def grep_all() -> None:
        ws.grep(NEEDLE, max_results=10000)

    cases = {
        "bare rg": bare_rg,
        "grep_files": grep_default,
        "grep_files (all)": grep_all,
        "python fallback": lambda: python_ws.grep(NEEDLE, max_results=100),
        "python fallback (all)": lambda: python_ws.grep(NEEDLE, max_results=10000),
    }
    try:
        return interleave(cases, rounds, 1)
    finally:
        ws.close()
        python_ws.close()


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and a 2k-file tree")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    rounds, n, files = (5, 500, 2000) if args.quick else (15, 2000, 20000)
    with tempfile.TemporaryDirectory(prefix="ringfence-bench-") as tmp:
        base = Path(tmp)
        opened = bench_open(base, rounds, n)
        grepped = bench_grep(base, max(5, rounds // 2), files)
    baseline = opened["os.open"]
    confined = opened.get("openat2", opened["walk"])
    report: dict[str, object] = {
        "open_us": {k: round(v * 1e6, 2) for k, v in opened.items()},
        "open_ratio": round(confined / baseline, 2),
        "open_ratio_vs_builtin_open": round(confined / opened["open()"], 2),
        "walk_ratio": round(opened["walk"] / baseline, 2),
        "grep_ms": {k: round(v * 1e3, 1) for k, v in grepped.items()},
        "grep_ratio": round(grepped["grep_files"] / grepped["bare rg"], 2),
        "grep_all_ratio": round(grepped["grep_files (all)"] / grepped["bare rg"], 2),
        "files": files,
        "goals": {"open_ratio": 3.0, "grep_ratio": 1.5},
    }
    if args.json:
        print(json.dumps(report))
        return report
    print(f"resolve+open of a 6-deep path (median per call, {rounds} interleaved rounds of {n})")
    for name, us in report["open_us"].items():  # type: ignore[union-attr]
        print(f"  {name:<10} {us:8.2f} us")
    print(
        f"  confined / os.open = {report['open_ratio']}x (goal < 3x); "
        f"/ open() = {report['open_ratio_vs_builtin_open']}x; walk only = {report['walk_ratio']}x"
    )
    print(f"grep over {files} files (median per call)")
    for name, ms in report["grep_ms"].items():  # type: ignore[union-attr]
        print(f"  {name:<22} {ms:8.1f} ms")
    print(
        f"  grep_files / bare rg = {report['grep_ratio']}x (goal < 1.5x); "
        f"all matches = {report['grep_all_ratio']}x"
    )
    return report


if __name__ == "__main__":
    main()

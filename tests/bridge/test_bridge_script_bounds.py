"""What a script's source can cost before it runs: its size and its depth, through create_kernel.

Each test performs the attack through ``kernel.invoke("run_tool_script", ...)`` of a kernel
made by ``create_kernel`` (real runner subprocesses, a real events file) and asserts the
refusal, naming the field or limit, and the absence of any effect.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from cli_helpers import ringfence_process
from kernel_helpers import event_records

from ringfence._embed import create_kernel
from ringfence.bridge._tool import MAX_SCRIPT_CHARS, SCRIPT_TOOL
from ringfence.runtime import ApprovalAnswer, ScriptedApprover

YES = ScriptedApprover(lambda r: ApprovalAnswer.once())


async def test_an_oversize_script_is_refused_before_it_is_scanned_recorded_or_run(
    tmp_path: Path,
) -> None:
    """A script over MAX_SCRIPT_CHARS: refused naming ``script``, before the host parses it
    for credentials and before the ``proposed`` record holds it; nothing of it runs.

    Until 2026-12-07 the bound was the bridge's 16 MiB frame, reached only after the call
    was recorded whole: a 15 MB script held the host 280 s at 8 GB, and one under the
    frame limit ran.
    """
    workspace, log = tmp_path / "ws", tmp_path / "events.jsonl"
    workspace.mkdir()
    padding = "#" + "a" * (2 * 1024 * 1024) + "\n"  # 2 MiB: far over the bound, under a frame
    script = 'tools.write_file(path="made.txt", content="x")\n' + padding
    assert len(script) > MAX_SCRIPT_CHARS
    async with create_kernel(roots=[workspace], approver=YES, events_path=log) as kernel:
        outcome = await kernel.invoke(SCRIPT_TOOL, {"script": script})
    assert outcome.error is not None and outcome.error.code == "invalid_arguments"
    assert outcome.error.field == "script"
    assert f"{MAX_SCRIPT_CHARS:,}" in outcome.error.message
    assert not (workspace / "made.txt").exists()
    assert log.stat().st_size < 64 * 1024  # the source is not in the stream
    records = event_records(log)
    kinds = [r["kind"] for r in records]
    assert "script_started" not in kinds and "started" not in kinds
    proposed = next(r for r in records if r["kind"] == "proposed")
    assert isinstance(proposed["arguments"], str)
    assert proposed["arguments"].startswith("<not recorded:")


async def test_a_script_at_the_bound_still_runs(tmp_path: Path) -> None:
    """The bound is the schema's maxLength: a script of exactly that length runs."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    head = 'tools.write_file(path="made.txt", content="x")\n#'
    script = head + "a" * (MAX_SCRIPT_CHARS - len(head) - 1) + "\n"
    assert len(script) == MAX_SCRIPT_CHARS
    async with create_kernel(roots=[workspace], approver=YES) as kernel:
        outcome = await kernel.invoke(SCRIPT_TOOL, {"script": script})
    assert outcome.ok, outcome.error
    assert (workspace / "made.txt").read_text() == "x"


@pytest.mark.parametrize(
    "expression",
    [
        "-" * 2000 + "1",  # RestrictedPython's transformer recursed past the limit
        "1+" * 20000 + "1",  # CPython's compiler too
        "-" * 200_000 + "1",  # 200 KB: more memory than the run's limit, to compile
    ],
    ids=["unary-2000", "sum-20000", "unary-200000"],
)
async def test_a_script_too_deep_to_compile_is_a_compile_error_without_a_traceback(
    tmp_path: Path, expression: str
) -> None:
    """A short script whose syntax tree is deep: ``invalid_arguments`` naming ``script`` and
    why, never the runner's traceback (this host's file paths) as the tool's error.

    Until 2026-12-07 the runner died on it and the message was its traceback.
    """
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = 'tools.write_file(path="made.txt", content="x")\nx = ' + expression + "\n"
    async with create_kernel(roots=[workspace], approver=YES) as kernel:
        outcome = await kernel.invoke(SCRIPT_TOOL, {"script": script})
    assert outcome.error is not None
    assert outcome.error.code == "invalid_arguments", outcome.error.message[-500:]
    assert outcome.error.field == "script"
    assert re.search(r"too deeply|more memory", outcome.error.message)
    assert "Traceback" not in outcome.error.message
    assert "site-packages" not in str(outcome.error.to_dict())
    assert not (workspace / "made.txt").exists()


def _strict_json(text: str) -> object:
    """``text`` parsed as JSON proper: ``NaN``/``Infinity`` are Python's extension."""

    def refuse(constant: str) -> object:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_a_result_holding_nan_or_infinity_is_strict_json_at_the_cli(tmp_path: Path) -> None:
    """``run-script --json`` prints JSON a strict parser reads when the script's result holds
    a non-finite number: the result comes as its text (a result JSON cannot carry).

    Until 2026-12-07 the output held bare ``Infinity`` and ``NaN``.
    """
    script = tmp_path / "stats.py"
    script.write_text('import math\nresult = {"mean": math.nan, "top": math.inf, "n": 2}\n')
    posture = [k for k in os.environ if k.startswith("RINGFENCE_POSTURE")]
    done = ringfence_process(
        "run-script", str(script), "--approve", "yes", "--json", "--timeout", "30",
        cwd=tmp_path, unset=posture,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    parsed = _strict_json(done.stdout)
    assert isinstance(parsed, dict)
    assert parsed["result"]["result"] == "{'mean': nan, 'top': inf, 'n': 2}"


def _tree_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


async def test_a_scripts_calls_cannot_fill_the_disk_with_spool_files(tmp_path: Path) -> None:
    """Each call's spool is capped, but a script multiplies calls: 20 reads of a 2.7 MB file
    in one ``parallel`` would spool 54 MB. The session's spool quota bounds them together;
    every call still answers (head and tail), and the marker says the quota is used up.

    Until 2026-12-07 there was no such bound: 200 reads of a 6.7 MB file wrote 1.3 GB in 22 s,
    and a run may make 10,000 calls.
    """
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "big.txt").write_text((os.urandom(1024).hex() + "\n") * 1300)  # ~2.7 MB
    quota = 8 * 1024 * 1024
    script = (
        'r = parallel(tools.read_file(path="big.txt") for _ in range(20))\n'
        'result = {"n": len(r), "quota": sum(1 for x in r if "spool quota" in str(x))}\n'
    )
    async with create_kernel(roots=[workspace], approver=YES, spool_quota_bytes=quota) as kernel:
        outcome = await kernel.invoke(SCRIPT_TOOL, {"script": script, "timeout_seconds": 120})
        spooled = _tree_bytes(kernel.spool_dir) if kernel.spool_dir.exists() else 0
    assert outcome.ok, outcome.error
    assert outcome.value["result"]["n"] == 20
    assert all(c["ok"] for c in outcome.value["calls"])
    assert outcome.value["result"]["quota"] >= 1  # the markers past the quota say so
    assert spooled <= quota + 64 * 1024  # trailers of a few hundred bytes on top


async def test_a_batch_whose_replies_exceed_one_frame_gets_every_reply(tmp_path: Path) -> None:
    """300 reads of a 100 KB file in one ``parallel``: about 20 MB of replies, more than one
    16 MiB frame, go in several frames and the script gets each one.

    Until 2026-12-07 that road raised TypeError on the host (``len`` of the frame's size):
    the run failed as "ExceptionGroup: Exceptions from Trio nursery", its calls already run.
    """
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "mid.txt").write_text((os.urandom(512).hex() + "\n") * 100)  # ~100 KB
    script = (
        'r = parallel(tools.read_file(path="mid.txt") for _ in range(300))\n'
        "result = [len(r), min(len(str(x)) for x in r)]\n"
    )
    async with create_kernel(roots=[workspace], approver=YES) as kernel:
        outcome = await kernel.invoke(SCRIPT_TOOL, {"script": script, "timeout_seconds": 120})
    assert outcome.ok, outcome.error
    assert outcome.value["result"][0] == 300
    assert outcome.value["result"][1] > 60_000  # each a whole capped reply


def test_a_large_batchs_results_are_not_all_held_by_the_host(tmp_path: Path) -> None:
    """2,500 capped reads in one ``parallel`` through ``ringfence run-script``: the host sends
    replies as calls end, so its memory stays far below the batch's results (160 MB).

    Until 2026-12-07 the host held every reply until the batch ended: 1.6 GB resident for
    this batch, and a batch may have 10,000 calls.
    """
    import subprocess
    import sys
    import time

    import psutil

    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "mid.txt").write_text((os.urandom(512).hex() + "\n") * 200)  # ~200 KB
    script = tmp_path / "batch.py"
    script.write_text(
        'r = parallel(tools.read_file(path="mid.txt") for _ in range(2500))\n'
        "result = [len(r), sum(len(str(x)) for x in r)]\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGFENCE_POSTURE")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ringfence", "run-script", str(script), "--approve", "yes",
         "--json", "--timeout", "300"],
        cwd=workspace, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    host, peak = psutil.Process(proc.pid), 0
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            peak = max(peak, host.memory_info().rss)
        except psutil.Error:
            break
        time.sleep(0.05)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    result = json.loads(out)["result"]["result"]
    assert result[0] == 2500 and result[1] > 2500 * 60_000  # every reply came, whole
    assert peak < 500 * 1024 * 1024, f"the host peaked at {peak >> 20} MiB"


def _run_script_cli(tmp_path: Path, file: str, stdin: bytes | None = None) -> tuple[int, str]:
    """``ringfence run-script FILE --approve yes --json`` as a real process under a 2 GiB
    address-space limit (an unbounded read fails there instead of filling the machine)."""
    import resource
    import subprocess
    import sys

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGFENCE_POSTURE")}
    done = subprocess.run(
        [sys.executable, "-m", "ringfence", "run-script", file, "--approve", "yes", "--json"],
        input=stdin,
        capture_output=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
        preexec_fn=limit,
        check=False,
    )
    return done.returncode, done.stdout.decode("utf-8", "replace")


@pytest.mark.parametrize("source", ["/dev/zero", "stdin"])
def test_an_endless_script_file_is_refused_before_it_is_read_whole(
    source: str, tmp_path: Path
) -> None:
    """``run-script /dev/zero`` (or an endless pipe on stdin) is refused naming FILE and the
    bound, having read at most that much; no runner starts, nothing is written.

    Until 2026-12-07 the CLI read FILE whole before the kernel's bound on a script's length
    applied: ``run-script /dev/zero`` held 1.5 GB after 6 s and kept growing.
    """
    from ringfence.cli._run_script import MAX_SCRIPT_FILE_BYTES

    workspace = tmp_path / "ws"
    workspace.mkdir()
    head = b'tools.write_file(path="made.txt", content="x")\n#'
    if source == "stdin":  # finite here, but past the bound
        code, out = _run_script_cli(workspace, "-", head + b"a" * (MAX_SCRIPT_FILE_BYTES + 16))
    else:
        code, out = _run_script_cli(workspace, source)
    body = json.loads(out)
    assert code != 0 and body["ok"] is False, body
    assert body["error"]["code"] == "invalid_arguments", body
    assert body["error"]["field"] == "FILE", body
    assert f"{MAX_SCRIPT_FILE_BYTES:,} bytes" in body["error"]["message"], body
    assert not (workspace / "made.txt").exists()

"""Everyday latency (issue 20): the CLI's start, the file tools' thread hop, serve's file calls.

* ``cli-start``: ``ringfence call read_file --workspace DIR`` and ``ringfence
  --version``/``--help`` as whole processes against the interpreter's floor,
  ``python -I -c pass`` (goal: the call within 120 ms), interleaved; plus the
  floor the call cannot go below, ``import trio`` and one ``trio.run``
  (informational: the verb runs the kernel on trio).
* ``workspace-hop``: one ``trio.to_thread.run_sync`` hop against the confined
  reads and listings that now run inline (informational; the thresholds in
  ``ringfence/workspace/_file_tools.py`` come from it).
* ``serve-files``: ``read_file`` of a small file and ``list_directory`` of a
  21-entry directory over MCP stdio, through ``ringfence serve`` (Gate,
  confinement and events on) against a bare Python SDK server returning the
  same bytes (``benchmarks/peers/sdk_files.py``; goal: within 1.1x) and the
  reference node ``server-filesystem`` (goal: within 1.3x; skipped without
  ``tests/npm``). All on long-lived connections, interleaved.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio
from mcp import Client, StdioServerParameters, stdio_client

from ringfence.workspace._workspace import Workspace

from ._harness import Arm, Samples, SyncArm, interleave, interleave_blocking
from ._source import ROOT
from ._suite import Row, Scenario

SDK_PEER = Path(__file__).resolve().parent / "peers" / "sdk_files.py"
NODE_FS = ROOT / "tests" / "npm" / "node_modules" / ".bin" / "mcp-server-filesystem"
CLI_GOAL_S = 0.120
SDK_GOAL = 1.1
NODE_GOAL = 1.3
SMALL_TEXT = "".join(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(20))


def _ringfence_command() -> list[str]:
    """The installed entry point when there is one (what a user runs), else ``-m ringfence``."""
    script = Path(sys.executable).parent / "ringfence"
    return [str(script)] if script.exists() else [sys.executable, "-m", "ringfence"]


# -- cli-start ---------------------------------------------------------------------------

# What any verb that runs the kernel pays before ringfence's own code: trio's import and loop.
TRIO = "import trio; trio.run(trio.sleep, 0)"
ARGS = '{"path": "f.txt"}'


async def run_cli(quick: bool) -> list[Row]:
    rounds = 5 if quick else 15
    with tempfile.TemporaryDirectory(prefix="ringfence-bench-") as scratch:
        # The workspace and the home side by side: a home inside a root is refused.
        tmp = str(Path(scratch, "ws"))
        Path(tmp).mkdir()
        Path(tmp, "f.txt").write_text("hello\n")
        env = {**os.environ, "RINGFENCE_HOME": str(Path(scratch, "home"))}
        rf = _ringfence_command()

        def runner(argv: list[str]) -> Any:
            def go() -> None:
                subprocess.run(argv, cwd=tmp, env=env, stdout=subprocess.DEVNULL, check=True)

            return go

        s = interleave_blocking(
            [
                SyncArm("python -I -c pass", runner([sys.executable, "-I", "-c", "pass"])),
                SyncArm(
                    "ringfence call read_file",
                    runner([*rf, "call", "read_file", "--args", ARGS, "--workspace", tmp]),
                ),
                SyncArm(
                    "python -I: import trio, trio.run", runner([sys.executable, "-I", "-c", TRIO])
                ),
                SyncArm("ringfence --version", runner([*rf, "--version"])),
                SyncArm("ringfence --help", runner([*rf, "--help"])),
            ],
            rounds=rounds,
            warmup=1,
        )
    floor = s["python -I -c pass"]
    call = s["ringfence call read_file"]
    note = {"load_average": os.getloadavg()}
    return [
        Row(
            "cli-start",
            "`ringfence call read_file` whole process",
            call,
            floor,
            f"<= {CLI_GOAL_S * 1000:g} ms",
            call.median <= CLI_GOAL_S,
            note,
        ),
        Row(
            "cli-start",
            "`ringfence --version`",
            s["ringfence --version"],
            floor,
            "near floor",
            None,
        ),
        Row("cli-start", "`ringfence --help`", s["ringfence --help"], floor, "near floor", None),
        Row(
            "cli-start",
            "`import trio` + one `trio.run` (the call's floor)",
            s["python -I: import trio, trio.run"],
            floor,
            "informational",
            None,
        ),
    ]


# -- workspace-hop -----------------------------------------------------------------------


async def run_hop(quick: bool) -> list[Row]:
    rounds, batch = (5, 100) if quick else (15, 200)
    with tempfile.TemporaryDirectory(prefix="ringfence-bench-") as tmp:
        root = Path(tmp)
        for size in (1 << 10, 64 << 10, 256 << 10, 1 << 20):
            (root / f"f{size}").write_text(("x" * 79 + "\n") * (size // 80))
        for n in (10, 100):
            (root / f"d{n}").mkdir()
            for i in range(n):
                (root / f"d{n}" / f"e{i:04d}").touch()
        ws = Workspace([root])
        try:

            def sync(fn: Any) -> Any:
                async def go() -> None:
                    fn()

                return go

            async def hop() -> None:
                await trio.to_thread.run_sync(lambda: None)

            arms = [
                Arm("to_thread hop", hop, batch),
                Arm(
                    "probe (O_PATH + fstat)",
                    sync(lambda: os.close(ws.open_fd("f1024", os.O_PATH))),
                    batch,
                ),
                *(
                    Arm(f"read {label}", sync(lambda s=size: ws.read_text(f"f{s}")), batch)
                    for label, size in (
                        ("1 KiB", 1 << 10),
                        ("64 KiB", 64 << 10),
                        ("256 KiB", 256 << 10),
                        ("1 MiB", 1 << 20),
                    )
                ),
                *(
                    Arm(f"list {n}", sync(lambda n=n: ws.list_dir(f"d{n}")), batch)
                    for n in (10, 100)
                ),
            ]
            s = await interleave(arms, rounds=rounds, warmup=1)
        finally:
            ws.close()
    hop_s = s["to_thread hop"]
    return [
        Row(
            "workspace-hop",
            f"{name} (inline) vs one thread hop",
            s[name],
            hop_s,
            "informational (inline below 1x)",
            None,
        )
        for name in s
        if name != "to_thread hop"
    ]


# -- serve-files -------------------------------------------------------------------------


def _tree(root: Path) -> None:
    (root / "small.txt").write_text(SMALL_TEXT)
    (root / "dir").mkdir()
    for i in range(21):
        (root / "dir" / f"entry-{i:02d}.txt").write_text("x\n")


async def run_serve(quick: bool) -> list[Row]:
    rounds, batch = (6, 20) if quick else (20, 50)
    node = NODE_FS.exists() and shutil.which("node") is not None
    with (
        tempfile.TemporaryDirectory(prefix="ringfence-bench-") as tmp,
        open(os.devnull, "w") as devnull,
    ):
        base = Path(tmp).resolve()
        root = base / "ws"
        root.mkdir()
        _tree(root)
        env = {**os.environ, "RINGFENCE_HOME": str(base / "home")}
        rf = _ringfence_command()
        servers = {
            "ringfence serve": StdioServerParameters(
                command=rf[0],
                args=[
                    *rf[1:],
                    "serve",
                    "--workspace",
                    str(root),
                    "--events",
                    str(base / "ev.jsonl"),
                ],
                env=env,
            ),
            "bare SDK server": StdioServerParameters(
                command=sys.executable, args=[str(SDK_PEER), str(root)], env=env
            ),
        }
        if node:
            servers["node server-filesystem"] = StdioServerParameters(
                command=str(NODE_FS), args=[str(root)], env=env
            )
        calls = {
            "read_file": {
                "node server-filesystem": ("read_text_file", {"path": str(root / "small.txt")}),
            },
            "list_directory": {
                "node server-filesystem": ("list_directory", {"path": str(root / "dir")}),
            },
        }
        ours = {"read_file": {"path": "small.txt"}, "list_directory": {"path": "dir"}}
        samples: dict[str, dict[str, Samples]] = {}
        cpu: dict[str, dict[str, float]] = {}  # tool -> server -> CPU seconds per call
        async with _clients(servers, devnull) as clients:
            procs = _server_processes(clients)
            for tool, args in ours.items():
                arms = []
                for name, client in clients.items():
                    remote, arguments = calls[tool].get(name, (tool, args))

                    async def call(
                        client: Any = client, remote: str = remote, a: Any = arguments
                    ) -> Any:
                        result = await client.call_tool(remote, a)
                        if result.is_error:
                            raise RuntimeError(f"{remote} failed: {result.content}")
                        return result

                    arms.append(Arm(name, call, batch))
                before = {name: _cpu(p) for name, p in procs.items()}
                samples[tool] = await interleave(arms, rounds=rounds, warmup=1)
                calls_made = (rounds + 1) * batch
                cpu[tool] = {n: (_cpu(p) - before[n]) / calls_made for n, p in procs.items()}
    load = {"load_average": os.getloadavg()}
    rows = []
    for tool, s in samples.items():
        rf_s, sdk = s["ringfence serve"], s["bare SDK server"]
        rows.append(
            Row(
                "serve-files",
                f"{tool} over stdio, ringfence serve vs bare SDK",
                rf_s,
                sdk,
                f"<= {SDK_GOAL:g}x bare SDK server",
                rf_s.median / sdk.median <= SDK_GOAL,
                {**load, "overhead_s": rf_s.median - sdk.median},
            )
        )
        if "node server-filesystem" in s:
            nd = s["node server-filesystem"]
            rows.append(
                Row(
                    "serve-files",
                    f"{tool} over stdio, ringfence serve vs node server-filesystem",
                    rf_s,
                    nd,
                    f"<= {NODE_GOAL:g}x node reference server",
                    rf_s.median / nd.median <= NODE_GOAL,
                    load,
                )
            )
        # CPU time of each server process per call: what the server itself spends,
        # robust to a loaded machine (where wall time is mostly waiting to be scheduled).
        c = cpu.get(tool, {})
        if "ringfence serve" in c and "bare SDK server" in c:
            rows.append(
                Row(
                    "serve-files",
                    f"{tool}: server CPU per call, ringfence serve vs bare SDK",
                    Samples("ringfence serve CPU", [c["ringfence serve"]]),
                    Samples("bare SDK server CPU", [c["bare SDK server"]]),
                    "informational (server process user+system time)",
                    None,
                    {"cpu_per_call_s": c},
                )
            )
    if not node:
        rows[0].notes["note"] = (
            f"node server-filesystem skipped: {NODE_FS} or node missing (make npm-servers)"
        )
    return rows


def _server_processes(clients: dict[str, Any]) -> dict[str, Any]:
    """The server process behind each client (the newest child started for it), by name."""
    import psutil

    kids = sorted(psutil.Process().children(recursive=True), key=lambda p: p.create_time())
    # Clients connect in order; the node entry point may run as a child of a shell shim.
    roots = [k for k in kids if k.ppid() == os.getpid()]
    out = {}
    for name, proc in zip(clients, roots, strict=False):
        leaves = proc.children(recursive=True)
        out[name] = leaves[-1] if leaves else proc
    return out


def _cpu(proc: Any) -> float:
    try:
        t = proc.cpu_times()
    except Exception:  # the server exited: its CPU cannot be read, the row says nan
        return float("nan")
    return t.user + t.system


class _clients:
    """Every server connected (legacy handshake, no cache), closed together."""

    def __init__(self, servers: dict[str, StdioServerParameters], errlog: Any) -> None:
        self.servers, self.errlog = servers, errlog
        self.stack: Any = None

    async def __aenter__(self) -> dict[str, Client]:
        from contextlib import AsyncExitStack

        self.stack = AsyncExitStack()
        await self.stack.__aenter__()
        out = {}
        for name, params in self.servers.items():
            client = Client(stdio_client(params, errlog=self.errlog), mode="legacy", cache=None)
            out[name] = await self.stack.enter_async_context(client)
        return out

    async def __aexit__(self, *exc: Any) -> None:
        await self.stack.__aexit__(*exc)


CLI = Scenario(
    "cli-start", "CLI whole-process start vs python -I -c pass", "call read_file <= 120 ms", run_cli
)
HOP = Scenario(
    "workspace-hop",
    "a to_thread hop vs small confined reads and listings",
    "informational",
    run_hop,
)
SERVE = Scenario(
    "serve-files",
    "ringfence serve read_file/list_directory vs bare SDK and node servers",
    "<= 1.1x bare SDK; <= 1.3x node",
    run_serve,
)
SCENARIOS = [CLI, HOP, SERVE]

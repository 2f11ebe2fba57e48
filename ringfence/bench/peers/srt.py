"""Peer: Anthropic's sandbox runtime (``srt``) against the confined ``local`` backend.

Same machine, same run, interleaved:

* **per command**: ``srt true`` (a Node process, its proxies and bubblewrap per
  command) against a command in a warm confined session, and against the
  one-shot CLI ``ringfence call run_shell`` (a whole process, a sandbox
  started and closed). Goals (issue 19): the warm session >= 50x faster per
  command than ``srt``; the one-shot CLI faster than ``srt``.
* **the confinement matrix**: the same five probes through both, each
  checked on disk (or at the listener) after it ran: write inside the
  workspace (should work), write outside it (a file in a fake ``$HOME``),
  read a fixture ``~/.ssh`` key, connect to a listener on 127.0.0.1, read the
  host process's ``/proc/<pid>/environ``. Goal: ringfence blocks everything
  ``srt``'s configuration blocks, and more.

``srt`` runs with the settings its README shows for an agent's workspace
(writes allowed in the workspace, no network domains, nothing denied for
reading); both get a scratch ``$HOME`` holding the fixture key, so nothing of
the real home is read or written. ``srt`` is pinned in ``tests/npm``
(``make npm-servers``) and needs ``bubblewrap`` and ``socat``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .. import latency
from .._harness import Samples
from .._source import source_file
from .._suite import Row, Scenario, Skip

SRT_RELATIVE = "tests/npm/node_modules/.bin/srt"
WARM_GOAL = 50.0  # srt's time per command over the warm session's
SECRET = "PEER-SRT-SECRET-7f3a"
KEY = "-----BEGIN OPENSSH PRIVATE KEY----- ringfence peer fixture"


@dataclass(frozen=True)
class Probe:
    name: str
    command: str
    blocked_means: str  # what "blocked" looks like, for the note


def _probes(home: Path, port: int, host_pid: int) -> list[Probe]:
    connect = (
        "python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', "
        f"{port}), 2); s.sendall(b'hello')\""
    )
    return [
        Probe("write inside the workspace", "echo inside > inside.txt", "the file is missing"),
        Probe("write outside (~/.bashrc)", f"echo owned >> {home}/.bashrc", "~/.bashrc unchanged"),
        Probe("read ~/.ssh/id_ed25519", f"cat {home}/.ssh/id_ed25519", "the key not in the output"),
        Probe("connect to 127.0.0.1 listener", connect, "the listener saw no connection"),
        Probe(
            "read the host process's environ",
            f"tr '\\0' '\\n' < /proc/{host_pid}/environ",
            "the secret not in the output",
        ),
    ]


@contextmanager
def _listener() -> Iterator[tuple[int, list[bytes]]]:
    """A loopback TCP listener that records what each connection sent."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    seen: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    seen.append(conn.recv(100) or b"(connected)")
                except OSError:
                    seen.append(b"(connected)")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], seen
    finally:
        stop.set()
        thread.join()
        server.close()


def _check_prerequisites() -> Path:
    srt = source_file(SRT_RELATIVE, what="Anthropic's srt", fix="make npm-servers")
    missing = [tool for tool in ("bwrap", "socat", "rg", "node") if shutil.which(tool) is None]
    if missing:
        raise Skip(
            f"srt needs {', '.join(missing)} (apt-get install bubblewrap socat ripgrep nodejs)"
        )
    return srt


def _fixture(base: Path) -> tuple[Path, Path, Path]:
    home = base / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(KEY + "\n")
    (home / ".bashrc").write_text("# fixture\n")
    ws = base / "ws"
    ws.mkdir()
    settings = base / "srt-settings.json"
    settings.write_text(
        json.dumps(
            {
                "filesystem": {"denyRead": [], "allowWrite": [str(ws)], "denyWrite": []},
                "network": {"allowedDomains": [], "deniedDomains": []},
            }
        )
    )
    return home, ws, settings


def _srt(
    srt: Path, settings: Path, ws: Path, env: dict[str, str], command: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(srt), "-s", str(settings), "-c", command],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _ringfence_call(
    ws: Path, env: dict[str, str], command: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *latency._ringfence_command(),
            "call",
            "run_shell",
            "--workspace",
            str(ws),
            "--backend",
            "local",
            "--posture",
            "allow-reversible",
            "--approve",
            "yes",
            "--json",
            "--args",
            json.dumps({"command": command}),
        ],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _blocked(probe: Probe, out: str, home: Path, ws: Path, seen: list[bytes]) -> bool:
    if probe.name.startswith("write inside"):
        done = (ws / "inside.txt").exists()
        (ws / "inside.txt").unlink(missing_ok=True)
        return not done
    if probe.name.startswith("write outside"):
        text = (home / ".bashrc").read_text()
        (home / ".bashrc").write_text("# fixture\n")
        return "owned" not in text
    if probe.name.startswith("read ~/.ssh"):
        return KEY not in out
    if probe.name.startswith("connect"):
        got = bool(seen)
        seen.clear()
        return not got
    return SECRET not in out


async def _warm_laps(ws: Path, rounds: int) -> list[float]:
    from ringfence.backends._types import SessionSpec
    from ringfence.backends.confined._session import start_confined as start_local

    session = await start_local(SessionSpec(roots=(ws,)))
    try:
        laps = []
        for _ in range(rounds):
            t = time.perf_counter()
            await session.run("true", cwd=ws, env={}, timeout=10, output_cap=4096)
            laps.append(time.perf_counter() - t)
        return laps
    finally:
        await session.aclose()


async def run(quick: bool) -> list[Row]:
    srt = _check_prerequisites()
    rounds = 3 if quick else 9
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="ringfence-peer-srt-") as tmp:
        base = Path(tmp).resolve()
        home, ws, settings = _fixture(base)
        env = {
            **os.environ,
            "HOME": str(home),
            "RINGFENCE_HOME": str(base / "rfhome"),
            "PEER_SECRET": SECRET,
        }
        # A host process with a secret in its environment, as the kernel's would have.
        host = subprocess.Popen(["sleep", "600"], env={**env, "PEER_SECRET": SECRET})
        env.pop("PEER_SECRET")
        # ringfence runs with its bytecode, as an installed package has it (pip compiles at
        # install): a PYTHONDONTWRITEBYTECODE in the caller's environment would have every
        # timed call compile its modules from source (~200 ms). It changes nothing for srt.
        rf_env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
        try:
            # One untimed round first, as every other scenario's warmup=1 (caches, bytecode).
            _srt(srt, settings, ws, env, "true")
            _ringfence_call(ws, rf_env, "true")
            # Per command, interleaved: srt, the one-shot CLI, and a round of warm commands.
            srt_s, cli_s, warm_s = Samples("srt true"), Samples("ringfence call"), Samples("warm")
            for _ in range(rounds):
                t = time.perf_counter()
                done = _srt(srt, settings, ws, env, "true")
                srt_s.per_op.append(time.perf_counter() - t)
                if done.returncode != 0:
                    raise Skip(f"srt does not run here: {done.stderr.strip()[:300]}")
                t = time.perf_counter()
                done = _ringfence_call(ws, rf_env, "true")
                cli_s.per_op.append(time.perf_counter() - t)
                if done.returncode != 0:
                    raise RuntimeError(
                        f"ringfence call run_shell failed: {done.stdout}{done.stderr}"
                    )
                warm_s.per_op.extend(await _warm_laps(ws, 10))
            rows.append(
                Row(
                    "peer-srt",
                    "warm confined session `true` vs `srt true` (per command)",
                    Samples("ringfence warm local", warm_s.per_op),
                    srt_s,
                    f">= {WARM_GOAL:g}x faster",
                    srt_s.median / warm_s.median >= WARM_GOAL,
                    {"speedup": srt_s.median / warm_s.median},
                )
            )
            rows.append(
                Row(
                    "peer-srt",
                    "one-shot `ringfence call run_shell true` (confined) vs `srt true`",
                    cli_s,
                    srt_s,
                    "< 1x (faster than srt)",
                    cli_s.median < srt_s.median,
                )
            )
            with _listener() as (port, seen):
                for probe in _probes(home, port, host.pid):
                    results = {}
                    for who in ("srt", "ringfence"):
                        t = time.perf_counter()
                        done = (
                            _srt(srt, settings, ws, env, probe.command)
                            if who == "srt"
                            else _ringfence_call(ws, rf_env, probe.command)
                        )
                        seconds = time.perf_counter() - t
                        out = done.stdout + done.stderr
                        results[who] = (_blocked(probe, out, home, ws, seen), seconds)
                    allowed_probe = probe.name.startswith("write inside")
                    (rf_blocked, rf_s), (srt_blocked, srt_seconds) = (
                        results["ringfence"],
                        results["srt"],
                    )
                    rows.append(
                        Row(
                            "peer-srt",
                            f"probe: {probe.name}: ringfence {_shown(rf_blocked)}; srt {_shown(srt_blocked)}",
                            Samples("ringfence", [rf_s]),
                            Samples("srt", [srt_seconds]),
                            "allowed by both"
                            if allowed_probe
                            else "ringfence blocks (srt may not)",
                            (not rf_blocked) if allowed_probe else rf_blocked,
                            {
                                "ringfence_blocked": rf_blocked,
                                "srt_blocked": srt_blocked,
                                "blocked_means": probe.blocked_means,
                            },
                        )
                    )
        finally:
            host.kill()
            host.wait()
    return rows


def _shown(blocked: bool) -> str:
    return "blocked" if blocked else "ALLOWED"


SCENARIO = Scenario(
    "peer-srt",
    "Anthropic srt vs the confined local backend: per command, and the confinement matrix",
    f"warm >= {WARM_GOAL:g}x faster than srt; one-shot CLI faster; blocks all srt blocks and more",
    run,
)

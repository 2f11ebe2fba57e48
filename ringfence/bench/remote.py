"""The docker backend on a remote engine (issue 17): a warm command, and shipping a workspace.

The engine is named by ``RINGFENCE_BENCH_ENGINE``: a JSON engine table as
``options.engines`` takes (``name``, ``base_url``, ``tls_ca``, ``tls_cert``,
``tls_key``); ``ship`` is forced to ``always``, so a loopback engine is
measured on the shipping path. ``tests/backends/engines_helpers.py`` starts
such an engine (a second ``dockerd`` with TLS on 127.0.0.1). Without it the
scenario is skipped with that reason.

Rows, interleaved in one run:

* a warm ``true`` on the remote engine (TLS, shipped, change sets: the
  host's sync walk, the command, the supervisor's empty-upper check) against
  the local docker backend with change sets; goal <= 2x;
* shipping a 2,000-file workspace (the session's own path: walk, hash, tar,
  one ``put_archive`` into a volume) against ``docker cp`` of the same tree
  into a container on the same engine; goal <= 2x.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import trio

from ._harness import Arm, interleave
from ._suite import Row, Scenario, Skip

ENGINE_VARIABLE = "RINGFENCE_BENCH_ENGINE"
WARM_GOAL = 2.0
SHIP_GOAL = 2.0
FILES = 2000
IMAGE = "busybox"


def _engine_table(raw: str | None) -> dict[str, Any]:
    """The engine table the command line read from ``RINGFENCE_BENCH_ENGINE``; Skip without."""
    if not raw:
        raise Skip(
            f"no remote engine: set {ENGINE_VARIABLE} to a JSON engine table (name, base_url, "
            "tls_ca, tls_cert, tls_key); tests/backends/engines_helpers.py starts one"
        )
    try:
        table = dict(json.loads(raw))
    except (ValueError, TypeError) as exc:
        raise Skip(f"{ENGINE_VARIABLE} is not a JSON table: {exc}") from None
    return {**table, "ship": "always"}


def _make_tree(root: Path, files: int) -> None:
    for i in range(files):
        d = root / f"d{i % 40}"
        d.mkdir(exist_ok=True)
        (d / f"f{i}.txt").write_text(f"file {i}\n" * 8)


async def run_warm(quick: bool, engine: str | None = None) -> list[Row]:
    from ringfence.backends._types import SessionSpec
    from ringfence.backends.docker._session import start_docker
    from ringfence.runtime._errors import RingfenceError

    table = _engine_table(engine)
    rounds, batch = (4, 30) if quick else (20, 80)
    with tempfile.TemporaryDirectory(prefix="ringfence-bench-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        (root / "README").write_text("a small workspace\n")
        local_spec = SessionSpec(roots=(root,), options={"image": IMAGE}, change_sets=True)
        remote_spec = SessionSpec(
            roots=(root,), options={"image": IMAGE, "engines": [table]}, change_sets=True
        )
        try:
            local = await start_docker(local_spec)
        except RingfenceError as exc:
            raise Skip(f"no local docker engine: {exc.message}") from None
        plain = await start_docker(replace(local_spec, change_sets=False))
        try:
            try:
                remote = await start_docker(remote_spec)
            except RingfenceError as exc:
                raise Skip(f"the remote engine cannot start a session: {exc.message}") from None
            try:

                async def local_true() -> object:
                    return await local.run(["true"], cwd=root, env={}, timeout=30, output_cap=4096)

                async def plain_true() -> object:
                    return await plain.run(["true"], cwd=root, env={}, timeout=30, output_cap=4096)

                async def remote_true() -> object:
                    return await remote.run(["true"], cwd=root, env={}, timeout=30, output_cap=4096)

                # One file written: its change set read back (the fetch, on the remote side).
                async def local_write() -> object:
                    return await local.run("echo x > w.txt", cwd=root, env={}, timeout=30,
                                           output_cap=4096)  # fmt: skip

                async def remote_write() -> object:
                    return await remote.run("echo x > w.txt", cwd=root, env={}, timeout=30,
                                            output_cap=4096)  # fmt: skip

                s = await interleave(
                    [
                        Arm("docker backend, local engine (change sets, warm)", local_true, batch),
                        Arm(
                            "docker backend, local engine (no change sets, warm)", plain_true, batch
                        ),
                        Arm(
                            "docker backend, remote engine (TLS, shipped, warm)", remote_true, batch
                        ),
                        Arm("local engine, a command writing one file", local_write, batch),
                        Arm("remote engine, a command writing one file", remote_write, batch),
                    ],
                    rounds=rounds,
                    warmup=1,
                )
            finally:
                await remote.aclose()
        finally:
            await local.aclose()
            await plain.aclose()
    plain_s = s["docker backend, local engine (no change sets, warm)"]
    base = s["docker backend, local engine (change sets, warm)"]
    subject = s["docker backend, remote engine (TLS, shipped, warm)"]
    writes = (s["remote engine, a command writing one file"],
              s["local engine, a command writing one file"])  # fmt: skip
    return [
        Row(
            "engine-remote",
            "remote engine (TLS loopback, shipped) warm `true` vs local docker backend",
            subject,
            base,
            f"within {WARM_GOAL:g}x the local docker backend",
            subject.median / base.median <= WARM_GOAL,
            {"overhead_s": subject.median - base.median},
        ),
        Row(
            "engine-remote",
            "remote engine warm `true` vs local docker backend without change sets",
            subject,
            plain_s,
            "informational (the remote path always captures a change set)",
            None,
            {"overhead_s": subject.median - plain_s.median},
        ),
        Row(
            "engine-remote",
            "a command writing one file: remote (its change set fetched) vs local docker",
            writes[0],
            writes[1],
            "informational (the fetch: tar + sha256 + base64 over the stream)",
            None,
            {"fetch_overhead_s": writes[0].median - writes[1].median},
        ),
    ]


async def run_ship(quick: bool, engine_table: str | None = None) -> list[Row]:
    from ringfence.backends.docker._api import connect_docker
    from ringfence.backends.engines._engines import Engine
    from ringfence.backends.engines._ship import ShippedRoot

    table = _engine_table(engine_table)
    engine = Engine.from_mapping(table, field=ENGINE_VARIABLE)
    docker_cli = shutil.which("docker")
    if docker_cli is None:
        raise Skip("the docker CLI is not installed (the baseline is `docker cp`)")
    rounds = 3 if quick else 10
    client = await trio.to_thread.run_sync(
        lambda: connect_docker(engine.base_url, tls=engine.tls_config())
    )
    volume = await trio.to_thread.run_sync(
        lambda: client.volumes.create(labels={"ringfence": "1", "ringfence.bench": "1"})
    )
    container = None
    try:
        container = await trio.to_thread.run_sync(
            lambda: client.containers.run(
                f"ringfence/{IMAGE}:latest",
                ["sleep", "600"],
                detach=True,
                network_mode="none",
                mounts=[{"Target": "/ws", "Source": volume.name, "Type": "volume"}],
            )
        )
        with tempfile.TemporaryDirectory(prefix="ringfence-bench-") as tmp:
            tree = Path(tmp) / "tree"
            tree.mkdir()
            await trio.to_thread.run_sync(_make_tree, tree, FILES)
            cli = [
                docker_cli,
                "--tlsverify",
                "--tlscacert", str(engine.tls_ca),
                "--tlscert", str(engine.tls_cert),
                "--tlskey", str(engine.tls_key),
                "-H", engine.base_url,
            ]  # fmt: skip
            env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}

            # Both targets exist before timing; each round overwrites the previous copy.
            await trio.to_thread.run_sync(
                lambda: container.exec_run(["mkdir", "-p", "/ws/a", "/ws/b"])
            )

            def ship() -> None:
                sync = ShippedRoot(str(tree), (65534, 65534)).sync()  # a fresh session's first
                if not container.put_archive("/ws/a", sync.tar):
                    raise RuntimeError("put_archive refused")

            def docker_cp() -> None:
                subprocess.run(
                    [*cli, "cp", f"{tree}/.", f"{container.id}:/ws/b"],
                    check=True,
                    env=env,
                    stdout=subprocess.DEVNULL,
                )

            async def ringfence_ship() -> object:
                return await trio.to_thread.run_sync(ship)

            async def cp() -> object:
                return await trio.to_thread.run_sync(docker_cp)

            s = await interleave(
                [
                    Arm(f"ship {FILES} files (walk, sha256, tar, put_archive)", ringfence_ship),
                    Arm(f"docker cp {FILES} files", cp),
                ],
                rounds=rounds,
                warmup=1,
            )
    finally:
        if container is not None:
            await trio.to_thread.run_sync(lambda: container.remove(force=True))
        await trio.to_thread.run_sync(lambda: volume.remove(force=True))
        client.close()
    subject = s[f"ship {FILES} files (walk, sha256, tar, put_archive)"]
    base = s[f"docker cp {FILES} files"]
    return [
        Row(
            "engine-remote",
            f"ship a {FILES}-file workspace to a TLS engine vs `docker cp`",
            subject,
            base,
            f"within {SHIP_GOAL:g}x docker cp",
            subject.median / base.median <= SHIP_GOAL,
            {"note": "docker cp includes the CLI's own start-up (its usual cost)"},
        )
    ]


def scenarios(engine: str | None = None) -> list[Scenario]:
    """The remote-engine scenario against ``engine`` (a JSON engine table; None: skipped)."""

    async def remote(quick: bool) -> list[Row]:
        return [*(await run_warm(quick, engine)), *(await run_ship(quick, engine))]

    return [
        Scenario(
            "engine-remote",
            "the docker backend on a remote engine (TLS, shipped): warm command, workspace ship",
            f"warm `true` within {WARM_GOAL:g}x local docker; ship within {SHIP_GOAL:g}x docker cp",
            remote,
        ),
    ]


SCENARIOS = scenarios()

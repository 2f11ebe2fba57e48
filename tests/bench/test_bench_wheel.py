"""ringfence installed from a built wheel into a fresh venv: the command and ``bench`` work.

What a user gets from ``pip install ringfence``, checked end to end: the wheel
is built (``pip wheel``) from a copy of the sources, so the build writes
nothing into the checkout; it is installed with pip into a fresh venv; the
commands run from that venv's ``bin/`` in a directory outside the source
tree, so nothing of the checkout is imported.

To stay fast and offline the venv borrows this interpreter's dependencies:
its site-packages lists ours in a ``.pth`` file as a plain path, so pip finds
every dependency the wheel declares already installed (``--no-index``: a
missing one fails the install) while the checkout's editable-install hook in
there never runs (``.pth`` files of a directory added that way are not
processed), and the venv's own ``ringfence`` is the wheel's. Only the build
needs an index: pip fetches the build backend (setuptools) into an isolated
environment, from PyPI or the configured index; the tests skip, saying so,
when it cannot.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CHECKOUT = Path(__file__).resolve().parents[2]
TIMEOUT = 60  # per command; the whole module takes about 30 s on a loaded 2-core machine


@dataclass(frozen=True)
class Installed:
    """A fresh venv holding the wheel's ringfence, and where to run it from."""

    wheel: Path
    bin: Path
    cwd: Path  # outside the source tree
    env: dict[str, str]

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin / "ringfence"), *argv],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )


def _build_wheel(tmp: Path) -> Path:
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(CHECKOUT / name, src / name)
    shutil.copytree(
        CHECKOUT / "ringfence", src / "ringfence", ignore=shutil.ignore_patterns("__pycache__")
    )
    dist = tmp / "dist"
    # A short timeout and one retry: an unreachable index is a skip within seconds, not minutes.
    env = {**os.environ, "PIP_DEFAULT_TIMEOUT": "15", "PIP_RETRIES": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(src), "-w", str(dist)],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    if proc.returncode != 0:
        out = proc.stdout + proc.stderr
        unreachable = ("No matching distribution", "Could not find a version", "NewConnectionError")
        if any(marker in out for marker in unreachable):
            pytest.skip(f"cannot fetch the build backend (setuptools) from the index: {out[-300:]}")
        pytest.fail(f"pip wheel failed:\n{out}")
    wheels = sorted(dist.glob("ringfence-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    tmp = tmp_path_factory.mktemp("wheel")
    wheel = _build_wheel(tmp)
    venv = tmp / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=TIMEOUT
    )
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=TIMEOUT,
    ).stdout.strip()
    ours = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    Path(purelib, "_ringfence_test_deps.pth").write_text("".join(f"{p}\n" for p in sorted(ours)))
    cwd = tmp / "elsewhere"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["RINGFENCE_HOME"] = str(tmp / "home")
    proc = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-index", str(wheel)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return Installed(wheel, venv / "bin", cwd, env)


def test_the_wheel_ships_the_suite_and_nothing_of_the_source_tree(installed: Installed) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    for needed in (
        "ringfence/bench/__init__.py",
        "ringfence/bench/scenarios.py",
        "ringfence/bench/gate.py",
        "ringfence/bench/peers/__init__.py",
        "ringfence/bench/peers/sdk_files.py",  # the bare SDK server serve-files runs
        "ringfence/py.typed",
    ):
        assert needed in names
    assert not any(n.startswith(("tests/", "benchmarks/", "examples/")) for n in names)
    # The venv's ringfence is the wheel's, and it knows it has no source tree.
    probe = subprocess.run(
        [
            str(installed.bin / "python"),
            "-c",
            "import ringfence, ringfence.bench as b; print(ringfence.__file__); print(b.SOURCE_TREE)",
        ],
        cwd=installed.cwd,
        env=installed.env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    where, tree = probe.stdout.split()
    assert Path(where).is_relative_to(installed.bin.parent), where
    assert tree == "None"


def test_the_wheel_ships_the_image_recipes(installed: Installed) -> None:
    """``images build`` from a wheel needs the recipes next to the installed package."""
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    recipes = "ringfence/backends/docker/recipes/"
    for needed in ("busybox/Dockerfile", "busybox/rootfs/etc/passwd", "debian/Dockerfile"):
        assert recipes + needed in names
    probe = subprocess.run(
        [
            str(installed.bin / "python"),
            "-c",
            "from ringfence.backends.docker._images import recipes_dir; print(recipes_dir())",
        ],
        cwd=installed.cwd,
        env=installed.env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert probe.returncode == 0, probe.stderr
    where = Path(probe.stdout.strip())
    assert where.is_relative_to(installed.bin.parent), where  # the wheel's, not the checkout's
    assert (where / "busybox" / "Dockerfile").is_file()
    assert (where / "debian" / "packages").is_file()


def test_version(installed: Installed) -> None:
    proc = installed.run("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ringfence 0.1.0"


def test_doctor_keeps_its_contract(installed: Installed) -> None:
    """Exit 0 exactly when the selected backend can run; every check named with its result."""
    proc = installed.run("doctor", "--json")
    assert proc.returncode in (0, 1), proc.stderr
    body = json.loads(proc.stdout)
    report = body["result"] if body["ok"] else body["error"]["details"]
    assert body["ok"] is (proc.returncode == 0)
    assert {c["name"] for c in report["checks"]} >= {"backend local", "backend host", "ripgrep"}
    assert all(isinstance(c["ok"], bool) and c["detail"] for c in report["checks"])
    assert set(report["backends"]) >= {"local", "host", "docker"}
    if not body["ok"]:
        assert body["error"]["code"] == "unavailable"
    # The host backend (unconfined) always runs: selecting it exits 0, in the plain form too.
    host = installed.run("doctor", "--backend", "host")
    assert host.returncode == 0, host.stdout + host.stderr
    assert "backend host: can run [selected]" in host.stdout
    assert "Traceback" not in proc.stderr + host.stderr


def test_bench_list(installed: Installed) -> None:
    proc = installed.run("bench", "--list")
    assert proc.returncode == 0, proc.stderr
    names = [line.split()[0] for line in proc.stdout.splitlines()]
    for expected in ("gate", "workspace-open", "changesets", "mcp-peer", "serve-files"):
        assert expected in names
    assert all("(goal: " in line for line in proc.stdout.splitlines())


def test_bench_gate_quick_and_source_tree_scenarios_skip_with_the_reason(
    installed: Installed,
) -> None:
    """``bench gate --quick`` measures; the scenarios needing a checkout's servers skip, naming them.

    One process for both: each start of the suite costs seconds on a loaded machine.
    """
    proc = installed.run("bench", "gate", "mcp-peer", "mcp-everything", "--quick")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:2] == ["scenario", "measurement"]
    rows = [line for line in lines if line.startswith("gate ")]
    assert rows and all("µs" in row for row in rows)
    assert "overhead <= 50 µs/call" in proc.stdout
    assert "[1/3] gate" in proc.stderr and "FAILED" not in proc.stdout + proc.stderr
    skipped = {line.split(":")[0]: line for line in lines if ": skipped (" in line}
    assert list(skipped) == ["mcp-peer", "mcp-everything"]
    assert "tests/mcp_host/servers/annotated.py" in skipped["mcp-peer"]
    assert "source tree" in skipped["mcp-peer"]
    assert "tests/npm/" in skipped["mcp-everything"]
    assert "make npm-servers" in skipped["mcp-everything"]

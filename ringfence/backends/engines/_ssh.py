"""An ``ssh://`` engine's socket, forwarded by OpenSSH to a private local socket.

:func:`open_forward` starts ``ssh -N -L <local socket>:<engine socket>``
through the one spawner (:func:`ringfence._proc.spawn`) and returns once the
local socket answers; the docker client then speaks to ``unix://`` that
socket, and everything above it (the supervisor's attached stream, the
container's lease, the shipped workspace) is what it is for a local socket.
The forward belongs to whoever opened it (a session, or one load probe) and
ends with its :meth:`SSHForward.aclose`; a forward that ended on its own is
reported by :meth:`SSHForward.ended` so the next call fails naming it.

ssh gets nothing from this machine's configuration: ``-F /dev/null`` (no
``~/.ssh/config``, no ``/etc/ssh/ssh_config``), no agent
(``IdentityAgent=none``, and no ``SSH_AUTH_SOCK`` in its environment),
``BatchMode`` (no prompt), and host keys from the engine's
``ssh_known_hosts`` file alone (``GlobalKnownHostsFile=/dev/null``) with
``StrictHostKeyChecking=yes``, or ``accept-new`` when the engine says
``ssh_accept_new``. An unknown or changed host key ends ssh before any
forward exists, so nothing reaches the engine; the error names the engine
and the file.

Why not docker-py's own SSH transport: with paramiko it loads the user's
host keys and *warns* about an unknown one (``WarningPolicy``), which is
trust on first use without the operator asking; with ``use_ssh_client`` it
runs ``ssh`` with the user's own configuration and cannot be given options.
Neither gives trio a plain socket for the supervisor's stream.

A killed owner leaves no forward behind: ssh runs under a small shell that
holds the read end of a pipe only the owner writes to; when the owner's end
closes (``aclose``, or the owner's process dies), the shell stops ssh, so
the container's lease (:mod:`..docker._container`) breaks and the container
goes as it would on a local engine. The private directory holding the socket
and ssh's log is removed by ``aclose`` (a killed owner leaves that directory
behind, empty of anything but a dead socket and the log).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from ... import _proc
from ...runtime._errors import InvalidArguments, Unavailable
from .._trees import claim, sweep_unclaimed

if TYPE_CHECKING:  # _engines imports this module where it probes an engine
    from ._engines import Engine

__all__ = ["SSHForward", "open_forward"]

START_LIMIT = 30.0  # TCP connect (ConnectTimeout below) + key exchange + authentication
CONNECT_TIMEOUT = 10
GRACE = 2.0
_POLL = 0.02
_SAFE_DIR = re.compile(r"^/[A-Za-z0-9._/+@,=-]*\Z")
_LOG_TAIL = 2000

# The shell around ssh: fd 3 is the owner's pipe. ssh runs in the background (its stdin
# /dev/null); a watcher reads the pipe and stops ssh at its end of file; the shell waits for
# ssh, stops the watcher and exits with ssh's status, so the leader's exit is the forward's.
_WRAPPER = (
    'exec 3<&0 </dev/null; "$@" 3<&- & p=$!; '
    "{ read -r _ <&3; kill -TERM $p 2>/dev/null; } & w=$!; "
    "wait $p; s=$?; kill $w 2>/dev/null; exit $s"
)


def ssh_argv(engine: Engine, local: Path, log: Path) -> list[str]:
    """The ssh command line of ``engine``'s forward to ``local`` (nothing from ``~/.ssh``)."""
    user, host, port = engine.ssh_target()
    if engine.ssh_known_hosts is None:  # Engine.from_mapping requires it; an Engine made in code
        raise InvalidArguments(
            f"engine {engine.name}: an ssh:// engine needs ssh_known_hosts (the file that pins "
            "its host key)",
            field="ssh_known_hosts",
        )
    strict = "accept-new" if engine.ssh_accept_new else "yes"
    options = {
        "BatchMode": "yes",
        "StrictHostKeyChecking": strict,
        "UserKnownHostsFile": str(engine.ssh_known_hosts),
        "GlobalKnownHostsFile": "/dev/null",
        "UpdateHostKeys": "no",
        "CheckHostIP": "no",
        "VerifyHostKeyDNS": "no",
        "HashKnownHosts": "no",
        "IdentityAgent": "none",
        "IdentitiesOnly": "yes",
        "PasswordAuthentication": "no",
        "KbdInteractiveAuthentication": "no",
        "ControlMaster": "no",
        "ControlPath": "none",
        "ForwardAgent": "no",
        "ForwardX11": "no",
        "ExitOnForwardFailure": "yes",
        "ConnectTimeout": str(CONNECT_TIMEOUT),
        "ServerAliveInterval": "15",
        "ServerAliveCountMax": "3",
        "LogLevel": "ERROR",
    }
    if engine.ssh_identity is not None:
        options["IdentityFile"] = str(engine.ssh_identity)
    argv = ["ssh", "-F", "/dev/null", "-N", "-E", str(log), "-p", str(port)]
    for key, value in options.items():
        argv += ["-o", f"{key}={value}"]
    argv += ["-L", f"{local}:{engine.ssh_socket}", "--", f"{user}@{host}" if user else host]
    return argv


class SSHForward:
    """One running ``ssh -L`` of an engine's socket. Made by :func:`open_forward`."""

    def __init__(
        self, engine: Engine, directory: Path, process: _proc.Process, mark: int | None = None
    ) -> None:
        self.engine = engine
        self.directory = directory
        self.process = process
        self._mark = mark  # the directory's claim (.._trees.claim), released after its removal
        self._closed = False

    @property
    def socket_path(self) -> Path:
        return self.directory / "docker.sock"

    @property
    def base_url(self) -> str:
        """The address the docker client uses: the local end of the forward."""
        return f"unix://{self.socket_path}"

    @property
    def log(self) -> Path:
        return self.directory / "ssh.log"

    def ended(self) -> str | None:
        """Why the forward is gone (ssh's exit and last words), or None while it runs."""
        if self._closed:
            return "the forward was closed"
        code = self.process.exit_code_when_done()
        if code is None:
            return None
        return _why(self.engine, code, _tail(self.log))

    async def wait_ended(self, limit: float) -> str | None:
        """:meth:`ended`; when the local socket no longer answers, after waiting up to ``limit``
        for ssh to be gone (a call that failed a moment after ssh died can reach here before
        ssh's shell has exited). A forward that still answers is not waited for."""
        if self.ended() is None and not await trio.to_thread.run_sync(_answers, self.socket_path):
            with trio.move_on_after(limit):
                await self.process.wait_leader()
        return self.ended()

    async def aclose(self) -> None:
        """Stop ssh (and its watcher), remove the directory. Idempotent; shielded."""
        if self._closed:
            return
        self._closed = True
        with trio.CancelScope(shield=True):
            stdin = self.process.stdin
            if stdin is not None:
                self.process.stdin = None
                with contextlib.suppress(OSError):
                    os.close(stdin)  # the watcher stops ssh
            if self.process.exit_code_when_done() is None:
                await self.process.terminate(GRACE)
            else:
                await self.process.kill_rest()
            self.process.close()
            for fd in (self.process.stdout, self.process.stderr):
                with contextlib.suppress(OSError):
                    os.close(fd)
            await trio.to_thread.run_sync(lambda: shutil.rmtree(self.directory, ignore_errors=True))
            if self._mark is not None:
                with contextlib.suppress(OSError):
                    os.close(self._mark)
                self._mark = None


def _tail(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-_LOG_TAIL:].strip()
    except OSError:
        return ""


def _why(engine: Engine, code: int, log: str) -> str:
    """What ssh's exit ``code`` and ``log`` mean, naming the engine's pin file."""
    user, host, port = engine.ssh_target()
    where = f"[{host}]:{port}" if port != 22 else host
    pins = engine.ssh_known_hosts
    if "Host key verification failed" in log:
        if "HAS CHANGED" in log or "has changed" in log:
            return (
                f"the host key of {where} is not the one pinned in {pins}: refused (a changed "
                "key can be an attacker in the middle; if the engine's key was replaced on "
                f"purpose, replace its line in {pins} after checking the new fingerprint)"
            )
        return (
            f"no host key of {where} is pinned in {pins}: refused (add the engine's key to "
            f"that file after checking its fingerprint, e.g. `ssh-keyscan -p {port} {host}`; "
            "or set ssh_accept_new = true to trust the first key seen)"
        )
    if "Permission denied" in log:
        identity = engine.ssh_identity or "OpenSSH's default identity files"
        return f"{user or 'the user'}@{host} refused our key ({identity}): {_last(log)}"
    return f"ssh exited with status {code}: {_last(log) or 'no message'}"


def _last(log: str) -> str:
    lines = [line for line in log.splitlines() if line.strip()]
    return " / ".join(lines[-3:])


def _refusal(engine: Engine, why: str) -> Unavailable:
    return Unavailable(f"engine {engine.name} ({engine.base_url}): {why}")


_PREFIX = "ringfence-ssh-"


def _sweep_forwards() -> int:
    """Remove the forward directories in the temporary directory whose owner is gone."""
    return sweep_unclaimed(Path(tempfile.gettempdir()), prefix=_PREFIX)


def _answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


async def open_forward(engine: Engine) -> SSHForward:
    """Start ``engine``'s forward and wait until its local socket accepts (or ssh exits).

    Raises Unavailable naming the engine (and, for a refused host key, the
    known_hosts file); nothing is left behind on failure or cancellation.
    """
    if shutil.which("ssh", path=os.defpath) is None:
        raise _refusal(
            engine,
            "an ssh:// engine needs the OpenSSH client (`ssh`), which is not installed "
            "(apt-get install openssh-client)",
        )
    # A killed owner closes nothing: its forward's directory (a dead socket, ssh's log) is
    # claimed for the owner's life, and one nobody holds goes here, at the next forward.
    with contextlib.suppress(OSError):
        await trio.to_thread.run_sync(_sweep_forwards)
    directory = Path(tempfile.mkdtemp(prefix=_PREFIX))
    mark: int | None = None
    try:
        mark = claim(directory)
        if not _SAFE_DIR.fullmatch(str(directory)) or len(str(directory)) > 90:
            raise _refusal(
                engine,
                f"the forward's socket directory {directory} is too long or has characters "
                "ssh reads as options; point the temporary directory (TMPDIR) at a short path",
            )
        argv = ssh_argv(engine, directory / "docker.sock", directory / "ssh.log")
        process = _proc.spawn(
            ["/bin/sh", "-c", _WRAPPER, "ringfence-ssh", *argv],
            cwd=directory,
            env={"PATH": os.defpath, "LANG": "C"},
            stdin_pipe=True,
        )
        forward = SSHForward(engine, directory, process, mark)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        if mark is not None:
            os.close(mark)
        raise
    try:
        with trio.move_on_after(START_LIMIT):
            while True:
                why = forward.ended()
                if why is not None:
                    raise _refusal(engine, why)
                if forward.socket_path.exists() and await trio.to_thread.run_sync(
                    _answers, forward.socket_path
                ):
                    return forward
                await trio.sleep(_POLL)
        raise _refusal(
            engine,
            f"ssh did not open the forward within {START_LIMIT:g} s "
            f"({_last(_tail(forward.log)) or 'no message'})",
        )
    except BaseException:
        await forward.aclose()
        raise

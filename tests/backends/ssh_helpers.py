"""A real OpenSSH server on loopback in front of a second ``dockerd``, for the ssh engine tests.

:func:`start_ssh_engine` starts a second Docker Engine on a unix socket of
its own (``engines_helpers.start_unix_engine``, loaded with the busybox
image), generates a host key and a client key (``ssh-keygen``) under
``base``, writes an ``sshd_config`` that accepts only that client key for
root on 127.0.0.1 at a free high port, starts ``/usr/sbin/sshd -D -e -f``
it, and writes ``known_hosts`` pinning the host key. ``other_key.pub`` is a
second host key nobody serves (for the wrong-pin test). :func:`stop_ssh_engine`
stops both daemons and removes what they made. Needs root, ``sshd``
(Debian's ``openssh-server``: ``.ci/run`` installs it) and ``dockerd``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from backends_helpers import docker_required
from engines_helpers import EngineProcess, can_start_engine, start_unix_engine, stop_engine

SSHD = Path("/usr/sbin/sshd")
# sshd refuses to start (and each connection's child to run) without its privilege
# separation directory. Made when missing and left, as openssh-server's own service leaves
# it: removed after one engine, it broke every connection of another one still running in
# the other test worker ("kex_exchange_identification: Connection reset by peer").
PRIVSEP = Path("/run/sshd")


@dataclass
class SSHEngine:
    docker: EngineProcess  # the second dockerd behind sshd
    sshd: subprocess.Popen[bytes]
    base: Path
    port: int

    @property
    def url(self) -> str:
        return f"ssh://root@127.0.0.1:{self.port}"

    @property
    def remote_socket(self) -> str:
        return self.docker.engine.base_url.removeprefix("unix://")

    @property
    def known_hosts(self) -> Path:
        return self.base / "known_hosts"

    @property
    def identity(self) -> Path:
        return self.base / "client_key"

    @property
    def sshd_log(self) -> Path:
        return self.base / "sshd.log"

    def table(self, name: str = "ssh-loopback", **kw: Any) -> dict[str, Any]:
        """The engine table ringfence is configured with (host key pinned)."""
        return {
            "name": name,
            "base_url": self.url,
            "ssh_known_hosts": str(self.known_hosts),
            "ssh_identity": str(self.identity),
            "ssh_socket": self.remote_socket,
            **kw,
        }

    def pin_line(self, public_key: Path) -> str:
        key_type, blob = public_key.read_text().split()[:2]
        return f"[127.0.0.1]:{self.port} {key_type} {blob}\n"


def can_start_ssh_engine() -> str | None:
    """Why an sshd + second dockerd cannot start here, or None."""
    reason = can_start_engine()
    if reason is not None:
        return reason
    if not SSHD.exists() or shutil.which("ssh-keygen") is None or shutil.which("ssh") is None:
        return (
            "openssh-server / openssh-client are not installed "
            "(apt-get install openssh-server openssh-client; .ci/run installs them)"
        )
    return None


def require_ssh_engine() -> None:
    """Skip the test when an ssh engine cannot start here; fail instead under
    ``RINGFENCE_REQUIRE_DOCKER=1`` (CI), naming why."""
    reason = can_start_ssh_engine()
    if reason is not None:
        if docker_required():
            pytest.fail(f"RINGFENCE_REQUIRE_DOCKER=1 but {reason}")
        pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ringfence-test", "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )


def start_ssh_engine(base: Path, *, images: tuple[str, ...]) -> SSHEngine:
    """sshd on 127.0.0.1:<free port> in front of a fresh second dockerd (see the module)."""
    (base / "engine").mkdir()
    docker = start_unix_engine(base / "engine", name="behind-sshd", load_images=images)
    sshd: subprocess.Popen[bytes] | None = None
    try:
        keys = base / "keys"
        keys.mkdir()
        for stem in ("host_key", "other_key"):
            _keygen(keys / stem)
        _keygen(base / "client_key")
        (base / "authorized_keys").write_text((base / "client_key.pub").read_text())
        (base / "other_key.pub").write_text((keys / "other_key.pub").read_text())
        port = _free_port()
        config = base / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    "ListenAddress 127.0.0.1",
                    f"Port {port}",
                    f"HostKey {keys / 'host_key'}",
                    f"AuthorizedKeysFile {base / 'authorized_keys'}",
                    "PidFile none",
                    "PermitRootLogin prohibit-password",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "StrictModes no",  # the test's tmp directories are not root's 0755
                    # A unix-socket forward needs both (AllowTcpForwarding gates every -L).
                    "AllowTcpForwarding local",
                    "AllowStreamLocalForwarding local",
                    "X11Forwarding no",
                    "PermitTTY no",
                    "LogLevel VERBOSE",
                    "",
                ]
            )
        )
        if not PRIVSEP.exists():
            PRIVSEP.mkdir(mode=0o755, exist_ok=True)
        with (base / "sshd.log").open("ab") as log:
            sshd = subprocess.Popen(
                [str(SSHD), "-D", "-e", "-f", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        handle = SSHEngine(docker, sshd, base, port)
        handle.known_hosts.write_text(handle.pin_line(keys / "host_key.pub"))
        deadline = time.monotonic() + 20
        while True:
            if sshd.poll() is not None:
                raise RuntimeError(f"sshd exited: {(base / 'sshd.log').read_text()[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("sshd did not listen within 20 s")
            time.sleep(0.05)
        return handle
    except BaseException:
        if sshd is not None:
            _stop(sshd)
        stop_engine(docker)
        raise


def _stop(process: subprocess.Popen[bytes]) -> None:
    # sshd's session: the listener and every connection's child.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def stop_ssh_engine(handle: SSHEngine) -> None:
    _stop(handle.sshd)
    stop_engine(handle.docker)


def accepted_logins(handle: SSHEngine) -> int:
    """How many times sshd has let our client key in so far (its log)."""
    return handle.sshd_log.read_text(errors="replace").count("Accepted publickey")

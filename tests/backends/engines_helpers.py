"""A second, real Docker Engine on loopback TCP with TLS, for the remote-engine tests.

:func:`start_tls_engine` generates a CA, a server certificate for 127.0.0.1
and a client certificate (``cryptography``), starts ``dockerd`` with its own
data root, exec root, pid file and bridge (a second daemon with
``bridge: none`` would delete the first one's ``docker0``), waits for it,
and loads the busybox sandbox image into it from the local engine.
:func:`stop_engine` stops it and removes what it made. Needs root and
``dockerd``; callers skip (or fail under ``RINGFENCE_REQUIRE_DOCKER``)
otherwise.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ringfence.backends.engines._engines import Engine

START_LIMIT = 60.0


@dataclass
class EngineProcess:
    engine: Engine
    process: subprocess.Popen[bytes]
    bridge: str
    base: Path
    log: Path


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(
    directory: Path, stem: str, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate
) -> None:
    (directory / f"{stem}-key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    (directory / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def make_certificates(directory: Path, *, ca_name: str = "ringfence test CA") -> None:
    """``ca.pem``, ``server(.pem|-key.pem)`` for 127.0.0.1/localhost, ``client(...)``."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name(ca_name))
        .issuer_name(_name(ca_name))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write(directory, "ca", ca_key, ca)
    for stem, usage in (
        ("server", ExtendedKeyUsageOID.SERVER_AUTH),
        ("client", ExtendedKeyUsageOID.CLIENT_AUTH),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(f"ringfence test {stem}"))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if stem == "server":
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        _write(directory, stem, key, builder.sign(ca_key, hashes.SHA256()))


def can_start_engine() -> str | None:
    """Why a second engine cannot start here, or None."""
    if os.geteuid() != 0:
        return "a second dockerd needs root"
    if shutil.which("dockerd") is None or shutil.which("ip") is None:
        return "dockerd or ip (iproute2) is not installed"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_dir_and_bridge(base: Path) -> tuple[Path, str]:
    """A short run directory (linked from ``base/run``) and a bridge of the engine's own."""
    # Short paths: dockerd's exec root holds unix sockets (108-byte limit).
    run = Path("/tmp") / f"rfe-{secrets.token_hex(4)}"
    run.mkdir()
    (base / "run").symlink_to(run)
    bridge = f"rfe{secrets.token_hex(4)}"
    octet = 16 + secrets.randbelow(200)
    subprocess.run(["ip", "link", "add", "name", bridge, "type", "bridge"], check=True)
    subprocess.run(["ip", "addr", "add", f"172.29.{octet}.1/24", "dev", bridge], check=True)
    subprocess.run(["ip", "link", "set", bridge, "up"], check=True)
    return run, bridge


def start_unix_engine(
    base: Path, *, name: str = "unix-second", load_images: tuple[str, ...] = ()
) -> EngineProcess:
    """A second engine on a unix socket of its own (``base/run/docker.sock``), e.g. for
    an sshd in front of it; otherwise as :func:`start_tls_engine`."""
    run, bridge = _run_dir_and_bridge(base)
    engine = Engine(name=name, base_url=f"unix://{run / 'docker.sock'}")
    return _start(base, run, bridge, ["-H", f"unix://{run / 'docker.sock'}"], engine, load_images)


def start_tls_engine(
    base: Path, *, name: str = "tls-loopback", load_images: tuple[str, ...] = ()
) -> EngineProcess:
    """Start a TLS engine under ``base`` (certs, data, exec root); load ``load_images`` into it."""
    certs = base / "certs"
    make_certificates(certs)
    run, bridge = _run_dir_and_bridge(base)
    port = _free_port()
    listen = [
        "-H", f"tcp://127.0.0.1:{port}",
        "--tlsverify",
        "--tlscacert", str(certs / "ca.pem"),
        "--tlscert", str(certs / "server.pem"),
        "--tlskey", str(certs / "server-key.pem"),
    ]  # fmt: skip
    engine = Engine(
        name=name,
        base_url=f"tcp://127.0.0.1:{port}",
        tls_ca=certs / "ca.pem",
        tls_cert=certs / "client.pem",
        tls_key=certs / "client-key.pem",
    )
    return _start(base, run, bridge, listen, engine, load_images)


def _start(
    base: Path,
    run: Path,
    bridge: str,
    listen: list[str],
    engine: Engine,
    load_images: tuple[str, ...],
) -> EngineProcess:
    """dockerd listening on ``listen``, ready, with ``load_images`` copied in (stopped again
    when any step fails)."""
    log = base / "dockerd.log"
    with log.open("ab") as log_file:
        process = _spawn_dockerd(base, run, listen, bridge, log_file)
    handle = EngineProcess(engine, process, bridge, base, log)
    try:
        _wait_ready(handle)
        for image in load_images:
            copy_image(image, engine)
    except BaseException:
        stop_engine(handle)
        raise
    return handle


def _spawn_dockerd(
    base: Path, run: Path, listen: list[str], bridge: str, log_file: Any
) -> subprocess.Popen[bytes]:
    config = Path("/etc/docker/daemon.json")  # the runtimes the main engine has (runsc)
    return subprocess.Popen(
        [
            "dockerd",
            "--data-root", str(base / "data"),
            "--exec-root", str(run / "exec"),
            "--pidfile", str(run / "docker.pid"),
            *listen,
            "--bridge", bridge,
            "--iptables=false",
            "--ip-masq=false",
            "--config-file", str(config) if config.exists() else os.devnull,
        ],
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip


def _client(engine: Engine):  # type: ignore[no-untyped-def]
    from ringfence.backends.docker._api import connect_docker

    return connect_docker(engine.base_url, tls=engine.tls_config(), timeout=30)


def _wait_ready(handle: EngineProcess) -> None:
    deadline = time.monotonic() + START_LIMIT
    last: BaseException | None = None
    while time.monotonic() < deadline:
        if handle.process.poll() is not None:
            raise RuntimeError(f"dockerd exited: {handle.log.read_text()[-2000:]}")
        try:
            _client(handle.engine).close()
            return
        except Exception as exc:  # retried until the deadline
            last = exc
            time.sleep(0.3)
    raise RuntimeError(f"the engine did not start in {START_LIMIT} s: {last}")


def copy_image(reference: str, engine: Engine) -> None:
    """``docker save`` from the local engine into ``engine`` (no registry here)."""
    from ringfence.backends.docker._api import connect_docker

    local = connect_docker()
    try:
        data = b"".join(local.images.get(reference).save(named=True))
    finally:
        local.close()
    remote = _client(engine)
    try:
        remote.images.load(data)
    finally:
        remote.close()


def stop_engine(handle: EngineProcess) -> None:
    """Stop the daemon (its containers with it) and remove its bridge and directories."""
    with contextlib.suppress(ProcessLookupError):
        handle.process.send_signal(signal.SIGTERM)
    try:
        handle.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(handle.process.pid, signal.SIGKILL)
        handle.process.wait(timeout=10)
    subprocess.run(["ip", "link", "delete", handle.bridge], check=False, capture_output=True)
    run = (handle.base / "run").resolve()
    shutil.rmtree(run, ignore_errors=True)
    shutil.rmtree(handle.base / "data", ignore_errors=True)

"""A remote server's OAuth metadata cannot aim ringfence at the person's own machine.

A server on another host answers ``mcp login`` with a 401 whose ``resource_metadata`` (or
whose metadata's endpoints) names ``http://127.0.0.1:PORT/...``: plain http to a loopback
host was allowed to any OAuth URL (the manifest's rule), so the SDK's flow sent its GET (and
then a registration POST of the server's choosing) to whatever listened there, a request
forgery against local services from a server anywhere. Such a URL is refused now, before
anything is sent, unless the MCP server itself is on a loopback host (a local setup).

The remote server is a stdlib HTTPS peer on this machine's non-loopback address with a
certificate made here; the loopback service is a bare socket that counts connections.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from mcp.shared.auth import AuthorizationCodeResult
from mcp_host_helpers import manifest, non_loopback_address

from ringfence.mcp_host.oauth._login import login
from ringfence.mcp_host.oauth._provider import LoginFlow
from ringfence.mcp_host.transport import _http
from ringfence.runtime import Unavailable, use_places
from ringfence.runtime._redact import Redactor


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    h = tmp_path / "rfhome"
    monkeypatch.setenv("RINGFENCE_NO_KEYRING", "1")
    with use_places(home=h):
        yield h


def _certificate(address: str, folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for ``address`` (its own CA): (certificate, key) files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ringfence test server")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


class _Listener:
    """A loopback service: counts the connections made to it and answers each 404."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.sock = socket.create_server((host, 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            with conn:
                conn.settimeout(10)
                try:
                    conn.recv(65536)  # the request's head (what it asks is not judged here)
                    conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


def _remote(address: str, cert: Path, key: Path, challenge: str) -> ThreadingHTTPServer:
    """The remote MCP server: every request is answered 401 with ``challenge``."""

    class Handler(BaseHTTPRequestHandler):
        def _refuse(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            if length:
                self.rfile.read(length)
            self.send_response(401)
            self.send_header("WWW-Authenticate", challenge)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = do_DELETE = _refuse

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((address, 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class _Browser:
    def __init__(self) -> None:
        self.urls: list[str] = []

    async def redirect(self, url: str) -> None:
        self.urls.append(url)

    async def callback(self) -> AuthorizationCodeResult:
        raise AssertionError("the login never reaches the browser")

    def flow(self) -> LoginFlow:
        return LoginFlow("http://127.0.0.1:9/callback", self.redirect, self.callback)


# Loopback spelled as plain http (allowed to any OAuth URL before), over https, and as a
# number the resolver reads as 127.0.0.1: each reached the listener.
_SPELLINGS = ("http://127.0.0.1:{port}", "https://localhost:{port}", "https://2130706433:{port}")


@pytest.mark.parametrize("spelling", _SPELLINGS)
async def test_a_remote_servers_metadata_cannot_send_the_flow_to_a_loopback_service(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelling: str
) -> None:
    address = non_loopback_address()
    cert, key = _certificate(address, tmp_path)
    trusted = ssl.create_default_context(cafile=str(cert))  # this test's server only
    monkeypatch.setattr(_http, "tls_context", lambda: trusted)
    victim = _Listener()
    base = spelling.format(port=victim.port)
    metadata = f"{base}/.well-known/oauth-protected-resource"
    remote = _remote(address, cert, key, f'Bearer resource_metadata="{metadata}"')
    try:
        url = f"https://{address}:{remote.server_address[1]}/mcp"
        config = manifest(
            f'[[server]]\nname = "far"\ntransport = "http"\nurl = "{url}"\nauth = "oauth"\n'
        ).servers[0]
        browser = _Browser()
        with pytest.raises(Unavailable) as caught:
            await login(config, Redactor(), browser.flow())
    finally:
        remote.shutdown()
        remote.server_close()
        victim.close()
    message = caught.value.message
    assert caught.value.field == "auth", caught.value
    assert "loopback" in message and f":{victim.port}" in message, message
    assert victim.connections == 0  # nothing reached the loopback service
    assert browser.urls == []


async def test_a_remote_servers_own_metadata_is_still_fetched(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule is about hosts nearer this machine than the server: metadata on the server's
    own host is fetched as before (the flow then fails on this peer's bare 401s)."""
    address = non_loopback_address()
    cert, key = _certificate(address, tmp_path)
    trusted = ssl.create_default_context(cafile=str(cert))
    monkeypatch.setattr(_http, "tls_context", lambda: trusted)
    remote = _remote(address, cert, key, "Bearer")
    try:
        url = f"https://{address}:{remote.server_address[1]}/mcp"
        config = manifest(
            f'[[server]]\nname = "far"\ntransport = "http"\nurl = "{url}"\nauth = "oauth"\n'
        ).servers[0]
        with pytest.raises(Unavailable) as caught:
            await login(config, Redactor(), _Browser().flow())
    finally:
        remote.shutdown()
        remote.server_close()
    assert "nearer" not in caught.value.message, caught.value.message


def _other_own_address(besides: str) -> str:
    """Another IPv4 address of this machine's interfaces (not loopback, not ``besides``)."""
    import psutil

    for addresses in psutil.net_if_addrs().values():
        for a in addresses:
            ip = ipaddress.ip_address(a.address) if a.family.name == "AF_INET" else None
            if ip is not None and not ip.is_loopback and a.address != besides:
                return a.address
    pytest.skip("this machine has a single non-loopback IPv4 address")


# This machine spelled as an address that is not loopback: the unspecified address (a
# connection to it reaches this machine: 0.0.0.0, and 0 as the resolver reads it) and another
# address of this machine's own interfaces. Each is "private" by its class, as near as a
# server on a private network, and the flow's GET reached a service listening on this machine.
_OWN_SPELLINGS = ("https://0.0.0.0:{port}", "https://0:{port}", "https://{other}:{port}")


@pytest.mark.parametrize("spelling", _OWN_SPELLINGS)
async def test_a_private_servers_metadata_cannot_send_the_flow_to_this_machine(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelling: str
) -> None:
    address = non_loopback_address()
    other = _other_own_address(address) if "{other}" in spelling else ""
    cert, key = _certificate(address, tmp_path)
    trusted = ssl.create_default_context(cafile=str(cert))  # this test's server only
    monkeypatch.setattr(_http, "tls_context", lambda: trusted)
    victim = _Listener("0.0.0.0")  # a local service on every interface
    base = spelling.format(port=victim.port, other=other)
    metadata = f"{base}/.well-known/oauth-protected-resource"
    remote = _remote(address, cert, key, f'Bearer resource_metadata="{metadata}"')
    try:
        url = f"https://{address}:{remote.server_address[1]}/mcp"
        config = manifest(
            f'[[server]]\nname = "far"\ntransport = "http"\nurl = "{url}"\nauth = "oauth"\n'
        ).servers[0]
        browser = _Browser()
        with pytest.raises(Unavailable) as caught:
            await login(config, Redactor(), browser.flow())
    finally:
        remote.shutdown()
        remote.server_close()
        victim.close()
    assert victim.connections == 0  # nothing reached the service on this machine
    message = caught.value.message
    assert caught.value.field == "auth", caught.value
    assert "address of this machine" in message and f":{victim.port}" in message, message
    assert browser.urls == []

"""The docker supervisor's attached stream to a TLS engine, over our own connection.

docker-py's attached socket to a TLS engine is an ``ssl.SSLSocket`` trio
cannot wait on; :func:`attach_tls` creates the exec through the SDK, then
starts it over a trio TLS connection verified with the engine's CA and our
client certificate (nothing from the environment: no ``REQUESTS_CA_BUNDLE``,
no proxy), and :class:`TLSStreamSocket` gives
:class:`._shell.Supervisor` the few socket calls it makes.
"""

from __future__ import annotations

import contextlib
import ssl
from urllib.parse import urlsplit

import docker
import trio

from ...runtime._errors import Unavailable
from ..engines._engines import Engine
from ._api import docker_call
from ._shell import create_attached_exec

__all__ = ["TLSStreamSocket", "attach_tls"]

_HEAD_LIMIT = 16384


class TLSStreamSocket:
    """The few socket calls :class:`._shell.Supervisor` makes, over a trio TLS stream."""

    def __init__(self, tls: trio.SSLStream[trio.SocketStream], leftover: bytes) -> None:
        self._tls = tls
        self._leftover = leftover

    def fileno(self) -> int:
        return self._tls.transport_stream.socket.fileno()

    async def send(self, data: bytes | memoryview) -> int:
        try:
            await self._tls.send_all(bytes(data))
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise OSError(f"the TLS stream to the engine broke: {exc}") from exc
        return len(data)

    async def recv(self, size: int) -> bytes:
        if self._leftover:
            data, self._leftover = self._leftover, b""
            return data
        try:
            return await self._tls.receive_some(size)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise OSError(f"the TLS stream from the engine broke: {exc}") from exc

    def close(self) -> None:
        self._tls.transport_stream.socket.close()


def _ssl_context(engine: Engine) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(engine.tls_ca))
    ctx.load_cert_chain(str(engine.tls_cert), str(engine.tls_key))
    return ctx


async def attach_tls(
    engine: Engine,
    client: docker.DockerClient,
    container_id: str,
    argv: list[str],
    user: str,
    environment: list[str] | None = None,
) -> tuple[str, TLSStreamSocket]:
    """Create an exec (SDK) and start it attached over our own verified TLS connection.

    Raises Unavailable naming the engine when it cannot be reached or does
    not switch the connection to the raw stream.
    """
    exec_id = await docker_call(create_attached_exec, client, container_id, argv, user, environment)
    url = urlsplit(engine.base_url.replace("tcp://", "https://", 1))
    host, port = url.hostname or "127.0.0.1", url.port or 2376
    body = b'{"Detach":false,"Tty":false}'
    request = (
        f"POST /v{client.api.api_version}/exec/{exec_id}/start HTTP/1.1\r\n"
        f"Host: {host}:{port}\r\nUser-Agent: ringfence\r\nContent-Type: application/json\r\n"
        f"Connection: Upgrade\r\nUpgrade: tcp\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    try:
        ctx = await trio.to_thread.run_sync(_ssl_context, engine)
        with trio.fail_after(30):
            tcp = await trio.open_tcp_stream(host, port)
            tls = trio.SSLStream(tcp, ctx, server_hostname=host)
            await tls.send_all(request)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = await tls.receive_some(4096)
                if not chunk or len(head) > _HEAD_LIMIT:
                    raise OSError("the engine closed the connection before the stream started")
                head += chunk
    except (OSError, ssl.SSLError, trio.BrokenResourceError, trio.TooSlowError) as exc:
        raise Unavailable(
            f"engine {engine.name} ({engine.base_url}): cannot attach to the sandbox shell "
            f"over TLS ({type(exc).__name__}: {exc})"
        ) from None
    header, _, rest = head.partition(b"\r\n\r\n")
    status = header.split(b"\r\n", 1)[0]
    if b" 101 " not in status and b" 200 " not in status:
        with contextlib.suppress(Exception):
            tcp.socket.close()
        raise Unavailable(
            f"engine {engine.name} ({engine.base_url}) refused to attach to the sandbox shell: "
            f"{status.decode('latin-1')!r}"
        )
    return exec_id, TLSStreamSocket(tls, rest)

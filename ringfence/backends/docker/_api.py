"""The one place ringfence talks to the docker SDK's client and translates its errors.

Every blocking docker-py call in ringfence runs in a worker thread
(``trio.to_thread.run_sync``) inside :func:`map_docker_errors`, which turns
every docker-py, requests and socket exception into a
:class:`~ringfence.runtime.RingfenceError` with a message that says what to do.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import docker
import docker.errors
import docker.tls
import requests.exceptions
import trio
from docker.constants import DEFAULT_DOCKER_API_VERSION
from docker.utils import kwargs_from_env, version_lt

from ...runtime._errors import InvalidArguments, RingfenceError, ToolError, Unavailable

# Re-exported for backends/_docker.py, which imports it from here, until it imports it
# from ._images (this module no longer imports anything back from _images' importers).
from ._images import docker_location, image_missing as image_missing

__all__ = [
    "MIN_API_VERSION",
    "connect_docker",
    "docker_call",
    "image_missing",
    "map_docker_errors",
    "translate_docker_error",
]

T = TypeVar("T")

# Docker Engine 20.10 (Debian 12's docker.io) speaks 1.41; nothing older is supported.
MIN_API_VERSION = "1.41"
CLIENT_TIMEOUT = 30.0

START_DAEMON = (
    "start it (`sudo systemctl start docker`, or `sudo dockerd &` where there is no systemd) "
    "or point DOCKER_HOST at a running daemon; `ringfence doctor` checks it"
)


def _unreachable(exc: BaseException) -> Unavailable:
    return Unavailable(
        f"the Docker daemon is not reachable at {docker_location()} ({type(exc).__name__}: {exc}); "
        + START_DAEMON
    )


def _tool(prefix: str) -> Callable[[BaseException], RingfenceError]:
    return lambda exc: ToolError(f"{prefix}: {exc}")


def _unavailable(prefix: str) -> Callable[[BaseException], RingfenceError]:
    return lambda exc: Unavailable(f"{prefix}: {exc}")


def _invalid(prefix: str) -> Callable[[BaseException], RingfenceError]:
    return lambda exc: InvalidArguments(f"{prefix}: {exc}")


def _api_error(exc: BaseException) -> RingfenceError:
    assert isinstance(exc, docker.errors.APIError)
    explanation = exc.explanation or str(exc)
    if "No such image" in explanation:
        return Unavailable(f"a sandbox image is missing: {explanation}")
    return ToolError(f"the Docker daemon refused ({exc.status_code}): {explanation}")


# Every exception class docker.errors defines, most specific first (a test checks
# that none is missing). Each maps to a RingfenceError factory.
DOCKER_ERRORS: dict[type[BaseException], Callable[[BaseException], RingfenceError]] = {
    docker.errors.ImageNotFound: lambda exc: Unavailable(f"a sandbox image is missing: {exc}"),
    docker.errors.NotFound: _unavailable("a Docker object ringfence needs is gone"),
    docker.errors.APIError: _api_error,
    docker.errors.BuildError: _tool("building the sandbox image failed"),
    docker.errors.ContainerError: _tool("a container failed"),
    docker.errors.ImageLoadError: _tool("loading an image failed"),
    docker.errors.StreamParseError: _tool(
        "the Docker daemon sent a stream ringfence could not parse"
    ),
    docker.errors.DeprecatedMethod: _tool("ringfence used a deprecated docker SDK method"),
    docker.errors.InvalidArgument: _invalid("invalid Docker argument"),
    docker.errors.InvalidRepository: _invalid("invalid image reference"),
    docker.errors.NullResource: _invalid("empty Docker resource id"),
    docker.errors.TLSParameterError: _unavailable("the Docker TLS settings are invalid"),
    docker.errors.InvalidConfigFile: _unavailable("the Docker client configuration is invalid"),
    docker.errors.InvalidVersion: _unavailable("the Docker API version is not supported"),
    docker.errors.ContextAlreadyExists: _unavailable("Docker context error"),
    docker.errors.ContextNotFound: _unavailable("the Docker context does not exist"),
    docker.errors.ContextException: _unavailable("Docker context error"),
    docker.errors.MissingContextParameter: _unavailable("the Docker context is incomplete"),
    # Raised for "Error while fetching server API version" and friends: no daemon.
    docker.errors.DockerException: _unreachable,
}

# Transport errors below docker-py: the daemon is not there (or went away).
TRANSPORT_ERRORS: dict[type[BaseException], Callable[[BaseException], RingfenceError]] = {
    requests.exceptions.Timeout: lambda exc: Unavailable(
        f"the Docker daemon at {docker_location()} did not answer within {CLIENT_TIMEOUT:.0f} s ({exc})"
    ),
    requests.exceptions.RequestException: _unreachable,
    OSError: _unreachable,
}


def translate_docker_error(exc: BaseException) -> RingfenceError:
    """The RingfenceError for an exception raised by docker-py or its transport."""
    if isinstance(exc, RingfenceError):
        return exc
    for table in (DOCKER_ERRORS, TRANSPORT_ERRORS):
        for cls, make in table.items():
            if isinstance(exc, cls):
                return make(exc)
    return ToolError(f"unexpected error from the docker SDK: {type(exc).__name__}: {exc}")


_TRANSLATED: tuple[type[BaseException], ...] = (
    docker.errors.DockerException,
    docker.errors.StreamParseError,
    requests.exceptions.RequestException,
    OSError,
)


@contextlib.contextmanager
def map_docker_errors() -> Iterator[None]:
    """Translate docker-py / requests / socket exceptions raised inside into RingfenceErrors.

    ``docker.errors.APIError`` is a ``requests.HTTPError`` and so an
    ``OSError``; everything is matched most-specific-first by
    :func:`translate_docker_error`. Other exceptions (bugs) pass through.
    """
    try:
        yield
    except _TRANSLATED as exc:
        raise translate_docker_error(exc) from exc


async def docker_call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run one blocking docker-py call in a worker thread, errors translated."""
    with map_docker_errors():
        return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs))


def _probe_unix_socket(url: str) -> None:
    """Fail fast (and without leaking a descriptor) when a unix-socket daemon is absent.

    docker-py leaves the socket of a failed unix connect open; probing first
    keeps that path out of reach for the common "no daemon" case.
    """
    if not url.startswith(("unix://", "http+unix://")):
        return
    path = "/" + url.split("://", 1)[1].lstrip("/")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(CLIENT_TIMEOUT)
        try:
            probe.connect(path)
        except OSError as exc:
            raise Unavailable(
                f"the Docker daemon is not reachable at {url} ({exc.strerror or exc}); "
                + START_DAEMON
            ) from None


def _refuse_ssh(url: str, from_env: bool) -> None:
    """docker-py's own ssh transport is never used: with paramiko it *warns* about a host key
    it does not know and goes on (trust on first use nobody asked for), and with the OpenSSH
    client it reads the user's ~/.ssh/config. An engine table pins the key instead."""
    if not url.startswith("ssh://"):
        return
    raise Unavailable(
        f"{'DOCKER_HOST' if from_env else 'base_url'} is {url}: ringfence reaches an ssh:// "
        "engine only through an engine table that pins its host key (options.engines: "
        "base_url, ssh_known_hosts, ssh_identity; docs/backends.md), never through docker-py's "
        "ssh transport, which does not pin it"
    )


def _plaintext_refusal(url: str, from_env: bool) -> InvalidArguments | None:
    """Why the client for ``url`` (docker-py's own address, after its TLS choice) must not be
    used: the Engine API in plain text to a host other than this one. Whoever is on the path
    reads every command, file and output and can run anything on the engine as root. The
    loopback interface (an address in 127.0.0.0/8, ``::1`` or ``localhost``) never leaves
    this machine, so a local tunnel or proxy stays usable."""
    if not url.startswith("http://"):  # https://, or http+docker:// (a unix socket)
        return None
    host = urllib.parse.urlsplit(url).hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name other than localhost: it may resolve anywhere
        loopback = False
    if loopback:
        return None
    name = "DOCKER_HOST" if from_env else "options.base_url"
    return InvalidArguments(
        f"{name} is {url.replace('http://', 'tcp://', 1)}: the Engine API in plain text (no "
        f"TLS) to {host or 'a host'} that is not this machine's loopback; anyone on the path "
        "could read and run anything there. Give the engine as an engine table with TLS "
        '(options.engines: base_url = "tcp://host:2376", tls_ca, tls_cert, tls_key; '
        "docs/backends.md), reach it over ssh:// (an engine table that pins its host key), or "
        "forward it to 127.0.0.1",
        field=name,
    )


def connect_docker(
    base_url: str | None = None,
    *,
    tls: docker.tls.TLSConfig | None = None,
    timeout: float = CLIENT_TIMEOUT,
) -> docker.DockerClient:
    """A client for the daemon at ``base_url`` (default: ``DOCKER_HOST`` or the local socket).

    Blocking (one ``/version`` round trip). The API version is negotiated like
    the docker CLI does: the lower of the daemon's and the SDK's, refused below
    :data:`MIN_API_VERSION`. ``trust_env`` is off so ``REQUESTS_CA_BUNDLE`` or a
    proxy variable cannot redirect or re-trust the connection. ``tls`` (an
    engine's certificates, see :mod:`..engines._engines`) replaces the environment's
    ``DOCKER_TLS_VERIFY``/``DOCKER_CERT_PATH`` for an explicit ``base_url``.

    Raises Unavailable when the daemon cannot be reached or is too old,
    naming the address that was tried.
    """
    try:
        with map_docker_errors():
            kwargs = kwargs_from_env()
            if base_url is not None:
                kwargs["base_url"] = base_url
            if tls is not None:
                kwargs["tls"] = tls
            _refuse_ssh(str(kwargs.get("base_url") or ""), base_url is None)
            _probe_unix_socket(str(kwargs.get("base_url") or "unix:///var/run/docker.sock"))
            client = _client(MIN_API_VERSION, timeout, kwargs)
            refusal = _plaintext_refusal(str(client.api.base_url), base_url is None)
            if refusal is not None:  # before a single request
                client.close()
                raise refusal
            try:
                server = client.api.version(api_version=False)
            except BaseException:
                client.close()
                raise
    except Unavailable as exc:
        if base_url is None or base_url in exc.message:
            raise
        # map_docker_errors names DOCKER_HOST's daemon and how to start a local one; the
        # daemon tried was another one, so the message names that one (and no local advice).
        local = f"at {docker_location()} "
        text = exc.message.replace("; " + START_DAEMON, "")
        if local in text:
            text = text.replace(local, f"at {base_url} ", 1)
        else:
            text = f"{text} (engine {base_url})"
        raise exc.with_(message=text) from exc.__cause__
    except ValueError as exc:  # a malformed address (bad port, scheme) before any connection
        where = base_url if base_url is not None else docker_location()
        raise InvalidArguments(
            f"{where!r} is not a Docker daemon address ({exc}); use unix:///path/docker.sock, "
            "tcp://host:port (ssh://: an engine table, docs/backends.md)",
            field="DOCKER_HOST" if base_url is None else "options.base_url",
        ) from None
    server_api = str(server.get("ApiVersion", "0"))
    negotiated = (
        server_api
        if version_lt(server_api, DEFAULT_DOCKER_API_VERSION)
        else DEFAULT_DOCKER_API_VERSION
    )
    if version_lt(negotiated, MIN_API_VERSION):
        client.close()
        raise Unavailable(
            f"the Docker daemon at {docker_location()} speaks API {server_api} (Engine "
            f"{server.get('Version', '?')}); ringfence needs API {MIN_API_VERSION} "
            "(Docker Engine 20.10) or newer"
        )
    if negotiated != client.api.api_version:
        # The version is fixed when a client is made (no request is sent for it): the one
        # that asked the daemon's version goes, one speaking the negotiated version comes.
        client.close()
        client = _client(negotiated, timeout, kwargs)
    return client


def _client(version: str, timeout: float, kwargs: dict[str, Any]) -> docker.DockerClient:
    """A client speaking API ``version`` (no request sent), the environment not trusted, no
    redirect followed and no answer read past :data:`RESPONSE_LIMIT` (:func:`_bounded_response`)."""
    client = docker.DockerClient(version=version, timeout=int(timeout), **kwargs)
    client.api.trust_env = False  # requests' Session setting: no REQUESTS_CA_BUNDLE, no proxy
    client.api.hooks["response"].append(_bounded_response)  # requests' public hooks
    return client


# The largest answer of the Engine API read whole (a container list, an inspect: a few KiB
# to a few MiB). docker-py reads every answer whole and decodes its JSON: an engine that
# answered /info with 128 MiB had this process hold some 400 MiB of it.
RESPONSE_LIMIT = 16 << 20


def _response_too_large(url: str, size: int | str) -> Unavailable:
    where = urllib.parse.urlsplit(url)
    return Unavailable(
        f"the Docker engine answered {where.path} with more than {RESPONSE_LIMIT} bytes "
        f"({size}); an Engine API answer is a few KiB: refused, nothing of it is used"
    )


class _BoundedBody:
    """A response's body (urllib3's, which requests reads through :meth:`stream` when it
    reads a whole answer) that raises Unavailable past :data:`RESPONSE_LIMIT` decoded bytes.
    Everything else is the wrapped body's."""

    def __init__(self, raw: Any, url: str) -> None:
        self._raw = raw
        self._url = url

    def stream(self, amt: int | None = None, decode_content: bool | None = None) -> Iterator[bytes]:
        taken = 0
        for chunk in self._raw.stream(amt, decode_content=decode_content):
            taken += len(chunk)
            if taken > RESPONSE_LIMIT:
                self._raw.close()
                raise _response_too_large(self._url, "more, still coming")
            yield chunk

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


def _bounded_response(response: Any, *args: Any, **kwargs: Any) -> Any:
    """requests' response hook: a redirect is refused (the Engine API makes none; requests
    would follow it to any https address with the request, its body and our client
    certificate); an answer read whole (not a stream: logs, attached sockets, archives) is
    refused by its Content-Length, or as it arrives, past :data:`RESPONSE_LIMIT`."""
    if response.is_redirect:
        response.close()
        where = urllib.parse.urlsplit(response.url).path
        raise Unavailable(
            f"the Docker engine answered {where} with a redirect ({response.status_code} to "
            f"{response.headers.get('Location', '')[:200]!r}); the Engine API makes none, and "
            "ringfence sends no request where an engine points it: refused"
        )
    if kwargs.get("stream") or response.status_code == 101:
        return response
    length = response.headers.get("Content-Length", "")
    if length.isdigit() and int(length) > RESPONSE_LIMIT:
        response.close()
        raise _response_too_large(response.url, f"{length} announced")
    response.raw = _BoundedBody(response.raw, response.url)
    return response

"""Docker engines other than the local one: how to reach them, and which one a session goes to.

An :class:`Engine` names a Docker Engine by its API address (``unix://``,
``tcp://`` with TLS client certificates, or ``ssh://user@host[:port]``
through an OpenSSH forward of the engine's socket whose host key is pinned,
:mod:`._ssh`) and says how its files relate to ours: a ``unix://`` engine
shares this machine's file system, so the docker backend bind-mounts the
roots; any other engine is *remote*, and the workspace is shipped into the
sandbox instead (:mod:`._ship`), whatever address it has. ``ship`` overrides
that choice (``always`` is how the tests prove the shipping path on a
loopback engine).

:func:`place` is the pool's placement rule: every engine is asked for its
own load (:func:`probe_engine`: running containers, CPUs, memory, one
``/info`` round trip each, concurrently) and the session goes to the
least-loaded engine that answered. An engine that does not answer is
skipped with its reason; when none answers, placement fails with
``unavailable`` naming each engine and why. Placement happens once per
session: a session never moves to another engine (its in-sandbox state
would be lost), so an engine that goes away fails that session's next call.

Non-guarantees: placement reads a moment's load, it does not reserve
capacity (two kernels placing at once can pick the same engine); TLS and
SSH material is read from files the operator names, and ringfence neither
creates nor rotates it (the one exception: ``ssh_accept_new`` lets ssh add
a first-seen host key to the named known_hosts file).
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import trio

from ...runtime._errors import InvalidArguments, RingfenceError, Unavailable
from .._mounts import place_in_file_system

if TYPE_CHECKING:  # _ssh is imported where an ssh engine is probed
    from ._ssh import SSHForward

__all__ = [
    "Engine",
    "EngineLoad",
    "ShipMode",
    "parse_engines",
    "place",
    "place_keeping",
    "probe_engine",
    "refuse_engine_files_inside_roots",
]

ShipMode = Literal["auto", "always", "never"]
SHIP_MODES: tuple[ShipMode, ...] = ("auto", "always", "never")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z")
_SCHEMES = ("unix://", "tcp://", "ssh://", "http://", "https://")
# Every key of an engine table (the docs' list is checked against it).
ENGINE_KEYS = (
    "name",
    "base_url",
    "tls_ca",
    "tls_cert",
    "tls_key",
    "ship",
    "ssh_known_hosts",
    "ssh_identity",
    "ssh_accept_new",
    "ssh_socket",
)
SSH_KEYS = ("ssh_known_hosts", "ssh_identity", "ssh_accept_new", "ssh_socket")
DEFAULT_SSH_SOCKET = "/var/run/docker.sock"
# ssh://[user@]host[:port]: a host name, an IPv4 address or a bracketed IPv6 one; nothing else
# (no path, no query, no option a leading '-' could smuggle onto ssh's command line).
_SSH_URL = re.compile(
    r"^ssh://(?:(?P<user>[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})@)?"
    r"(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\])"
    r"(?::(?P<port>[0-9]{1,5}))?\Z"
)
# A file path handed to ssh's option parser: characters it gives no meaning (no spaces, which
# split UserKnownHostsFile; no quotes or backslashes; no '%' tokens or '${}' variables).
_SSH_PATH = re.compile(r"^/[A-Za-z0-9._/+@,=-]*\Z")
PROBE_TIMEOUT = 5.0  # an engine that takes longer to say how loaded it is, is not placed on


@dataclass(frozen=True)
class Engine:
    """One Docker Engine a sandbox can run on.

    ``base_url`` is its API address. ``tls_ca``/``tls_cert``/``tls_key`` are
    PEM files (all three, or none): the engine's CA and this client's
    certificate and key; with them the connection is verified TLS and
    nothing from the environment (``REQUESTS_CA_BUNDLE``, proxies) can
    change it. ``ship`` chooses how the workspace reaches the sandbox:
    ``auto`` bind-mounts on a ``unix://`` engine and ships elsewhere,
    ``always``/``never`` force one (``never`` on a remote engine mounts paths
    of *that* machine: only for an engine known to share the file system).

    An ``ssh://`` engine is reached through ``ssh -L`` of ``ssh_socket`` (the
    engine's socket on that machine) to a private local socket (:mod:`._ssh`).
    ``ssh_known_hosts`` is required: the file that pins the engine's host key;
    ssh runs with strict checking against it alone, so an unknown or changed
    key is refused. ``ssh_accept_new`` (the operator's explicit choice) lets
    ssh add a key it has never seen to that file (trust on first use).
    ``ssh_identity`` is the client's private key (default: OpenSSH's own
    default identity files; never an agent).
    """

    name: str
    base_url: str
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    ship: ShipMode = "auto"
    ssh_known_hosts: Path | None = None
    ssh_identity: Path | None = None
    ssh_accept_new: bool = False
    ssh_socket: str = DEFAULT_SSH_SOCKET

    @property
    def local(self) -> bool:
        """Whether the engine's paths are this machine's (decides bind-mount vs ship)."""
        if self.ship != "auto":
            return self.ship == "never"
        return self.base_url.startswith("unix://")

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    @property
    def ssh(self) -> bool:
        """Whether the engine is reached through an ssh forward (:mod:`._ssh`)."""
        return self.base_url.startswith("ssh://")

    def ssh_target(self) -> tuple[str | None, str, int]:
        """``(user, host, port)`` of an ``ssh://`` address (checked by :meth:`from_mapping`)."""
        found = _SSH_URL.fullmatch(self.base_url)
        if found is None:
            raise InvalidArguments(
                f"engine {self.name}: {self.base_url!r} is not ssh://[user@]host[:port]",
                field="base_url",
            )
        host = found["host"].strip("[]")
        return found["user"], host, int(found["port"] or 22)

    def describe(self) -> dict[str, Any]:
        """What events record about the engine (no key material, only where it is)."""
        return {
            "engine": self.name,
            "base_url": self.base_url,
            "tls": self.tls,
            **({"ssh_known_hosts": str(self.ssh_known_hosts)} if self.ssh else {}),
            "workspace": "bind-mount" if self.local else "shipped",
        }

    def as_table(self) -> dict[str, Any]:
        """The configuration table :meth:`from_mapping` reads back into this engine."""
        table: dict[str, Any] = {"name": self.name, "base_url": self.base_url, "ship": self.ship}
        for key in ("tls_ca", "tls_cert", "tls_key", "ssh_known_hosts", "ssh_identity"):
            if getattr(self, key) is not None:
                table[key] = str(getattr(self, key))
        if self.ssh:
            table["ssh_accept_new"] = self.ssh_accept_new
            table["ssh_socket"] = self.ssh_socket
        return table

    def tls_config(self) -> Any:
        """The docker SDK's TLS configuration, or None for a plain connection."""
        if not self.tls:
            return None
        import docker.tls  # the SDK loads only where an engine is used

        return docker.tls.TLSConfig(
            client_cert=(str(self.tls_cert), str(self.tls_key)),
            ca_cert=str(self.tls_ca),
            verify=True,
        )

    @classmethod
    def from_mapping(cls, value: Mapping[str, Any], *, field: str) -> Engine:
        """An engine from configuration (the keys of :data:`ENGINE_KEYS`).

        Every problem raises InvalidArguments naming ``field`` and the key;
        the TLS and SSH files must exist and be readable now, so a typo is
        reported at configuration time, not at the first command.
        """
        if not isinstance(value, Mapping):
            raise InvalidArguments(f"{field} must be a table, not {value!r}", field=field)
        known = set(ENGINE_KEYS)
        unknown = sorted(set(value) - known)
        if unknown:
            raise InvalidArguments(
                f"{field}: unknown key(s) {unknown}; known: {sorted(known)}", field=field
            )
        name, base_url = value.get("name"), value.get("base_url")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise InvalidArguments(
                f"{field}.name must be a short name (letters, digits, '_.-'), not {name!r}",
                field=f"{field}.name",
            )
        if not isinstance(base_url, str) or not base_url.startswith(_SCHEMES):
            raise InvalidArguments(
                f"{field}.base_url must be an engine address starting with one of "
                f"{', '.join(_SCHEMES)}, not {base_url!r}",
                field=f"{field}.base_url",
            )
        if base_url.startswith("http://"):
            # docker-py speaks http:// in plain text even with certificates given: the
            # workspace, every command and the Engine API's root on that machine in the clear.
            raise InvalidArguments(
                f"{field}.base_url {base_url!r} is the Engine API in plain text (no TLS, even "
                "with certificates); give tcp://host:port or https://host:port with tls_ca, "
                "tls_cert and tls_key",
                field=f"{field}.base_url",
            )
        ship = value.get("ship", "auto")
        if ship not in SHIP_MODES:
            raise InvalidArguments(
                f"{field}.ship must be one of {list(SHIP_MODES)}, not {ship!r}",
                field=f"{field}.ship",
            )
        paths: dict[str, Path | None] = {}
        for key in ("tls_ca", "tls_cert", "tls_key"):
            paths[key] = _readable(value.get(key), f"{field}.{key}")
        given = [k for k, p in paths.items() if p is not None]
        if given and len(given) != 3:
            missing = sorted(set(paths) - set(given))
            raise InvalidArguments(
                f"{field}: TLS needs tls_ca, tls_cert and tls_key together; missing {missing}",
                field=f"{field}.{missing[0]}",
            )
        if base_url.startswith(("tcp://", "https://")) and not given:
            # The Engine API on TCP without TLS is root on that machine for anyone who can
            # reach the port: ringfence never uses it that way.
            raise InvalidArguments(
                f"{field}: {base_url} is a TCP engine without TLS; give tls_ca, tls_cert and "
                "tls_key (an unauthenticated Engine API is root on its machine)",
                field=f"{field}.tls_cert",
            )
        ssh = _ssh_settings(value, base_url, field, tls=bool(given))
        return cls(
            name=name,
            base_url=base_url,
            tls_ca=paths["tls_ca"],
            tls_cert=paths["tls_cert"],
            tls_key=paths["tls_key"],
            ship=ship,
            **ssh,
        )


def _readable(raw: object, field: str, *, may_be_missing: bool = False) -> Path | None:
    """The file path at ``field`` (None when not given), readable now; else InvalidArguments.

    ``may_be_missing``: a file ssh creates (``ssh_accept_new``'s known_hosts) may be absent,
    but its directory must exist."""
    if raw is None:
        return None
    if not isinstance(raw, str | Path) or not str(raw):
        raise InvalidArguments(f"{field} must be a file path, not {raw!r}", field=field)
    path = Path(raw).expanduser()
    try:
        with path.open("rb"):
            pass
    except FileNotFoundError:
        if not (may_be_missing and path.parent.is_dir()):
            raise InvalidArguments(
                f"{field}: cannot read {path} (no such file)", field=field
            ) from None
    except OSError as exc:
        raise InvalidArguments(
            f"{field}: cannot read {path} ({exc.strerror or exc})", field=field
        ) from None
    return path


def _ssh_path(path: Path | None, field: str) -> Path | None:
    """``path`` made absolute, refused when ssh's option parser would read it differently."""
    if path is None:
        return None
    absolute = path.absolute()
    if not _SSH_PATH.fullmatch(str(absolute)):
        raise InvalidArguments(
            f"{field}: {str(absolute)!r} has characters ssh's options give a meaning to (spaces, "
            "quotes, '%', '$', '#', '\\'): use a path of letters, digits and '._/+@,=-'",
            field=field,
        )
    return absolute


def _ssh_settings(
    value: Mapping[str, Any], base_url: str, field: str, *, tls: bool
) -> dict[str, Any]:
    """The ``ssh_*`` keys of an engine table, checked against its address; InvalidArguments
    names the key."""
    if not base_url.startswith("ssh://"):
        extra = [k for k in SSH_KEYS if k in value]
        if extra:
            raise InvalidArguments(
                f"{field}.{extra[0]} is only for ssh:// engines, not {base_url}",
                field=f"{field}.{extra[0]}",
            )
        return {}
    if not _SSH_URL.fullmatch(base_url):
        raise InvalidArguments(
            f"{field}.base_url must be ssh://[user@]host[:port] (no path, password or options), "
            f"not {base_url!r}",
            field=f"{field}.base_url",
        )
    port = _SSH_URL.fullmatch(base_url)["port"]  # type: ignore[index]
    if port is not None and not 1 <= int(port) <= 65535:
        raise InvalidArguments(
            f"{field}.base_url: port {port} is out of range", field=f"{field}.base_url"
        )
    if tls:
        raise InvalidArguments(
            f"{field}: an ssh:// engine is authenticated by ssh (ssh_known_hosts, "
            "ssh_identity), not by tls_ca/tls_cert/tls_key",
            field=f"{field}.tls_cert",
        )
    accept_new = value.get("ssh_accept_new", False)
    if not isinstance(accept_new, bool):
        raise InvalidArguments(
            f"{field}.ssh_accept_new must be true or false, not {accept_new!r}",
            field=f"{field}.ssh_accept_new",
        )
    if value.get("ssh_known_hosts") is None:
        raise InvalidArguments(
            f"{field}: an ssh:// engine needs ssh_known_hosts, the known_hosts file that pins "
            "its host key (e.g. `ssh-keyscan -p PORT HOST > engine_known_hosts`, after checking "
            "the fingerprint with the engine's operator); ringfence never trusts a host key "
            "it has not been given, unless ssh_accept_new = true",
            field=f"{field}.ssh_known_hosts",
        )
    known_hosts = _ssh_path(
        _readable(value["ssh_known_hosts"], f"{field}.ssh_known_hosts", may_be_missing=accept_new),
        f"{field}.ssh_known_hosts",
    )
    identity = _ssh_path(
        _readable(value.get("ssh_identity"), f"{field}.ssh_identity"), f"{field}.ssh_identity"
    )
    remote = value.get("ssh_socket", DEFAULT_SSH_SOCKET)
    if not isinstance(remote, str) or not _SSH_PATH.fullmatch(remote) or ":" in remote:
        raise InvalidArguments(
            f"{field}.ssh_socket must be the absolute path of the engine's socket on its "
            f"machine (letters, digits and '._/+@,=-'), not {remote!r}",
            field=f"{field}.ssh_socket",
        )
    return {
        "ssh_known_hosts": known_hosts,
        "ssh_identity": identity,
        "ssh_accept_new": accept_new,
        "ssh_socket": remote,
    }


# The files an engine's trust rests on: what a session's tools must not be able to write
# (a pin, a CA: the next connection trusts whom the agent chose) or read (a key: root on the
# engine's machine).
TRUST_KEYS = ("tls_ca", "tls_cert", "tls_key", "ssh_known_hosts", "ssh_identity")


def refuse_engine_files_inside_roots(
    engines: Sequence[Engine], roots: Sequence[str | os.PathLike[str]]
) -> None:
    """Raise InvalidArguments (field ``options.engines[i].<key>``) when a workspace root holds
    a file an engine's trust rests on (:data:`TRUST_KEYS`), before any engine is contacted.

    Inside a root, every tool of the session writes it: ``write_file`` or a merged change
    set replaces the pinned host key or the CA, and the next forward or TLS connection (a
    TLS session's attach reads the CA file again) trusts an engine the agent chose; a client
    key there is readable, and it is root on the engine's machine. Judged by identity, not
    spelling, as ringfence's own home is: every directory holding the file, as given and as
    a link resolves, against each root's device and inode; the place in its file system
    (a file or directory bind-mounted from inside a root); a second name (a hard link) on a
    root's file system. A file that does not exist yet (``ssh_accept_new``) is judged by the
    directories that would hold it."""
    by_identity: dict[tuple[int, int], str] = {}
    places: list[tuple[str, tuple[str, str]]] = []
    for root in roots:
        st = os.stat(root)
        by_identity[(st.st_dev, st.st_ino)] = str(root)
        place = place_in_file_system(root)
        if place is not None:
            places.append((str(root), place))
    devices = {dev for dev, _ in by_identity}
    for i, engine in enumerate(engines):
        for key in TRUST_KEYS:
            path = getattr(engine, key)
            if path is None:
                continue
            why = _held_by_root(Path(path), by_identity, places, devices)
            if why is not None:
                raise InvalidArguments(
                    f"options.engines[{i}].{key} {path} of engine {engine.name} {why}: the "
                    "session's tools could rewrite it (pin another host key or CA, so the "
                    "next connection trusts an engine they chose) or read a key that is root "
                    "on the engine's machine; keep the engine's files outside every workspace "
                    "root",
                    field=f"options.engines[{i}].{key}",
                    engine=engine.name,
                    path=str(path),
                )


def _held_by_root(
    path: Path,
    by_identity: Mapping[tuple[int, int], str],
    places: Sequence[tuple[str, tuple[str, str]]],
    devices: set[int],
) -> str | None:
    """Why ``path`` is a root's to write (see :func:`refuse_engine_files_inside_roots`)."""
    spelled = Path(os.path.abspath(path))
    holders = [Path(os.path.realpath(spelled.parent))]
    if os.path.islink(spelled):
        holders.append(Path(os.path.realpath(spelled)).parent)
    for holder in holders:
        for where in (holder, *holder.parents):
            try:
                st = os.stat(where)
            except OSError:
                continue  # not made yet: the directories above it decide
            root = by_identity.get((st.st_dev, st.st_ino))
            if root is not None:
                return f"is inside the workspace root {root}"
    for target in {spelled, Path(os.path.realpath(spelled))}:
        here = place_in_file_system(target)
        if here is None:
            continue
        for root, (device, within) in places:
            top = within.rstrip("/")
            if here[0] == device and (here[1] == within or here[1].startswith(top + "/")):
                return f"is mounted from inside the workspace root {root}"
    try:
        st = os.stat(spelled)
    except OSError:
        return None
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and st.st_dev in devices:
        return f"has {st.st_nlink - 1} other name(s) (hard links) on a workspace root's file system"
    return None


def parse_engines(value: object, *, field: str = "options.engines") -> tuple[Engine, ...]:
    """A non-empty list of engines with distinct names, or InvalidArguments naming the entry."""
    if not isinstance(value, Sequence) or isinstance(value, str | bytes) or not value:
        raise InvalidArguments(f"{field} must be a non-empty list of engines", field=field)
    engines = tuple(Engine.from_mapping(v, field=f"{field}[{i}]") for i, v in enumerate(value))
    names = [e.name for e in engines]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InvalidArguments(f"{field}: engine names repeat: {dupes}", field=field)
    return engines


@dataclass(frozen=True)
class EngineLoad:
    """One engine's answer to "how busy are you", or why it gave none."""

    engine: Engine
    running: int = 0
    cpus: int = 0
    memory: int = 0
    error: str | None = None

    @property
    def reachable(self) -> bool:
        return self.error is None

    @property
    def score(self) -> float:
        """Running containers per CPU: lower is less loaded; unreachable is infinite."""
        if not self.reachable:
            return math.inf
        return self.running / max(self.cpus, 1)


async def probe_engine(engine: Engine, *, timeout: float = PROBE_TIMEOUT) -> EngineLoad:
    """Ask ``engine`` for its load (``/info``); never raises for an unreachable engine."""
    load, _ = await _probe(engine, timeout, keep=False)
    return load


async def _probe(
    engine: Engine, timeout: float, *, keep: bool
) -> tuple[EngineLoad, SSHForward | None]:
    """The engine's load; with ``keep``, an ssh engine's forward stays open for the caller
    (who then owns it) when the engine answered, else it is closed here."""
    # The docker SDK loads only where engines are used.
    from ..docker._api import connect_docker, map_docker_errors
    from ._ssh import START_LIMIT, open_forward

    def ask(url: str) -> dict[str, Any]:
        client = connect_docker(url, tls=engine.tls_config(), timeout=timeout)
        try:
            with map_docker_errors():
                return dict(client.info())
        finally:
            client.close()

    forward: SSHForward | None = None
    try:
        # An ssh engine's forward (key exchange, authentication) is not its load's answer.
        with trio.fail_after(timeout + 1 + (START_LIMIT if engine.ssh else 0)):
            if engine.ssh:
                forward = await open_forward(engine)
            url = forward.base_url if forward is not None else engine.base_url
            info = await trio.to_thread.run_sync(ask, url, abandon_on_cancel=True)
    except trio.TooSlowError:
        load = EngineLoad(engine, error=f"no answer within {timeout:g} s")
    except RingfenceError as exc:  # every docker, TLS, ssh and socket failure, mapped
        load = EngineLoad(engine, error=exc.message)
    except BaseException:
        if forward is not None:
            await forward.aclose()
        raise
    else:
        load = EngineLoad(
            engine,
            running=int(info.get("ContainersRunning") or 0),
            cpus=int(info.get("NCPU") or 0),
            memory=int(info.get("MemTotal") or 0),
        )
        if keep:
            return load, forward
    if forward is not None:
        await forward.aclose()
    return load, None


async def place(engines: Sequence[Engine]) -> tuple[Engine, list[EngineLoad]]:
    """The least-loaded reachable engine, and every engine's answer (for the event).

    Ties go to the engine listed first. Raises Unavailable naming every
    engine and its reason when none answers.
    """
    engine, loads, forward = await place_keeping(engines)
    if forward is not None:
        await forward.aclose()
    return engine, loads


async def place_keeping(
    engines: Sequence[Engine],
) -> tuple[Engine, list[EngineLoad], SSHForward | None]:
    """:func:`place`, and the chosen engine's ssh forward still open (None for other engines):
    the session takes it over instead of paying a second ssh handshake. Every other forward
    the probes opened is closed, also on failure or cancellation."""
    probed: list[tuple[EngineLoad, SSHForward | None] | None] = [None] * len(engines)
    kept: SSHForward | None = None

    async def one(i: int) -> None:
        probed[i] = await _probe(engines[i], PROBE_TIMEOUT, keep=True)

    try:
        async with trio.open_nursery() as nursery:
            for i in range(len(engines)):
                nursery.start_soon(one, i)
        answered = [pair[0] for pair in probed if pair is not None]
        reachable = [load for load in answered if load.reachable]
        if not reachable:
            reasons = "; ".join(
                f"{load.engine.name} ({load.engine.base_url}): {load.error}" for load in answered
            )
            raise Unavailable(f"no Docker engine of the pool is reachable: {reasons}")
        best = min(reachable, key=lambda load: load.score)  # min keeps the first of equals
        kept = next(pair[1] for pair in probed if pair is not None and pair[0] is best)
        return best.engine, answered, kept
    finally:
        for pair in probed:
            if pair is not None and pair[1] is not None and pair[1] is not kept:
                await pair[1].aclose()

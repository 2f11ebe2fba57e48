"""Docker engines other than the local one: how to reach them, and which one a session goes to.

An :class:`Engine` names a Docker Engine by its API address (``unix://``,
``tcp://`` with TLS client certificates, or ``ssh://`` through docker-py's
own support) and says how its files relate to ours: a ``unix://`` engine
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
capacity (two kernels placing at once can pick the same engine); TLS
material is read from files the operator names, and ringfence neither
creates nor rotates it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import trio

from ...runtime._errors import InvalidArguments, RingfenceError, Unavailable

__all__ = ["Engine", "EngineLoad", "ShipMode", "parse_engines", "place", "probe_engine"]

ShipMode = Literal["auto", "always", "never"]
SHIP_MODES: tuple[ShipMode, ...] = ("auto", "always", "never")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_SCHEMES = ("unix://", "tcp://", "ssh://", "http://", "https://")
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
    """

    name: str
    base_url: str
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    ship: ShipMode = "auto"

    @property
    def local(self) -> bool:
        """Whether the engine's paths are this machine's (decides bind-mount vs ship)."""
        if self.ship != "auto":
            return self.ship == "never"
        return self.base_url.startswith("unix://")

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    def describe(self) -> dict[str, Any]:
        """What events record about the engine (no key material, only where it is)."""
        return {
            "engine": self.name,
            "base_url": self.base_url,
            "tls": self.tls,
            "workspace": "bind-mount" if self.local else "shipped",
        }

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
        """An engine from configuration (``{name, base_url, tls_ca, tls_cert, tls_key, ship}``).

        Every problem raises InvalidArguments naming ``field`` and the key;
        the TLS files must exist and be readable now, so a typo is reported
        at configuration time, not at the first command.
        """
        if not isinstance(value, Mapping):
            raise InvalidArguments(f"{field} must be a table, not {value!r}", field=field)
        known = {"name", "base_url", "tls_ca", "tls_cert", "tls_key", "ship"}
        unknown = sorted(set(value) - known)
        if unknown:
            raise InvalidArguments(
                f"{field}: unknown key(s) {unknown}; known: {sorted(known)}", field=field
            )
        name, base_url = value.get("name"), value.get("base_url")
        if not isinstance(name, str) or not _NAME.match(name):
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
        ship = value.get("ship", "auto")
        if ship not in SHIP_MODES:
            raise InvalidArguments(
                f"{field}.ship must be one of {list(SHIP_MODES)}, not {ship!r}",
                field=f"{field}.ship",
            )
        paths: dict[str, Path | None] = {}
        for key in ("tls_ca", "tls_cert", "tls_key"):
            raw = value.get(key)
            if raw is None:
                paths[key] = None
                continue
            if not isinstance(raw, str | Path) or not str(raw):
                raise InvalidArguments(
                    f"{field}.{key} must be a file path, not {raw!r}", field=f"{field}.{key}"
                )
            path = Path(raw).expanduser()
            try:
                with path.open("rb"):
                    pass
            except OSError as exc:
                raise InvalidArguments(
                    f"{field}.{key}: cannot read {path} ({exc.strerror or exc})",
                    field=f"{field}.{key}",
                ) from None
            paths[key] = path
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
        return cls(
            name=name,
            base_url=base_url,
            tls_ca=paths["tls_ca"],
            tls_cert=paths["tls_cert"],
            tls_key=paths["tls_key"],
            ship=ship,
        )


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
    # The docker SDK loads only where engines are used.
    from ..docker._api import connect_docker, map_docker_errors

    def ask() -> dict[str, Any]:
        client = connect_docker(engine.base_url, tls=engine.tls_config(), timeout=timeout)
        try:
            with map_docker_errors():
                return dict(client.info())
        finally:
            client.close()

    try:
        with trio.fail_after(timeout + 1):
            info = await trio.to_thread.run_sync(ask, abandon_on_cancel=True)
    except trio.TooSlowError:
        return EngineLoad(engine, error=f"no answer within {timeout:g} s")
    except RingfenceError as exc:  # every docker, TLS and socket failure, mapped
        return EngineLoad(engine, error=exc.message)
    return EngineLoad(
        engine,
        running=int(info.get("ContainersRunning") or 0),
        cpus=int(info.get("NCPU") or 0),
        memory=int(info.get("MemTotal") or 0),
    )


async def place(engines: Sequence[Engine]) -> tuple[Engine, list[EngineLoad]]:
    """The least-loaded reachable engine, and every engine's answer (for the event).

    Ties go to the engine listed first. Raises Unavailable naming every
    engine and its reason when none answers.
    """
    loads: list[EngineLoad | None] = [None] * len(engines)

    async def one(i: int) -> None:
        loads[i] = await probe_engine(engines[i])

    async with trio.open_nursery() as nursery:
        for i in range(len(engines)):
            nursery.start_soon(one, i)
    answered = [load for load in loads if load is not None]
    reachable = [load for load in answered if load.reachable]
    if not reachable:
        reasons = "; ".join(
            f"{load.engine.name} ({load.engine.base_url}): {load.error}" for load in answered
        )
        raise Unavailable(f"no Docker engine of the pool is reachable: {reasons}")
    best = min(reachable, key=lambda load: load.score)  # min keeps the first of equals
    return best.engine, answered

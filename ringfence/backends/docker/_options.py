"""The docker backend's options (``SessionSpec.options``), checked before anything starts."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...runtime._errors import InvalidArguments
from .._shellstate import PERSIST_OPTION, persist_option
from ..engines._engines import Engine, parse_engines
from ..engines._ship import SHIP_GIT, ShipGit
from ._images import resolve_image

__all__ = ["DEFAULT_IMAGE", "IMAGE_VARIABLE", "DockerOptions", "parse_user"]

IMAGE_VARIABLE = "RINGFENCE_DOCKER_IMAGE"
DEFAULT_IMAGE = "debian"
_LEAST_NANO_CPUS = 10_000_000  # Docker's least CPU limit (0.01); 0 means none
_SIZE = re.compile(r"\d+[bkmg]?", re.IGNORECASE)  # whole (fullmatch): no trailing newline


@dataclass(frozen=True)
class DockerOptions:
    """Backend-specific options (``SessionSpec.options``), checked before anything starts.

    ``image``: a recipe name (``busybox``, ``debian``) or an image reference;
    default ``debian`` (the command line's ``$RINGFENCE_DOCKER_IMAGE`` is passed as this option). ``memory`` (memory and
    swap together) and ``tmp_size``: ``512m``-style sizes. ``cpus``: a
    fraction of CPUs. ``pids``: the pids limit. ``user``: ``uid:gid`` for
    commands (never 0). ``base_url``: the daemon (default ``DOCKER_HOST``).
    ``runtime``: an OCI runtime registered with the daemon, e.g. ``runsc``
    (gVisor: an application kernel between commands and the host's); a
    runtime the daemon does not have is ``unavailable``. ``engines``: a list
    of engine tables (:func:`..engines._engines.parse_engines`; instead of
    ``base_url``) to place the session on. ``ship_git``: on a remote engine,
    ``readonly`` ships git directories (a command's writes to them are in its
    change set, which the Gate refuses) or ``skip`` leaves them on the host.
    ``persist_shell_state``: the working directory and exported variables
    carry over between commands (:mod:`._shellstate`; default false).
    """

    image: str
    memory: str = "512m"
    cpus: float = 1.0
    pids: int = 256
    tmp_size: str = "64m"
    user: str | None = None
    base_url: str | None = None
    runtime: str | None = None
    engines: tuple[Engine, ...] = ()
    ship_git: ShipGit = "readonly"
    persist_shell_state: bool = False

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> DockerOptions:
        known = {"image", "memory", "cpus", "pids", "tmp_size", "user", "base_url", "runtime"}
        known |= {"engines", "ship_git", PERSIST_OPTION}
        unknown = sorted(set(options) - known)
        if unknown:
            raise InvalidArguments(
                f"unknown docker backend option(s) {unknown}; known: {sorted(known)}",
                field="options",
            )
        image = options.get("image") or DEFAULT_IMAGE
        opts = cls(
            image=resolve_image(str(image)),
            memory=str(options.get("memory", cls.memory)),
            cpus=options.get("cpus", cls.cpus),
            pids=options.get("pids", cls.pids),
            tmp_size=str(options.get("tmp_size", cls.tmp_size)),
            user=options.get("user"),
            base_url=options.get("base_url"),
            runtime=options.get("runtime"),
            engines=_engines_option(options),
            ship_git=options.get("ship_git", "readonly"),
            persist_shell_state=persist_option(options),
        )
        for name in ("memory", "tmp_size"):
            if not _SIZE.fullmatch(getattr(opts, name)):
                raise InvalidArguments(
                    f"{name} must be a size like 512m, not {getattr(opts, name)!r}",
                    field=f"options.{name}",
                )
            if not getattr(opts, name).rstrip("bkmgBKMG").strip("0"):
                # Docker's (and tmpfs's) "no limit": a sandbox without a memory bound.
                raise InvalidArguments(
                    f"{name} must be more than 0 (0 is Docker's and tmpfs's 'no limit'), not "
                    f"{getattr(opts, name)!r}",
                    field=f"options.{name}",
                )
        if (
            isinstance(opts.cpus, bool)
            or not isinstance(opts.cpus, int | float)
            or not math.isfinite(opts.cpus)
            or int(opts.cpus * 1e9) < _LEAST_NANO_CPUS
        ):
            # Fewer than Docker's least are 0 nano-CPUs: its "no limit".
            raise InvalidArguments(
                f"cpus must be a number of CPUs of at least 0.01, not {opts.cpus!r}",
                field="options.cpus",
            )
        if isinstance(opts.pids, bool) or not isinstance(opts.pids, int) or opts.pids < 8:
            raise InvalidArguments(
                f"pids must be an integer of at least 8, not {opts.pids!r}", field="options.pids"
            )
        if opts.user is not None:
            parse_user(opts.user)
        if opts.ship_git not in SHIP_GIT:
            raise InvalidArguments(
                f"ship_git must be one of {list(SHIP_GIT)}, not {opts.ship_git!r}",
                field="options.ship_git",
            )
        if opts.runtime is not None and not (
            isinstance(opts.runtime, str) and re.fullmatch(r"[A-Za-z0-9][\w.-]*", opts.runtime)
        ):
            raise InvalidArguments(
                f"runtime must be a runtime's name such as 'runsc', not {opts.runtime!r}",
                field="options.runtime",
            )
        return opts


def _engines_option(options: Mapping[str, Any]) -> tuple[Engine, ...]:
    """``options.engines`` (a list of engine tables, :func:`..engines._engines.parse_engines`), or ()."""
    if "engines" not in options:
        return ()
    if options.get("base_url") is not None:
        raise InvalidArguments("give either base_url or engines, not both", field="options.engines")
    return parse_engines(options["engines"], field="options.engines")


def parse_user(user: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+):(\d+)", str(user))
    if not m:
        raise InvalidArguments(f"user must be numeric uid:gid, not {user!r}", field="options.user")
    uid, gid = int(m.group(1)), int(m.group(2))
    if uid == 0:
        raise InvalidArguments(
            "commands never run as root in the docker backend (user uid 0 refused)",
            field="options.user",
        )
    return uid, gid

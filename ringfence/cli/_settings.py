"""Settings: every environment variable ringfence reads, read once, by the command line.

The library takes arguments; only the command line (:func:`ringfence.cli._main.main`)
calls :meth:`Settings.from_env` and passes what it read on as arguments, so an embedded
kernel does what its caller asked, whatever the environment holds. A bad value is
refused here, naming the variable, before a verb starts. docs/configuration.md lists
every variable and flag in one table (checked by tests/docs/test_docs_config.py).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..mcp_host.oauth._tokens import SealedStore
    from ..runtime._files import Places
    from ..workspace.changes._store import Retention

__all__ = ["Settings"]

# The command line's name for each variable (tests/docs/test_docs_config.py finds them here).
POSTURE = "RINGFENCE_POSTURE"
WORKSPACE_ROOTS = "RINGFENCE_WORKSPACE_ROOTS"
EXECUTION_BACKEND = "RINGFENCE_EXECUTION_BACKEND"
SCRIPT_SANDBOX = "RINGFENCE_SCRIPT_SANDBOX"
MANAGED_POLICY = "RINGFENCE_MANAGED_POLICY"
MCP = "RINGFENCE_MCP"
OTEL = "RINGFENCE_OTEL"
DEBUG = "RINGFENCE_DEBUG"
SECRET_NAMES = "RINGFENCE_SECRET_NAMES"
SERVE_TOKEN = "RINGFENCE_SERVE_TOKEN"
CHECKPOINTS_KEEP = "RINGFENCE_CHECKPOINTS_KEEP"
CHECKPOINTS_DAYS = "RINGFENCE_CHECKPOINTS_DAYS"
CHECKPOINTS_MIB = "RINGFENCE_CHECKPOINTS_MIB"
CHECKPOINTS_FSYNC = "RINGFENCE_CHECKPOINTS_FSYNC"
NO_KEYRING = "RINGFENCE_NO_KEYRING"
HOME = "RINGFENCE_HOME"
BWRAP = "RINGFENCE_BWRAP"
LAYERS_DIR = "RINGFENCE_LAYERS_DIR"
DOCKER_IMAGE = "RINGFENCE_DOCKER_IMAGE"
BENCH_ENGINE = "RINGFENCE_BENCH_ENGINE"


@dataclass(frozen=True)
class Settings:
    """What the environment says, as values (``None``: the variable is unset or empty)."""

    posture: str | None = None  # RINGFENCE_POSTURE: the default --posture
    workspace_roots: tuple[Path, ...] = ()  # RINGFENCE_WORKSPACE_ROOTS
    backend: str | None = None  # RINGFENCE_EXECUTION_BACKEND: the default --backend
    script_sandbox: str | None = None  # RINGFENCE_SCRIPT_SANDBOX
    managed_policy: str | None = None  # RINGFENCE_MANAGED_POLICY
    mcp: bool = False  # RINGFENCE_MCP=1: --mcp by default
    otel: bool = False  # RINGFENCE_OTEL=1: --otel by default
    debug: bool = False  # RINGFENCE_DEBUG=1: tracebacks, whole library log records
    secret_names: tuple[str, ...] = ()  # RINGFENCE_SECRET_NAMES: more credential-name globs
    serve_token: str | None = None  # RINGFENCE_SERVE_TOKEN: serve --transport http's token
    checkpoints_keep: int | None = None  # RINGFENCE_CHECKPOINTS_KEEP
    checkpoints_days: float | None = None  # RINGFENCE_CHECKPOINTS_DAYS
    checkpoints_mib: float | None = None  # RINGFENCE_CHECKPOINTS_MIB
    checkpoints_fsync: bool = False  # RINGFENCE_CHECKPOINTS_FSYNC=1
    keyring: bool = True  # RINGFENCE_NO_KEYRING=1 turns it off: OAuth tokens' key in a file
    home: Path | None = None  # RINGFENCE_HOME: ringfence's state directory (~/.ringfence)
    bwrap: str | None = None  # RINGFENCE_BWRAP: bubblewrap's path, when not bwrap on PATH
    layers_dir: Path | None = None  # RINGFENCE_LAYERS_DIR: the local backend's overlays
    docker_image: str | None = None  # RINGFENCE_DOCKER_IMAGE: the docker backend's default image
    bench_engine: str | None = None  # RINGFENCE_BENCH_ENGINE: the engine-remote scenario's

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """The settings ``environ`` holds; raises InvalidArguments naming a bad variable."""

        def text(name: str) -> str | None:
            return environ.get(name) or None

        def flag(name: str) -> bool:
            return environ.get(name) == "1"

        def path(name: str) -> Path | None:
            value = text(name)
            return Path(value) if value else None

        roots = text(WORKSPACE_ROOTS)
        names = text(SECRET_NAMES)
        keep = _positive(environ, CHECKPOINTS_KEEP)
        if keep is not None and keep != int(keep):  # 0.5 kept int(0.5) == 0 change sets
            from ..runtime._errors import InvalidArguments

            raise InvalidArguments(
                f"${CHECKPOINTS_KEEP} must be a whole number, not {environ[CHECKPOINTS_KEEP]!r}",
                field=CHECKPOINTS_KEEP,
            )
        return cls(
            posture=text(POSTURE),
            workspace_roots=tuple(Path(p) for p in roots.split(os.pathsep) if p) if roots else (),
            backend=text(EXECUTION_BACKEND),
            script_sandbox=text(SCRIPT_SANDBOX),
            managed_policy=text(MANAGED_POLICY),
            mcp=flag(MCP),
            otel=flag(OTEL),
            debug=flag(DEBUG),
            secret_names=_patterns(names) if names else (),
            serve_token=environ.get(SERVE_TOKEN),
            checkpoints_keep=int(keep) if keep is not None else None,
            checkpoints_days=_positive(environ, CHECKPOINTS_DAYS),
            checkpoints_mib=_positive(environ, CHECKPOINTS_MIB),
            checkpoints_fsync=flag(CHECKPOINTS_FSYNC),
            keyring=not flag(NO_KEYRING),
            home=path(HOME),
            bwrap=text(BWRAP),
            layers_dir=path(LAYERS_DIR),
            docker_image=text(DOCKER_IMAGE),
            bench_engine=text(BENCH_ENGINE),
        )

    def places(self) -> AbstractContextManager[Places]:
        """The places these settings name (unset: the defaults), for the verb's run."""
        from ..runtime._files import Places, entered_places

        return entered_places(Places(home=self.home, bwrap=self.bwrap, layers_dir=self.layers_dir))

    def apply_defaults(self, args: Any) -> None:
        """Turn on ``--mcp`` and ``--otel`` where the settings say so (the flags only add)."""
        for name in ("mcp", "otel"):
            if getattr(args, name, None) is False and getattr(self, name):
                setattr(args, name, True)

    def posture_for(self, flag: str | None) -> str:
        """``--posture``, else ``RINGFENCE_POSTURE``, else ``ask``."""
        return flag or self.posture or "ask"

    def roots(self, explicit: Sequence[str | os.PathLike[str]] = ()) -> list[Path]:
        """``--workspace`` values, else ``RINGFENCE_WORKSPACE_ROOTS``, else the current directory."""
        if explicit:
            return [Path(p) for p in explicit]
        return list(self.workspace_roots) or [Path.cwd()]

    def token_store(self) -> SealedStore:
        """Where MCP OAuth tokens are sealed: ``$RINGFENCE_HOME``, the key in the system
        keyring unless ``RINGFENCE_NO_KEYRING=1``."""
        from ..mcp_host.oauth._tokens import SealedStore
        from ..runtime._files import ringfence_home

        return SealedStore(ringfence_home(), keyring=self.keyring)

    def retention(self) -> Retention:
        """The change-set store's bounds: the variables set, the store's defaults for the rest."""
        from ..workspace.changes._store import Retention

        given: dict[str, Any] = {
            "keep": self.checkpoints_keep,
            "max_age_days": self.checkpoints_days,
            "max_mib": self.checkpoints_mib,
        }
        return Retention(
            **{k: v for k, v in given.items() if v is not None}, fsync=self.checkpoints_fsync
        )


def _positive(environ: Mapping[str, str], name: str) -> float | None:
    raw = environ.get(name)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    # finite too: `inf` (or `1e400`) passed, and the change-set store's int() of it failed
    # the first write with "unexpected error: OverflowError", naming no variable
    if not (value > 0 and math.isfinite(value)):
        from ..runtime._errors import InvalidArguments

        raise InvalidArguments(f"${name} must be a positive finite number, not {raw!r}", field=name)
    return value


def _patterns(raw: str) -> tuple[str, ...]:
    """Comma-separated globs, blanks dropped (as ``Redactor(names=...)`` takes them)."""
    return tuple(p.strip() for p in raw.split(",") if p.strip())

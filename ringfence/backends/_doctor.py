"""What can run here, and why not: the checks behind ``ringfence doctor``. Blocking."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import _proc
from .._confine import landlock, seccomp
from ..runtime._errors import RingfenceError
from .docker._api import connect_docker, map_docker_errors
from .docker._imagebuild import list_images
from .docker._images import IMAGES, docker_location
from .docker._options import IMAGE_VARIABLE, DockerOptions

__all__ = ["Check", "backend_status", "run_checks"]


@dataclass(frozen=True)
class Check:
    """One line of the report. ``fix`` says what to run when ``ok`` is false."""

    name: str
    ok: bool
    detail: str
    fix: str | None = None
    backends: tuple[str, ...] = field(default=())  # the backends that need this check

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail, "fix": self.fix}


def run_checks(bwrap: str | None = None, docker_image: str | None = None) -> list[Check]:
    """Every check, in report order. Never raises for a missing layer: that is a failed check.

    ``bwrap``: bubblewrap's path when it is not on ``PATH`` (the command line's
    ``RINGFENCE_BWRAP``); ``docker_image``: the docker backend's image when not its default
    (``RINGFENCE_DOCKER_IMAGE``).
    """
    checks = [*_local_checks()]
    checks.append(
        Check(
            "backend host",
            True,
            "UNCONFINED host child processes (not a sandbox: reads ~/.ssh, writes anywhere "
            "the user can, reaches the network)",
            None,
            ("host",),
        )
    )
    checks.append(_process_tracking())
    checks += _docker_checks(docker_image)
    checks += [_bubblewrap(bwrap), _userns(), _landlock(), _seccomp(), _ripgrep()]
    return checks


def _local_checks() -> list[Check]:
    """Start a real confined session (strict) and report each of its layers with its fix."""
    import tempfile

    import trio

    from ._types import SessionSpec
    from .confined._session import FIXES, start_confined

    with tempfile.TemporaryDirectory(prefix="ringfence-doctor-") as tmp:

        async def probe() -> list[Check]:
            try:
                session = await start_confined(SessionSpec(roots=(Path(tmp),)))
            except RingfenceError as exc:
                layer = getattr(exc, "layer", "sandbox")
                checks = [
                    Check("backend local", False, f"confined sandbox: {exc.message}", None, ()),
                    Check(
                        f"local layer {layer}",
                        False,
                        getattr(exc, "why", exc.message),
                        FIXES.get(layer),
                        ("local",),
                    ),
                ]
                return checks + await best_effort(layer)
            try:
                checks = [
                    Check(
                        "backend local",
                        True,
                        f"confined (strict): every layer applied; session start "
                        f"{session.start_seconds * 1000:.0f} ms",
                        None,
                        ("local",),
                    )
                ]
                for layer in session.layers:
                    fix = None if layer.ok else FIXES.get(layer.name)
                    checks.append(Check(f"local layer {layer.name}", layer.ok, layer.detail, fix))
                return checks
            finally:
                await session.aclose()

        async def best_effort(failed: str) -> list[Check]:
            """Every layer as sandbox='best-effort' would run (what --sandbox best-effort gets)."""
            spec = SessionSpec(roots=(Path(tmp),), options={"sandbox": "best-effort"})
            try:
                session = await start_confined(spec)
            except RingfenceError as exc:
                return [Check("local best-effort", False, exc.message)]
            try:
                return [
                    Check(
                        f"local layer {layer.name}",
                        layer.ok,
                        f"{layer.detail} (with --sandbox best-effort)",
                        None if layer.ok else FIXES.get(layer.name),
                    )
                    for layer in session.layers
                    if layer.name != failed
                ]
            finally:
                await session.aclose()

        return trio.run(probe)


def _bubblewrap(given: str | None) -> Check:
    bwrap = given or shutil.which("bwrap")
    if bwrap is None or not os.access(bwrap, os.X_OK):
        return Check(
            "bubblewrap",
            False,
            "bwrap not on PATH (the local backend's namespaces)",
            "sudo apt-get install bubblewrap",
            ("local",),
        )
    try:
        out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10)
        version = out.stdout.strip() or "unknown version"
    except (OSError, subprocess.SubprocessError) as exc:
        return Check("bubblewrap", False, f"{bwrap} does not run: {exc}", None, ("local",))
    return Check("bubblewrap", True, f"{version} at {bwrap}", None, ("local",))


def backend_status(checks: list[Check], backend: str) -> tuple[bool, list[Check]]:
    """Whether ``backend`` can run, and the failed checks that stop it."""
    needed = [c for c in checks if backend in c.backends]
    failed = [c for c in needed if not c.ok]
    return (bool(needed) and not failed), failed


def _docker_checks(image: str | None) -> list[Check]:
    default = DockerOptions.from_mapping({"image": image} if image else {}).image
    try:
        client = connect_docker(timeout=10)
    except RingfenceError as exc:
        # A refused address (a plain tcp:// engine off loopback) names its own fix; starting
        # a daemon is the fix only when none answers.
        fix = (
            None
            if exc.code == "invalid_arguments"
            else "sudo systemctl start docker (or: sudo dockerd &)"
        )
        return [
            Check("docker daemon", False, exc.message, fix, ("docker",)),
            Check("docker images", False, "not checked: no daemon", None, ()),
        ]
    try:
        info = client.version()
        url = docker_location()
        checks = [
            Check(
                "docker daemon",
                True,
                f"Docker Engine {info.get('Version', '?')} (API {client.api.api_version}) at {url}",
                None,
                ("docker",),
            )
        ]
        checks.append(_runsc(client.info().get("Runtimes") or {}))
        # Which image the backend needs is decided by reference against the recipes, never by
        # the listing: an image labelled as a recipe's (an older build still tagged under
        # another name, say) is shown, and is never taken for the configured one.
        recipes = {recipe.reference for recipe in IMAGES.values()}
        listed = [image for image in list_images(client) if image.name in IMAGES]
        for image in listed:
            needed = ("docker",) if image.reference == default and default in recipes else ()
            if image.present:
                detail = f"{image.reference} present ({(image.size_bytes or 0) // 2**20} MiB)"
                checks.append(Check(f"image {image.name}", True, detail, None, needed))
            else:
                fix = f"ringfence images build {image.name}"
                role = " (the docker backend's default)" if needed else ""
                checks.append(
                    Check(
                        f"image {image.name}",
                        False,
                        f"{image.reference} missing{role}",
                        fix,
                        needed,
                    )
                )
        if default not in recipes:
            checks.append(_configured_image(client, default))
        checks.append(_containers(client))
        return checks
    except RingfenceError as exc:
        return [Check("docker daemon", False, exc.message, None, ("docker",))]
    finally:
        client.close()


def _containers(client: Any) -> Check:
    """ringfence's containers on this daemon, from their labels: in sessions, from warm pools.

    Informational (no backend needs it). A pool's own figures (warm, claims, misses) are
    its process's: in each claiming or missing session's ``backend_started`` metadata.
    A pooled container keeps its label once claimed: "warm or claimed".
    """
    from .docker._session import CONTAINER_LABEL

    with map_docker_errors():
        found = client.containers.list(
            all=True, filters={"label": CONTAINER_LABEL}, ignore_removed=True
        )
    pooled = sum(1 for c in found if c.labels.get(f"{CONTAINER_LABEL}.pool") == "1")
    owners = {c.labels.get(f"{CONTAINER_LABEL}.owner", "") for c in found}
    detail = (
        f"{len(found)} ringfence container(s) on this daemon: {len(found) - pooled} in "
        f"sessions, {pooled} from warm pools (warm or claimed), held by {len(owners)} "
        "process(es); each goes with its process (a lease)"
    )
    return Check("docker containers", True, detail)


def _configured_image(client: Any, reference: str) -> Check:
    """The docker backend's image when it is none of ringfence's own (``RINGFENCE_DOCKER_IMAGE``).

    Without this check a missing configured image said "can run", and the
    next call failed ``unavailable``.
    """
    import docker.errors

    name = "image (configured)"
    with map_docker_errors():  # anything but "not found" is the daemon's failure
        try:
            client.images.get(reference)
        except docker.errors.ImageNotFound:
            return Check(
                name,
                False,
                f"{reference} missing (the docker backend's image, from {IMAGE_VARIABLE} or "
                "the backend options)",
                f"docker build or docker load {reference}, or unset {IMAGE_VARIABLE}",
                ("docker",),
            )
    return Check(name, True, f"{reference} present (the docker backend's image)", None, ("docker",))


def _runsc(runtimes: dict[str, Any]) -> Check:
    """Whether the daemon has gVisor's runsc registered (the docker option runtime="runsc")."""
    if "runsc" in runtimes:
        path = (runtimes["runsc"] or {}).get("path", "runsc")
        return Check("docker runtime runsc", True, f"gVisor registered ({path})")
    return Check(
        "docker runtime runsc",
        False,
        f"not registered (runtimes: {', '.join(sorted(runtimes)) or 'none'}); only the "
        "docker option runtime='runsc' needs it",
        "sudo apt-get install runsc; add "
        '{"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none"]}}} '
        "to /etc/docker/daemon.json and reload dockerd (sudo kill -HUP $(cat /var/run/docker.pid))",
    )


def _process_tracking() -> Check:
    """How the local backend finds a command's processes; the run-id fallback is a failed check.

    Not needed by any backend (``local`` runs either way), but the fallback is
    weaker: a process that leaves the session and scrubs ``RINGFENCE_RUN_ID``
    outlives its command.
    """
    found = _proc.tracking()
    if found.method == "cgroup":
        return Check("process tracking", True, found.detail)
    return Check(
        "process tracking",
        False,
        f"run-id hunt ({found.detail}); a process that leaves the session and scrubs "
        "RINGFENCE_RUN_ID outlives its command",
        "run as root, or in a delegated cgroup2 subtree "
        "(systemd-run --user --scope -p Delegate=yes ringfence …)",
    )


def _userns() -> Check:
    try:
        limit = int(Path("/proc/sys/user/max_user_namespaces").read_text())
    except (OSError, ValueError):
        return Check("user namespaces", False, "not supported by this kernel")
    gate = Path("/proc/sys/kernel/unprivileged_userns_clone")
    if gate.exists() and gate.read_text().strip() == "0":
        return Check(
            "user namespaces",
            False,
            "disabled for unprivileged users",
            "sudo sysctl kernel.unprivileged_userns_clone=1",
        )
    if limit == 0:
        return Check(
            "user namespaces",
            False,
            "max_user_namespaces is 0",
            "sudo sysctl user.max_user_namespaces=15000",
        )
    return Check("user namespaces", True, f"available (max {limit})")


def _landlock() -> Check:
    abi, err = landlock.probe()
    if abi >= 1:
        return Check("landlock", True, f"ABI {abi}")
    if err == errno.EOPNOTSUPP:
        return Check(
            "landlock",
            False,
            "built in but disabled",
            "boot with lsm=landlock,… (kernel command line)",
        )
    return Check(
        "landlock", False, f"not available ({errno.errorcode.get(err, err)}); needs Linux 5.13+"
    )


def _seccomp() -> Check:
    mode = seccomp.mode()
    if mode < 0:
        return Check("seccomp", False, "not available in this kernel (CONFIG_SECCOMP)")
    try:
        actions = Path("/proc/sys/kernel/seccomp/actions_avail").read_text().split()
    except OSError:
        actions = []
    filt = "filter mode" if "errno" in actions or not actions else "strict mode only"
    return Check("seccomp", True, f"available ({filt}); this process is in mode {mode}")


def _ripgrep() -> Check:
    rg = shutil.which("rg")
    if rg is None:
        return Check("ripgrep", False, "rg not on PATH", "sudo apt-get install ripgrep")
    try:
        out = subprocess.run([rg, "--version"], capture_output=True, text=True, timeout=10)
        version = out.stdout.splitlines()[0] if out.stdout else "unknown version"
    except (OSError, subprocess.SubprocessError) as exc:
        return Check("ripgrep", False, f"{rg} does not run: {exc}", "sudo apt-get install ripgrep")
    return Check("ripgrep", True, f"{version} at {rg}")

"""Resource limits a sandboxed process sets on itself (and every process it starts).

CPU time is a soft limit with SIGKILL one second later (the hard limit); the
others are exact. No core files ever. ``RLIMIT_NPROC`` counts every process of
the uid, and the kernel does not enforce it for root: a sandbox that may run as
root needs a cgroup ``pids`` limit too (:mod:`.cgroup`). Failures raise
:class:`~ringfence._confine.LayerUnavailable` for the layer ``rlimits``.
"""

from __future__ import annotations

import resource

from . import LayerUnavailable

__all__ = ["apply"]


def apply(
    *,
    cpu_seconds: int,
    address_space: int,
    open_files: int,
    file_size: int,
    processes: int | None = None,
) -> None:
    """Set the limits on the calling process; ``processes`` None leaves ``RLIMIT_NPROC``."""
    limits = [
        (resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 1),
        (resource.RLIMIT_AS, address_space, address_space),
        (resource.RLIMIT_NOFILE, open_files, open_files),
        (resource.RLIMIT_FSIZE, file_size, file_size),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    if processes is not None:
        limits.append((resource.RLIMIT_NPROC, processes, processes))
    for which, soft, hard in limits:
        try:
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError) as exc:
            raise LayerUnavailable("rlimits", f"setrlimit({which}) failed: {exc}") from None

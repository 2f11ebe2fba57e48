"""ringfence._confine: the Linux primitives every sandbox of ringfence is built from.

One home for the system calls Python does not wrap, through ``ctypes``: the C
library (:mod:`.libc`, loaded once), Landlock (:mod:`.landlock`), seccomp BPF
and its user notifications (:mod:`.seccomp`), resource limits
(:mod:`.rlimits`), credentials and capabilities (:mod:`.creds`), mounts
(:mod:`.mounts`), ``openat2`` (:mod:`.openat2`) and cgroup v2 files
(:mod:`.cgroup`). The policies built from them stay with their users: the
script runner's layers (``bridge._sandbox``), the confined shell's filters
(``backends.confined._layers``) and its supervisor.

Standard library only, and nothing of ringfence: the script runner and the
confined shell's supervisor import these modules inside their sandboxes, started
by :mod:`.boot` with ``python -I -S``, where nothing but the standard library
and this package's own directories can be found. Importing the package imports
none of its modules: each user imports the ones it needs, so a sandbox loads
only what it applies. A layer that cannot be applied is :class:`LayerUnavailable`.
"""

from __future__ import annotations

__all__ = ["SANDBOXED_ENV", "LayerUnavailable"]

# The environment a confined program (a ``sandbox = "local"`` MCP server) is to run with, as
# one JSON object in this one variable: the processes that start it outside the sandbox (the
# spawn gate's shell, bubblewrap) and its supervisor get none of it as their own environment
# (an ``LD_PRELOAD`` naming a workspace file ran that file on the host, unconfined); the
# supervisor hands it to the program alone, at its exec, after every layer.
SANDBOXED_ENV = "RINGFENCE_SANDBOXED_ENV"


class LayerUnavailable(Exception):
    """One confinement layer could not be applied: ``layer`` names it, the message says why."""

    def __init__(self, layer: str, message: str) -> None:
        super().__init__(message)
        self.layer = layer
        self.message = message

"""Freed memory handed back to the operating system once a burst of requests is over.

Measured in a real run (20 SDK clients reading an 11 KB file for 15 s, some cut off, the
server under tracemalloc and live-object counts): once they had gone, every MCP session,
stored event, grant and log subscription was gone too, and Python's own allocations were
back within 0.4 MiB of idle (the rest is the spent intent nonces, kept 30 s), yet the
process stayed 14 MiB above its idle size (97.3 to 111.5 MiB). That is glibc keeping freed
chunks in its arenas (the main one and one per worker thread the file reads ran in) wherever
a live block sits above them; ``malloc_trim(0)`` handed every whole free page back: 91.9 MiB,
below idle. So :class:`QuietTrim` calls it once when the server has been quiet for a moment
after activity. Where the C library has no ``malloc_trim`` (musl, macOS) it does nothing.

Before it, one full cyclic collection: much of what a session leaves (the SDK's tasks and
streams, exceptions with their tracebacks) is in reference cycles, freed only when the
collector runs, and after a load nothing allocates enough to make it run. Skipped while
the collector is off (a change set being merged holds it off, or the host turned it off).
"""

from __future__ import annotations

import gc
from collections.abc import Callable

import trio

from .._confine.libc import malloc_trim

__all__ = ["QUIET_SECONDS", "QuietTrim"]

# How long after the last request ended the server counts as quiet.
QUIET_SECONDS = 2.0


class QuietTrim:
    """Trim once per burst: :meth:`activity` when a request ends, :meth:`freed` when something
    large was let go outside a request (a session ended idle), :meth:`tick` periodically."""

    def __init__(
        self, quiet_seconds: float = QUIET_SECONDS, clock: Callable[[], float] = trio.current_time
    ) -> None:
        self.quiet_seconds = quiet_seconds
        self._clock = clock
        self._last = 0.0
        self._pending = False
        self.trims = 0

    def activity(self) -> None:
        self._last = self._clock()
        self._pending = True

    def freed(self) -> None:
        """Worth a trim, at the next tick if no request ended within ``quiet_seconds``."""
        self._pending = True

    async def tick(self) -> None:
        """Trim if there was activity and none for ``quiet_seconds`` since."""
        if not self._pending or self._clock() - self._last < self.quiet_seconds:
            return
        self._pending = False
        if gc.isenabled():
            gc.collect()  # on this thread: finalizers run where their objects live
        trim = malloc_trim()
        if trim is not None:
            await trio.to_thread.run_sync(trim, 0)  # walks every arena: off the event loop
            self.trims += 1

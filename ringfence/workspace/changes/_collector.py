"""The cyclic garbage collector held off while a change set is read, saved and merged: opt-in.

A 10,000-file shell command's change set makes ~60,000 objects the collector
tracks (its changes, images, stat results, upper-file notes), and they all
live until the merge ends. The collector would run over them ~100 times and,
about once per command, make a full pass over the whole process's heap
(measured: ~25-110 ms around a 10,000-file burst's ~1 s of capture and merge),
finding nothing: none of them is part of a cycle, so reference counting frees
them all when the call drops its set.

The collector is the process's, not the library's: nothing pauses it unless
the caller that owns the process asked (``create_kernel(pause_collector=True)``,
which the ``ringfence`` command passes for its own one-verb process; off for
every other caller). Paused, that work is not done; the next automatic
collection after the pause looks at whatever is still alive then.

The collector has one switch for the process, so pauses count: nested and
concurrent pauses (two kernels merging at once) share one, the last one out
switches the collector back on, and only if it was on when the first came
in, so a host that turned it off keeps it off. Not promised: a host that
switches the collector while a pause is under way is overruled when the
pause ends.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["collector_paused"]

_lock = threading.Lock()
_depth = 0
_restore = False  # whether the last pause out switches the collector back on


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic cyclic collection in this process until the block ends (see above)."""
    global _depth, _restore
    with _lock:
        if _depth == 0:
            _restore = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _restore:
                gc.enable()

"""The script's output on the host: bytes decoded, then the runtime's one head/tail buffer.

One :class:`OutputCapture` per stream of one run (stdout for the reply,
stderr for the runner's diagnostics). The order of redaction and cutting,
which keeps a secret from surviving a cut, is
:class:`ringfence.runtime.OutputBuffer`'s: each piece is redacted as it
arrives (a secret split across reads included), the text is kept whole while
it fits the cap, then spooled to a 0600 file (up to ``spool_cap`` bytes)
while memory keeps a head and a tail; at the end the kept parts and the spool
are redacted again with every secret known by then (one registered by a call
the script made after printing it), and only then cut.
"""

from __future__ import annotations

import codecs
import functools
from pathlib import Path

import trio

from ..runtime._output import OutputBuffer
from ..runtime._redact import Redactor

__all__ = ["CUT_SLACK", "MARKER_ROOM", "OutputCapture"]

MARKER_ROOM = 512  # bytes of the reply's output cap kept for the cut marker
# Extra characters kept around each cut, so a secret registered late (by a call made after it
# was printed) is redacted whole before the cut is made.
CUT_SLACK = 4096


class OutputCapture:
    """One output stream of the child; :meth:`finish` gives the text to report.

    The reply is whole, or a head and a tail around a marker, within ``cap``
    bytes in all (:data:`MARKER_ROOM` of them for the marker). :meth:`feed`
    may append to the spool from the calling (trio) thread: at most one read
    (64 KiB) to the page cache; :meth:`finish` runs in a worker thread.
    """

    def __init__(
        self,
        redactor: Redactor,
        cap: int,
        spool_dir: Path | None = None,
        spool_cap: int = 0,
        what: str = "script output",
    ) -> None:
        self.cap = max(cap, 1)
        self.eof = trio.Event()
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        room = max(self.cap - MARKER_ROOM, 2)
        self._buffer = OutputBuffer(
            self.cap,
            room + CUT_SLACK,
            redactor=redactor,
            spool_dir=spool_dir,
            spool_cap=spool_cap,
            what=what,
        )

    def feed(self, data: bytes) -> None:
        self._buffer.feed(self._decoder.decode(data))

    def close(self, *, remove: bool = False) -> None:
        """Close the spool file (and delete it with ``remove``). Idempotent."""
        self._buffer.close(remove=remove)

    async def finish(self) -> str:
        """End the stream; the text to report (whole, or cut within ``cap`` bytes).

        Output that fits the cap and was never spooled is finished here (no
        file is touched); anything else in a worker thread.
        """
        self._buffer.feed(self._decoder.decode(b"", final=True))
        finish = functools.partial(self._buffer.finish, self.cap, marker_room=MARKER_ROOM)
        try:
            if not self._buffer.over and not self._buffer.spooled and self._buffer.size <= self.cap:
                return finish().text
            return (await trio.to_thread.run_sync(finish)).text
        except OSError:  # the spool's rewrite failed: nobody will be told where it is
            self.close(remove=True)
            raise

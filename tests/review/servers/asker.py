"""A session whose Gate asks the review page three questions, the third once the first is gone.

``python asker.py WORKSPACE TIMEOUT [HOST]``: a kernel (posture ``ask``) whose approver is
the page (``ReviewApprover``, ``attach_review``: the library's own API) asks about
``write_file`` of ``first.txt``, 3 s later ``second.txt``; when the first question is no
longer waiting (timed out), ``third.txt``. The page's URL goes to stderr as
``ringfence review`` prints it; each call's outcome to stdout as one JSON line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import trio

from ringfence import create_kernel
from ringfence.review import EventFeed, ReviewApprover, ReviewOptions, attach_review


async def main(workspace: Path, timeout: float, host: str) -> None:
    approver = ReviewApprover(timeout_seconds=timeout)
    feed = EventFeed("asker (in memory)", live=True)

    def announce(url: str) -> None:
        sys.stderr.write(f"asker: review page at {url}\n")
        sys.stderr.flush()

    kernel = create_kernel(roots=[workspace], posture="ask", approver=approver)
    attach_review(kernel, feed, approver, ReviewOptions(host=host), announce)
    outcomes: dict[str, object] = {}
    async with kernel:

        async def write(name: str) -> None:
            outcome = await kernel.invoke(
                "write_file", {"path": name, "content": f"{name}\n"}, origin="agent"
            )
            outcomes[name] = outcome.ok

        async with trio.open_nursery() as nursery:
            nursery.start_soon(write, "first.txt")
            while len(approver.pending()) < 1:
                await trio.sleep(0.05)
            await trio.sleep(3.0)
            nursery.start_soon(write, "second.txt")
            while "first.txt" not in outcomes:  # timed out, or answered on the page
                await trio.sleep(0.05)
            nursery.start_soon(write, "third.txt")
    print(json.dumps(outcomes), flush=True)


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1]), float(sys.argv[2]), (sys.argv[3:] or ["127.0.0.1"])[0])

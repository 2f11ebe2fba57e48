"""``ringfence serve`` exactly as the command runs it, with the test tools of serve_tools added.

Run as ``python tests/serve/serve_peer.py serve --workspace DIR ...``: the
kernel that ``ringfence serve`` builds gets ``serve_tools`` registered for the
first workspace root; everything else is the real command.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import serve_tools

import ringfence.cli._session as session
from ringfence.cli import main

_create_kernel = session.create_kernel


def create_kernel(*, roots: Any = (), **kwargs: Any) -> Any:
    roots = list(roots)
    kernel = _create_kernel(roots=roots, **kwargs)
    serve_tools.register_tools(kernel, Path(roots[0]))
    return kernel


session.create_kernel = create_kernel  # type: ignore[assignment]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Test helpers for judging a tree after a writer ran: its exact state, and what real git finds.

Importable from any test module as ``tree_helpers`` (``tests/`` is on ``sys.path``).
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

__all__ = ["exact_state", "git_found"]


def exact_state(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every entry below ``root``: (kind, mode, bytes or a link's target), never following links."""
    out: dict[str, tuple[str, int, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", 0, os.fsencode(os.readlink(path)))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), b"")
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), path.read_bytes())
    return out


def git_found(where: Path, ceiling: Path) -> str | None:
    """What the real git's discovery finds from ``where``: its absolute git directory, its
    complaint (``error: …``: git found something it refuses), or None (no repository up to
    ``ceiling``; no system or global configuration read)."""
    if not where.is_dir():
        return None
    out = subprocess.run(
        ["git", "rev-parse", "--absolute-git-dir"],
        cwd=where,
        capture_output=True,
        text=True,
        env={
            "PATH": os.environ["PATH"],
            "HOME": str(ceiling),
            "GIT_CEILING_DIRECTORIES": str(ceiling),
            "GIT_CONFIG_NOSYSTEM": "1",
        },
    )
    if out.returncode != 0 and "not a git repository (or any" in out.stderr:
        return None
    return out.stdout.strip() if out.returncode == 0 else f"error: {out.stderr.strip()}"

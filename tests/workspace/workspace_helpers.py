"""Helpers shared by the workspace tests (imported as ``workspace_helpers``)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from ringfence.workspace._resolver import openat2_available

SECRET = b"OUTSIDE-SECRET\n"


@dataclass
class Tree:
    base: Path
    ws: Path  # first root
    ws2: Path  # second root
    sibling: Path  # shares ws's name as a prefix: CVE-2025-53110
    outside: Path

    def roots(self) -> list[Path]:
        return [self.ws, self.ws2]


RESOLVER_MODES = ["openat2", "walk"] if openat2_available() else ["walk"]


def snapshot(root: Path) -> dict[str, tuple]:
    """Everything under ``root`` (links not followed): kind, bytes or target, mode."""
    out: dict[str, tuple] = {}
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("file", p.read_bytes(), stat.S_IMODE(st.st_mode), st.st_ino)
    return out


def under(path: Path, roots: list[Path]) -> bool:
    """Whole-component containment (never a string prefix)."""
    return any(path == r or r in path.parents for r in roots)


def fd_target(fd: int) -> Path:
    return Path(os.readlink(f"/proc/self/fd/{fd}"))


GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="git is not installed (add it to .ci/run)")


def git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": str(cwd or Path.cwd()),
    }
    return subprocess.run(
        [GIT or "git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )

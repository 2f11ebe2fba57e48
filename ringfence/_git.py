"""ringfence's own git calls, with every program a repository could name switched off.

A repository's configuration, hooks and attributes name programs git runs
on its own: hooks, ``core.fsmonitor``, ``core.pager``, ``core.sshCommand``,
``core.editor``, credential helpers, clean/smudge/process filters, diff
drivers and textconv, ``gpg.program`` and more. A workspace is written by
an agent, so when ringfence itself runs git there (worktree sessions,
``worktree diff``), none of these may run (the seed's rule). :func:`run_git`
is the one place ringfence runs git:

* a clean environment: ``PATH``, ``LC_ALL=C``, ``HOME`` pointing at an empty
  directory, ``GIT_CONFIG_NOSYSTEM=1``, ``GIT_CONFIG_GLOBAL=/dev/null``, no
  ``GIT_*`` of the caller's (no ``GIT_DIR``, ``GIT_SSH_COMMAND``,
  ``GIT_EXTERNAL_DIFF``, ``GIT_PAGER``, askpass …), ``GIT_TERMINAL_PROMPT=0``;
* ``-c`` overrides (:data:`OVERRIDES`): hooks to ``/dev/null``, the
  fsmonitor off, the pager ``cat``, ssh/editor/askpass/proxy/gpg programs
  ``false``, credential helpers reset, every transport protocol refused;
* every filter and diff driver the repository configures (read first with
  ``git config --get-regexp``, which runs nothing) emptied, so attributes
  naming them do nothing; diffs run with ``--no-ext-diff --no-textconv``
  (callers add them; :func:`git_diff` does).

Not promised: git itself is trusted (its version is what the host has), and
a repository's *content* (a malicious object, a huge file) is not checked.
"""

from __future__ import annotations

import os
import re
import selectors
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ._proc import spawn
from .runtime._errors import ToolError, Unavailable
from .runtime._programs import in_root, search_path

__all__ = ["OVERRIDES", "GitResult", "git_diff", "run_git"]

OVERRIDES: tuple[str, ...] = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "core.pager=cat",
    "core.editor=false",
    "core.sshCommand=false",
    "core.askPass=false",
    "core.gitProxy=false",
    "credential.helper=",
    "diff.external=",
    "gpg.program=false",
    "gpg.ssh.program=false",
    "gpg.x509.program=false",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "sequence.editor=false",
    "protocol.allow=never",
    "uploadpack.packObjectsHook=",
    "core.alternateRefsCommand=",
    "receive.procReceiveRefs=",
    "submodule.recurse=false",
    "fetch.recurseSubmodules=false",
)
# Driver settings whose value is a program: emptied for every driver the repository names.
_DRIVER_KEYS = re.compile(
    r"^(filter\.(.+)\.(clean|smudge|process)|diff\.(.+)\.(command|textconv)|"
    r"merge\.(.+)\.driver)\Z"
)


@dataclass(frozen=True)
class GitResult:
    """One git run: its exit code and output (bytes, not decoded)."""

    code: int
    stdout: bytes
    stderr: bytes


def _environment(home: str, repo: Path) -> dict[str, str]:
    """git's environment: ``PATH`` without its entries in the repository (an activated
    project venv puts ``<repo>/.venv/bin`` first: the agent's own ``git`` there ran on the
    host), no configuration but the repository's."""
    return {
        "PATH": search_path(os.environ.get("PATH", "/usr/bin:/bin"), [repo]),
        "LC_ALL": "C",
        "HOME": home,
        "XDG_CONFIG_HOME": home,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_OPTIONAL_LOCKS": "0",
        "GIT_NO_REPLACE_OBJECTS": "1",
        "GIT_ATTR_NOSYSTEM": "1",
    }


def _run(argv: Sequence[str], cwd: Path, env: dict[str, str], timeout: float) -> GitResult:
    process = spawn(list(argv), cwd=cwd, env=env)
    try:
        out: dict[int, list[bytes]] = {process.stdout: [], process.stderr: []}
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            for fd in out:
                sel.register(fd, selectors.EVENT_READ)
            while sel.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    process.kill_rest_now()
                    raise ToolError(f"git {' '.join(argv[1:3])} took longer than {timeout:g}s")
                for key, _ in sel.select(left):
                    chunk = os.read(key.fd, 65536)
                    if chunk:
                        out[key.fd].append(chunk)
                    else:
                        sel.unregister(key.fd)
        os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)
        code = process.exit_code_when_done()
    finally:
        process.close()
        os.close(process.stdout)
        os.close(process.stderr)
    return GitResult(code or 0, b"".join(out[process.stdout]), b"".join(out[process.stderr]))


def run_git(
    args: Sequence[str], *, cwd: str | os.PathLike[str], timeout: float = 60.0
) -> GitResult:
    """Run ``git ARGS`` in ``cwd`` with hooks, filters and configured programs off.

    Blocking (async callers use ``trio.to_thread.run_sync``). Raises
    Unavailable when git is not installed, ToolError on a timeout (the
    whole process tree is killed). A non-zero exit is returned, not raised.
    """
    where = Path(cwd)
    with tempfile.TemporaryDirectory(prefix="ringfence-git-home-") as home:
        env = _environment(home, where)
        git = shutil.which("git", path=env["PATH"])
        if git is None or in_root(git, [where]) is not None:
            raise Unavailable(
                "git is not installed outside the repository (ringfence runs it for worktree "
                "sessions; PATH entries inside the repository are left out: the agent writes "
                "there)"
            )
        base = [git]
        for item in OVERRIDES:
            base += ["-c", item]
        listed = _run(
            [*base, "config", "--null", "--get-regexp", r"^(filter|diff|merge)\."],
            where,
            env,
            timeout,
        )
        for entry in listed.stdout.split(b"\0"):
            key = entry.split(b"\n", 1)[0].decode("utf-8", "replace")
            if _DRIVER_KEYS.match(key):
                base += ["-c", f"{key}="]
        return _run([*base, *args], where, env, timeout)


def git_diff(args: Sequence[str], *, cwd: str | os.PathLike[str]) -> GitResult:
    """``git diff`` with external diff programs and textconv off (see :func:`run_git`)."""
    return run_git(["diff", "--no-ext-diff", "--no-textconv", "--no-color", *args], cwd=cwd)

"""Configuration files an agent can write, attacked through the command line.

A workspace's ``.ringfence/`` is the agent's to write (a ``write_file``, a shell command, a
writable MCP server): whatever ringfence reads from there must be bounded in time and memory
and refused with one line naming the file and the bound, never read whole.
"""

from __future__ import annotations

import os
from pathlib import Path

from cli_helpers import (  # isolated: autouse
    isolated,  # noqa: F401
    ringfence_process,
)


def rf(*args: str, cwd: Path, home: Path):
    """``ringfence *args`` as a real process, its own home, no terminal."""
    return ringfence_process(
        *args,
        cwd=cwd,
        env={"RINGFENCE_HOME": str(home)},
        unset=("RINGFENCE_WORKSPACE_ROOTS", "RINGFENCE_POSTURE"),
        stdin="",
    )


def test_a_sparse_huge_workspace_manifest_is_refused_by_its_size_not_read(
    tmp_path: Path,
) -> None:
    """``truncate -s 3G .ringfence/mcp.toml`` in the workspace: `mcp list --workspace` (and
    every session that reads the manifests) read the whole file, 6 GB of memory for a 3 GB
    sparse file, before the TOML parser said "Invalid statement". Now at most one byte past
    1 MiB is read and the refusal names the file and the bound."""
    home, work = tmp_path / "home", tmp_path / "work"
    (work / ".ringfence").mkdir(parents=True)
    home.mkdir()
    manifest = work / ".ringfence" / "mcp.toml"
    with open(manifest, "wb") as f:
        f.truncate(64 * 1024 * 1024)  # sparse: costs no disk, 64 MiB to whoever reads it
    for argv in (("mcp", "list", "--workspace", str(work)),
                 ("mcp", "list", "--workspace", str(work), "--json")):  # fmt: skip
        proc = rf(*argv, cwd=work, home=home)
        assert proc.returncode == 2, proc.stderr
        said = proc.stdout + proc.stderr  # --json says it on stdout
        assert "Traceback" not in said
        assert "mcp.toml" in said and "1,048,576 bytes" in said, said
    assert os.path.getsize(manifest) == 64 * 1024 * 1024  # left as it was
    assert not (home / "mcp.toml").exists()

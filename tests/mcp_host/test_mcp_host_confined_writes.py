"""A writable confined MCP server (``sandbox = "local"``, ``sandbox_writable = true``).

Its writes reach the workspace only as change sets: after each call the
server's cgroup is frozen, its overlay's upper directory read and merged by the
guarded writer (issue 28, finding 5). Each attack is made by a real stdio server
(``servers/planter.py``) through ``create_kernel(mcp_manifest=…)`` or the
``ringfence`` command, and each test checks the refusal in the call's answer AND
the host: real ``git`` finds no repository, the command its ``core.fsmonitor``
names never ran, no link leaves the roots.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp_host_helpers import manifest, py_server

from ringfence import create_kernel
from ringfence.runtime import Kernel, Posture

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

WRITABLE = 'sandbox = "local"\nsandbox_writable = true\n'


def planter(extra: str = WRITABLE) -> str:
    return py_server("plant", "planter.py", extra=extra)


def kernel_for(workspace: Path, tmp_path: Path, block: str, **kw: Any) -> Kernel:
    return create_kernel(
        roots=[workspace],
        posture=Posture.ALLOW_ALL,
        mcp_manifest=manifest(block),
        events_path=tmp_path / "events.jsonl",
        **kw,
    )


def events(tmp_path: Path, kind: str) -> list[dict[str, Any]]:
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["kind"] == kind]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("workspace data\n")
    return ws


def _git(cwd: Path, *args: str, ceiling: Path) -> subprocess.CompletedProcess[str]:
    """Real git, as a person at the host runs it (hooks and fsmonitor as configured), with
    no global or system configuration and discovery stopping above the test's directory."""
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(ceiling),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CEILING_DIRECTORIES": str(ceiling),
    }
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def _config(marker: Path, worktree: str) -> str:
    return (
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n"
        f'\tworktree = {worktree}\n\tfsmonitor = "touch {marker} #"\n'
    )


def _head(path: str) -> dict[str, str]:
    return {"op": "write", "path": path, "text": "ref: refs/heads/main\n"}


# Each shape is a repository git would find (checked against the server's own unconfined
# run in the test): the ops, relative to the workspace, with MARKER for the fsmonitor's file.
SHAPES: dict[str, list[dict[str, str]]] = {
    "dotgit": [
        {"op": "mkdir", "path": "sub/.git/objects"},
        {"op": "mkdir", "path": "sub/.git/refs"},
        _head("sub/.git/HEAD"),
        {"op": "write", "path": "sub/.git/config", "text": "CONFIG:."},
    ],
    "refs_a_link": [
        _head("sub/HEAD"),
        {"op": "mkdir", "path": "sub/objects"},
        {"op": "link", "path": "sub/refs", "target": "objects"},
        {"op": "write", "path": "sub/config", "text": "CONFIG:.."},
    ],
    "executable_files": [
        _head("sub/HEAD"),
        {"op": "write", "path": "sub/objects", "text": "", "mode": "755"},
        {"op": "write", "path": "sub/refs", "text": "", "mode": "755"},
        {"op": "write", "path": "sub/config", "text": "CONFIG:.."},
    ],
    "commondir": [
        _head("sub/HEAD"),
        {"op": "write", "path": "sub/commondir", "text": "../common\n"},
        {"op": "mkdir", "path": "common/objects"},
        {"op": "mkdir", "path": "common/refs"},
        {"op": "write", "path": "sub/config", "text": "CONFIG:.."},
        {"op": "write", "path": "common/config", "text": "CONFIG:../sub"},
    ],
    "head_a_link": [
        {"op": "link", "path": "sub/HEAD", "target": "refs/heads/main"},
        {"op": "mkdir", "path": "sub/objects"},
        {"op": "mkdir", "path": "sub/refs/heads"},
        {"op": "write", "path": "sub/config", "text": "CONFIG:.."},
    ],
}


def _ops(shape: str, root: Path, marker: Path) -> list[dict[str, str]]:
    out = []
    for op in SHAPES[shape]:
        op = dict(op)
        op["path"] = str(root / op["path"])
        if op.get("text", "").startswith("CONFIG:"):
            op["text"] = _config(marker, op["text"].removeprefix("CONFIG:"))
        out.append(op)
    return out


def _no_repository(workspace: Path, ceiling: Path, marker: Path) -> None:
    """Real git finds no repository anywhere the attack wrote, and running it there (as the
    person at the host would) starts nothing."""
    for where in (workspace, workspace / "sub", workspace / "common"):
        if not where.is_dir():
            continue
        found = _git(where, "rev-parse", "--absolute-git-dir", ceiling=ceiling)
        assert found.returncode != 0, (where, found.stdout)
        _git(where, "status", ceiling=ceiling)
    assert not marker.exists()


@pytest.mark.parametrize("shape", sorted(SHAPES))
async def test_a_writable_server_cannot_plant_a_repository(
    shape: str, workspace: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "fsmonitor-ran"
    # The attack is real: the same ops on a scratch copy make a repository git uses.
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    control = py_server("plant", "planter.py")  # unconfined: writes the disk directly
    async with kernel_for(scratch, tmp_path, control, checkpoints=False) as kernel:
        done = await kernel.call("mcp.plant.apply", {"ops": _ops(shape, scratch, marker)})
        assert "ok: " in json.dumps(done), done
    found = _git(scratch / "sub", "rev-parse", "--absolute-git-dir", ceiling=tmp_path)
    assert found.returncode == 0, found.stderr
    # git reads the planted configuration, and where it has a work tree runs its fsmonitor
    # (a linked-worktree-style directory found through commondir has none: git status there
    # refuses, but every other command reads that configuration).
    read = _git(scratch / "sub", "config", "core.fsmonitor", ceiling=tmp_path)
    assert str(marker) in read.stdout, read
    _git(scratch / "sub", "status", ceiling=tmp_path)
    assert marker.exists() or shape == "commondir"  # the fsmonitor ran
    marker.unlink(missing_ok=True)
    # Confined and writable: refused, nothing on disk.
    async with kernel_for(workspace, tmp_path, planter()) as kernel:
        outcome = await kernel.invoke("mcp.plant.apply", {"ops": _ops(shape, workspace, marker)})
        assert not outcome.ok, outcome.value
        assert outcome.error.code in ("git_metadata", "invalid_arguments"), outcome.error
        assert "refused" in outcome.error.message, outcome.error.message
        assert str(workspace / "sub") in outcome.error.message or "sub/" in outcome.error.message
        # The workspace's own files are untouched, and a later benign call still works.
        ok = await kernel.call(
            "mcp.plant.apply",
            {"ops": [{"op": "write", "path": str(workspace / "fine.txt"), "text": "fine\n"}]},
        )
        assert "ok: " in json.dumps(ok), ok
    _no_repository(workspace, tmp_path, marker)
    assert (workspace / "fine.txt").read_text() == "fine\n"
    assert (workspace / "notes.txt").read_text() == "workspace data\n"


async def test_a_link_that_leaves_the_roots_is_refused(workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host secret\n")
    depth = len(workspace.relative_to("/").parts)
    ops = [
        {"op": "link", "path": str(workspace / "abs"), "target": str(outside)},
        {"op": "link", "path": str(workspace / "rel"), "target": "../outside"},
        # Through another link (finding 2's shape): d/up resolves inside, the second leaves.
        {"op": "link", "path": str(workspace / "d/up"), "target": ".."},
        {"op": "link", "path": str(workspace / "etc"), "target": "d/up/" + "../" * depth + "etc"},
    ]
    async with kernel_for(workspace, tmp_path, planter()) as kernel:
        outcome = await kernel.invoke("mcp.plant.apply", {"ops": ops})
        assert not outcome.ok and outcome.error.code == "invalid_arguments", outcome
        for name in ("abs", "rel", "etc"):
            assert name in outcome.error.message or name in json.dumps(outcome.error.details)
    for name in ("abs", "rel", "etc"):
        assert not os.path.lexists(workspace / name), name
    for top, dirs, files in os.walk(workspace):
        for name in dirs + files:
            path = Path(top, name)
            if path.is_symlink():
                assert Path(os.path.realpath(path)).is_relative_to(workspace), path


async def test_a_chmod_of_the_root_itself_is_refused_once_by_name(
    workspace: Path, tmp_path: Path
) -> None:
    """The server changes its root's own mode (the upper directory's, which it sees as the
    root's) and writes nothing else: refused at the merge, named; the root keeps its mode,
    and the next call's writes are merged without that refusal again."""
    workspace.chmod(0o755)
    ops = [{"op": "chmod", "path": str(workspace), "mode": "700"}]  # nothing else written
    later = [{"op": "write", "path": str(workspace / "made.txt"), "text": "made\n"}]
    async with kernel_for(workspace, tmp_path, planter()) as kernel:
        first = await kernel.invoke("mcp.plant.apply", {"ops": ops})
        second = await kernel.invoke("mcp.plant.apply", {"ops": later})
    assert not first.ok and first.error.code == "invalid_arguments", first
    (refused,) = first.error.details["changes"]["refused"]
    assert refused["path"] == "." and "0755 to 0700" in refused["message"], refused
    assert second.ok and second.value["changes"]["refused"] == [], second
    assert (workspace / "made.txt").read_text() == "made\n"
    assert stat.S_IMODE(workspace.stat().st_mode) == 0o755


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    from ringfence.cli._main import main

    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_legitimate_writes_become_a_change_set_listed_and_undone(
    workspace: Path, tmp_path: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through the command: the server's writes are a change set of the call, which
    ``checkpoints list`` shows and ``undo`` takes back, byte for byte."""
    (ringfence_home / "mcp.toml").write_text(planter())
    session = ["--workspace", str(workspace), "--posture", "allow-all"]
    ops = [
        {"op": "write", "path": str(workspace / "notes.txt"), "text": "changed by the server\n"},
        {"op": "write", "path": str(workspace / "new/made.txt"), "text": "made\n"},
    ]
    code, body = _cli(
        capsys, "call", "mcp.plant.apply", "--args", json.dumps({"ops": ops}), *session
    )
    assert code == 0, body
    changes = body["result"]["changes"]
    assert changes["files"] >= 3 and changes["refused"] == [], changes
    set_id = changes["id"]
    assert (workspace / "notes.txt").read_text() == "changed by the server\n"
    assert (workspace / "new/made.txt").read_text() == "made\n"
    code, body = _cli(capsys, "checkpoints", "list", "--workspace", str(workspace))
    assert code == 0, body
    (listed,) = [s for s in body["result"] if s["id"] == set_id]
    assert listed["tool"] == "mcp.plant.apply", listed
    code, body = _cli(capsys, "undo", set_id, *session)
    assert code == 0, body
    assert (workspace / "notes.txt").read_text() == "workspace data\n"
    assert not (workspace / "new").exists()


async def test_writes_between_calls_join_the_next_calls_change_set(
    workspace: Path, tmp_path: Path
) -> None:
    async with kernel_for(workspace, tmp_path, planter()) as kernel:
        first = await kernel.call(
            "mcp.plant.later",
            {"path": str(workspace / "late.txt"), "text": "late\n", "seconds": 0.3},
        )
        assert first["changes"] is None, first
        await trio.sleep(1.0)
        assert not (workspace / "late.txt").exists()  # written to the overlay, not merged yet
        second = await kernel.call("mcp.plant.read", {"path": str(workspace / "late.txt")})
        assert "late" in json.dumps(second)
        assert second["changes"]["files"] == 1, second
    assert (workspace / "late.txt").read_text() == "late\n"
    (checkpoint,) = [e for e in events(tmp_path, "checkpoint") if e.get("id")]
    assert checkpoint["tool"] == "mcp.plant.read" and checkpoint["paths"] == ["late.txt"]


async def test_deletions_and_renames_after_a_merge_reach_the_workspace(
    workspace: Path, tmp_path: Path
) -> None:
    """The overlay stays mounted across calls while its lower layer (the root) takes the
    merges: a file the server made, merged, then removed or renamed, goes from the host too."""
    async with kernel_for(workspace, tmp_path, planter()) as kernel:
        ops = [
            {"op": "write", "path": str(workspace / "a.txt"), "text": "a\n"},
            {"op": "write", "path": str(workspace / "d/b.txt"), "text": "b\n"},
        ]
        await kernel.call("mcp.plant.apply", {"ops": ops})
        assert (workspace / "a.txt").exists() and (workspace / "d/b.txt").exists()
        gone = await kernel.call(
            "mcp.plant.apply",
            {"ops": [{"op": "remove", "path": str(workspace / "a.txt")}]},
        )
        assert gone["changes"]["files"] == 1, gone
        assert not (workspace / "a.txt").exists()
        moved = await kernel.call(
            "mcp.plant.apply",
            {
                "ops": [
                    {"op": "write", "path": str(workspace / "e/b.txt"), "text": "b\n"},
                    {"op": "remove", "path": str(workspace / "d")},
                    {"op": "remove", "path": str(workspace / "notes.txt")},
                ]
            },
        )
        assert moved["changes"]["refused"] == [], moved
        # Nothing it wrote before is written again: a call that writes nothing makes no set.
        idle = await kernel.call("mcp.plant.read", {"path": str(workspace / "e/b.txt")})
        assert idle["changes"] is None, idle
    assert not (workspace / "d").exists() and not (workspace / "notes.txt").exists()
    assert (workspace / "e/b.txt").read_text() == "b\n"


async def test_the_hosts_change_to_a_file_the_server_wrote_is_kept(
    workspace: Path, tmp_path: Path
) -> None:
    """The server's own copy stays in its overlay; a later call does not write it back."""
    target = workspace / "shared.txt"
    async with kernel_for(workspace, tmp_path, planter()) as kernel:
        await kernel.call(
            "mcp.plant.apply", {"ops": [{"op": "write", "path": str(target), "text": "server\n"}]}
        )
        target.write_text("host\n")
        later = await kernel.call(
            "mcp.plant.apply",
            {"ops": [{"op": "write", "path": str(workspace / "other.txt"), "text": "x\n"}]},
        )
        assert later["changes"]["files"] == 1, later
    assert target.read_text() == "host\n"


# -- fail closed --------------------------------------------------------------------------------


async def test_without_an_overlay_a_writable_server_is_refused_naming_why(
    workspace: Path, tmp_path: Path
) -> None:
    """A mount inside a root cannot be an overlay's lower layer: the server is not started
    (and, above all, never started writing the root directly)."""
    if os.geteuid() != 0:
        pytest.skip("mounting inside the workspace needs root")
    inner = workspace / "mnt"
    inner.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(inner)], check=True)
    try:
        async with kernel_for(workspace, tmp_path, planter()) as kernel:
            error = kernel.extensions["mcp"].failures["plant"]
            assert not [s for s in kernel.tools() if s.name.startswith("mcp.plant.")]
    finally:
        subprocess.run(["umount", "-l", str(inner)], check=False)
    assert error.code == "unavailable", error.message
    assert "overlay" in error.message and "sandbox_writable = false" in error.message
    assert "mount point inside a root" in error.message  # the fix names the cause


def test_without_the_cgroup_freezer_a_writable_server_is_refused_naming_why(
    workspace: Path, tmp_path: Path
) -> None:
    """A kernel process that sees no cgroup v2 hierarchy (here: its own mount namespace with
    the hierarchy unmounted) cannot freeze a server: refused, never started; a read-only
    server still starts."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a mount namespace of the test's own needs root and unshare")
    (tmp_path / "mcp.toml").write_text(
        planter() + py_server("reader", "planter.py", extra='sandbox = "local"\n')
    )
    script = f"""
import json, trio
from ringfence import create_kernel

async def main():
    async with create_kernel(roots=[{str(workspace)!r}], mcp_manifest={str(tmp_path / "mcp.toml")!r}) as k:
        failures = k.extensions["mcp"].failures
        print(json.dumps({{n: e.to_dict() for n, e in failures.items()}}))

trio.run(main)
"""
    unmount = "grep ' - cgroup2 ' /proc/self/mountinfo | cut -d' ' -f5 | xargs -r -n1 umount -l"
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", f'{unmount} && exec "$@"', "sh",
         sys.executable, "-c", script],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    failures = json.loads(done.stdout.strip().splitlines()[-1])
    assert list(failures) == ["plant"], failures  # the read-only server connected
    error = failures["plant"]
    assert error["code"] == "unavailable" and error["field"] == "sandbox_writable", error
    assert "cgroup" in error["message"] and "sandbox_writable = false" in error["message"]
    assert sorted(p.name for p in workspace.iterdir()) == ["notes.txt"]  # as it was


async def test_under_a_dry_run_the_servers_writes_are_staged_not_merged(
    workspace: Path, tmp_path: Path
) -> None:
    """A tool the operator lists as read runs under a dry run; what it wrote is judged and
    staged into the plan (an ``apply_changes`` call), as a ``run_shell`` command's is."""
    block = planter(WRITABLE + 'read_only_tools = ["apply"]\n')
    plan = tmp_path / "plan.json"
    async with kernel_for(workspace, tmp_path, block, dry_run=True, plan_path=plan) as kernel:
        ops = [{"op": "write", "path": str(workspace / "staged.txt"), "text": "later\n"}]
        staged = await kernel.call("mcp.plant.apply", {"ops": ops})
        assert staged["changes"]["staged"] is True, staged
        planted = await kernel.invoke(
            "mcp.plant.apply", {"ops": _ops("dotgit", workspace, tmp_path / "m")}
        )
        assert not planted.ok and planted.error.code == "git_metadata", planted
        assert "staging" in planted.error.message
    assert not (workspace / "staged.txt").exists()
    assert not (workspace / "sub").exists()
    assert "apply_changes" in plan.read_text()


async def test_a_rewrite_that_keeps_size_and_times_is_still_read(
    workspace: Path, tmp_path: Path
) -> None:
    """Files read before are not read again while their stat signature holds; a rewrite of
    the same size with the old times put back still changes the ctime, and is merged."""
    target = workspace / "same.txt"
    async with kernel_for(workspace, tmp_path, planter()) as kernel:
        write = {"op": "write", "path": str(target), "text": "aaaa\n"}
        await kernel.call("mcp.plant.apply", {"ops": [write]})
        await trio.sleep(1.5)  # past the settling margin: the next read trusts the signature
        idle = await kernel.call("mcp.plant.read", {"path": str(target)})
        assert idle["changes"] is None, idle
        again = {**write, "text": "bbbb\n", "keep_mtime": True}
        done = await kernel.call("mcp.plant.apply", {"ops": [again]})
        assert done["changes"]["files"] == 1, done
    assert target.read_text() == "bbbb\n"

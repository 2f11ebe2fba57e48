"""The docker backend's change sets (issue 15): every command's writes land in an upper directory.

With ``SessionSpec.change_sets`` each command runs on an overlay per root
(the root its read-only lower layer) inside a nested user and mount
namespace; the result names the upper directories, which
``changes_from_upper`` reads into the exact change set and ``merge_changes``
merges through the guarded writer. Real daemon, real overlays, real merges.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import socket
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import docker.errors
import pytest
import trio
from backends_helpers import (
    DOCKER_OPTIONS,
    WORKSPACE_UID,
    chown_like_workspace,
    container_processes,
)

from ringfence.backends import SessionSpec, ShellResult
from ringfence.backends.docker._idmap import idmapped_view
from ringfence.backends.docker._seal import (
    enter_program,
    mount_program,
    seal_program,
    userns_program,
)
from ringfence.backends.docker._seccomp import NAMESPACE_ALLOW, profile
from ringfence.backends.docker._session import (
    CONTAINER_LABEL,
    OWNER_SPACE_LABEL,
    DockerSession,
    owner_space,
    remove_stale_containers,
    start_docker,
)
from ringfence.backends.testing import check_backend
from ringfence.runtime import RingfenceError, Unavailable
from ringfence.workspace import Change, CheckpointStore, Workspace
from ringfence.workspace.changes._merge import MergeReport, merge_changes
from ringfence.workspace.changes._upper import changes_from_upper

pytestmark = pytest.mark.docker

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


async def start(ws: Path, **kw) -> DockerSession:
    options = {**DOCKER_OPTIONS, **kw.pop("options", {})}
    return await start_docker(
        SessionSpec(roots=(ws,), kill_grace=0.5, options=options, change_sets=True, **kw)
    )


async def sh(session: DockerSession, command: str, cwd: Path, **kw) -> ShellResult:
    kw.setdefault("timeout", 20)
    return await session.run(command, cwd=cwd, env={}, output_cap=64 * 1024, **kw)


def tree(root: Path) -> dict[str, tuple[str, bytes, int]]:
    """Every entry below ``root``: kind, bytes (or link target), mode."""
    out: dict[str, tuple[str, bytes, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.fsencode(os.readlink(p)), 0)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", b"", stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("file", p.read_bytes(), stat.S_IMODE(st.st_mode))
    return out


def make(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    made = [p for p in root.rglob("*")]
    chown_like_workspace(root, *made)


def capture(ws: Workspace, store: CheckpointStore, result: ShellResult) -> list[Change]:
    """The run's change set, read from its uppers the way run_shell reads them."""
    changes: list[Change] = []
    for i, upper in enumerate(result.uppers):
        assert upper.root == ws.roots[i]
        upper_fd, lower_fd = os.open(upper.path, _DIR), os.open(upper.root, _DIR)
        try:
            changes += changes_from_upper(upper_fd, lower_fd, i, store)
        finally:
            os.close(upper_fd)
            os.close(lower_fd)
    return changes


def line(text: str) -> str:
    """How :func:`summary` shows a file holding ``text`` and a newline."""
    return "file:" + hashlib.sha256(f"{text}\n".encode()).hexdigest()


def summary(changes: list[Change]) -> set[tuple[str, str | None, str | None]]:
    """(path, before, after) with each side as its kind, or ``file:<sha>`` for a file."""

    def side(image) -> str | None:
        if image is None:
            return None
        return f"file:{image.digest}" if image.kind == "file" else image.kind

    return {(c.path, side(c.before), side(c.after)) for c in changes}


async def test_edit_create_delete_rename_give_the_exact_change_set(
    docker_client, workspace: Path
) -> None:
    make(
        workspace,
        {
            "keep.txt": "keep\n",
            "edit.txt": "old\n",
            "gone.txt": "gone\n",
            "old/x": "x\n",
            "old/sub/y": "y\n",
            "del/p": "p\n",
            "del/q/r": "r\n",
        },
    )
    before = tree(workspace)
    session = await start(workspace)
    try:
        r = await sh(
            session,
            "printf 'new\\n' > edit.txt && echo made > new.txt && rm gone.txt && "
            "mv old renamed && rm -r del && mkdir -p fresh/deep && echo z > fresh/deep/z",
            workspace,
        )
        assert r.exit_code == 0, r
        assert tree(workspace) == before  # nothing reached the real workspace
        with Workspace([workspace]) as ws:
            store = CheckpointStore(ws)
            try:
                changes = capture(ws, store, r)
                assert summary(changes) == {
                    ("edit.txt", line("old"), line("new")),
                    ("new.txt", None, line("made")),
                    ("gone.txt", line("gone"), None),
                    ("old/x", line("x"), None),
                    ("old/sub/y", line("y"), None),
                    ("old/sub", "dir", None),
                    ("old", "dir", None),
                    ("renamed", None, "dir"),
                    ("renamed/x", None, line("x")),
                    ("renamed/sub", None, "dir"),
                    ("renamed/sub/y", None, line("y")),
                    ("del/p", line("p"), None),
                    ("del/q/r", line("r"), None),
                    ("del/q", "dir", None),
                    ("del", "dir", None),
                    ("fresh", None, "dir"),
                    ("fresh/deep", None, "dir"),
                    ("fresh/deep/z", None, line("z")),
                }
                assert len(changes) == 18  # each path once
                report = merge_changes(ws, changes, store)
            finally:
                store.close()
        assert isinstance(report, MergeReport) and not report.refused
        after = tree(workspace)
        assert set(after) == {
            "keep.txt",
            "edit.txt",
            "new.txt",
            "renamed",
            "renamed/x",
            "renamed/sub",
            "renamed/sub/y",
            "fresh",
            "fresh/deep",
            "fresh/deep/z",
        }
        assert after["edit.txt"][1] == b"new\n" and after["renamed/sub/y"][1] == b"y\n"
        owner = workspace.stat()
        for rel in after:
            st = (workspace / rel).lstat()
            assert (st.st_uid, st.st_gid) == (owner.st_uid, owner.st_gid), rel
        # The merged tree is what the next command sees.
        r2 = await sh(session, "cat renamed/sub/y edit.txt; ls", workspace)
        listed = ["edit.txt", "fresh", "keep.txt", "new.txt", "renamed"]
        assert r2.stdout.split() == ["y", "new", *listed]
    finally:
        await session.aclose()


ATTACKS = {
    "umount": "umount /workspace || umount -l /workspace",
    "remount": "mount -o remount,rw /workspace",
    "own namespace": "unshare -Urm sh -c 'umount /workspace; umount -l /workspace; "
    "mount -o remount,rw /workspace; umount /.rf-uppers; echo x > /workspace/pwn'",
    "proc self root": "echo x > /proc/self/root/workspace/pwn",
    "proc roots": "for p in /proc/[0-9]*; do echo x > $p/root/workspace/pwn; "
    "mv $p/root/.rf-uppers/0/u $p/root/.rf-uppers/0/u2; "
    "ln -s /etc $p/root/.rf-uppers/0/u; done",
    "uppers directly": "echo x > /.rf-uppers/0/u/pwn; rm -rf /.rf-uppers/0/u; "
    "ln -s /etc /.rf-uppers/0/u",
}


async def test_a_command_cannot_write_the_real_workspace(docker_client, workspace: Path) -> None:
    make(workspace, {"a.txt": "a\n"})
    before = tree(workspace)
    session = await start(workspace)
    try:
        for name, attack in ATTACKS.items():
            r = await sh(session, attack, workspace)
            assert tree(workspace) == before, name
            # Whatever got written landed in this run's upper, a directory the host made.
            [upper] = r.uppers
            assert upper.path.is_dir() and not upper.path.is_symlink(), name
            assert set(os.listdir(upper.path)) <= {"pwn"}, (name, os.listdir(upper.path))
        # The lower is mounted read-only by Docker; the command is no one's root.
        status = await sh(session, "id -u; grep -E 'CapEff|Seccomp:' /proc/self/status", workspace)
        lines = status.stdout.split()
        assert lines[0] == str(workspace.stat().st_uid) != "0"
        assert lines[1:] == ["CapEff:", "0000000000000000", "Seccomp:", "2"], status
        mounts = docker_client.api.inspect_container(session.container_id)["Mounts"]
        [ws_mount] = [m for m in mounts if m["Destination"] == "/workspace"]
        assert ws_mount["RW"] is False
    finally:
        await session.aclose()


# Every other process's root, working directory, environment, descriptors and memory: the
# supervisor among them, which (issue 34) is root of the user namespace the overlays are
# mounted from, with the uppers unhidden and the lower under its working directory.
_SUPERVISOR_REACH = (
    'for p in /proc/[0-9]*; do [ "$p" = /proc/$$ ] && continue; '
    'ls "$p/root/.rf-uppers/0" >/dev/null 2>&1 && echo "LEAK root $p"; '
    'ls "$p/cwd/" >/dev/null 2>&1 && echo "LEAK cwd $p"; '
    'cat "$p/environ" >/dev/null 2>&1 && echo "LEAK environ $p"; '
    '[ -n "$(readlink "$p/fd/0" 2>/dev/null)" ] && echo "LEAK fd $p"; '
    'cat "$p/maps" >/dev/null 2>&1 && echo "LEAK maps $p"; '
    'echo x > "$p/cwd/pwn" 2>/dev/null && echo "LEAK write $p"; '
    'echo x > "$p/root/.rf-uppers/0/u/pwn" 2>/dev/null && echo "LEAK upper $p"; '
    "done; echo checked"
)


async def test_a_command_cannot_reach_the_supervisor_holding_its_namespaces(
    docker_client, workspace: Path
) -> None:
    """The supervisor holds the user and mount namespace every command's overlay is mounted
    from (issue 34); a command (nested user namespace, no capabilities) reaches nothing of it
    through /proc: not its root (the uppers unhidden), cwd (the lower), descriptors (listing
    their numbers is allowed to the same uid, as it was before) or memory map."""
    make(workspace, {"a.txt": "a\n"})
    before = tree(workspace)
    session = await start(workspace)
    try:
        r = await sh(session, _SUPERVISOR_REACH, workspace)
        assert r.exit_code == 0 and r.stdout.strip() == "checked", r
        assert not any(os.listdir(u.path) for u in r.uppers), r
        # The supervisor is there, in a user namespace of its own: what the loop went past.
        listing = await sh(session, "ls -d /proc/[0-9]*", workspace)
        assert len(listing.stdout.split()) >= 3, listing
        r = await sh(session, "echo fine > ok.txt && cat a.txt", workspace)
        assert r.exit_code == 0 and r.stdout == "a\n", r
        assert sorted(os.listdir(r.uppers[0].path)) == ["ok.txt"]
    finally:
        await session.aclose()
    assert tree(workspace) == before


async def test_a_commands_environment_does_not_steer_the_wrapper(
    docker_client, workspace: Path
) -> None:
    """PATH, IFS and friends reach only the command: the overlay is set up with none of them."""
    make(
        workspace,
        {
            name: "#!/bin/sh\necho hijacked > /tmp/hijacked\n"
            for name in ("bin/mount", "bin/unshare", "bin/sh")
        },
    )
    for name in ("mount", "unshare", "sh"):
        os.chmod(workspace / "bin" / name, 0o755)
    # __rf_i: the wrapper's own variable (what it runs next), exported by its last act.
    env = {"PATH": "/workspace/bin:/bin", "IFS": "/", "n": "0", "ENV": "/workspace/bin/sh",
           "__rf_i": "Sexec /workspace/bin/sh"}  # fmt: skip
    session = await start(workspace)
    try:
        r = await session.run(
            ["/bin/sh", "-c", 'echo "$PATH|$n"; echo x > made'],
            cwd=workspace,
            env=env,
            timeout=20,
            output_cap=4096,
        )
        assert r.exit_code == 0 and r.stdout == "/workspace/bin:/bin|0\n", r
        assert sorted(os.listdir(r.uppers[0].path)) == ["made"]
        check = await sh(session, "cat /tmp/hijacked 2>&1 || echo clean", workspace)
        assert check.stdout.strip().endswith("clean"), check
    finally:
        await session.aclose()


def git(root: Path, *args: str) -> None:
    env = {"PATH": os.environ["PATH"], "HOME": str(root.parent), "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)


async def test_git_metadata_writes_stay_in_the_upper_and_the_merge_refuses_them(
    docker_client, workspace: Path
) -> None:
    git(workspace, "init", "-q")
    make(workspace, {"sub/.git": "gitdir: ../.git/modules/sub\n", "sub/file": "f\n"})
    (workspace / ".git" / "modules" / "sub").mkdir(parents=True)
    chown_like_workspace(workspace, *workspace.rglob("*"))
    before = tree(workspace)
    session = await start(
        workspace, readonly_paths=(workspace / ".git", workspace / "sub" / ".git")
    )
    try:
        r = await sh(
            session,
            "echo 'gitdir: /tmp/evil' > sub/.git && "
            "mkdir -p other/.git && printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' "
            "> other/.git/config && echo 'touch /tmp/pwned' > .git/hooks/pre-commit && "
            "echo fine > fine.txt",
            workspace,
        )
        assert r.exit_code == 0, r  # the overlay takes every write ...
        assert tree(workspace) == before  # ... and none reached the workspace
        with Workspace([workspace]) as ws:
            store = CheckpointStore(ws)
            try:
                changes = capture(ws, store, r)
                with pytest.raises(RingfenceError) as info:
                    merge_changes(ws, changes, store)
                assert info.value.code == "git_metadata"
                refused = {e["path"]: e["code"] for e in info.value.details["refused"]}
                assert refused["sub/.git"] == refused[".git/hooks/pre-commit"] == "git_metadata"
                assert refused["other/.git/config"] == "git_metadata"
                assert tree(workspace) == before  # atomic: nothing at all
                report = merge_changes(ws, changes, store, atomic=False)
            finally:
                store.close()
        assert {c.path for c in report.applied} == {"fine.txt", "other"}
        assert {e["code"] for e in report.refused} == {"git_metadata"}
        after = tree(workspace)
        assert after["sub/.git"] == before["sub/.git"]
        assert ".git/hooks/pre-commit" not in after and "other/.git" not in after
        assert after["fine.txt"][1] == b"fine\n"
    finally:
        await session.aclose()


@pytest.fixture
def root_owned(tmp_path: Path) -> Iterator[Path]:
    """A checkout as CI makes it: every directory and file root's, 0755 and 0644."""
    if os.geteuid() != 0:
        pytest.skip("a root-owned workspace needs the tests to run as root (as on CI)")
    ws = tmp_path / "rootws"
    ws.mkdir()
    for rel, text in {"existing.txt": "existing\n", "src/a.c": "a\n", "src/old/b.c": "b\n"}.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)
    for p in [ws, *ws.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    yield ws


async def test_a_root_owned_workspace_is_writable_through_change_sets(
    docker_client, root_owned: Path
) -> None:
    work = (
        "echo x > f && echo more >> existing.txt && echo c > src/new.c && "
        "echo edited > src/a.c && mv src/old src/renamed && rm src/renamed/b.c"
    )
    # The problem: without change sets the command (never root) cannot write there.
    plain = await start_docker(
        SessionSpec(roots=(root_owned,), kill_grace=0.5, options=DOCKER_OPTIONS)
    )
    try:
        r = await sh(plain, work, root_owned)
        assert r.exit_code != 0 and "Permission denied" in r.stderr, r
    finally:
        await plain.aclose()
    before = tree(root_owned)
    session = await start(root_owned)
    try:
        r = await sh(session, f"id -u; {work}", root_owned)
        assert r.exit_code == 0 and r.stdout == "65534\n", r
        [upper] = r.uppers
        # From the host's view the command's files belong to its non-root user.
        assert (upper.path / "f").stat().st_uid == 65534
        assert (upper.path / "src" / "new.c").stat().st_uid == 65534
        assert tree(root_owned) == before
        with Workspace([root_owned]) as ws:
            store = CheckpointStore(ws)
            try:
                report = merge_changes(ws, capture(ws, store, r), store)
            finally:
                store.close()
        assert not report.refused
        after = tree(root_owned)
        assert after["f"][1] == b"x\n" and after["existing.txt"][1] == b"existing\nmore\n"
        assert after["src/a.c"][1] == b"edited\n" and after["src/new.c"][1] == b"c\n"
        assert "src/old" not in after and after["src/renamed"][0] == "dir"
        assert "src/renamed/b.c" not in after
        for rel in after:  # merged entries are the workspace owner's
            st = (root_owned / rel).lstat()
            assert (st.st_uid, st.st_gid) == (0, 0), rel
    finally:
        await session.aclose()
    # The id-mapped view of the root is gone with the session; the root is untouched by it.
    assert not list((Path(os.environ["RINGFENCE_HOME"]) / "docker-uppers").iterdir())


async def test_uppers_are_emptied_by_the_next_run_and_removed_at_close(
    docker_client, workspace: Path, ringfence_home: Path
) -> None:
    session = await start(workspace)
    try:
        # A directory the command makes unreadable must not stop the emptying.
        r = await sh(session, "mkdir -p d/e && echo a > d/e/f && chmod 000 d/e d", workspace)
        [upper] = r.uppers
        assert (upper.path / "d").is_dir()
        r2 = await sh(session, "true", workspace)
        assert r2.uppers == r.uppers and os.listdir(upper.path) == []
        # A command that wrote nothing leaves nothing to empty (the next run skips it);
        # the one after it still gets its own writes alone, and a rerun sees none of them.
        r3 = await sh(session, "cat /dev/null", workspace)
        assert r3.exit_code == 0 and os.listdir(upper.path) == []
        r4 = await sh(session, "echo b > g && ls", workspace)
        assert r4.stdout.split() == ["g"] and os.listdir(upper.path) == ["g"], r4
        r5 = await sh(session, "ls; echo c > h", workspace)
        assert r5.stdout == "" and os.listdir(upper.path) == ["h"], r5
        # A cancelled command (after a clean one) never reports back: the next run still
        # empties what it wrote (and the work directory its overlay marked) first.
        await sh(session, "true", workspace)
        with trio.move_on_after(2.0):
            await sh(session, "echo x > late; sleep 30", workspace)
        r6 = await sh(session, "ls; echo d > i", workspace)
        assert r6.exit_code == 0 and r6.stdout == "", r6
        assert os.listdir(upper.path) == ["i"], r6
    finally:
        await session.aclose()
    assert not upper.path.exists()
    assert os.listdir(ringfence_home / "docker-uppers") == []


@pytest.mark.parametrize("image", ["busybox", "debian"])
async def test_docker_backend_conforms_with_change_sets(
    docker_client, workspace: Path, image: str
) -> None:
    """The suite on busybox's applets and on the debian image's util-linux unshare and mount."""
    if image == "debian" and not docker_client.images.list(name="ringfence/debian"):
        pytest.skip("ringfence/debian is not built here (`ringfence images build debian`)")
    await check_backend(
        start_docker,
        workspace,
        processes=container_processes,
        options={**DOCKER_OPTIONS, "image": image},
        change_sets=True,
    )


async def test_change_sets_under_gvisor_are_refused(docker_client, workspace: Path) -> None:
    if "runsc" not in (docker_client.info().get("Runtimes") or {}):
        pytest.skip("runsc is not registered with the Docker daemon (.ci/run registers it)")
    label = {"label": f"ringfence.owner={os.uname().nodename}:{os.getpid()}"}
    before = {c.id for c in docker_client.containers.list(all=True, filters=label)}
    with pytest.raises(Unavailable) as info:
        await start(workspace, options={"runtime": "runsc", "pids": 512})
    assert "gVisor" in info.value.message and "runc" in info.value.message
    assert {c.id for c in docker_client.containers.list(all=True, filters=label)} == before


async def test_the_namespace_profile_applies_only_to_change_sets(
    docker_client, workspace: Path
) -> None:
    """Without change sets Docker's own default profile still refuses namespaces and mounts."""
    plain = await start_docker(
        SessionSpec(roots=(workspace,), kill_grace=0.5, options=DOCKER_OPTIONS)
    )
    try:
        r = await sh(plain, "unshare -Urm true", workspace)
        assert r.exit_code != 0 and "Operation not permitted" in r.stderr, r
    finally:
        await plain.aclose()
    session = await start(workspace)
    try:
        # The wrapper may (the container's profile); the command under its own filter may not.
        r = await sh(session, "unshare -Urm true && echo allowed", workspace)
        assert r.stdout == "" and "Operation not permitted" in r.stderr, r
        opts = docker_client.api.inspect_container(session.container_id)["HostConfig"]
        [seccomp] = [o for o in opts["SecurityOpt"] if o.startswith("seccomp=")]
        assert seccomp == "seccomp=" + json.dumps(profile(), separators=(",", ":"))
    finally:
        await session.aclose()


# Each a namespace or mount a change-set command tries; none may succeed (the stacked filter).
_NAMESPACE_ATTACKS = {
    "unshare user+mount": "unshare -Urm sh -c 'echo pwned > /workspace/x'",
    "unshare user only": "unshare -U true",
    "mount over the root": "mount -t tmpfs rf /workspace",
    "remount the hidden uppers": "mount -o remount,rw /.rf-uppers",
    "umount the overlay": "umount -l /workspace",
    "nsenter the wrapper's namespace": "nsenter -U -m -t 1 true",
}
_PY_ATTACKS = {
    "clone(CLONE_NEWUSER)": "os.unshare(os.CLONE_NEWUSER)",
    "clone3": "ctypes.CDLL(None, use_errno=True).syscall(435, 0, 0) == 0 or sys.exit(ctypes.get_errno() == 38 and 3 or 4)",
    "setns": "os.setns(os.open('/proc/1/ns/mnt', os.O_RDONLY))",
}


async def test_the_next_command_clears_the_volatile_mark_and_fails_closed_on_one_it_cannot(
    docker_client, workspace: Path
) -> None:
    """The host leaves each command's ``volatile`` mark in the work directory; the next
    command's ``enter`` removes it before it mounts. A mark it cannot remove (here a file
    the host put beside it) makes the mount refuse: the command does not run, on the
    read-only root or anywhere, and the session says the overlay failed."""
    make(workspace, {"keep.txt": "kept\n"})
    before = tree(workspace)
    session = await start(workspace)
    try:
        r = await sh(session, "echo a > one", workspace)
        [upper] = r.uppers
        mark = upper.path.parent / "w" / "work" / "incompat" / "volatile"
        assert r.exit_code == 0 and (mark / "dirty").exists(), r
        for i in range(3):
            r = await sh(session, f"test ! -e one && echo {i} > two && cat two", workspace)
            assert r.exit_code == 0 and r.stdout == f"{i}\n", r
            assert os.listdir(upper.path) == ["two"] and (mark / "dirty").exists()
        for _ in range(3):  # nothing written: the host empties nothing, enter clears the mark
            r = await sh(session, "test ! -e two", workspace)
            assert r.exit_code == 0 and os.listdir(upper.path) == [], r
            assert (mark / "dirty").exists()
        (mark / "stuck").write_text("")  # rmdir(MARK) now fails: the mark stays
        with pytest.raises(Unavailable, match="overlay could not be set up"):
            await sh(session, "echo ran > /tmp/ran; echo x > three", workspace)
        (mark / "stuck").unlink()
        r = await sh(session, "test -e /tmp/ran && echo RAN; ls", workspace)
        assert r.exit_code == 0 and "RAN" not in r.stdout and "three" not in r.stdout, r
    finally:
        await session.aclose()
    assert tree(workspace) == before


async def test_a_program_that_cannot_be_executed_gets_126_or_127(
    docker_client, workspace: Path
) -> None:
    """After the namespaces and the filter, ``enter`` execs the program itself: a path that
    is missing gives 127, one that is no program 126, each with a message saying so (not
    the filter's: that one was installed)."""
    session = await start(workspace)
    try:
        for argv, code in ((["/nonexistent"], 127), (["/etc/passwd"], 126)):
            r = await session.run(argv, cwd=workspace, env={}, timeout=20, output_cap=4096)
            assert r.exit_code == code and "could not be executed" in r.stderr, r
            assert "seccomp" not in r.stderr, r
        r = await session.run(["/bin/sh", "-c", "echo $0 $1", "zero", "one"], cwd=workspace,
                              env={}, timeout=20, output_cap=4096)  # fmt: skip
        assert r.exit_code == 0 and r.stdout == "zero one\n", r
    finally:
        await session.aclose()


@pytest.mark.parametrize("image", ["busybox", "debian"])
async def test_a_change_set_command_can_make_no_namespace_and_no_mount(
    docker_client, workspace: Path, image: str
) -> None:
    """The container's profile lets the wrapper mount the overlays; the command's own stacked
    filter (._seal) refuses it every namespace and mount, and the installer cannot be swapped."""
    if image == "debian" and not docker_client.images.list(name="ringfence/debian"):
        pytest.skip("ringfence/debian is not built here (`ringfence images build debian`)")
    make(workspace, {"keep.txt": "kept\n"})
    before = tree(workspace)
    session = await start(workspace, options={"image": image})
    try:
        for name, attack in _NAMESPACE_ATTACKS.items():
            r = await sh(session, f"{attack} && echo ESCAPED", workspace)
            assert "ESCAPED" not in r.stdout and r.exit_code != 0, (name, r)
            assert not any(os.listdir(u.path) for u in r.uppers), (name, r)
        if image == "debian":
            for name, attack in _PY_ATTACKS.items():
                code = f"import ctypes, os, sys\n{attack}\nprint('ESCAPED')"
                r = await sh(session, ["python3", "-c", code], workspace)
                assert "ESCAPED" not in r.stdout and r.exit_code != 0, (name, r)
        # The installer and the wrapper's namespace and mount programs (they run before the
        # filter) are root's and read-only: a command cannot replace one so that a later
        # command runs without its filter or in namespaces of its choosing.
        for name, program in (("seal", seal_program), ("userns", userns_program),
                              ("mount", mount_program), ("enter", enter_program)):  # fmt: skip
            path = f"/.rf-bin/{name}"
            swap = f"cp /bin/sh /tmp/s; cp /tmp/s {path} || mv /tmp/s {path} || rm -f {path}"
            r = await sh(session, f"{swap}; ls -l {path}; sha256sum {path}", workspace)
            assert "-r-xr-xr-x" in r.stdout and "denied" in r.stderr, (name, r)
            assert hashlib.sha256(program()).hexdigest() in r.stdout, (name, r)
        r = await sh(session, "unshare -U true && echo ESCAPED", workspace)
        assert "ESCAPED" not in r.stdout and r.exit_code != 0, r
        r = await sh(session, "echo fine > ok.txt && cat keep.txt", workspace)
        assert r.exit_code == 0 and r.stdout == "kept\n", r
    finally:
        await session.aclose()
    assert tree(workspace) == before


def test_the_profile_is_dockers_default_plus_the_namespace_calls() -> None:
    allowed = {
        n
        for rule in profile()["syscalls"]
        if rule["action"] == "SCMP_ACT_ALLOW"
        for n in rule["names"]
    }
    assert set(NAMESPACE_ALLOW) <= allowed
    # Docker gates these on capabilities a ringfence container never holds: still refused.
    for name in (
        "bpf",
        "perf_event_open",
        "keyctl",
        "add_key",
        "init_module",
        "kexec_load",
        "open_by_handle_at",
        "chroot",
        "pivot_root",
        "reboot",
        "swapon",
        "acct",
        "fsopen",
        "fsmount",
        "move_mount",
        "open_tree",
        "mount_setattr",
        "userfaultfd",
    ):
        assert name not in allowed, name
    assert profile()["defaultAction"] == "SCMP_ACT_ERRNO"


async def test_every_root_gets_its_own_upper(
    docker_client, workspace: Path, tmp_path: Path
) -> None:
    second = tmp_path / "second"
    second.mkdir()
    chown_like_workspace(workspace, second)
    session = await start_docker(
        SessionSpec(
            roots=(workspace, second), kill_grace=0.5, options=DOCKER_OPTIONS, change_sets=True
        )
    )
    try:
        r = await sh(session, "echo one > a && echo two > /workspace2/b && pwd", workspace)
        assert r.exit_code == 0 and r.stdout == "/workspace\n", r
        assert [u.root for u in r.uppers] == [workspace, second]
        assert [sorted(os.listdir(u.path)) for u in r.uppers] == [["a"], ["b"]]
        assert os.listdir(workspace) == [] and os.listdir(second) == []
        with Workspace([workspace, second]) as ws:
            store = CheckpointStore(ws)
            try:
                changes = capture(ws, store, r)
            finally:
                store.close()
        assert [(c.root, c.path) for c in changes] == [(0, "a"), (1, "b")]
    finally:
        await session.aclose()


async def test_more_roots_than_the_held_supervisor_mounts_run_under_the_wrapper(
    docker_client, workspace: Path, tmp_path: Path
) -> None:
    """Ten roots: /.rf-bin/enter takes nine at most (one digit); such a session runs each
    command under the per-command wrapper script instead, with the same captures."""
    roots = [workspace]
    for i in range(2, 11):
        root = tmp_path / f"r{i}"
        root.mkdir()
        chown_like_workspace(workspace, root)
        roots.append(root)
    session = await start_docker(
        SessionSpec(roots=tuple(roots), kill_grace=0.5, options=DOCKER_OPTIONS, change_sets=True)
    )
    try:
        for _ in range(2):
            r = await sh(session, "echo one > a && echo ten > /workspace10/j && ls /", workspace)
            assert r.exit_code == 0 and "workspace10" in r.stdout, r
            assert [sorted(os.listdir(u.path)) for u in r.uppers] == [["a"]] + [[]] * 8 + [["j"]]
        r = await sh(
            session, "umount /workspace10 && echo ESCAPED; echo x > /workspace10/k", workspace
        )
        assert "ESCAPED" not in r.stdout and not (roots[-1] / "k").exists(), r
        assert os.listdir(r.uppers[-1].path) == ["k"], r
    finally:
        await session.aclose()
    assert all(os.listdir(root) == [] for root in roots)


async def test_a_dead_sessions_directories_go_with_its_container(
    docker_client, workspace: Path, ringfence_home: Path
) -> None:
    """Stale cleanup unmounts a left-over id-mapped view and never deletes through it."""
    make(workspace, {"precious.txt": "keep me\n"})
    session_id = secrets.token_hex(6)
    top = ringfence_home / "docker-uppers" / session_id
    (top / "c" / "0" / "u" / "d").mkdir(parents=True)
    (top / "c" / "0" / "u" / "d" / "f").write_text("left over\n")
    (top / "l0").mkdir()
    viewed = idmapped_view(workspace, top / "l0", (WORKSPACE_UID, WORKSPACE_UID), (1, 1))
    assert viewed == (os.geteuid() == 0)
    stale = docker_client.containers.create(
        "ringfence/busybox:latest",
        ["true"],
        labels={
            CONTAINER_LABEL: "1",
            f"{CONTAINER_LABEL}.session": session_id,
            f"{CONTAINER_LABEL}.owner": f"{socket.gethostname()}:{2**22 + 12345}",
            OWNER_SPACE_LABEL: owner_space(),
        },
    )
    try:
        assert remove_stale_containers(docker_client) >= 1
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            stale.remove(force=True)
    assert not top.exists()
    assert (workspace / "precious.txt").read_text() == "keep me\n"

"""``run_shell`` cannot leave git metadata behind (issue 11, escape 1), on local and docker.

Each attack runs for real through ``create_kernel`` and ``run_shell``, then a
real ``git status`` on the host must not run the marker program the attacker
configured (``core.fsmonitor``), the planted files must be gone from the
workspace (quarantined under the kernel's spool dir), and the event stream
must record the refusal.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from backends_helpers import DOCKER_OPTIONS, git_env, persons_git as git
from kernel_helpers import event_records

from ringfence import create_kernel
from ringfence.runtime import Posture

BACKENDS = [
    pytest.param("local", id="local"),
    pytest.param("host", id="host"),
    pytest.param("docker", id="docker", marks=pytest.mark.docker),
]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each backend in turn; ``docker`` first asks for ``docker_client`` (daemon and image)."""
    if request.param == "docker":
        request.getfixturevalue("docker_client")
    return request.param


def new_repo(tmp_path: Path, path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    assert git(tmp_path, path, "init", "-q", "-b", "main").returncode == 0
    (path / "README").write_text("hello\n")
    git(tmp_path, path, "add", "README")
    assert git(tmp_path, path, "commit", "-q", "-m", "init").returncode == 0


def own_tree(workspace: Path, top: Path) -> None:
    """Give everything under ``top`` to the workspace owner (commands in docker run as it)."""
    if os.geteuid() != 0:
        return
    st = workspace.stat()
    for dirpath, dirnames, filenames in os.walk(top):
        for name in [*dirnames, *filenames]:
            os.lchown(os.path.join(dirpath, name), st.st_uid, st.st_gid)
    os.lchown(top, st.st_uid, st.st_gid)


def evil_gitdir_script(name: str, marker: Path) -> str:
    """Shell that assembles a git directory ``name`` whose config runs ``marker``."""
    return (
        f"mkdir -p '{name}/objects' '{name}/refs/heads' && "
        f"echo 'ref: refs/heads/main' > '{name}/HEAD' && "
        f"printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = \"touch {marker}; :\"\\n'"
        f" > '{name}/config'"
    )


def kernel(ws: Path, backend: str, tmp_path: Path, *, spool: Path | None = None):
    """An unrestricted kernel on ``ws``, events in ``tmp_path/events.jsonl``, quarantine in ``spool``."""
    return create_kernel(
        roots=[ws],
        posture=Posture.UNRESTRICTED,
        backend=backend,
        backend_options=DOCKER_OPTIONS if backend == "docker" else None,
        events_path=tmp_path / "events.jsonl",
        # The scan-and-quarantine path (host, docker, --no-change-sets); the change-set merge
        # is tested in tests/backends/test_backends_changesets.py.
        change_sets=False,
        **({"spool_dir": spool} if spool else {}),
    )


def events(tmp_path: Path) -> list[dict]:
    return event_records(tmp_path / "events.jsonl")


def assert_refused(outcome, tmp_path: Path, *names: str) -> Path:
    """The call failed with git_metadata naming ``names``; the events say so. The quarantine."""
    assert outcome.error is not None, outcome.value
    assert outcome.error.code == "git_metadata", outcome.error
    for name in names:
        assert name in outcome.error.message, (name, outcome.error.message)
    records = [r for r in events(tmp_path) if r.get("call_id") == outcome.call_id]
    kinds = [r["kind"] for r in records]
    assert "git_metadata_refused" in kinds and kinds[-1] == "failed", kinds
    assert records[-1]["error"]["code"] == "git_metadata"
    refused = next(r for r in records if r["kind"] == "git_metadata_refused")
    assert all(any(n in p["path"] for p in refused["paths"]) for n in names)
    quarantine = Path(refused["quarantine"])
    assert quarantine.name == outcome.call_id and quarantine.is_dir()
    return quarantine


# -- (a) a gitfile redirected to a planted git directory ------------------------------------


@pytest.mark.parametrize("layout", ["worktree", "submodule"])
async def test_gitfile_redirect_is_refused_and_undone(
    backend: str, layout: str, workspace: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    if layout == "worktree":
        new_repo(tmp_path, workspace / "repo")
        assert git(tmp_path, workspace / "repo", "worktree", "add", "-q", "../wt").returncode == 0
        target = workspace / "wt"
    else:
        new_repo(tmp_path, workspace / "proj")
        lib = workspace / "proj" / "lib"
        modules = workspace / "proj" / ".git" / "modules" / "lib"
        modules.parent.mkdir()
        made = git(
            tmp_path, workspace / "proj", "init", "-q", "--separate-git-dir", str(modules), "lib"
        )
        assert made.returncode == 0, made.stderr
        new_repo(tmp_path, lib)
        target = lib
    own_tree(workspace, workspace)
    gitfile = (target / ".git").read_bytes()
    owner = (target / ".git").stat().st_uid
    assert gitfile.startswith(b"gitdir: ")
    cwd = str(target.relative_to(workspace))
    attack = f"printf 'gitdir: .evilgit\\n' > .git; {evil_gitdir_script('.evilgit', marker)}"
    async with kernel(workspace, backend, tmp_path) as k:
        outcome = await k.invoke("run_shell", {"command": attack, "cwd": cwd})
    quarantine = assert_refused(outcome, tmp_path, ".evilgit")
    assert (target / ".git").read_bytes() == gitfile
    assert (target / ".git").stat().st_uid == owner
    assert not (target / ".evilgit").exists()
    assert (quarantine / "0" / cwd / ".evilgit" / "config").is_file()
    status = git(tmp_path, target, "status")
    assert status.returncode == 0, status.stderr
    assert not marker.exists()


# -- (b) a brand-new .git when the workspace is a subdirectory of a repository ------------


@pytest.mark.parametrize("name", [".git", ".GIT", "sub/deep/.git.", "git~1", ".g\u200cit"])
async def test_new_dotgit_in_any_spelling_is_refused_and_quarantined(
    backend: str, name: str, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    outer = tmp_path / "outer"
    new_repo(tmp_path, outer)
    ws = outer / "ws"
    ws.mkdir()
    if os.geteuid() == 0:
        os.chown(ws, 1000, 1000)
    async with kernel(ws, backend, tmp_path) as k:
        outcome = await k.invoke("run_shell", {"command": evil_gitdir_script(name, marker)})
    quarantine = assert_refused(outcome, tmp_path, name)
    assert not (ws / name).exists()
    # Kept, under another name: git takes no directory without a HEAD for a repository.
    assert (quarantine / "0" / name / "HEAD.quarantined").is_file()
    status = git(tmp_path, ws, "status")
    assert status.returncode == 0, status.stderr
    assert not marker.exists()
    # The enclosing repository is untouched: the planted directory is not in the workspace.
    assert sorted(p.name for p in ws.iterdir()) == (["sub"] if "/" in name else [])


async def test_new_gitfile_and_symlink_named_git_are_refused(
    backend: str, workspace: Path, tmp_path: Path
) -> None:
    script = (
        f"mkdir a b && {evil_gitdir_script('a/repo', tmp_path / 'pwned')} && "
        "printf 'gitdir: ../a/repo\\n' > b/.Git && ln -s a/repo .git"
    )
    async with kernel(workspace, backend, tmp_path) as k:
        outcome = await k.invoke("run_shell", {"command": script})
    assert_refused(outcome, tmp_path, "a/repo", "b/.Git", ".git")
    assert not os.path.lexists(workspace / ".git") and not (workspace / "b" / ".Git").exists()
    assert not (workspace / "a" / "repo").exists() and (workspace / "a").is_dir()


async def test_metadata_planted_before_a_timeout_is_still_refused(
    backend: str, workspace: Path, tmp_path: Path
) -> None:
    script = f"{evil_gitdir_script('.git', tmp_path / 'pwned')}; sleep 30"
    async with kernel(workspace, backend, tmp_path) as k:
        outcome = await k.invoke("run_shell", {"command": script, "timeout_seconds": 1})
    assert_refused(outcome, tmp_path, ".git")
    assert not (workspace / ".git").exists()


# -- (c) writes into an existing git directory ------------------------------------------------


async def test_local_writes_into_an_existing_git_directory_are_refused_and_undone(
    workspace: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    new_repo(tmp_path, workspace)
    config = (workspace / ".git" / "config").read_bytes()
    attack = (
        f"printf '\\tfsmonitor = \"touch {marker}; :\"\\n' >> .git/config; "
        f"printf '#!/bin/sh\\ntouch {marker}\\n' > .git/hooks/pre-commit; "
        "chmod +x .git/hooks/pre-commit"
    )
    # host: the write reaches the git directory and is undone; the confined local backend's
    # read-only mount refuses it first (test_backends_confined_attacks.py).
    async with kernel(workspace, "host", tmp_path) as k:
        outcome = await k.invoke("run_shell", {"command": attack})
    quarantine = assert_refused(outcome, tmp_path, ".git/config", ".git/hooks/pre-commit")
    assert (workspace / ".git" / "config").read_bytes() == config
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
    assert (quarantine / "0" / ".git" / "hooks" / "pre-commit").is_file()
    assert b"fsmonitor" in (quarantine / "0" / ".git" / "config").read_bytes()
    assert git(tmp_path, workspace, "status").returncode == 0
    (workspace / "x").write_text("x\n")
    git(tmp_path, workspace, "add", "x")
    assert git(tmp_path, workspace, "commit", "-q", "-m", "x").returncode == 0
    assert not marker.exists()


@pytest.mark.docker
async def test_docker_writes_into_git_directories_and_gitfiles_hit_read_only_mounts(
    docker_client, workspace: Path, tmp_path: Path
) -> None:
    new_repo(tmp_path, workspace / "repo")
    assert git(tmp_path, workspace / "repo", "worktree", "add", "-q", "../wt").returncode == 0
    own_tree(workspace, workspace)
    config = (workspace / "repo" / ".git" / "config").read_bytes()
    gitfile = (workspace / "wt" / ".git").read_bytes()
    attack = (
        "echo '[core] fsmonitor = x' >> repo/.git/config; "
        "echo evil > repo/.git/hooks/pre-commit; echo 'gitdir: /tmp' > wt/.git; rm -f wt/.git"
    )
    async with kernel(workspace, "docker", tmp_path) as k:
        result = await k.call("run_shell", {"command": attack})
    assert result["stderr"].count("Read-only file system") >= 3, result
    assert (workspace / "repo" / ".git" / "config").read_bytes() == config
    assert (workspace / "wt" / ".git").read_bytes() == gitfile
    assert not (workspace / "repo" / ".git" / "hooks" / "pre-commit").exists()
    started = next(r for r in events(tmp_path) if r["kind"] == "backend_started")
    assert str(workspace / "wt" / ".git") in started["readonly_paths"]


# -- what is not refused ----------------------------------------------------------------------


async def test_ordinary_commands_and_host_git_between_commands_pass(
    backend: str, workspace: Path, tmp_path: Path
) -> None:
    new_repo(tmp_path, workspace)
    own_tree(workspace, workspace)
    async with kernel(workspace, backend, tmp_path) as k:
        first = await k.call("run_shell", {"command": "mkdir -p src/.github && echo x > src/a"})
        # The user commits on the host between two commands: that is the new baseline.
        git(tmp_path, workspace, "add", "src")
        assert git(tmp_path, workspace, "commit", "-q", "-m", "src").returncode == 0
        second = await k.call("run_shell", {"command": "echo y >> src/a; cat .git/HEAD"})
    assert first["exit_code"] == 0 and second["exit_code"] == 0
    assert second["stdout"] == "ref: refs/heads/main\n"
    notices = [r["message"] for r in events(tmp_path) if r["kind"] == "notice"]
    assert any("between commands" in n for n in notices), notices


# -- docker: background writers and setuid bits -------------------------------------------


@pytest.mark.docker
async def test_docker_background_writer_dies_with_its_command(
    docker_client, workspace: Path, tmp_path: Path
) -> None:
    import trio

    script = f"(sleep 0.5; {evil_gitdir_script('.git', tmp_path / 'pwned')}) >/dev/null 2>&1 &"
    async with kernel(workspace, "docker", tmp_path) as k:
        first = await k.call("run_shell", {"command": script})
        await trio.sleep(1.5)
        second = await k.call("run_shell", {"command": "ls -a"})
    assert first["exit_code"] == 0 and ".git" not in second["stdout"].split()
    assert not (workspace / ".git").exists()


@pytest.mark.docker
async def test_docker_setuid_and_setgid_bits_do_not_reach_the_host(
    docker_client, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "old").write_text("#!/bin/sh\n")
    own_tree(workspace, workspace)
    script = "cp /bin/busybox s && touch g && chmod 4755 s && chmod 2755 g && chmod 6755 old"
    async with kernel(workspace, "docker", tmp_path) as k:
        result = await k.call("run_shell", {"command": script})
    assert result["exit_code"] == 0, result
    for name in ("s", "g", "old"):
        mode = (workspace / name).lstat().st_mode
        assert not mode & (stat.S_ISUID | stat.S_ISGID), (name, oct(mode))
        assert mode & 0o755 == 0o755
    cleared = [r for r in events(tmp_path) if r["kind"] == "setid_cleared"]
    assert len(cleared) == 1 and len(cleared[0]["paths"]) == 3


async def test_quarantine_on_another_file_system_copies_without_following_links(
    workspace: Path, tmp_path: Path
) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == workspace.stat().st_dev:
        pytest.skip("needs /dev/shm on a file system other than the workspace's")
    spool = Path(tempfile.mkdtemp(prefix="ringfence-test-spool-", dir=shm))
    try:
        script = (
            f"{evil_gitdir_script('.git', tmp_path / 'pwned')} && ln -s / .git/root && "
            "mkfifo .git/fifo && echo keep > kept"
        )
        async with kernel(workspace, "local", tmp_path, spool=spool) as k:
            outcome = await k.invoke("run_shell", {"command": script})
        quarantine = assert_refused(outcome, tmp_path, ".git")
        assert quarantine.is_relative_to(spool)
        copied = quarantine / "0" / ".git"
        assert (copied / "HEAD.quarantined").read_text() == "ref: refs/heads/main\n"  # kept, inert
        assert os.readlink(copied / "root") == "/" and not (copied / "fifo").exists()
        assert not os.path.lexists(workspace / ".git")
        assert (workspace / "kept").read_text() == "keep\n"
    finally:
        shutil.rmtree(spool)


async def test_local_new_directories_in_a_git_directory_holding_hooks_or_config_are_moved_out(
    workspace: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    new_repo(tmp_path, workspace)
    shutil.rmtree(workspace / ".git" / "hooks")
    attack = (
        f"mkdir -p .git/hooks && printf '#!/bin/sh\\ntouch {marker}\\n' > .git/hooks/pre-commit"
        " && chmod +x .git/hooks/pre-commit && "
        f"{evil_gitdir_script('.git/modules/evil', marker)} && "
        f"{evil_gitdir_script('.git/objects/evil', marker)}"
    )
    # host: the write reaches the git directory and is undone; the confined local backend's
    # read-only mount refuses it first (test_backends_confined_attacks.py).
    async with kernel(workspace, "host", tmp_path) as k:
        outcome = await k.invoke("run_shell", {"command": attack})
    quarantine = assert_refused(
        outcome, tmp_path, ".git/hooks", ".git/modules", ".git/objects/evil"
    )
    assert not (workspace / ".git" / "hooks").exists()
    assert not (workspace / ".git" / "modules").exists()
    assert not (workspace / ".git" / "objects" / "evil").exists()
    assert (quarantine / "0" / ".git" / "hooks" / "pre-commit").is_file()
    (workspace / "x").write_text("x\n")
    git(tmp_path, workspace, "add", "x")
    assert git(tmp_path, workspace, "commit", "-q", "-m", "x").returncode == 0
    assert not marker.exists()


CHILD = """
import json, sys, trio
from ringfence import create_kernel
from ringfence.runtime import Posture

async def main(ws, script):
    async with create_kernel(roots=[ws], posture=Posture.UNRESTRICTED, backend="host") as k:
        outcome = await k.invoke("run_shell", {"command": script})
    print(json.dumps(outcome.error.to_dict() if outcome.error else None))

trio.run(main, sys.argv[1], sys.argv[2])
"""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root")
async def test_a_dotgit_hidden_in_an_unlistable_directory_is_refused(tmp_path: Path) -> None:
    # ringfence runs as a user that cannot list a directory mode 0311, but git can enter it.
    # Root without CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH is such a user for root's own files.
    ws = tmp_path / "ws"
    ws.mkdir()
    marker = tmp_path / "pwned"
    script = f"mkdir d && cd d && {evil_gitdir_script('.git', marker)} && chmod 311 ."
    child = subprocess.run(
        [
            "setpriv",
            "--bounding-set=-dac_override,-dac_read_search",
            "--inh-caps=-all",
            sys.executable,
            "-c",
            CHILD,
            str(ws),
            script,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 0, child.stderr
    error = json.loads(child.stdout.splitlines()[-1])
    assert error is not None and error["code"] == "git_metadata", error
    assert "unreadable" in error["message"] and "/d " in error["message"]
    assert not (ws / "d").exists()
    git(tmp_path, ws, "status")
    assert not marker.exists()


@pytest.mark.parametrize("across", [False, True], ids=["same-fs", "other-fs"])
async def test_a_locked_deep_dotgit_still_leaves_the_workspace(
    across: bool, workspace: Path, tmp_path: Path
) -> None:
    spool = quarantine = None
    if across:
        shm = Path("/dev/shm")
        if not shm.is_dir() or shm.stat().st_dev == workspace.stat().st_dev:
            pytest.skip("needs /dev/shm on a file system other than the workspace's")
        spool = Path(tempfile.mkdtemp(prefix="ringfence-test-spool-", dir=shm))
    # 1,100 levels: deeper than Python's recursion limit; every directory locked (0555).
    script = (
        f"{evil_gitdir_script('.git', tmp_path / 'pwned')} && "
        "mkdir -p .git/$(printf 'd/%.0s' $(seq 1100)) && "
        "find .git -depth -type d -exec chmod 0555 {} +"
    )
    try:
        async with kernel(workspace, "local", tmp_path, spool=spool) as k:
            outcome = await k.invoke("run_shell", {"command": script, "timeout_seconds": 60})
        quarantine = assert_refused(outcome, tmp_path, ".git")
        assert not os.path.lexists(workspace / ".git")
    finally:
        # pytest's own cleanup recurses and cannot remove a tree this deep.
        for deep in (spool, quarantine):
            if deep is not None:
                subprocess.run(["chmod", "-R", "u+rwx", str(deep)], check=False)
                subprocess.run(["rm", "-rf", str(deep)], check=False)


async def test_metadata_planted_before_a_cancellation_is_still_removed(
    backend: str, workspace: Path, tmp_path: Path
) -> None:
    import trio

    script = f"{evil_gitdir_script('.git', tmp_path / 'pwned')}; sleep 30"
    config = workspace / ".git" / "config"
    async with kernel(workspace, backend, tmp_path) as k:
        # Cancelled once the command has planted its last file (a fixed 1.5 s window was too
        # short for a container on a loaded machine: nothing planted yet, nothing to remove).
        with trio.move_on_after(120) as waited:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(k.invoke, "run_shell", {"command": script})
                while not (config.exists() and config.stat().st_size > 0):
                    await trio.sleep(0.05)
                nursery.cancel_scope.cancel()
    assert not waited.cancelled_caught, "the command never planted its git directory"
    assert not (workspace / ".git").exists()
    refused = [r for r in events(tmp_path) if r["kind"] == "git_metadata_refused"]
    assert len(refused) == 1 and refused[0]["paths"][0]["action"] == "quarantined"


async def test_local_read_only_git_commands_pass(workspace: Path, tmp_path: Path) -> None:
    new_repo(tmp_path, workspace)
    # A touched tracked file makes git status refresh the index (unless optional locks are
    # off) and git diff rewrite it (always): a stat cache, noted but not refused.
    script = "sleep 1.1; touch README && git status --short && git diff --stat && git log --oneline"
    # host: the index rewrite reaches the git directory (a notice); the confined local backend
    # mounts it read-only, so git skips the rewrite there.
    async with kernel(workspace, "host", tmp_path) as k:
        env = {k: v for k, v in git_env(tmp_path).items() if k != "PATH"}
        result = await k.call("run_shell", {"command": script, "env": env})
    assert result["exit_code"] == 0 and "init" in result["stdout"], result
    notices = [r["message"] for r in events(tmp_path) if r["kind"] == "notice"]
    assert any("rewrote a git index" in n for n in notices), notices


async def test_quarantine_never_lands_inside_the_workspace(workspace: Path, tmp_path: Path) -> None:
    spool = workspace / ".ringfence-spool"  # a spool dir configured inside the root
    async with kernel(workspace, "local", tmp_path, spool=spool) as k:
        outcome = await k.invoke("run_shell", {"command": "mkdir .git"})
    quarantine = assert_refused(outcome, tmp_path, ".git")
    try:
        assert not quarantine.is_relative_to(workspace) and not (workspace / ".git").exists()
        assert (quarantine / "0" / ".git").is_dir()
    finally:
        shutil.rmtree(quarantine.parent.parent)


# -- the incremental scan: later commands are checked as closely as the first ------------


async def test_attacks_after_earlier_commands_are_refused(
    backend: str, workspace: Path, tmp_path: Path
) -> None:
    """From the second command on, the scans start from the previous command's scan.

    Plants in a deep directory nothing touched for a while (taken from the base
    unless its ctime moved), twice in a row in the same directory (hot after
    the first undo), and (local) an in-place append to an existing git config.
    """
    import trio

    marker = tmp_path / "pwned"
    new_repo(tmp_path, workspace / "repo")
    (workspace / "keep" / "deep" / "er").mkdir(parents=True)
    own_tree(workspace, workspace)
    config = (workspace / "repo" / ".git" / "config").read_bytes()
    await trio.sleep(0.1)  # older than the hot margin: the cheap path is taken for them
    async with kernel(workspace, backend, tmp_path) as k:
        for _ in range(2):
            assert (await k.call("run_shell", {"command": "true"}))["exit_code"] == 0
        for name in (".git", ".GIT"):
            attack = evil_gitdir_script(f"keep/deep/er/{name}", marker)
            outcome = await k.invoke("run_shell", {"command": attack})
            assert_refused(outcome, tmp_path, f"keep/deep/er/{name}")
            assert os.listdir(workspace / "keep" / "deep" / "er") == []
        if backend in ("local", "host"):
            append = f"printf '\\tfsmonitor = \"touch {marker}; :\"\\n' >> repo/.git/config"
            outcome = await k.invoke("run_shell", {"command": append})
            if backend == "host":  # written, then undone by the scan
                assert_refused(outcome, tmp_path, "repo/.git/config")
            else:  # the confined sandbox's read-only mount refuses the write itself
                assert outcome.error is None and outcome.value["exit_code"] != 0
                assert "Read-only file system" in outcome.value["stderr"]
            assert (workspace / "repo" / ".git" / "config").read_bytes() == config
        assert (await k.call("run_shell", {"command": "true"}))["exit_code"] == 0
    assert (
        "not a git repository" in git(tmp_path, workspace / "keep" / "deep" / "er", "status").stderr
    )
    status = git(tmp_path, workspace / "repo", "status")
    assert status.returncode == 0, status.stderr
    assert not marker.exists()


# -- (g) the quarantine keeps what was planted, and git takes none of it for a repository ----


def git_dirs_found(tmp_path: Path, top: Path) -> dict[str, str]:
    """Every directory below ``top`` (links not followed) where the real git finds a
    repository inside ``top``: its path -> the git directory found."""
    found: dict[str, str] = {}
    env = {**git_env(tmp_path), "GIT_CEILING_DIRECTORIES": str(top.parent)}
    for dirpath, dirnames, _ in os.walk(top):
        for name in [".", *dirnames]:
            where = Path(dirpath) / name
            if where.is_symlink():
                continue
            got = subprocess.run(
                ["git", "rev-parse", "--absolute-git-dir"],
                cwd=where,
                env=env,
                capture_output=True,
                text=True,
                timeout=30,
            )
            if got.returncode == 0 and Path(got.stdout.strip()).is_relative_to(top):
                found[str(where)] = got.stdout.strip()
    return found


async def test_the_quarantine_is_no_repository_a_person_inspecting_it_runs(
    backend: str, workspace: Path, tmp_path: Path
) -> None:
    """The refusal names the quarantine, so a person goes to look; a shell prompt or an
    editor there runs ``git status``. It ran the planted ``core.fsmonitor``: the planted
    ``.git`` (and a bare repository, a gitfile to it, a lower-case ``head``) were kept
    whole. Now every ``HEAD`` there is renamed: the content is kept, no repository is."""
    marker = tmp_path / "pwned"
    fsmonitor = "printf '\\tworktree = ..\\n\\tbare = false\\n' >> bare.git/config"
    attack = " && ".join(
        [
            evil_gitdir_script("sub/.git", marker),
            "echo hi > sub/f",
            evil_gitdir_script("bare.git", marker),
            fsmonitor,
            "mkdir wt && printf 'gitdir: ../bare.git\\n' > wt/.git",
            evil_gitdir_script("low/.git", marker),
            "mv low/.git/HEAD low/.git/head",
        ]
    )
    own_tree(workspace, workspace)
    async with kernel(workspace, backend, tmp_path) as k:
        outcome = await k.invoke("run_shell", {"command": attack})
    quarantine = assert_refused(outcome, tmp_path, "sub/.git", "bare.git", "wt/.git")
    kept = quarantine / "0"
    # Real git, in every directory of the quarantine: no repository there, nothing run.
    for where in (
        kept / "sub",
        kept / "wt",
        kept / "bare.git",
        kept / "low",
        kept / "sub" / ".git",
    ):
        git(tmp_path, where, "status")
    assert not marker.exists()
    assert git_dirs_found(tmp_path, quarantine) == {}
    # What was planted is kept to inspect, its HEADs under another name.
    assert b"fsmonitor" in (kept / "sub" / ".git" / "config").read_bytes()
    assert (kept / "sub" / ".git" / "HEAD.quarantined").read_bytes() == b"ref: refs/heads/main\n"
    assert (kept / "bare.git" / "HEAD.quarantined").is_file()
    assert not any(p.name.casefold() == "head" for p in quarantine.rglob("*"))
    # And out of the workspace, as before: no repository left there either.
    assert git_dirs_found(tmp_path, workspace) == {}


# -- (h) a repository the person makes while a session runs is mounted read-only too ---------


@pytest.mark.parametrize(
    "confined",
    ["local", pytest.param("docker", marks=pytest.mark.docker)],
)
async def test_a_repository_made_during_the_session_is_read_only_to_the_next_command(
    confined: str, workspace: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The session mounted only the git directories present when it started: a repository
    the person cloned into the workspace afterwards was writable by the next command,
    whose ``core.fsmonitor`` ran in the person's ``git status`` (an editor's git view)
    while the command was still running; the check after it restored the config too late.
    Now the session is started again with it read-only: the write fails, nothing runs. So
    it is when the person removes the clone and clones again at the same path (the file
    system gives the new ``.git`` the old one's inode number)."""
    import trio

    if confined == "docker":
        request.getfixturevalue("docker_client")
    marker = tmp_path / "pwned"
    config_path = workspace / "repo" / ".git" / "config"
    plant = (
        f"printf '[core]\\n\\tfsmonitor = \"touch {marker}; :\"\\n' >> repo/.git/config; sleep 3"
    )
    async with kernel(workspace, confined, tmp_path) as k:
        assert (await k.call("run_shell", {"command": "true"}))["exit_code"] == 0
        for _ in ("cloned", "cloned again"):
            shutil.rmtree(workspace / "repo", ignore_errors=True)
            new_repo(tmp_path, workspace / "repo")  # the person's clone, mid-session
            own_tree(workspace, workspace)
            config = config_path.read_bytes()
            outcome = None

            async def attack() -> None:
                nonlocal outcome
                outcome = await k.invoke("run_shell", {"command": plant})

            async with trio.open_nursery() as nursery:
                nursery.start_soon(attack)
                # The person's git, while the command runs (a planted fsmonitor runs here).
                while outcome is None:
                    if b"fsmonitor" in config_path.read_bytes():
                        git(tmp_path, workspace / "repo", "status")
                    await trio.sleep(0.05)
            assert not marker.exists()  # the planted fsmonitor never ran
            assert outcome is not None and outcome.error is None, outcome
            assert "Read-only file system" in outcome.value["stderr"], outcome.value
            assert config_path.read_bytes() == config
            assert git(tmp_path, workspace / "repo", "status").returncode == 0
            assert not marker.exists()
    notices = [e.get("message", "") for e in events(tmp_path) if e["kind"] == "notice"]
    assert sum("started again to mount it read-only" in m for m in notices) == 2, notices

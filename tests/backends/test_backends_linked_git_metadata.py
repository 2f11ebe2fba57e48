"""What git reads through a link in a repository's metadata is git metadata, by every writer.

A person's checkout whose ``.git/hooks`` is a link to ``../githooks`` (or whose
``.git/hooks/pre-commit`` links to ``../../scripts/pre-commit``, the usual way to
share hooks) runs what lies there at their next ``git commit``, on the host. Every
write into ``.git`` was refused, yet ``write_file githooks/post-commit``, a shell
command's change set and a ``--no-change-sets`` command wrote the hook git ran
there. Each attack here goes through ``create_kernel`` and ``invoke``; the
person's real ``git commit`` afterwards must run nothing the agent wrote, and the
workspace keeps no hook.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from backends_helpers import DOCKER_OPTIONS, own_all_like_workspace, persons_git

from ringfence import create_kernel
from ringfence.runtime import Posture

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def _repository(tmp_path: Path, workspace: Path) -> Path:
    """The person's checkout ``repo``: ``.git/hooks`` links to ``../githooks`` (empty), and
    ``githooks/pre-commit`` links on to ``../scripts/pre-commit`` (not there yet)."""
    repo = workspace / "repo"
    repo.mkdir()
    assert persons_git(tmp_path, repo, "init", "-q", "-b", "main").returncode == 0
    shutil.rmtree(repo / ".git" / "hooks")
    (repo / "githooks").mkdir()
    (repo / "scripts").mkdir()
    (repo / ".git" / "hooks").symlink_to("../githooks")
    (repo / "githooks" / "pre-commit").symlink_to("../scripts/pre-commit")
    (repo / "lib").mkdir()
    (repo / "lib" / "util.sh").write_text("echo util\n")
    own_all_like_workspace(workspace)
    return repo


def _state(repo: Path) -> dict[str, bytes | str]:
    """Every entry below the hooks' places, by path: its bytes or link target."""
    out: dict[str, bytes | str] = {}
    for top in ("githooks", "scripts", "elsewhere"):
        for dirpath, dirnames, filenames in os.walk(repo / top):
            for name in [*dirnames, *filenames]:
                path = Path(dirpath, name)
                rel = str(path.relative_to(repo))
                if path.is_symlink():
                    out[rel] = os.readlink(path)
                elif path.is_file():
                    out[rel] = path.read_bytes()
                else:
                    out[rel] = "dir"
    return out


def _commit_runs_nothing(tmp_path: Path, repo: Path, marker: Path) -> None:
    """The person's ``git commit`` runs no hook the agent wrote."""
    done = persons_git(tmp_path, repo, "commit", "-q", "--allow-empty", "-m", "person")
    assert done.returncode == 0, done.stderr
    assert not marker.exists()


HOOK = "#!/bin/sh\ntouch {marker}\n"


@pytest.mark.parametrize(
    ("tool", "rel"),
    [
        ("write_file", "githooks/post-commit"),  # inside the linked hooks directory
        ("write_file", "scripts/pre-commit"),  # where a hook's own link leads (dangling)
    ],
)
async def test_a_file_tool_never_writes_what_git_reads_through_a_link_in_git_metadata(
    tool: str, rel: str, workspace: Path, tmp_path: Path
) -> None:
    repo = _repository(tmp_path, workspace)
    marker = tmp_path / "pwned"
    before = _state(repo)
    async with create_kernel(
        roots=[workspace], posture=Posture.UNRESTRICTED, events_path=tmp_path / "ev.jsonl"
    ) as k:
        outcome = await k.invoke(
            tool, {"path": f"repo/{rel}", "content": HOOK.format(marker=marker)}
        )
        assert outcome.error is not None and outcome.error.code == "git_metadata", outcome
        assert "git reads it through the link" in outcome.error.message
        # An ordinary file of the same checkout is still written.
        fine = await k.invoke("write_file", {"path": "repo/lib/new.sh", "content": "echo\n"})
        assert fine.error is None, fine.error
    assert _state(repo) == before
    _commit_runs_nothing(tmp_path, repo, marker)


@pytest.mark.parametrize(
    ("backend", "change_sets"),
    [
        pytest.param("local", True, id="local-change-sets"),
        pytest.param("local", False, id="local-no-change-sets"),
        pytest.param("host", False, id="host"),
        pytest.param("docker", False, id="docker-no-change-sets", marks=pytest.mark.docker),
    ],
)
async def test_a_shell_command_never_writes_what_git_reads_through_a_link_in_git_metadata(
    backend: str,
    change_sets: bool,
    workspace: Path,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """On local the change set is refused, or (``--no-change-sets``) the places are
    read-only; on host the check after the command takes out what it wrote there and puts
    back what it changed."""
    if backend == "docker":
        request.getfixturevalue("docker_client")
    repo = _repository(tmp_path, workspace)
    old_hook = repo / "githooks" / "pre-push"
    old_hook.write_text("#!/bin/sh\nexit 0\n")
    old_hook.chmod(0o755)
    own_all_like_workspace(workspace)
    marker = tmp_path / "pwned"
    before = _state(repo)
    plant = (
        f"cd repo && printf '#!/bin/sh\\ntouch {marker}\\n' > githooks/post-commit; "
        "chmod +x githooks/post-commit; "
        f"printf '#!/bin/sh\\ntouch {marker}\\n' > scripts/pre-commit; chmod +x scripts/pre-commit; "
        f"printf 'touch {marker}\\n' >> githooks/pre-push; echo util2 > lib/util.sh"
    )
    async with create_kernel(
        roots=[workspace],
        posture=Posture.UNRESTRICTED,
        backend=backend,
        backend_options=DOCKER_OPTIONS if backend == "docker" else None,
        change_sets=change_sets,
        events_path=tmp_path / "ev.jsonl",
    ) as k:
        outcome = await k.invoke("run_shell", {"command": plant})
        if change_sets:
            assert outcome.error is not None and outcome.error.code == "git_metadata", outcome
            assert "git reads it through the link" in outcome.error.message
        elif backend == "host":
            assert outcome.error is not None and outcome.error.code == "git_metadata", outcome
            assert "githooks/post-commit (new, quarantined)" in outcome.error.message
            assert "githooks/pre-push (changed, restored)" in outcome.error.message
        else:
            assert outcome.error is None, outcome.error
            assert "Read-only file system" in outcome.value["stderr"], outcome.value
    assert _state(repo) == before
    _commit_runs_nothing(tmp_path, repo, marker)


async def test_a_change_set_cannot_move_a_link_git_reads_its_hooks_through(
    workspace: Path, tmp_path: Path
) -> None:
    """``.git/hooks -> ../hooks.d/current`` with ``hooks.d`` a link to ``a``: the set only
    retargets ``hooks.d`` to ``elsewhere``, whose hook the agent wrote before (an ordinary
    file then); git would run it."""
    repo = workspace / "repo"
    repo.mkdir()
    assert persons_git(tmp_path, repo, "init", "-q", "-b", "main").returncode == 0
    shutil.rmtree(repo / ".git" / "hooks")
    marker = tmp_path / "pwned"
    (repo / "a" / "current").mkdir(parents=True)
    (repo / "hooks.d").symlink_to("a")
    (repo / ".git" / "hooks").symlink_to("../hooks.d/current")
    (repo / "elsewhere" / "current").mkdir(parents=True)
    hook = repo / "elsewhere" / "current" / "post-commit"
    hook.write_text(HOOK.format(marker=marker))
    hook.chmod(0o755)
    own_all_like_workspace(workspace)
    async with create_kernel(
        roots=[workspace],
        posture=Posture.UNRESTRICTED,
        backend="local",
        events_path=tmp_path / "ev.jsonl",
    ) as k:
        outcome = await k.invoke("run_shell", {"command": "cd repo && ln -sfn elsewhere hooks.d"})
        assert outcome.error is not None and outcome.error.code == "git_metadata", outcome
    assert os.readlink(repo / "hooks.d") == "a"
    _commit_runs_nothing(tmp_path, repo, marker)


@pytest.mark.parametrize("tool", ["write_file", "run_shell"])
async def test_a_hooks_link_spelled_through_a_host_link_leads_to_the_same_place(
    tool: str, workspace: Path, tmp_path: Path
) -> None:
    """``.git/hooks -> /…/alias/repo/githooks``, ``alias`` a host link to the workspace: the
    walk judging links stops at a link outside the roots, yet git reaches ``githooks``."""
    repo = workspace / "repo"
    repo.mkdir()
    assert persons_git(tmp_path, repo, "init", "-q", "-b", "main").returncode == 0
    shutil.rmtree(repo / ".git" / "hooks")
    (repo / "githooks").mkdir()
    alias = tmp_path / "alias"
    alias.symlink_to(workspace)
    (repo / ".git" / "hooks").symlink_to(alias / "repo" / "githooks")
    own_all_like_workspace(workspace)
    marker = tmp_path / "pwned"
    hook = HOOK.format(marker=marker)
    args = (
        {"path": "repo/githooks/post-commit", "content": hook}
        if tool == "write_file"
        else {"command": f"printf '{hook}' > repo/githooks/post-commit"}
    )
    async with create_kernel(
        roots=[workspace],
        posture=Posture.UNRESTRICTED,
        backend="local",
        events_path=tmp_path / "ev.jsonl",
    ) as k:
        outcome = await k.invoke(tool, args)
        assert outcome.error is not None and outcome.error.code == "git_metadata", outcome
    assert os.listdir(repo / "githooks") == []
    _commit_runs_nothing(tmp_path, repo, marker)

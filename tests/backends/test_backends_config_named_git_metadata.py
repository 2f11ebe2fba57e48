"""What a repository's configuration names is git metadata, by every writer.

A checkout whose ``.git/config`` includes a file of the working tree (``git config
include.path ../.gitconfig``: projects ship their settings so) or names a hooks
directory in it (``core.hooksPath = .githooks``, what husky and many projects set)
reads and runs what lies there: ``write_file .gitconfig`` with ``core.fsmonitor``
was run by the person's next ``git status``, a hook written to ``.githooks`` by
their next ``git commit``. Every write into ``.git`` was refused, but these are
ordinary workspace files. Each attack here goes through ``create_kernel`` and
``invoke``; the person's real ``git status`` and ``git commit`` afterwards must run
nothing the agent wrote, and the files stay as they were.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from backends_helpers import DOCKER_OPTIONS, own_all_like_workspace, persons_git

from ringfence import create_kernel
from ringfence.runtime import Posture

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def _repository(tmp_path: Path, workspace: Path) -> Path:
    """The person's checkout ``repo``: its ``.git/config`` includes ``../shared.gitconfig``
    (there, harmless) and, under an ``includeIf``, ``../local.gitconfig`` (not there: an
    optional override), and names ``.githooks`` as its hooks directory (a ``pre-push``)."""
    repo = workspace / "repo"
    repo.mkdir()
    assert persons_git(tmp_path, repo, "init", "-q", "-b", "main").returncode == 0
    for key, value in (
        ("include.path", "../shared.gitconfig"),
        ("includeIf.gitdir:**.path", "../local.gitconfig"),
        ("core.hooksPath", ".githooks"),
    ):
        assert persons_git(tmp_path, repo, "config", key, value).returncode == 0
    (repo / "shared.gitconfig").write_text("[diff]\n\trenames = true\n")
    (repo / ".githooks").mkdir()
    (repo / ".githooks" / "pre-push").write_text("#!/bin/sh\nexit 0\n")
    (repo / ".githooks" / "pre-push").chmod(0o755)
    (repo / "lib").mkdir()
    (repo / "lib" / "util.sh").write_text("echo util\n")
    own_all_like_workspace(workspace)
    return repo


def _state(repo: Path) -> dict[str, bytes | str]:
    """The places the configuration names, by path: bytes, or ``dir``/absent."""
    out: dict[str, bytes | str] = {}
    for rel in ("shared.gitconfig", "local.gitconfig", ".githooks"):
        path = repo / rel
        out[rel] = path.read_bytes() if path.is_file() else "dir" if path.is_dir() else "-"
    for path in sorted((repo / ".githooks").rglob("*")):
        out[str(path.relative_to(repo))] = path.read_bytes() if path.is_file() else "dir"
    return out


def _git_runs_nothing(tmp_path: Path, repo: Path, marker: Path) -> None:
    """The person's ``git status`` and ``git commit`` run nothing the agent wrote."""
    status = persons_git(tmp_path, repo, "status", "--short")
    assert status.returncode == 0, status.stderr
    done = persons_git(tmp_path, repo, "commit", "-q", "--allow-empty", "-m", "person")
    assert done.returncode == 0, done.stderr
    assert not marker.exists()


FSMONITOR = '[core]\n\tfsmonitor = "touch {marker}; false"\n'
HOOK = "#!/bin/sh\ntouch {marker}\n"


@pytest.mark.parametrize(
    ("rel", "content"),
    [
        ("shared.gitconfig", FSMONITOR),  # a file the configuration includes
        ("local.gitconfig", FSMONITOR),  # an include not there yet (git skips it till then)
        (".githooks/post-commit", HOOK),  # inside core.hooksPath
        (".githooks/pre-push", HOOK),  # a hook that is there
    ],
)
async def test_a_file_tool_never_writes_what_a_repositorys_configuration_names(
    rel: str, content: str, workspace: Path, tmp_path: Path
) -> None:
    repo = _repository(tmp_path, workspace)
    marker = tmp_path / "pwned"
    before = _state(repo)
    async with create_kernel(
        roots=[workspace], posture=Posture.UNRESTRICTED, events_path=tmp_path / "ev.jsonl"
    ) as k:
        outcome = await k.invoke(
            "write_file", {"path": f"repo/{rel}", "content": content.format(marker=marker)}
        )
        assert outcome.error is not None and outcome.error.code == "git_metadata", outcome
        assert "so git reads it" in outcome.error.message, outcome.error.message
        if (repo / rel).is_file():
            edited = await k.invoke(
                "edit_file",
                {"path": f"repo/{rel}", "old": "exit 0" if "hooks" in rel else "renames"}
                | {"new": f"touch {marker}" if "hooks" in rel else "external = /bin/x"},
            )
            assert edited.error is not None and edited.error.code == "git_metadata", edited
        # An ordinary file of the same checkout is still written.
        fine = await k.invoke("write_file", {"path": "repo/lib/new.sh", "content": "echo\n"})
        assert fine.error is None, fine.error
    assert _state(repo) == before
    _git_runs_nothing(tmp_path, repo, marker)


@pytest.mark.parametrize(
    ("backend", "change_sets"),
    [
        pytest.param("local", True, id="local-change-sets"),
        pytest.param("local", False, id="local-no-change-sets"),
        pytest.param("host", False, id="host"),
        pytest.param("docker", True, id="docker-change-sets", marks=pytest.mark.docker),
        pytest.param("docker", False, id="docker-no-change-sets", marks=pytest.mark.docker),
    ],
)
async def test_a_shell_command_never_writes_what_a_repositorys_configuration_names(
    backend: str,
    change_sets: bool,
    workspace: Path,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """On local the change set is refused; without change sets the places that are there
    are read-only (local, docker) or put back (host), and what a command makes where an
    include or hooks directory is not yet is quarantined by the check after it."""
    if backend == "docker":
        request.getfixturevalue("docker_client")
    repo = _repository(tmp_path, workspace)
    marker = tmp_path / "pwned"
    before = _state(repo)
    plant = (
        f"cd repo; printf '[core]\\n\\tfsmonitor = touch {marker}\\n' >> shared.gitconfig; "
        f"printf '[core]\\n\\tfsmonitor = touch {marker}\\n' > local.gitconfig; "
        f"printf '#!/bin/sh\\ntouch {marker}\\n' > .githooks/post-commit; "
        "chmod +x .githooks/post-commit; echo util2 > lib/util.sh"
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
        assert outcome.error is not None and outcome.error.code == "git_metadata", outcome
        if change_sets:
            assert "so git reads it" in outcome.error.message, outcome.error.message
        else:
            assert "local.gitconfig (new, quarantined)" in outcome.error.message
    assert _state(repo) == before
    _git_runs_nothing(tmp_path, repo, marker)


async def test_the_persons_relative_hooks_path_names_each_repositorys_hooks(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The person's own ``core.hooksPath = .githooks`` (in their global configuration, not
    the repository's) makes every repository's ``.githooks`` its hooks."""
    repo = workspace / "repo"
    repo.mkdir()
    assert persons_git(tmp_path, repo, "init", "-q", "-b", "main").returncode == 0
    own_all_like_workspace(workspace)
    home = tmp_path / "githome"
    (home / ".gitconfig").write_text("[core]\n\thooksPath = .githooks\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    marker = tmp_path / "pwned"
    async with create_kernel(
        roots=[workspace], posture=Posture.UNRESTRICTED, events_path=tmp_path / "ev.jsonl"
    ) as k:
        outcome = await k.invoke(
            "write_file",
            {"path": "repo/.githooks/pre-commit", "content": HOOK.format(marker=marker)},
        )
        assert outcome.error is not None and outcome.error.code == "git_metadata", outcome
    assert not (repo / ".githooks").exists()
    done = persons_git(tmp_path, repo, "commit", "-q", "--allow-empty", "-m", "person")
    assert done.returncode == 0, done.stderr
    assert not marker.exists()


@pytest.mark.parametrize("rel", ["tools/fsmon.sh", "scripts/tc.sh"])
async def test_a_program_a_repositorys_configuration_runs_is_never_written(
    rel: str, workspace: Path, tmp_path: Path
) -> None:
    """``core.fsmonitor = tools/fsmon.sh`` (git runs it, from the worktree's top, at every
    ``git status``) and ``diff.t.textconv = sh scripts/tc.sh`` (a word of the command):
    rewriting either ran the agent's code in the person's next git. A change set is refused
    the same way."""
    repo = workspace / "repo"
    repo.mkdir()
    assert persons_git(tmp_path, repo, "init", "-q", "-b", "main").returncode == 0
    for key, value in (
        ("core.fsmonitor", "tools/fsmon.sh"),
        ("diff.t.textconv", "sh scripts/tc.sh"),
    ):
        assert persons_git(tmp_path, repo, "config", key, value).returncode == 0
    for name in ("tools/fsmon.sh", "scripts/tc.sh"):
        (repo / name).parent.mkdir(exist_ok=True)
        (repo / name).write_text("#!/bin/sh\nexit 1\n")
        (repo / name).chmod(0o755)
    own_all_like_workspace(workspace)
    marker = tmp_path / "pwned"
    async with create_kernel(
        roots=[workspace], posture=Posture.UNRESTRICTED, events_path=tmp_path / "ev.jsonl"
    ) as k:
        outcome = await k.invoke(
            "write_file",
            {"path": f"repo/{rel}", "content": f"#!/bin/sh\ntouch {marker}\nexit 1\n"},
        )
        assert outcome.error is not None and outcome.error.code == "git_metadata", outcome
        assert "so git reads it" in outcome.error.message, outcome.error.message
        shell = await k.invoke("run_shell", {"command": f"echo 'touch {marker}' >> repo/{rel}"})
        assert shell.error is not None and shell.error.code == "git_metadata", shell
    assert (repo / rel).read_text() == "#!/bin/sh\nexit 1\n"
    status = persons_git(tmp_path, repo, "status", "--short")
    assert status.returncode == 0, status.stderr
    assert not marker.exists()


@pytest.mark.parametrize("change_sets", [True, False], ids=["change-sets", "no-change-sets"])
async def test_what_the_repository_above_the_workspace_names_in_it_is_never_written(
    change_sets: bool, tmp_path: Path
) -> None:
    """The workspace is a monorepo's ``frontend`` (``--workspace mono/frontend``): the
    repository's metadata lies above the root, where no scan looked, yet its configuration
    names files in the root (``core.hooksPath = frontend/.husky/_``, as husky sets it in a
    subdirectory; an include of ``../frontend/local.gitconfig``) and its ``hooks`` links into
    it. The file tools and a shell command wrote all three, run by the person's next git."""
    mono = tmp_path / "mono"
    front = mono / "frontend"
    (front / "githooks").mkdir(parents=True)
    (front / "src").mkdir()
    assert persons_git(tmp_path, mono, "init", "-q", "-b", "main").returncode == 0
    for key, value in (
        ("core.hooksPath", "frontend/.husky/_"),
        ("include.path", "../frontend/local.gitconfig"),
    ):
        assert persons_git(tmp_path, mono, "config", key, value).returncode == 0
    shutil.rmtree(mono / ".git" / "hooks")
    (mono / ".git" / "hooks").symlink_to("../frontend/githooks")
    own_all_like_workspace(mono)
    marker = tmp_path / "pwned"
    async with create_kernel(
        roots=[front],
        posture=Posture.UNRESTRICTED,
        change_sets=change_sets,
        events_path=tmp_path / "ev.jsonl",
    ) as k:
        for rel, content in (
            ("local.gitconfig", FSMONITOR),
            (".husky/_/pre-commit", HOOK),
            ("githooks/pre-commit", HOOK),
        ):
            outcome = await k.invoke(
                "write_file", {"path": rel, "content": content.format(marker=marker)}
            )
            assert outcome.error is not None and outcome.error.code == "git_metadata", outcome
        fine = await k.invoke("write_file", {"path": "src/app.js", "content": "1\n"})
        assert fine.error is None, fine.error
        shell = await k.invoke(
            "run_shell",
            {
                "command": f"printf '[core]\\n\\tfsmonitor = touch {marker}\\n' > local.gitconfig; "
                f"mkdir -p .husky/_; printf '#!/bin/sh\\ntouch {marker}\\n' > .husky/_/pre-commit; "
                "chmod +x .husky/_/pre-commit; echo 2 > src/app.js"
            },
        )
        assert shell.error is not None and shell.error.code == "git_metadata", shell
    assert not (front / "local.gitconfig").exists()
    assert not (front / ".husky" / "_").exists()
    assert list((front / "githooks").iterdir()) == []
    status = persons_git(tmp_path, mono, "status", "--short")
    assert status.returncode == 0, status.stderr
    done = persons_git(tmp_path, mono, "commit", "-q", "--allow-empty", "-m", "person")
    assert done.returncode == 0, done.stderr
    assert not marker.exists()


async def test_an_optional_include_is_the_file_it_names(workspace: Path, tmp_path: Path) -> None:
    """git 2.52 reads ``:(optional)PATH`` as ``PATH``, skipped while it is not there: the
    place is ``PATH`` (taken as a relative path named ``:(optional)..``, the include was
    nothing, and ``write_file opt.gitconfig`` wrote what the person's newer git reads)."""
    repo = workspace / "repo"
    repo.mkdir()
    assert persons_git(tmp_path, repo, "init", "-q", "-b", "main").returncode == 0
    config = repo / ".git" / "config"
    config.write_text(config.read_text() + '[include]\n\tpath = ":(optional)../opt.gitconfig"\n')
    own_all_like_workspace(workspace)
    async with create_kernel(
        roots=[workspace], posture=Posture.UNRESTRICTED, events_path=tmp_path / "ev.jsonl"
    ) as k:
        outcome = await k.invoke(
            "write_file", {"path": "repo/opt.gitconfig", "content": "[core]\n\tpager = x\n"}
        )
        assert outcome.error is not None and outcome.error.code == "git_metadata", outcome
    assert not (repo / "opt.gitconfig").exists()


@pytest.mark.parametrize("change_sets", [True, False], ids=["change-sets", "no-change-sets"])
async def test_a_worktree_of_a_repository_outside_the_roots_keeps_its_hooks(
    change_sets: bool, tmp_path: Path
) -> None:
    """The workspace is a linked worktree (``git worktree add``) of a repository outside the
    roots whose configuration says ``core.hooksPath = .husky/_``: its ``.git`` is a gitfile
    naming ``repo/.git/worktrees/wt``, so no scan read that configuration, and the hooks
    directory is the worktree's own ``.husky/_``. ``write_file .husky/_/pre-commit`` ran in
    the person's next ``git commit`` there."""
    repo = tmp_path / "repo"
    repo.mkdir()
    assert persons_git(tmp_path, repo, "init", "-q", "-b", "main").returncode == 0
    assert persons_git(tmp_path, repo, "config", "core.hooksPath", ".husky/_").returncode == 0
    assert persons_git(tmp_path, repo, "commit", "-q", "--allow-empty", "-m", "i").returncode == 0
    wt = tmp_path / "ws" / "wt"
    wt.parent.mkdir()
    added = persons_git(tmp_path, repo, "worktree", "add", "-q", str(wt))
    assert added.returncode == 0, added.stderr
    own_all_like_workspace(tmp_path / "ws")
    marker = tmp_path / "pwned"
    async with create_kernel(
        roots=[wt],
        posture=Posture.UNRESTRICTED,
        change_sets=change_sets,
        events_path=tmp_path / "ev.jsonl",
    ) as k:
        outcome = await k.invoke(
            "write_file", {"path": ".husky/_/pre-commit", "content": HOOK.format(marker=marker)}
        )
        assert outcome.error is not None and outcome.error.code == "git_metadata", outcome
        shell = await k.invoke(
            "run_shell",
            {
                "command": f"mkdir -p .husky/_; printf '#!/bin/sh\\ntouch {marker}\\n' > "
                ".husky/_/pre-commit; chmod +x .husky/_/pre-commit; echo 1 > app.js"
            },
        )
        assert shell.error is not None and shell.error.code == "git_metadata", shell
    assert not (wt / ".husky" / "_").exists()
    done = persons_git(tmp_path, wt, "commit", "-q", "--allow-empty", "-m", "person")
    assert done.returncode == 0, done.stderr
    assert not marker.exists()


@pytest.mark.parametrize(
    ("settings", "rel", "runs"),
    [
        # ``git archive --format=tgz`` pipes the tar through ``tar.tgz.command``.
        ((("tar.tgz.command", "tools/gz.sh"),), "tools/gz.sh", ("archive", "--format=tgz", "HEAD")),
        # Signing with ssh and no key set asks ``gpg.ssh.defaultKeyCommand`` for one.
        (
            (("gpg.format", "ssh"), ("gpg.ssh.defaultKeyCommand", "sh scripts/key.sh")),
            "scripts/key.sh",
            ("commit", "-q", "-S", "--allow-empty", "-m", "signed"),
        ),
        # git 2.54's configured hooks (``hook.<name>.command``): this machine's git may be older.
        (
            (("hook.lint.event", "pre-commit"), ("hook.lint.command", "ci/lint.sh")),
            "ci/lint.sh",
            (),
        ),
        # A path attached to an option: ssh reads ``-Fconfig/ssh_config`` and runs its
        # ``ProxyCommand`` (the word ``-Fconfig/ssh_config`` was taken for the path).
        (
            (("core.sshCommand", "ssh -Fconfig/ssh_config"),),
            "config/ssh_config",
            ("fetch", "-q", "ssh://127.0.0.1:1/x"),
        ),
        # git-lfs runs a custom transfer agent's program from git's configuration.
        ((("lfs.customtransfer.t.path", "tools/transfer"),), "tools/transfer", ()),
        # The top spelled by a command's output (``/scripts/lint.sh`` was taken for the path).
        (
            (("alias.lint", '!sh "$(git rev-parse --show-toplevel)/scripts/lint.sh"'),),
            "scripts/lint.sh",
            ("lint",),
        ),
    ],
    ids=[
        "tar-command",
        "ssh-default-key-command",
        "configured-hook",
        "attached-option",
        "lfs",
        "built-top",
    ],
)
async def test_a_program_named_by_any_command_setting_is_never_written(
    settings: tuple[tuple[str, str], ...],
    rel: str,
    runs: tuple[str, ...],
    workspace: Path,
    tmp_path: Path,
) -> None:
    """Settings git runs beyond a fixed list of keys (``tar.<format>.command``,
    ``gpg.ssh.defaultKeyCommand``, ``hook.<name>.command``, ``sendemail.toCmd``, ...) name
    programs too: with ``tar.tgz.command = tools/gz.sh`` the agent's ``write_file
    tools/gz.sh`` ran in the person's next ``git archive --format=tgz``; so does a path
    attached to an option (``ssh -Fconfig/ssh_config``). The file tools and a shell command's
    change set are refused; the person's git runs nothing."""
    repo = workspace / "repo"
    repo.mkdir()
    assert persons_git(tmp_path, repo, "init", "-q", "-b", "main").returncode == 0
    assert persons_git(tmp_path, repo, "commit", "-q", "--allow-empty", "-m", "i").returncode == 0
    for key, value in settings:
        assert persons_git(tmp_path, repo, "config", key, value).returncode == 0
    own_all_like_workspace(workspace)
    marker = tmp_path / "pwned"
    # A program; for ssh, a configuration whose ProxyCommand runs the same.
    if rel.endswith("ssh_config"):
        program = f"Host *\n  ProxyCommand touch {marker}\n"
    else:
        program = f"#!/bin/sh\ntouch {marker}\ncat\n"
    async with create_kernel(
        roots=[workspace], posture=Posture.UNRESTRICTED, events_path=tmp_path / "ev.jsonl"
    ) as k:
        outcome = await k.invoke("write_file", {"path": f"repo/{rel}", "content": program})
        assert outcome.error is not None and outcome.error.code == "git_metadata", outcome
        assert "so git reads it" in outcome.error.message, outcome.error.message
        shell = await k.invoke(
            "run_shell",
            {
                "command": f"mkdir -p repo/{rel.rpartition('/')[0]}; "
                f"cat > repo/{rel} <<'EOF'\n{program}EOF\nchmod +x repo/{rel}"
            },
        )
        assert shell.error is not None and shell.error.code == "git_metadata", shell
        fine = await k.invoke("write_file", {"path": "repo/lib/new.sh", "content": "echo\n"})
        assert fine.error is None, fine.error
    assert not (repo / rel).exists()
    if runs:
        persons_git(tmp_path, repo, *runs)  # may fail (no tool, no key): it must run nothing
    assert not marker.exists()


@pytest.mark.parametrize("earlier", ["write_file", "run_shell"])
@pytest.mark.parametrize("change", ["git-config", "appended", "hook-link"])
async def test_what_the_person_configures_during_a_session_holds_the_next_write(
    earlier: str, change: str, workspace: Path, tmp_path: Path
) -> None:
    """The person changes the repository while a session runs (``git config include.path
    ../local.gitconfig``, a line appended to ``.git/config``, a hook linked to
    ``../../scripts/pre-commit``). The file tools judged their next write by the scan of an
    earlier write or command, which named nothing: ``write_file local.gitconfig`` with
    ``core.fsmonitor`` was written and run by the person's next ``git status``."""
    repo = workspace / "repo"
    repo.mkdir()
    assert persons_git(tmp_path, repo, "init", "-q", "-b", "main").returncode == 0
    (repo / "scripts").mkdir()
    own_all_like_workspace(workspace)
    marker = tmp_path / "pwned"
    async with create_kernel(
        roots=[workspace], posture=Posture.UNRESTRICTED, events_path=tmp_path / "ev.jsonl"
    ) as k:
        if earlier == "write_file":
            first = await k.invoke("write_file", {"path": "repo/a.txt", "content": "a\n"})
        else:
            first = await k.invoke("run_shell", {"command": "echo a > repo/a.txt"})
        assert first.error is None, first.error
        if change == "git-config":
            done = persons_git(tmp_path, repo, "config", "include.path", "../local.gitconfig")
            assert done.returncode == 0, done.stderr
        elif change == "appended":
            with (repo / ".git" / "config").open("a") as config:
                config.write("[include]\n\tpath = ../local.gitconfig\n")
        else:
            (repo / ".git" / "hooks" / "pre-commit").symlink_to("../../scripts/pre-commit")
        rel = "scripts/pre-commit" if change == "hook-link" else "local.gitconfig"
        outcome = await k.invoke(
            "write_file",
            {"path": f"repo/{rel}", "content": FSMONITOR.format(marker=marker)},
        )
        assert outcome.error is not None and outcome.error.code == "git_metadata", outcome
        fine = await k.invoke("write_file", {"path": "repo/b.txt", "content": "b\n"})
        assert fine.error is None, fine.error
    assert not (repo / rel).exists()
    status = persons_git(tmp_path, repo, "status", "--short")
    assert status.returncode == 0, status.stderr
    assert not marker.exists()


@pytest.mark.parametrize(
    ("setting", "writer"),
    [
        ("include.path", "write_file"),
        ("include.path", "run_shell --no-change-sets"),
        ("core.hooksPath", "run_shell"),
        ("core.fsmonitor", "run_shell"),
    ],
)
async def test_what_the_persons_own_configuration_names_in_a_root_during_a_session_is_never_written(
    setting: str, writer: str, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session whose roots hold a file the person's global configuration includes (or its
    hooks directory) is refused when it starts; the person naming one while it runs (``git
    config --global include.path ~/proj/team.gitconfig``) went unseen: the agent's
    ``team.gitconfig`` with ``core.fsmonitor`` ran in the person's ``git status`` in every
    repository, and a hook in that hooks directory in every ``git commit``. A program the
    person's configuration names by its path in a root (``core.fsmonitor = ~/proj/fsmon.sh``)
    was held only while a repository lay in the roots."""
    home = tmp_path / "githome"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    other = tmp_path / "other"
    other.mkdir()
    assert persons_git(tmp_path, other, "init", "-q", "-b", "main").returncode == 0
    marker = tmp_path / "pwned"
    if setting == "include.path":
        value, rel, content = str(workspace / "team.gitconfig"), "team.gitconfig", FSMONITOR
    elif setting == "core.hooksPath":
        value, rel, content = str(workspace / "hooks"), "hooks/pre-commit", HOOK
    else:  # a program by its path in the root: no repository lies in the roots
        value, rel, content = str(workspace / "fsmon.sh"), "fsmon.sh", HOOK
    content = content.format(marker=marker)
    async with create_kernel(
        roots=[workspace],
        posture=Posture.UNRESTRICTED,
        change_sets=writer != "run_shell --no-change-sets",
        events_path=tmp_path / "ev.jsonl",
    ) as k:
        first = await k.invoke("write_file", {"path": "a.txt", "content": "a\n"})
        assert first.error is None, first.error
        done = persons_git(tmp_path, other, "config", "--global", setting, value)
        assert done.returncode == 0, done.stderr
        if writer == "write_file":
            outcome = await k.invoke("write_file", {"path": rel, "content": content})
        else:
            outcome = await k.invoke(
                "run_shell",
                {
                    "command": f"mkdir -p {Path(rel).parent}; cat > {rel} <<'EOF'\n{content}EOF\n"
                    f"chmod +x {rel}; echo b > b.txt"
                },
            )
        assert outcome.error is not None and outcome.error.code == "git_metadata", outcome
    assert not (workspace / rel).exists()
    status = persons_git(tmp_path, other, "status", "--short")
    assert status.returncode == 0, status.stderr
    done = persons_git(tmp_path, other, "commit", "-q", "--allow-empty", "-m", "person")
    assert done.returncode == 0, done.stderr
    assert not marker.exists()

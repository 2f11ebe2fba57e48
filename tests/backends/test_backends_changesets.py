"""Change sets on the confined ``local`` backend: every command's writes are one undoable set.

Real bubblewrap, real overlays, real files; driven through the CLI
(``ringfence call run_shell``, ``checkpoints``, ``undo``, ``plan``) and
``create_kernel``. Each attack is performed for real and the test asserts
the refusal and that the real workspace did not change.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio
from backends_helpers import DOCKER_OPTIONS, WORKSPACE_UID
from cli_helpers import cli_json, isolated  # noqa: F401 (an autouse fixture)

from ringfence import create_kernel
from ringfence.backends.confined._plan import _empty_uppers, _uppers_ready
from ringfence.cli._main import main
from ringfence.runtime import ApprovalAnswer, InvalidArguments, Kernel, Posture, ScriptedApprover
from ringfence.workspace import CheckpointStore, Workspace

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def tree_state(root: Path) -> dict[str, tuple[str, int, str]]:
    """Every entry below ``root``: (kind, mode, sha256 of content or link target)."""
    out: dict[str, tuple[str, int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", 0, hashlib.sha256(os.readlink(path).encode()).hexdigest())
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), "")
            else:
                data = path.read_bytes()
                out[rel] = ("file", stat.S_IMODE(st.st_mode), hashlib.sha256(data).hexdigest())
    return out


def owned(ws: Path, owner: int) -> Path:
    if os.geteuid() == 0:
        for dirpath, dirnames, filenames in os.walk(ws):
            for name in [".", *dirnames, *filenames]:
                os.chown(Path(dirpath) / name, owner, owner, follow_symlinks=False)
    return ws


def make_tree(ws: Path) -> None:
    (ws / "edit.txt").write_text("line 1\nline 2\n")
    (ws / "gone.txt").write_text("delete me\n")
    (ws / "old-name.txt").write_text("renamed\n")
    (ws / "bin.dat").write_bytes(bytes(range(256)))
    (ws / "dir-a" / "deep").mkdir(parents=True)
    (ws / "dir-a" / "one.txt").write_text("one\n")
    (ws / "dir-a" / "deep" / "two.txt").write_text("two\n")
    (ws / "trash" / "sub").mkdir(parents=True)
    (ws / "trash" / "x.txt").write_text("x\n")
    (ws / "trash" / "sub" / "y.txt").write_text("y\n")
    (ws / "link").symlink_to("edit.txt")


COMMAND = (
    "printf 'line 3\\n' >> edit.txt && rm gone.txt && mv old-name.txt new-name.txt && "
    "mv dir-a dir-b && rm -rf trash && mkdir -p made/inner && printf 'new\\n' > made/inner/n.txt"
    " && chmod 600 bin.dat"
)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


# The held-out checks run plain `--backend docker` too: change sets are its default (issue 34).
BACKENDS = ["local", pytest.param("docker", marks=pytest.mark.docker)]


def backend_args(backend: str, request: pytest.FixtureRequest) -> list[str]:
    """No flag but the backend's name; docker's image is the test image (its variable)."""
    if backend == "local":
        return []
    request.getfixturevalue("docker_client")  # skips (or fails under CI) without a daemon
    monkeypatch = request.getfixturevalue("monkeypatch")
    monkeypatch.setenv("RINGFENCE_DOCKER_IMAGE", DOCKER_OPTIONS["image"])
    return ["--backend", backend]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("owner", [0, WORKSPACE_UID], ids=["root-owned", "user-owned"])
def test_a_command_is_one_exact_change_set_and_undo_restores_every_byte(
    ws: Path, owner: int, backend: str, request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Edit, create, delete, rename (a file and a directory), delete a directory, chmod:
    `checkpoints` shows exactly those changes and `undo` restores the tree byte for byte.
    On docker the workspace owned by root is written without a command ever running as root."""
    make_tree(ws)
    owned(ws, owner)
    before = tree_state(ws)
    args = ["--workspace", str(ws), "--posture", "allow-reversible", "--approve", "no"]
    args += backend_args(backend, request)
    code, out = cli_json(
        capsys, "call", "run_shell", "--args", json.dumps({"command": COMMAND}), *args
    )
    assert code == 0, out
    changes = out["result"]["changes"]
    assert changes["refused"] == [] and changes["id"]
    after = tree_state(ws)
    assert (ws / "edit.txt").read_text() == "line 1\nline 2\nline 3\n"
    assert not (ws / "gone.txt").exists() and not (ws / "trash").exists()
    assert (ws / "new-name.txt").read_text() == "renamed\n"
    assert (ws / "dir-b" / "deep" / "two.txt").read_text() == "two\n"
    assert not (ws / "dir-a").exists()
    assert (ws / "made" / "inner" / "n.txt").read_text() == "new\n"
    assert stat.S_IMODE((ws / "bin.dat").stat().st_mode) == 0o600
    assert all(p.lstat().st_uid == owner for p in ws.rglob("*"))  # merged as the owner's
    # The exact change set: every path that differs, and nothing else.
    code, listed = cli_json(capsys, "checkpoints", "list", "--workspace", str(ws))
    assert code == 0 and [s["id"] for s in listed["result"]] == [changes["id"]]
    differ = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    assert set(listed["result"][0]["paths"]) == differ
    with Workspace([ws]) as workspace:
        store = CheckpointStore(workspace)
        cs = store.load(changes["id"])
        store.close()
    kinds = {(c.path, c.before and c.before.kind, c.after and c.after.kind) for c in cs.changes}
    assert ("gone.txt", "file", None) in kinds and ("new-name.txt", None, "file") in kinds
    assert ("dir-a", "dir", None) in kinds and ("dir-b/deep/two.txt", None, "file") in kinds
    assert ("trash/sub/y.txt", "file", None) in kinds and ("trash", "dir", None) in kinds
    assert ("made/inner/n.txt", None, "file") in kinds and ("edit.txt", "file", "file") in kinds
    code, shown = cli_json(capsys, "checkpoints", "show", changes["id"], "--workspace", str(ws))
    assert (
        "+line 3" in shown["result"]["diff"]
        and "Directory deleted trash/" in shown["result"]["diff"]
    )
    # undo through the Gate: back to the very bytes, modes and links.
    code, undone = cli_json(capsys, "undo", *args)
    assert code == 0, undone
    assert tree_state(ws) == before


@pytest.mark.parametrize("backend", BACKENDS)
def test_dry_run_stages_the_change_set_and_plan_apply_merges_it(
    ws: Path, tmp_path: Path, backend: str, request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    make_tree(ws)
    owned(ws, WORKSPACE_UID)
    before = tree_state(ws)
    plan = tmp_path / "plan.json"
    args = ["--workspace", str(ws), "--posture", "allow-reversible", "--approve", "no"]
    args += backend_args(backend, request)
    code, out = cli_json(
        capsys, "call", "run_shell", "--args", json.dumps({"command": COMMAND}), *args,
        "--dry-run", str(plan),
    )  # fmt: skip
    assert code == 0, out
    assert out["result"]["changes"]["staged"] is True
    assert tree_state(ws) == before  # the real workspace did not change
    assert main(["plan", "show", str(plan)]) == 0
    shown = capsys.readouterr().out
    assert "apply_changes" in shown and "+line 3" in shown and "-delete me" in shown
    code, applied = cli_json(capsys, "plan", "apply", str(plan), *args)
    assert code == 0, applied
    assert (ws / "edit.txt").read_text() == "line 1\nline 2\nline 3\n"
    assert not (ws / "trash").exists() and (ws / "dir-b" / "one.txt").exists()


def test_a_conflicting_apply_is_refused_naming_the_file_and_changes_nothing(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_tree(ws)
    plan = tmp_path / "plan.json"
    args = ["--workspace", str(ws), "--posture", "allow-reversible", "--approve", "no"]
    code, _ = cli_json(
        capsys, "call", "run_shell", "--args", json.dumps({"command": COMMAND}), *args,
        "--dry-run", str(plan),
    )  # fmt: skip
    assert code == 0
    (ws / "edit.txt").write_text("changed after staging\n")
    before = tree_state(ws)
    code, out = cli_json(capsys, "plan", "apply", str(plan), *args)
    assert code != 0 and out["error"]["code"] == "tool_error"
    assert "conflict" in out["error"]["message"] and "edit.txt" in out["error"]["message"]
    assert tree_state(ws) == before


GIT_ATTACKS = {
    "write .git/config": "printf '[core]\\n\\tfsmonitor = \"touch /tmp/pwned\"\\n' >> .git/config",
    "new sub/.git": "mkdir -p sub/.git/objects sub/.git/refs && echo 'ref: refs/heads/main' "
    "> sub/.git/HEAD",
    "rewrite gitfile": "echo 'gitdir: /tmp/evil' > mod/.git",
    "new .GIT in any spelling": "mkdir -p deep/.GIT && echo x > deep/.GIT/config",
}


@pytest.mark.parametrize("attack", list(GIT_ATTACKS), ids=list(GIT_ATTACKS))
async def test_git_metadata_attacks_are_refused_by_the_merge(
    workspace: Path, tmp_path: Path, attack: str
) -> None:
    git = workspace / ".git"
    for sub in ("objects", "refs/heads", "modules/mod/objects", "modules/mod/refs"):
        (git / sub).mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "config").write_text("[core]\n\trepositoryformatversion = 0\n")
    (git / "modules/mod/HEAD").write_text("ref: refs/heads/main\n")
    (workspace / "mod").mkdir()
    (workspace / "mod" / ".git").write_text("gitdir: ../.git/modules/mod\n")
    owned(workspace, WORKSPACE_UID)
    before = tree_state(workspace)
    events = tmp_path / "events.jsonl"
    async with create_kernel(
        roots=[workspace], posture=Posture.ALLOW_REVERSIBLE, events_path=events
    ) as k:
        outcome = await k.invoke(
            "run_shell", {"command": GIT_ATTACKS[attack] + " && echo ok > kept.txt"}
        )
    assert outcome.error is not None and outcome.error.code == "git_metadata", outcome
    refused = outcome.error.details["changes"]["refused"]
    assert refused and all(r["code"] == "git_metadata" for r in refused)
    now = tree_state(workspace)
    assert (workspace / "kept.txt").read_text() == "ok\n"  # the rest was merged
    assert {p: now.get(p) for p in before} == before  # no git metadata changed
    # Only the harmless rest appeared: the file and the directories that held the refused .git.
    assert set(now) - set(before) <= {"kept.txt", "sub", "deep"}
    assert not Path("/tmp/pwned").exists()
    records = [json.loads(line) for line in events.read_text().splitlines()]
    checkpoint = [r for r in records if r["kind"] == "checkpoint"]
    assert checkpoint and checkpoint[0]["refused"] == refused


async def test_the_whole_set_is_refused_when_the_operator_says_so(workspace: Path) -> None:
    before = tree_state(workspace)
    async with create_kernel(
        roots=[workspace], posture=Posture.ALLOW_REVERSIBLE, merge_refused=False
    ) as k:
        outcome = await k.invoke(
            "run_shell", {"command": "mkdir .git && echo x > .git/HEAD; echo ok > f"}
        )
    assert outcome.error is not None and outcome.error.code == "git_metadata"
    assert "refused as a whole" in outcome.error.message
    assert tree_state(workspace) == before
    kept = outcome.error.details["changes"]  # nothing lost: kept, staged, for a look
    assert kept["staged"] is True and kept["id"] in outcome.error.message


def test_no_change_sets_on_the_command_line_puts_run_shell_back_in_the_residual(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--workspace", str(ws), "--posture", "allow-reversible", "--approve", "no"]
    command = json.dumps({"command": "echo hi > hi.txt"})
    code, out = cli_json(capsys, "call", "run_shell", "--args", command, *args, "--no-change-sets")
    assert code != 0 and out["error"]["code"] == "denied" and not (ws / "hi.txt").exists()
    code, out = cli_json(capsys, "call", "run_shell", "--args", command, *args)
    assert code == 0 and out["result"]["changes"]["files"] == 1 and (ws / "hi.txt").exists()


def _backend_options(
    backend: str, request: pytest.FixtureRequest, workspace: Path
) -> dict[str, Any]:
    """``create_kernel`` options for ``backend`` (docker: its fixture first, the workspace
    given to the container's user)."""
    if backend != "docker":
        return {}
    request.getfixturevalue("docker_client")
    owned(workspace, WORKSPACE_UID)
    return {"backend": "docker", "backend_options": DOCKER_OPTIONS}


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_chmod_of_the_root_itself_is_refused_by_name_not_dropped(
    backend: str, request: pytest.FixtureRequest, workspace: Path
) -> None:
    """The overlay's top directory is the upper directory: a command's ``chmod .`` changed
    its mode there and was dropped without a word (``changes: null``; on docker the next
    commands kept seeing it). It is now refused at the merge, named, the rest merged, the
    root's mode untouched; the next command sees the root's own mode again."""
    options = _backend_options(backend, request, workspace)
    workspace.chmod(0o755)
    async with create_kernel(
        roots=[workspace], posture=Posture.ALLOW_REVERSIBLE, change_sets=True, **options
    ) as k:
        alone = await k.invoke("run_shell", {"command": "chmod 700 ."})
        mixed = await k.invoke("run_shell", {"command": "chmod 777 . && echo x > f"})
        after = await k.call("run_shell", {"command": "stat -c %a ."})
    for outcome, mode in ((alone, "0700"), (mixed, "0777")):
        assert outcome.error is not None and outcome.error.code == "invalid_arguments"
        (refused,) = outcome.error.details["changes"]["refused"]
        assert refused["path"] == "." and f"0755 to {mode}" in refused["message"], refused
    assert "nothing else was changed" in alone.error.message  # type: ignore[union-attr]
    assert (workspace / "f").read_text() == "x\n"  # the rest was merged
    assert stat.S_IMODE(workspace.stat().st_mode) == 0o755
    assert after["stdout"] == "755\n" and after["changes"] is None


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_chmod_of_the_root_by_the_host_during_a_command_is_not_the_commands(
    backend: str, request: pytest.FixtureRequest, workspace: Path
) -> None:
    """The host (a person, an editor) chmods a root while a command runs: the command's
    upper directory still has the mode the root had when it started. That was reported as
    the command's ``chmod .`` and refused: the call failed with ``invalid_arguments`` for a
    change it never made. The upper's mode is now compared with the one it was made with:
    the command's writes merge without a word, the root keeps the host's mode, and the
    next command sees it."""
    options = _backend_options(backend, request, workspace)
    workspace.chmod(0o755)
    seen: list[str] = []

    async def chmod_when_started() -> None:
        while not any("started" in text for text in seen):
            await trio.sleep(0.01)
        workspace.chmod(0o750)

    async with output_watched_kernel(workspace, seen.append, **options) as k:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(chmod_when_started)
            during = await k.invoke(
                "run_shell", {"command": "echo started && sleep 1 && echo x > f"}
            )
        after = await k.call("run_shell", {"command": "stat -c %a ."})
    assert during.error is None, during.error
    assert during.value["changes"]["files"] == 1 and (workspace / "f").read_text() == "x\n"
    assert stat.S_IMODE(workspace.stat().st_mode) == 0o750
    assert after["stdout"] == "750\n" and after["changes"] is None, after


async def test_a_command_cannot_unmount_or_remount_its_layer(workspace: Path) -> None:
    """umount, mount, unshare: refused; no capability is left; the write goes to the layer."""
    script = (
        f"umount {workspace}; umount -l {workspace}; mount -o remount,rw {workspace}; "
        f"mount -t tmpfs none {workspace}; unshare -m true; unshare -Urm true; "
        "grep -E 'Cap(Eff|Prm|Bnd|Amb)' /proc/self/status; "
        f"echo written > {workspace}/after-umount.txt; cat /proc/self/mountinfo"
    )
    async with create_kernel(roots=[workspace], posture=Posture.ALLOW_REVERSIBLE) as k:
        result = await k.call("run_shell", {"command": script})
    assert result["exit_code"] == 0, result
    caps = [line.split()[1] for line in result["stdout"].splitlines() if line.startswith("Cap")]
    assert caps == ["0000000000000000"] * 4, result["stdout"]
    mounts = [line for line in result["stdout"].splitlines() if f" {workspace} " in line]
    assert mounts and mounts[-1].split(" - ")[1].startswith("overlay"), mounts  # still on top
    stderr = result["stderr"]
    assert stderr.count("Operation not permitted") + stderr.count("must be superuser") >= 4, stderr
    # The write after the attempts went through the layer and came back as a change set.
    assert result["changes"]["files"] == 1 and (workspace / "after-umount.txt").exists()


def output_watched_kernel(
    workspace: Path, on_output: Callable[[str], None], **options: Any
) -> Kernel:
    """A kernel under ``allow-reversible`` whose commands' output lines reach ``on_output``
    as they are recorded (the event stream written synchronously); ``options`` go to
    ``create_kernel`` (a backend)."""

    def observe(line: str) -> None:
        record = json.loads(line)
        if record["kind"] == "output":
            on_output(record.get("text", ""))

    return create_kernel(
        roots=[workspace],
        posture=Posture.ALLOW_REVERSIBLE,
        event_observer=observe,
        events_sync=True,
        **options,
    )


async def test_writes_are_invisible_in_the_real_root_until_merged(workspace: Path) -> None:
    seen: list[bool] = []
    target = workspace / "during.txt"

    def observe(text: str) -> None:
        if "written" in text:
            seen.append(target.exists())

    async with output_watched_kernel(workspace, observe) as k:
        result = await k.call(
            "run_shell",
            {"command": "echo data > during.txt && cat during.txt && echo written && sleep 0.5"},
        )
    assert result["stdout"] == "data\nwritten\n"
    assert seen == [False]  # written inside the sandbox, not yet in the workspace
    assert target.read_text() == "data\n"  # merged when the command ended


async def test_a_background_process_writes_nothing_after_its_command(workspace: Path) -> None:
    """Its writes up to the command's end are merged with the command's; it is killed then."""
    async with create_kernel(roots=[workspace], posture=Posture.ALLOW_REVERSIBLE) as k:
        first = await k.call(
            "run_shell",
            {"command": "(echo early > early.txt; sleep 0.3; echo late > late.txt) & sleep 0.1"},
        )
        second = await k.call("run_shell", {"command": ["sleep", "0.5"]})
    assert first["changes"]["files"] == 1 and (workspace / "early.txt").exists()
    assert second["changes"] is None and not (workspace / "late.txt").exists()


async def test_a_cancelled_command_leaves_nothing_and_the_next_ones_run(workspace: Path) -> None:
    """A host cancels a call mid-command: the command is stopped, what it wrote is dropped
    (not merged, not seen by the next command), and the next commands run on the same
    sandbox. Before, its overlay's unmount report was left unread: the next command was
    `lost`, and the restart sometimes found the overlay's work directory unusable."""
    (workspace / "keep.txt").write_text("keep\n")
    async with create_kernel(roots=[workspace], posture=Posture.ALLOW_REVERSIBLE) as k:
        with trio.move_on_after(1.5) as scope:
            await k.call("run_shell", {"command": "echo x > left.txt; sleep 30"})
        assert scope.cancelled_caught
        runs = [await k.call("run_shell", {"command": "ls -a"}) for _ in range(3)]
    for run in runs:
        assert run["status"] == "exited" and not run["session_restarted"], run
        assert run["stdout"] == ".\n..\nkeep.txt\n", run
    assert sorted(os.listdir(workspace)) == ["keep.txt"]


async def test_a_sandbox_killed_mid_command_leaves_the_next_command_working(
    workspace: Path,
) -> None:
    """The sandbox is killed from outside while a command runs (out of memory, an operator):
    its overlays go with its namespace and leave their volatile marks in the work
    directories. The next command starts a new sandbox on the same layers, which mounted
    nothing ("mounting the overlay: Invalid argument") until the marks were removed first;
    now it runs, and says the session restarted."""
    seen: list[str] = []
    async with output_watched_kernel(workspace, seen.append) as k:

        async def kill_when_written() -> None:
            while not any("written" in text for text in seen):
                await trio.sleep(0.01)
            for child in psutil.Process().children(recursive=True):
                # Other tests' processes in this worker may end meanwhile (a CI flake:
                # FileNotFoundError on their /proc/<pid>/stat).
                with contextlib.suppress(psutil.Error, OSError):
                    if child.name() == "bwrap":
                        child.kill()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(kill_when_written)
            first = await k.call(
                "run_shell", {"command": "echo one > one && echo written && sleep 30"}
            )
        second = await k.call("run_shell", {"command": "echo two > two"})
    assert first["status"] == "lost" and first["session_restarted"], first
    assert second["status"] == "exited" and second["session_restarted"], second
    assert second["changes"]["files"] == 1 and (workspace / "two").read_text() == "two\n"


def test_a_layer_is_emptied_before_a_command_unless_it_is_ready(tmp_path: Path) -> None:
    """What decides the hop to empty the upper directories before a command: any entry, or
    the upper's owner or mode differing from its root's (the overlay's top shows them)."""
    root, layers = tmp_path / "root", tmp_path / "layers"
    upper = layers / "0" / "upper"
    root.mkdir(mode=0o755)
    upper.mkdir(parents=True, mode=0o755)
    root.chmod(0o755)
    upper.chmod(0o755)
    assert _uppers_ready(layers, (root,))
    (upper / ".hidden").write_text("x")
    assert not _uppers_ready(layers, (root,))
    _empty_uppers(layers, (root,))
    assert _uppers_ready(layers, (root,)) and os.listdir(upper) == []
    root.chmod(0o700)
    assert not _uppers_ready(layers, (root,))
    _empty_uppers(layers, (root,))
    assert _uppers_ready(layers, (root,)) and stat.S_IMODE(upper.stat().st_mode) == 0o700


async def test_run_shell_is_reversible_only_with_change_sets_and_without_network(
    workspace: Path,
) -> None:
    """allow-reversible runs a change-set command without asking; otherwise it asks."""
    no = ScriptedApprover(lambda _r: ApprovalAnswer.deny("test says no"))
    async with create_kernel(roots=[workspace], posture=Posture.ALLOW_REVERSIBLE, approver=no) as k:
        spec = k.registry.get("run_shell")
        assert spec.consequence.value == "reversible" and not spec.residual
        assert (await k.call("run_shell", {"command": "echo hi > hi.txt"}))["exit_code"] == 0
    assert (workspace / "hi.txt").exists()
    for options in ({"change_sets": False}, {"backend_options": {"network": True}}):
        async with create_kernel(
            roots=[workspace], posture=Posture.ALLOW_REVERSIBLE, approver=no, **options
        ) as k:
            spec = k.registry.get("run_shell")
            assert spec.consequence.value == "irreversible" and spec.residual
            outcome = await k.invoke("run_shell", {"command": "echo no > no.txt"})
        assert outcome.error is not None and outcome.error.code == "denied"
    assert not (workspace / "no.txt").exists()


async def test_change_sets_without_namespaces_refuse_rather_than_write_the_roots(
    workspace: Path, no_bwrap: Path
) -> None:
    """Asked for change sets where the sandbox cannot have overlays: unavailable, nothing ran."""
    async with create_kernel(
        roots=[workspace],
        posture=Posture.ALLOW_REVERSIBLE,
        backend_options={"sandbox": "best-effort"},
        change_sets=True,
    ) as k:
        outcome = await k.invoke("run_shell", {"command": "echo x > written.txt"})
    assert outcome.error is not None and outcome.error.code == "unavailable"
    assert "overlay" in outcome.error.message and "--no-change-sets" in outcome.error.message
    assert not (workspace / "written.txt").exists()


def test_the_host_backend_refuses_change_sets_before_anything_opens(ws: Path) -> None:
    with pytest.raises(InvalidArguments, match="host backend cannot keep change sets"):
        create_kernel(roots=[ws], backend="host", change_sets=True)


@pytest.mark.docker
async def test_the_docker_backend_s_uppers_are_merged_by_the_same_gate(
    docker_client: Any, workspace: Path
) -> None:
    """run_shell's capture works for any backend that fills ``uppers``: docker too."""
    (workspace / ".git").mkdir()
    (workspace / ".git" / "config").write_text("[core]\n")
    (workspace / "a.txt").write_text("old\n")
    owned(workspace, WORKSPACE_UID)
    before = tree_state(workspace)
    async with create_kernel(
        roots=[workspace],
        posture=Posture.ALLOW_REVERSIBLE,
        backend="docker",
        backend_options=DOCKER_OPTIONS,
        change_sets=True,
    ) as k:
        assert k.registry.get("run_shell").consequence.value == "reversible"
        ok = await k.call("run_shell", {"command": "echo new > a.txt"})
        refused = await k.invoke("run_shell", {"command": "echo evil >> .git/config"})
    assert ok["changes"]["files"] == 1 and (workspace / "a.txt").read_text() == "new\n"
    assert refused.error is not None and refused.error.code == "git_metadata"
    now = tree_state(workspace)
    assert now[".git/config"] == before[".git/config"]


@pytest.mark.docker
def test_docker_through_the_cli_a_root_owned_workspace_needs_no_flag_and_no_host_root(
    docker_client: Any,
    ws: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Plain `--backend docker` on a root-owned workspace: the command runs as 65534 (mapped
    to itself in its namespace, never host root) and its writes are merged as the owner's.
    `--no-change-sets` brings back the old failure, with the note naming the cause."""
    if os.geteuid() != 0:
        pytest.skip("a root-owned workspace needs a root test run")
    monkeypatch.setenv("RINGFENCE_DOCKER_IMAGE", DOCKER_OPTIONS["image"])
    make_tree(ws)
    owned(ws, 0)
    before = tree_state(ws)
    args = ["--workspace", str(ws), "--backend", "docker", "--posture", "allow-reversible"]
    who = "id -u > who.txt && cat /proc/self/uid_map >> who.txt && echo x >> edit.txt"
    code, out = cli_json(
        capsys, "call", "run_shell", "--args", json.dumps({"command": who}), *args,
        "--approve", "no",
    )  # fmt: skip
    assert code == 0 and out["result"]["exit_code"] == 0, out
    assert "notes" not in out["result"]
    uid, mapping = (ws / "who.txt").read_text().splitlines()
    assert uid == "65534" and mapping.split() == ["65534", "0", "1"]  # uid 0 outside = 65534
    assert all(p.lstat().st_uid == 0 for p in ws.rglob("*"))  # the workspace owner's
    code, undone = cli_json(capsys, "undo", *args, "--approve", "no")
    assert code == 0, undone
    assert tree_state(ws) == before
    # The control: without change sets the container user cannot write a root-owned tree.
    code, out = cli_json(
        capsys, "call", "run_shell", "--args", json.dumps({"command": "echo x > edit.txt"}),
        *args, "--approve", "yes", "--no-change-sets",
    )  # fmt: skip
    assert out["result"]["exit_code"] != 0 and "Permission denied" in out["result"]["stderr"]
    (note,) = out["result"]["notes"]
    assert str(ws) in note and "--no-change-sets" in note and note in out["warnings"]
    assert tree_state(ws) == before


async def test_a_tree_too_deep_for_a_change_set_is_refused_whole_and_leaves_nothing(
    ws: Path, ringfence_home: Path
) -> None:
    """1,500 locked levels: refused with the limit named, nothing merged, the upper emptied
    (the next command's set holds only its own file), and nothing left in RINGFENCE_HOME."""
    deep = "mkdir -p $(printf 'd/%.0s' $(seq 1500)) && find d -depth -type d -exec chmod 0555 {} +"
    async with create_kernel(roots=[ws], posture=Posture.ALLOW_REVERSIBLE) as kernel:
        first = await kernel.invoke("run_shell", {"command": deep})
        assert first.error is not None and "512 directory levels" in first.error.message
        assert list(ws.iterdir()) == []
        second = await kernel.invoke("run_shell", {"command": "echo hi > x.txt"})
        assert second.ok and second.value["changes"]["files"] == 1
        assert sorted(p.name for p in ws.iterdir()) == ["x.txt"]
    left = [p for p in ringfence_home.rglob("ringfence-layers-*")]
    assert left == []

"""``ringfence call <file tool> --json`` in a real subprocess, with the kernel's error codes."""

from __future__ import annotations

import json
import os

import pytest
from cli_helpers import ringfence_json as ringfence
from workspace_helpers import SECRET, Tree, snapshot


def call(tree: Tree, tool: str, args: dict, *extra: str):
    return ringfence(
        "call",
        tool,
        "--args",
        json.dumps(args),
        "--json",
        "--workspace",
        str(tree.ws),
        "--workspace",
        str(tree.ws2),
        *extra,
    )


def test_read_list_glob_grep(tree: Tree) -> None:
    assert call(tree, "read_file", {"path": "hello.txt"})[:2] == (
        0,
        {"ok": True, "result": "hello\n"},
    )
    code, body, _ = call(tree, "list_directory", {"path": "sub"})
    assert (code, body["result"]) == (0, [{"name": "inner.txt", "type": "file"}])
    code, body, _ = call(tree, "glob_files", {"pattern": "**/*.txt"})
    assert body["result"] == ["hello.txt", "sub/inner.txt"]
    code, body, _ = call(tree, "grep_files", {"pattern": "inn"})
    assert body["result"] == [{"path": "sub/inner.txt", "line": 1, "text": "inner"}]


def test_write_and_edit_need_a_posture_that_allows_them(tree: Tree) -> None:
    before = snapshot(tree.ws)
    code, body, _ = call(tree, "write_file", {"path": "new.txt", "content": "x"}, "--approve", "no")
    assert code == 3 and body["error"]["code"] == "denied"
    assert snapshot(tree.ws) == before
    code, body, _ = call(
        tree, "write_file", {"path": "new.txt", "content": "x\n"}, "--posture", "allow-reversible"
    )
    checkpoint = body.get("result", {}).pop("checkpoint", None)  # the write's change set
    assert (code, body) == (
        0,
        {"ok": True, "result": {"path": "new.txt", "bytes": 2, "created": True}},
    )
    assert isinstance(checkpoint, str)
    code, body, _ = call(
        tree, "edit_file", {"path": "new.txt", "old": "x", "new": "y"}, "--approve", "yes"
    )
    assert code == 0 and (tree.ws / "new.txt").read_text() == "y\n"


def test_error_codes_and_exit_statuses(tree: Tree) -> None:
    (tree.ws / "evil").symlink_to(tree.outside / "secret")
    (tree.ws / ".git").mkdir()
    before = (snapshot(tree.ws), snapshot(tree.outside), snapshot(tree.sibling))
    cases = [
        ("read_file", {"path": "evil"}, 1, "outside_workspace"),
        ("read_file", {"path": str(tree.sibling / "secret")}, 1, "outside_workspace"),
        ("read_file", {"path": "missing"}, 1, "not_found"),
        ("read_file", {}, 2, "invalid_arguments"),
        ("write_file", {"path": "evil", "content": "PWNED"}, 1, "outside_workspace"),
        ("write_file", {"path": ".git/config", "content": "x"}, 1, "git_metadata"),
        ("edit_file", {"path": "hello.txt", "old": "nope", "new": "x"}, 2, "invalid_arguments"),
        ("glob_files", {"pattern": "../*"}, 2, "invalid_arguments"),
    ]
    for tool, args, want_exit, want_code in cases:
        code, body, err = call(tree, tool, args, "--posture", "allow-all")
        assert (code, body and body["error"]["code"]) == (want_exit, want_code), (
            tool,
            args,
            body,
            err,
        )
        assert "message" in body["error"] and body["ok"] is False
    assert (snapshot(tree.ws), snapshot(tree.outside), snapshot(tree.sibling)) == before
    assert (tree.outside / "secret").read_bytes() == SECRET


def test_unrestricted_on_the_command_line(tree: Tree) -> None:
    code, body, _ = call(
        tree, "read_file", {"path": str(tree.outside / "secret")}, "--posture", "unrestricted"
    )
    assert (code, body["result"]) == (0, SECRET.decode())


def test_roots_from_the_environment_and_a_bad_root(tree: Tree) -> None:
    code, body, _ = ringfence(
        "call", "read_file", "--args", '{"path": "two.txt"}', "--json",
        env={"RINGFENCE_WORKSPACE_ROOTS": os.pathsep.join([str(tree.ws2), str(tree.ws)])},
    )  # fmt: skip
    assert (code, body["result"]) == (0, "two\n")
    code, body, _ = ringfence(
        "call",
        "read_file",
        "--args",
        '{"path": "x"}',
        "--json",
        "--workspace",
        str(tree.base / "missing"),
    )
    assert code == 2 and body["error"]["code"] == "invalid_arguments"
    assert "missing" in body["error"]["message"]


def test_tools_list_shows_the_file_tools(tree: Tree) -> None:
    code, body, _ = ringfence("tools", "list", "--json", "--workspace", str(tree.ws))
    assert code == 0
    assert {t["name"]: t["consequence"] for t in body["result"]} == {
        "edit_file": "reversible",
        "glob_files": "read",
        "grep_files": "read",
        "list_directory": "read",
        "read_file": "read",
        "apply_changes": "reversible",  # merges a staged change set (plan apply)
        "run_shell": "reversible",  # local with change sets: every write is an undoable set
        "run_tool_script": "irreversible",  # wired in by the bridge package
        "undo": "reversible",  # restores change sets (workspace checkpoints)
        "write_file": "reversible",
    }


@pytest.mark.skipif(os.geteuid() != 0, reason="only root creates files for another user")
def test_a_root_ringfence_gives_what_it_creates_to_the_workspace_owner(tree: Tree) -> None:
    """Run as root on a user's workspace, ``write_file`` makes its file and every directory
    on the way the first root's owner's, as a command's writes are: a root-owned file there
    would refuse that user's (and the sandbox's) next write. What exists keeps its owner."""
    user = 1000
    for path in (tree.ws, tree.ws / "hello.txt"):
        os.chown(path, user, user)
    os.chown(tree.ws / "sub", 0, 0)  # an existing root-owned directory stays root's
    code, body, err = call(
        tree, "write_file", {"path": "a/b/new.txt", "content": "x\n"}, "--approve", "yes"
    )
    assert code == 0, (body, err)
    for made in ("a", "a/b", "a/b/new.txt"):
        st = os.lstat(tree.ws / made)
        assert (st.st_uid, st.st_gid) == (user, user), made
    assert (
        call(tree, "write_file", {"path": "hello.txt", "content": "y\n"}, "--approve", "yes")[0]
        == 0
    )
    assert (
        call(tree, "write_file", {"path": "sub/in.txt", "content": "z\n"}, "--approve", "yes")[0]
        == 0
    )
    assert (tree.ws / "hello.txt").stat().st_uid == user  # replaced: its owner kept
    assert (tree.ws / "sub" / "in.txt").stat().st_uid == user
    assert (tree.ws / "sub").stat().st_uid == 0

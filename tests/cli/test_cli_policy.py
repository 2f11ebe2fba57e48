"""Policy files through the command line: layers, refusal of bad files, and real run_shell calls.

Every call goes through ``ringfence.cli._main.main`` (the same parser and session
set-up as the ``ringfence`` command), with the real local backend.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ringfence.cli._main import main


@pytest.fixture(autouse=True)
def no_managed_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = _write(tmp_path / "managed" / "policy.toml", "# no managed rules\n")
    monkeypatch.setenv("RINGFENCE_MANAGED_POLICY", str(path))
    monkeypatch.delenv("RINGFENCE_POSTURE", raising=False)
    return path


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".ringfence").mkdir()
    return root


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _call(ws: Path, command: str, *extra: str, events: Path | None = None) -> int:
    argv = ["call", "run_shell", "--args", json.dumps({"command": command})]
    argv += ["--workspace", str(ws), "--backend", "local", "--approve", "no", "--json"]
    if events is not None:
        argv += ["--events", str(events)]
    return main(argv + list(extra))


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_policy_allows_git_status_and_denies_curl_inside_substitution(
    ws: Path, ringfence_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Posture ask, an approver that says no: only the policy can let git status run."""
    policy = _write(
        ringfence_home / "policy.toml",
        'deny = ["run_shell(curl *)"]\nallow = [\n  "run_shell(git status*)",\n]\n',
    )
    events = tmp_path / "events.jsonl"
    assert _call(ws, "git status", events=events) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and "branch" in json.dumps(out["result"])
    decided = [e for e in _events(events) if e["kind"] == "decided"]
    assert decided[-1]["verdict"] == "allow"
    assert decided[-1]["source"] == f"{policy}:3" and decided[-1]["layer"] == "user"

    marker = ws / "fetched"
    events2 = tmp_path / "events2.jsonl"
    code = _call(ws, f"echo $(curl -o {marker} http://127.0.0.1:9/)", events=events2)
    assert code == 3
    err = json.loads(capsys.readouterr().out)["error"]
    assert err["code"] == "denied" and "curl" in err["message"]
    kinds = [e["kind"] for e in _events(events2)]
    assert "decided" in kinds and "started" not in kinds
    decided = next(e for e in _events(events2) if e["kind"] == "decided")
    assert decided["source"] == f"{policy}:1" and decided["rule"] == "deny:run_shell(curl *)"
    assert not marker.exists()


def test_without_a_policy_the_same_git_status_asks_and_is_refused(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _call(ws, "git status") == 3
    assert "approver" in json.loads(capsys.readouterr().out)["error"]["message"]


def test_project_file_cannot_loosen(
    ws: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(ws / ".ringfence" / "policy.toml", 'allow = ["run_shell(touch *)"]\n')
    assert _call(ws, "touch made") == 3  # the project's allow is not applied
    capsys.readouterr()
    assert not (ws / "made").exists()
    assert main(["policy", "show", "--workspace", str(ws), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["result"]["rules"]
    assert shown[0]["layer"] == "project" and "trust" in shown[0]["inactive"]

    # Once the user trusts the project, its allow applies.
    _write(ringfence_home / "policy.toml", f'[trust]\nprojects = ["{ws}"]\n')
    assert _call(ws, "touch made") == 0
    assert (ws / "made").exists()


def test_a_pinned_trust_stops_applying_when_the_project_file_changes(
    ws: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An agent may write the project's policy file; a trust pinned to its sha256 then lapses."""
    project = _write(ws / ".ringfence" / "policy.toml", 'allow = ["run_shell(touch a*)"]\n')
    assert main(["policy", "show", "--workspace", str(ws), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["result"]["project_file"]
    _write(
        ringfence_home / "policy.toml",
        f'[trust]\nprojects = [{{ path = "{ws}", sha256 = "{shown["sha256"]}" }}]\n',
    )
    assert _call(ws, "touch a1") == 0 and (ws / "a1").exists()
    capsys.readouterr()
    # the agent widens the project's own rules …
    project.write_text('allow = ["run_shell(touch *)"]\n')
    assert _call(ws, "touch b1") == 3  # … and the trust no longer applies
    assert not (ws / "b1").exists()
    capsys.readouterr()
    assert main(["policy", "show", "--workspace", str(ws), "--json"]) == 0
    rule = json.loads(capsys.readouterr().out)["result"]["rules"][0]
    assert "changed since it was trusted" in rule["inactive"]


def test_policy_show_s_digest_is_of_the_bytes_its_rules_came_from(
    ws: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The agent swaps the project's file back and forth while the person runs `policy show`
    to learn what to trust. The digest was computed by a second read: a listing could show one
    content's rules beside the other content's digest, and the person pinned what they never
    saw. Now every listing's digest is that of the rules it shows."""
    import hashlib
    import threading

    texts = {tag: f'allow = ["run_shell(echo {tag})"]\n'.encode() for tag in ("aaaa", "bbbb")}
    digests = {tag: hashlib.sha256(text).hexdigest() for tag, text in texts.items()}
    target = ws / ".ringfence" / "policy.toml"
    target.write_bytes(texts["aaaa"])
    stop = threading.Event()

    def swap() -> None:
        spare = ws / ".ringfence" / "next.toml"
        while not stop.is_set():
            for text in texts.values():
                spare.write_bytes(text)
                os.replace(spare, target)

    swapper = threading.Thread(target=swap)
    swapper.start()
    try:
        shown = []
        for _ in range(60):
            assert main(["policy", "show", "--workspace", str(ws), "--json"]) == 0
            result = json.loads(capsys.readouterr().out)["result"]
            (rule,) = [r for r in result["rules"] if r["effect"] == "allow"]  # allow: never kept
            tag = "aaaa" if "aaaa" in rule["rule"] else "bbbb"
            shown.append((tag, result["project_file"]["sha256"]))
    finally:
        stop.set()
        swapper.join()
    mismatched = [(tag, digest) for tag, digest in shown if digest != digests[tag]]
    assert not mismatched, f"{len(mismatched)} of {len(shown)} listings: {mismatched[:3]}"
    assert {tag for tag, _ in shown} == {"aaaa", "bbbb"}  # the swap was seen both ways


def test_project_file_can_tighten(
    ws: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(ringfence_home / "policy.toml", 'allow = ["run_shell(touch *)"]\n')
    project = _write(ws / ".ringfence" / "policy.toml", 'deny = ["run_shell(touch secret*)"]\n')
    assert _call(ws, "touch fine && touch secret") == 3
    err = json.loads(capsys.readouterr().out)["error"]
    assert str(project) in err["message"]
    assert not (ws / "fine").exists() and not (ws / "secret").exists()


def test_managed_wins_over_user_and_command_line(
    ws: Path, ringfence_home: Path, no_managed_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    managed = _write(no_managed_file, '# org policy\ndeny = ["run_shell(touch *)"]\n')
    _write(ringfence_home / "policy.toml", 'allow = ["run_shell(touch *)"]\n')
    assert _call(ws, "touch x", "--allow", "run_shell(touch x)", "--posture", "unrestricted") == 3
    err = json.loads(capsys.readouterr().out)["error"]
    assert f"{managed}:2" in err["message"]
    assert not (ws / "x").exists()


def test_managed_lock_allow_turns_off_other_layers_allows(
    ws: Path, ringfence_home: Path, no_managed_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(no_managed_file, "lock_allow = true\n")
    _write(ringfence_home / "policy.toml", 'allow = ["run_shell(touch *)"]\n')
    assert _call(ws, "touch x") == 3
    assert not (ws / "x").exists()


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('deny = [\n  "run_shell(curl *)",\n  "bad tool(x)",\n]\n', ":3: deny[1]:"),
        (
            'allow = ["run_shell(git status*)"]\n\n[[rules]]\neffect = "allow"\ntool = "x"\n'
            'colour = "red"\n',
            ":6: rules[0].colour:",
        ),
        ('deny = ["read_file(path~(a)\\\\1)"]\n', ":1: deny[0]:"),
        ('deny = "run_shell(curl *)"\n', ":1: deny:"),
        ("deny = [\n", ": toml:"),
        ("mystery = 1\n", ":1: mystery:"),
        ('[trust]\nprojects = "x"\n', ":2: trust.projects:"),
        (
            '[trust]\nprojects = [{ path = "/x", sha256 = "short" }]\n',
            ":2: trust.projects[0]: sha256 must be the 64 hex digits",
        ),
        (
            '[trust]\nprojects = [{ path = "/x", mcp_sha256 = "short" }]\n',
            ":2: trust.projects[0]: mcp_sha256 must be the 64 hex digits",
        ),
    ],
)
def test_a_bad_file_refuses_the_session_naming_file_line_and_key(
    ws: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str], text: str, where: str
) -> None:
    bad = _write(ringfence_home / "policy.toml", text)
    events = ws.parent / "events.jsonl"
    assert _call(ws, "touch ran", events=events) == 2
    err = json.loads(capsys.readouterr().out)["error"]
    assert err["code"] == "invalid_arguments"
    assert err["message"].startswith(f"{bad}{where}"), err["message"]
    assert not (ws / "ran").exists() and not events.exists()  # no session at all
    assert main(["policy", "check", str(bad)]) == 2


def test_policy_check_and_explain(
    ws: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = _write(
        ws.parent / "p.toml",
        'deny = ["run_shell(curl *)"]\nask = ["write_file(path=deploy/**)"]\n'
        'allow = ["run_shell(git status*)", "run_shell(echo *)"]\n',
    )
    assert main(["policy", "check", str(good)]) == 0
    assert "ok, 4 rules" in capsys.readouterr().out

    args = json.dumps({"command": "git status && echo $(curl x) > deploy/log"})
    assert (
        main(
            [
                "policy",
                "explain",
                "run_shell",
                "--args",
                args,
                "--policy",
                str(good),
                "--workspace",
                str(ws),
                "--json",
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)["result"]
    assert report["decision"]["verdict"] == "deny"
    assert report["decision"]["source"] == f"{good}:1" and report["decision"]["layer"] == "session"
    parts = {(p["part"], p["text"]): p["verdict"] for p in report["parts"]}
    assert parts[("command", "git status")] == "allow"
    assert parts[("command", "curl x")] == "deny"
    assert parts[("write", "> deploy/log")] == "ask"

    path_args = json.dumps({"path": "notes/sub/../../deploy/x", "content": ""})
    assert (
        main(
            [
                "policy",
                "explain",
                "write_file",
                "--args",
                path_args,
                "--policy",
                str(good),
                "--workspace",
                str(ws),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "write_file: ask" in out and f"{good}:2" in out


def test_a_named_managed_file_that_is_missing_refuses_the_session(
    ws: Path, no_managed_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    no_managed_file.unlink()
    assert _call(ws, "touch ran") == 2
    err = json.loads(capsys.readouterr().out)["error"]
    assert str(no_managed_file) in err["message"] and "cannot be read" in err["message"]
    assert not (ws / "ran").exists()


def test_command_line_rules_are_a_session_layer(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _call(ws, "touch a", "--allow", "run_shell(touch a)") == 0
    assert (ws / "a").exists()
    capsys.readouterr()
    assert (
        _call(ws, "touch b", "--allow", "run_shell(touch *)", "--deny", "run_shell(touch b)") == 3
    )
    assert not (ws / "b").exists()
    capsys.readouterr()
    assert main(["policy", "show", "--workspace", str(ws), "--deny", "run_shell(curl *)"]) == 0
    assert "--deny" in capsys.readouterr().out
    assert main(["call", "run_shell", "--deny"]) == 2  # a parse error: exit 2, no SystemExit
    assert _call(ws, "true", "--deny", "run_shell(") == 2


def test_a_root_reached_through_a_symlink_is_judged_in_either_spelling(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    link = tmp_path / "link"
    link.symlink_to(ws)
    (ws / "deploy").mkdir()
    for spelling in (link, ws):
        target = spelling / "deploy" / "app.yaml"
        args = json.dumps({"path": str(target), "content": "x"})
        code = main(
            [
                "call",
                "write_file",
                "--args",
                args,
                "--workspace",
                str(link),
                "--json",
                "--posture",
                "unrestricted",
                "--deny",
                "write_file(path=deploy/**)",
            ]
        )
        assert code == 3, capsys.readouterr()
        capsys.readouterr()
    assert not (ws / "deploy" / "app.yaml").exists()


def test_a_project_policy_cannot_pose_as_other_lines_of_policy_show_or_explain(
    ws: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The project file is the repository's: a rule spelled with newlines printed fake lines
    in ``policy show`` (what the person reads before trusting it) and ``policy explain``.
    Each rule, source and reason stays on its line (issue 29, finding 4)."""
    fake = "\ndeny   run_shell(*)  managed  /etc/ringfence/policy.toml:1" + "\n" * 40
    _write(
        ws / ".ringfence" / "policy.toml",
        f'deny = [{json.dumps(f"read_file(path=x{fake})")}]\nask = ["write_file"]\n',
    )
    assert main(["policy", "show", "--workspace", str(ws)]) == 0
    shown = capsys.readouterr().out
    lines = shown.rstrip("\n").split("\n")
    assert len(lines) == 4, shown  # the project file's two lines, then one line per rule
    assert lines[2].startswith("deny   read_file(path=x\\ndeny   run_shell(*)  managed")
    assert lines[3].startswith("ask    write_file")
    assert not any(line.startswith("deny   run_shell") for line in lines)
    path = json.dumps({"path": "x" + fake})
    argv = ["policy", "explain", "read_file", "--args", path, "--workspace", str(ws)]
    assert main(argv) == 0
    explained = capsys.readouterr().out
    assert "" not in explained.rstrip("\n").split("\n"), explained
    assert not any(line.startswith("deny   run_shell") for line in explained.split("\n"))
    # --json keeps the file's exact text.
    assert main(["policy", "show", "--workspace", str(ws), "--json"]) == 0
    rules = json.loads(capsys.readouterr().out)["result"]["rules"]
    assert rules[0]["rule"] == f"read_file(path=x{fake})"


def test_a_fifo_left_as_the_project_policy_refuses_the_next_session_at_once(
    ws: Path, no_managed_file: Path, ringfence_home: Path
) -> None:
    """A command run without change sets (posture unrestricted) leaves a FIFO as
    `.ringfence/policy.toml`: every later session's start opened it and waited for a
    writer forever. Now the session is refused at once, naming the file, and nothing runs.
    The same for the user's file."""
    first = _call(ws, "mkfifo .ringfence/policy.toml", "--no-change-sets",
                  "--posture", "unrestricted")  # fmt: skip
    assert first == 0 and (ws / ".ringfence" / "policy.toml").is_fifo()
    os.mkfifo(ringfence_home / "policy.toml")
    for home, project in ((ringfence_home / "elsewhere", True), (ringfence_home, False)):
        home.mkdir(exist_ok=True)
        env = {**os.environ, "RINGFENCE_HOME": str(home),
               "RINGFENCE_MANAGED_POLICY": str(no_managed_file)}  # fmt: skip
        args = json.dumps({"command": "touch ran"})
        argv = [sys.executable, "-m", "ringfence", "call", "run_shell", "--args", args,
                "--workspace", str(ws), "--posture", "unrestricted", "--approve", "no"]  # fmt: skip
        if not project:
            (ws / ".ringfence" / "policy.toml").unlink()
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        fifo = ws / ".ringfence" / "policy.toml" if project else home / "policy.toml"
        assert done.returncode == 2, done
        assert done.stderr.startswith(f"ringfence: invalid_arguments: {fifo}: file: "), done
        assert "is not a regular file (a FIFO)" in done.stderr, done
        assert not (ws / "ran").exists()


def test_a_session_policy_file_inside_a_root_is_refused(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--policy ws/ringfence.toml`: a session-layer file may allow anything and trust
    projects, and inside the root the agent rewrote it (`allow = ["*"]`) for the next
    session started the same way. Refused before anything opens (also through a link to
    the root); the file is unchanged; one outside every root is used as before."""
    rules = 'deny = ["run_shell(touch *)"]\n'
    inside = _write(ws / "ringfence.toml", rules)
    (tmp_path / "alias").symlink_to(ws)
    attack = json.dumps({"path": "ringfence.toml", "content": 'allow = ["*"]\n'})
    for spelled in (inside, tmp_path / "alias" / "ringfence.toml"):
        code = main(["call", "write_file", "--args", attack, "--workspace", str(ws),
                     "--posture", "allow-reversible", "--approve", "no", "--policy",
                     str(spelled), "--json"])  # fmt: skip
        err = json.loads(capsys.readouterr().out)["error"]
        assert code == 2 and err["code"] == "invalid_arguments", err
        assert err["message"].startswith(f"{spelled}: file: lies inside the workspace root")
        assert inside.read_text() == rules
    outside = _write(tmp_path / "session.toml", rules)
    assert _call(ws, "touch ran", "--policy", str(outside), "--posture", "unrestricted") == 3
    assert not (ws / "ran").exists()


def test_a_fifo_left_as_the_workspace_mcp_manifest_is_refused_at_once(
    ws: Path, ringfence_home: Path
) -> None:
    """The same FIFO as `.ringfence/mcp.toml`: `mcp list --workspace` (and every session
    reading the manifests) waited forever for a writer. Now refused at once, naming it."""
    first = _call(ws, "mkfifo .ringfence/mcp.toml", "--no-change-sets",
                  "--posture", "unrestricted")  # fmt: skip
    assert first == 0 and (ws / ".ringfence" / "mcp.toml").is_fifo()
    env = {**os.environ, "RINGFENCE_HOME": str(ringfence_home)}
    argv = [sys.executable, "-m", "ringfence", "mcp", "list", "--workspace", str(ws)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert f"{ws / '.ringfence' / 'mcp.toml'}: cannot be read: not a regular file" in done.stderr


@pytest.mark.parametrize(
    "removal",
    [
        ["call", "write_file", "--args",
         json.dumps({"path": ".ringfence/policy.toml", "content": "deny = []\n"})],
        ["call", "run_shell", "--args", json.dumps({"command": "rm -r .ringfence"})],
        ["call", "run_shell", "--no-change-sets", "--args",
         json.dumps({"command": ": > no.toml && ln -sf ../no.toml .ringfence/policy.toml"})],
    ],
    ids=["write_file", "run_shell-change-set", "run_shell-no-change-sets-link"],
)  # fmt: skip
def test_an_agent_cannot_take_a_projects_deny_rule_away_from_the_next_session(
    ws: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str], removal: list[str]
) -> None:
    """The agent, allowed to write the workspace, removes the project's deny rule (a reversible
    write_file, a command's change set, a command without change sets turning the file into a
    link): the next session loaded no deny rule and `rm` ran. A rule a session loaded stays in
    force, naming where it came from, until the person runs `ringfence policy accept`."""
    project = _write(ws / ".ringfence" / "policy.toml", 'deny = ["run_shell(rm keep*)"]\n')
    (ws / "keep.txt").write_text("precious\n")
    assert _call(ws, "rm keep.txt", "--posture", "unrestricted") == 3  # the first session
    capsys.readouterr()
    argv = [*removal, "--workspace", str(ws), "--posture", "unrestricted", "--json"]
    assert main(argv) == 0, capsys.readouterr()
    assert not project.is_file() or "rm keep" not in project.read_text(errors="replace")
    capsys.readouterr()
    events = ws.parent / "events.jsonl"
    assert _call(ws, "rm keep.txt", "--posture", "unrestricted", events=events) == 3
    err = json.loads(capsys.readouterr().out)["error"]
    assert (
        err["code"] == "denied"
        and "removed from the file since a session loaded it" in (err["message"])
    ), err
    assert (ws / "keep.txt").read_text() == "precious\n"
    assert not any(e.get("type") == "tool.started" for e in _events(events)), _events(events)
    # The person's way out: accept the file as it is; then the rule no longer binds.
    assert main(["policy", "accept", "--workspace", str(ws), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["result"]["dropped"] == 1
    assert _call(ws, "rm keep.txt", "--posture", "unrestricted") == 0
    assert not (ws / "keep.txt").exists()


def test_a_home_that_cannot_keep_the_projects_rules_refuses_the_session(
    ws: Path, ringfence_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where the project's loaded rules cannot be recorded, the next session could not keep
    them: this one does not start, naming the directory, and runs nothing."""
    _write(ws / ".ringfence" / "policy.toml", 'deny = ["run_shell(rm *)"]\n')
    (ringfence_home / "projects").write_text("not a directory\n")
    assert _call(ws, "touch ran", "--posture", "unrestricted") == 2
    err = json.loads(capsys.readouterr().out)["error"]
    assert err["code"] == "invalid_arguments", err
    assert str(ringfence_home / "projects") in err["message"], err
    assert not (ws / "ran").exists()


@pytest.mark.parametrize(
    ("tool", "args"),
    [("grep_files", {"pattern": "TOPSECRET"}), ("glob_files", {"pattern": "**/*.txt"})],
)
def test_a_search_that_leaves_its_path_out_meets_rules_on_the_first_root(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], tool: str, args: dict
) -> None:
    """A search without ``path`` searches the first root, and a rule on ``path=.`` denies
    that: the matcher on an argument the call did not give never matched, so the search of
    everything ran past the deny rule that its spelled-out twin met."""
    (ws / "secrets").mkdir()
    (ws / "secrets" / "k.txt").write_text("TOPSECRET=1\n")
    events = tmp_path / "events.jsonl"
    argv = ["call", tool, "--args", json.dumps(args), "--workspace", str(ws), "--json"]
    argv += ["--posture", "unrestricted", "--deny", f"{tool}(path=.)", "--events", str(events)]
    assert main(argv) == 3
    out = capsys.readouterr().out
    assert json.loads(out)["error"]["code"] == "denied" and "k.txt" not in out
    kinds = [r["kind"] for r in _events(events) if r.get("tool") == tool]
    assert "started" not in kinds and "finished" not in kinds
    # the same rule leaves a search of another directory alone
    argv[3] = json.dumps({**args, "path": "secrets"})
    assert main(argv) == 0 and "k.txt" in capsys.readouterr().out

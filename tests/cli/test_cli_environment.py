"""The environment never weakens an embedded kernel; the command line reads it, shows and records it.

``create_kernel`` (and ``select_backend``, ``load_policy``) take what a caller
passes, else their confined defaults, whatever ``RINGFENCE_EXECUTION_BACKEND``,
``RINGFENCE_SCRIPT_SANDBOX``, ``RINGFENCE_WORKSPACE_ROOTS`` or
``RINGFENCE_MANAGED_POLICY`` say. The ``ringfence`` command still honours them,
passes them as arguments, and shows and records each weaker choice.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import isolated  # noqa: F401  (autouse fixture)

from ringfence import create_kernel
from ringfence.backends.docker._options import DockerOptions
from ringfence.cli._main import main
from ringfence.cli._settings import Settings
from ringfence.mcp_host import parse_manifest
from ringfence.mcp_host.oauth._tokens import SealedStore
from ringfence.runtime import InvalidArguments, Posture
from ringfence.runtime.policy._files import load_policy
from ringfence.serve._http import check_token
from ringfence.workspace import Retention

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is missing")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def events(path: Path, kind: str) -> list[dict[str, Any]]:
    return [e for e in map(json.loads, path.read_text().splitlines()) if e["kind"] == kind]


@needs_bwrap
async def test_create_kernel_ignores_variables_that_would_weaken_it(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A library caller who passed no backend, script sandbox or roots gets the confined
    defaults: the environment's `host`, `none` and wider roots are not applied."""
    wide = tmp_path / "wide"
    wide.mkdir()
    (wide / "secret.txt").write_text("outside the caller's workspace\n")
    marker = Path("/tmp") / f"ringfence-env-attack-{secrets.token_hex(6)}"
    monkeypatch.setenv("RINGFENCE_EXECUTION_BACKEND", "host")
    monkeypatch.setenv("RINGFENCE_SCRIPT_SANDBOX", "none")
    monkeypatch.setenv("RINGFENCE_WORKSPACE_ROOTS", str(wide))
    monkeypatch.chdir(ws)
    log = tmp_path / "events.jsonl"
    try:
        async with create_kernel(posture=Posture.UNRESTRICTED, events_path=log) as kernel:
            # The attack a host backend would let through: a write to the host's /tmp.
            r = await kernel.call("run_shell", {"command": f"touch {marker}; echo done"})
            await kernel.call("run_tool_script", {"script": "print('ran')"})
        assert not marker.exists()
        assert r["stdout"] == "done\n"  # it wrote the sandbox's private /tmp
        assert kernel.roots == (str(ws),)  # the current directory, not the variable's
        assert kernel.registry.get("run_shell").meta["backend"] == "local"
        assert kernel.registry.get("run_tool_script").meta["sandbox"] == "strict"
        assert not events(log, "script_sandbox_level")  # written only for a weaker level
        assert [e["weakened"] for e in events(log, "script_sandbox")] == [False]
        (started,) = events(log, "backend_started")
        assert started["backend"] == "local" and started["sandbox"]["confined"] is True
        assert not events(log, "weaker_confinement")
    finally:
        marker.unlink(missing_ok=True)


def test_load_policy_ignores_the_managed_policy_variable(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The variable would swap the machine's managed policy for another file; the library
    reads the machine's (``managed=`` is how a caller names another)."""
    planted = tmp_path / "planted.toml"
    planted.write_text('allow = ["run_shell"]\n')
    monkeypatch.setenv("RINGFENCE_MANAGED_POLICY", str(planted))
    layers = load_policy([ws], user=tmp_path / "no-user.toml")
    assert not [r for r in layers.policy.rules if "run_shell" in str(r)]
    named = load_policy([ws], user=tmp_path / "no-user.toml", managed=planted)
    assert [r for r in named.policy.rules if "run_shell" in str(r)]


def test_the_cli_honours_the_backend_variable_and_shows_and_records_it(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RINGFENCE_EXECUTION_BACKEND", "host")
    log = tmp_path / "events.jsonl"
    argv = ["call", "run_shell", "--args", '{"command": "echo $PPID > on-host"}']
    argv += ["--workspace", str(ws), "--approve", "yes", "--events", str(log), "--no-change-sets"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "UNCONFINED" in err and "$RINGFENCE_EXECUTION_BACKEND=host" in err
    (weaker,) = events(log, "weaker_confinement")
    assert weaker["choices"][0] | {"means": ""} == {
        "setting": "backend",
        "value": "host",
        "source": "$RINGFENCE_EXECUTION_BACKEND=host",
        "means": "",
    }
    (started,) = events(log, "backend_started")
    assert started["backend"] == "host" and started["sandbox"]["unconfined"] is True
    assert (ws / "on-host").exists()
    # The flag is a choice too, shown with its own source.
    assert main([*argv[:-1], "--backend", "host", "--no-change-sets"]) == 0
    assert "(--backend host)" in capsys.readouterr().err


def test_an_unknown_backend_in_the_variable_is_refused_naming_it(
    ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RINGFENCE_EXECUTION_BACKEND", "nspawn")
    assert main(["tools", "list", "--workspace", str(ws)]) == 2
    err = capsys.readouterr().err
    assert "nspawn" in err and "RINGFENCE_EXECUTION_BACKEND" in err


def test_the_cli_honours_the_script_sandbox_variable_and_shows_and_records_it(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RINGFENCE_SCRIPT_SANDBOX", "none")
    script = tmp_path / "s.py"
    script.write_text("print('ran')\n")
    log = tmp_path / "events.jsonl"
    argv = ["run-script", str(script), "--workspace", str(ws), "--approve", "yes"]
    assert main([*argv, "--events", str(log), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["result"]["output"] == "ran\n"
    assert "run_tool_script's OS sandbox is none ($RINGFENCE_SCRIPT_SANDBOX=none)" in err
    (weaker,) = events(log, "weaker_confinement")
    assert weaker["choices"][0]["setting"] == "script_sandbox"
    assert [e["level"] for e in events(log, "script_sandbox_level")] == ["none"]


# -- Settings: the one read of the environment -------------------------------------------


def test_settings_from_env_reads_every_variable_once() -> None:
    env = {
        "RINGFENCE_POSTURE": "allow-reads",
        "RINGFENCE_WORKSPACE_ROOTS": os.pathsep.join(["/a", "", "/b"]),
        "RINGFENCE_EXECUTION_BACKEND": "docker",
        "RINGFENCE_SCRIPT_SANDBOX": "best-effort",
        "RINGFENCE_MANAGED_POLICY": "/etc/other.toml",
        "RINGFENCE_MCP": "1",
        "RINGFENCE_OTEL": "0",
        "RINGFENCE_DEBUG": "1",
        "RINGFENCE_SECRET_NAMES": " *_SIGIL , vault_* ,",
        "RINGFENCE_SERVE_TOKEN": "t" * 20,
        "RINGFENCE_CHECKPOINTS_KEEP": "7",
        "RINGFENCE_CHECKPOINTS_MIB": "1.5",
        "RINGFENCE_CHECKPOINTS_FSYNC": "1",
        "RINGFENCE_NO_KEYRING": "1",
        "RINGFENCE_BWRAP": "/opt/bwrap",
        "RINGFENCE_DOCKER_IMAGE": "busybox",
        "RINGFENCE_BENCH_ENGINE": "{}",
    }
    s = Settings.from_env(env)
    assert s.posture == "allow-reads" and s.workspace_roots == (Path("/a"), Path("/b"))
    assert (s.backend, s.script_sandbox, s.managed_policy) == (
        "docker",
        "best-effort",
        "/etc/other.toml",
    )
    assert (s.mcp, s.otel, s.debug, s.keyring) == (True, False, True, False)
    assert s.secret_names == ("*_SIGIL", "vault_*") and s.serve_token == "t" * 20
    retention = s.retention()
    assert (retention.keep, retention.max_mib, retention.fsync) == (7, 1.5, True)
    assert retention.max_age_days == Retention().max_age_days  # unset: the store's default
    assert (s.bwrap, s.docker_image, s.bench_engine) == ("/opt/bwrap", "busybox", "{}")
    assert Settings.from_env({}) == Settings()


@pytest.mark.parametrize("name", ["RINGFENCE_CHECKPOINTS_DAYS", "RINGFENCE_CHECKPOINTS_MIB"])
def test_a_bad_number_is_refused_naming_its_variable(name: str) -> None:
    with pytest.raises(InvalidArguments) as refused:
        Settings.from_env({name: "-3"})
    assert refused.value.field == name and name in refused.value.message


def test_the_library_defaults_do_not_consult_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What the command line reads changes nothing for a library caller who passed nothing."""
    monkeypatch.setenv("RINGFENCE_CHECKPOINTS_KEEP", "1")
    monkeypatch.setenv("RINGFENCE_CHECKPOINTS_FSYNC", "1")
    monkeypatch.setenv("RINGFENCE_NO_KEYRING", "1")
    monkeypatch.setenv("RINGFENCE_SERVE_TOKEN", "x" * 32)
    monkeypatch.setenv("RINGFENCE_DOCKER_IMAGE", "not-the-default:never")
    assert (
        DockerOptions.from_mapping({}).image
        == DockerOptions.from_mapping({"image": "debian"}).image
    )
    assert Retention() == Retention(keep=500, max_age_days=30.0, max_mib=1024.0, fsync=False)
    assert SealedStore(tmp_path).keyring is True
    assert check_token(None) is None


@needs_bwrap
def test_the_cli_passes_the_secret_names_variable_to_the_kernel(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """RINGFENCE_SECRET_NAMES still redacts for the command: read by Settings, passed on."""
    secret = f"vault-{secrets.token_hex(8)}"
    monkeypatch.setenv("RINGFENCE_SECRET_NAMES", "vault_*")
    log = tmp_path / "events.jsonl"
    args = {"command": 'echo "$VAULT_ROLE"', "env": {"VAULT_ROLE": secret}}
    argv = ["call", "run_shell", "--args", json.dumps(args), "--workspace", str(ws)]
    assert main([*argv, "--approve", "yes", "--events", str(log), "--json"]) == 0
    out = capsys.readouterr().out
    assert secret not in out and secret not in log.read_text()
    assert "[REDACTED SECRET]" in out


def test_the_secret_names_variable_holds_for_the_manifest_through_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A literal `env` value under an operator's credential name is refused by `mcp add`
    (the library's parse_manifest takes the names as an argument)."""
    manifest = tmp_path / "mcp.toml"
    argv = ["mcp", "add", "vault", "--transport", "stdio", "--command", "/bin/true"]
    argv += ["--env", "VAULT_ROLE=admin", "--manifest", str(manifest), "--json"]
    monkeypatch.setenv("RINGFENCE_SECRET_NAMES", "vault_*")
    assert main(argv) == 2
    out = json.loads(capsys.readouterr().out)
    assert "looks like a credential" in out["error"]["message"] and not manifest.exists()
    text = '[[server]]\nname = "v"\ntransport = "stdio"\ncommand = "/bin/true"\nenv = {VAULT_ROLE = "admin"}\n'
    assert parse_manifest(text).servers  # no names given: the built-in rules only
    with pytest.raises(InvalidArguments, match="looks like a credential"):
        parse_manifest(text, secret_names=["vault_*"])


# -- $RINGFENCE_HOME inside a workspace root -------------------------------------------------


def snapshot(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else None
        for p in sorted(root.rglob("*"))
    }


@needs_bwrap
def test_a_home_inside_a_root_is_refused_and_the_next_session_still_asks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`serve` or `call` started from ~ with the default ~/.ringfence: the agent would write
    the user policy (`allow = ["*"]`) that the next session obeys. Refused before anything
    opens; nothing written; the next session (another root, the same home) still asks."""
    home = tmp_path / "home"
    (home / ".ringfence").mkdir(parents=True)
    (home / ".ringfence" / "mcp.toml").write_text("# the user's servers\n")
    (home / "project").mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("RINGFENCE_HOME")  # the default: ~/.ringfence
    before = snapshot(home)
    attack = json.dumps({"path": ".ringfence/policy.toml", "content": 'allow = ["*"]\n'})
    refusals = []
    (tmp_path / "alias").symlink_to(home)  # a symlink spelling the home elsewhere
    for root in (home, home / ".ringfence", tmp_path / "alias"):
        code = main(["call", "write_file", "--args", attack, "--workspace", str(root),
                     "--posture", "allow-reversible", "--approve", "no"])  # fmt: skip
        refusals.append((root, code, capsys.readouterr().err))
    written = snapshot(home)
    # The next session: a root beside the home, asking, answered no: nothing runs.
    marker = home / "project" / "ran-without-asking"
    code = main(["call", "run_shell", "--args", json.dumps({"command": f"touch {marker}"}),
                 "--workspace", str(home / "project"), "--posture", "ask", "--approve", "no",
                 "--network"])  # fmt: skip
    assert not marker.exists()
    assert code == 3 and "denied" in capsys.readouterr().err
    assert written == before  # no policy, no spool, no key, no checkpoint
    for root, code, err in refusals:
        assert code == 2 and err.startswith("ringfence: invalid_arguments: "), err
        assert str(home / ".ringfence") in err and "set RINGFENCE_HOME" in err, err
        assert f"workspace root {root.resolve()}" in err, err
    code = main(["call", "read_file", "--args", '{"path": ".ringfence/mcp.toml"}',
                 "--workspace", str(home), "--json"])  # fmt: skip
    body = json.loads(capsys.readouterr().out)  # reading is refused too
    assert code == 2 and body["error"]["field"] == "RINGFENCE_HOME", body


@needs_bwrap
def test_a_user_policy_linked_into_a_root_is_refused_and_the_next_session_keeps_its_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """$RINGFENCE_HOME is outside every root, but its policy.toml is a symbolic link into a
    dotfiles checkout the agent works in (or a hard link to a file there): the agent rewrote
    it (`allow = ["*"]`) and the next session, in another root, ran `touch` that the user's
    rule denies without asking. Refused before anything opens; the file is unchanged; the
    next session still denies. The control: a link to a file outside the roots is used."""
    home, dots, other, outside = (tmp_path / n for n in ("home", "dots", "other", "outside"))
    for d in (home, dots, other, outside):
        d.mkdir()
    rules = 'deny = ["run_shell(touch *)"]\n'
    (dots / "ringfence.toml").write_text(rules)
    (home / "policy.toml").symlink_to(dots / "ringfence.toml")
    monkeypatch.setenv("RINGFENCE_HOME", str(home))
    attack = json.dumps({"path": "ringfence.toml", "content": 'allow = ["*"]\n'})

    def write_policy(root: Path) -> tuple[int, str]:
        code = main(["call", "write_file", "--args", attack, "--workspace", str(root),
                     "--posture", "allow-reversible", "--approve", "no"])  # fmt: skip
        return code, capsys.readouterr().err

    def next_session() -> tuple[int, str]:
        marker = other / "ran"
        code = main(["call", "run_shell", "--args", json.dumps({"command": f"touch {marker}"}),
                     "--workspace", str(other), "--posture", "ask", "--approve", "no"])  # fmt: skip
        assert not marker.exists()
        return code, capsys.readouterr().err

    code, err = write_policy(dots)
    assert code == 2 and err.startswith("ringfence: invalid_arguments: "), err
    assert f"{home / 'policy.toml'}, which governs" in err and str(dots) in err, err
    assert (dots / "ringfence.toml").read_text() == rules
    code, err = next_session()
    assert code == 3 and "is denied by the rule 'run_shell(touch *)'" in err, err
    # A hard link to the file in the checkout: the same file by another name.
    (home / "policy.toml").unlink()
    os.link(dots / "ringfence.toml", home / "policy.toml")
    code, err = write_policy(dots)
    assert code == 2 and "hard links" in err, err
    assert (dots / "ringfence.toml").read_text() == rules
    # The control: a link to a file outside every root is the user's policy as before.
    (home / "policy.toml").unlink()
    (outside / "ringfence.toml").write_text(rules)
    (home / "policy.toml").symlink_to(outside / "ringfence.toml")
    code, err = write_policy(dots)
    assert code == 0 and (dots / "ringfence.toml").read_text() == 'allow = ["*"]\n', err
    code, err = next_session()
    assert code == 3 and "is denied by the rule 'run_shell(touch *)'" in err, err


def _can_bind_mount(tmp_path: Path) -> bool:
    (tmp_path / "probe-a").mkdir()
    (tmp_path / "probe-b").mkdir()
    done = subprocess.run(["mount", "--bind", tmp_path / "probe-a", tmp_path / "probe-b"],
                          capture_output=True, check=False)  # fmt: skip
    if done.returncode == 0:
        subprocess.run(["umount", tmp_path / "probe-b"], check=True)
    return done.returncode == 0


@needs_bwrap
def test_a_home_bind_mounted_from_inside_a_root_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """$RINGFENCE_HOME is a bind mount of `<root>/.rf` (or its policy.toml one of a file in
    the root): no directory from the home up to `/` is the root, so the home was taken for
    outside it, and the agent's `write_file .rf/policy.toml` (`allow = ["*"]`) became the
    user policy the next session obeyed. Refused by where the home lies in its file system;
    the control: a bind mount of a directory outside every root is used."""
    if os.geteuid() != 0 or not _can_bind_mount(tmp_path):
        pytest.skip("bind mounts need root here")
    ws, home, outside = tmp_path / "ws", tmp_path / "home", tmp_path / "outside"
    for d in (ws / ".rf", home, outside):
        d.mkdir(parents=True)
    (ws / ".rf" / "policy.toml").write_text('deny = ["run_shell(touch *)"]\n')
    (outside / "policy.toml").write_text('deny = ["run_shell(touch *)"]\n')
    monkeypatch.setenv("RINGFENCE_HOME", str(home))
    attack = json.dumps({"path": ".rf/policy.toml", "content": 'allow = ["*"]\n'})
    mounted: list[Path] = []

    def bind(source: Path, target: Path) -> None:
        subprocess.run(["mount", "--bind", source, target], check=True)
        mounted.append(target)

    try:
        bind(ws / ".rf", home)
        code = main(["call", "write_file", "--args", attack, "--workspace", str(ws),
                     "--posture", "allow-reversible", "--approve", "no"])  # fmt: skip
        err = capsys.readouterr().err
        assert code == 2 and f"is inside the workspace root {ws}" in err, err
        assert (ws / ".rf" / "policy.toml").read_text() == 'deny = ["run_shell(touch *)"]\n'
        subprocess.run(["umount", mounted.pop()], check=True)
        # The same with the policy file alone mounted from the root.
        (home / "policy.toml").write_text("")
        bind(ws / ".rf" / "policy.toml", home / "policy.toml")
        code = main(["call", "write_file", "--args", attack, "--workspace", str(ws),
                     "--posture", "allow-reversible", "--approve", "no"])  # fmt: skip
        err = capsys.readouterr().err
        assert code == 2 and f"resolves inside the workspace root {ws}" in err, err
        assert (ws / ".rf" / "policy.toml").read_text() == 'deny = ["run_shell(touch *)"]\n'
        subprocess.run(["umount", mounted.pop()], check=True)
        (home / "policy.toml").unlink()
        # The control: the home mounted from outside every root works as before.
        bind(outside, home)
        code = main(["call", "write_file", "--args", attack, "--workspace", str(ws),
                     "--posture", "allow-reversible", "--approve", "no"])  # fmt: skip
        assert code == 0, capsys.readouterr().err
        marker = ws / "ran"
        code = main(["call", "run_shell", "--args", json.dumps({"command": f"touch {marker}"}),
                     "--workspace", str(ws), "--posture", "ask", "--approve", "no"])  # fmt: skip
        assert code == 3 and not marker.exists(), capsys.readouterr().err
    finally:
        for target in reversed(mounted):
            subprocess.run(["umount", target], check=False)


@needs_bwrap
def test_a_home_outside_the_roots_is_hidden_from_run_shell(
    ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A RINGFENCE_HOME outside the homes and /tmp (here under /var/lib): its readable files
    (the MCP manifest may hold literal env values) are hidden from a confined command."""
    try:
        home = Path(tempfile.mkdtemp(prefix="ringfence-test-home-", dir="/var/lib"))
    except OSError as exc:
        pytest.skip(f"no directory outside /tmp and the homes to put a home in: {exc}")
    try:
        secret = f"literal-{secrets.token_hex(8)}"
        (home / "mcp.toml").write_text(f"# API_KEY = {secret}\n")
        (home / "mcp.toml").chmod(0o644)
        home.chmod(0o755)
        monkeypatch.setenv("RINGFENCE_HOME", str(home))
        command = f"cat {home}/mcp.toml 2>/dev/null || echo hidden"
        code = main(["call", "run_shell", "--args", json.dumps({"command": command}),
                     "--workspace", str(ws), "--approve", "yes", "--json"])  # fmt: skip
        body = json.loads(capsys.readouterr().out)
        assert code == 0 and body["result"]["stdout"] == "hidden\n", body
        assert secret not in json.dumps(body)
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.docker
def test_the_cli_passes_the_docker_image_variable_to_the_backend(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """RINGFENCE_DOCKER_IMAGE is the command line's: a session the CLI starts uses it (an image
    that does not exist is refused naming it, nothing runs)."""
    monkeypatch.setenv("RINGFENCE_DOCKER_IMAGE", "ringfence/no-such-image:never")
    ws = tmp_path / "ws"
    ws.mkdir()
    code = main(
        [
            "call",
            "run_shell",
            "--backend",
            "docker",
            "--workspace",
            str(ws),
            "--approve",
            "yes",
            "--args",
            json.dumps({"command": "touch ran"}),
            "--json",
        ]
    )
    body = json.loads(capsys.readouterr().out)
    assert code != 0 and "ringfence/no-such-image" in json.dumps(body)
    assert not (ws / "ran").exists()

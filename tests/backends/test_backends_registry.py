"""Selecting a backend by name, and adding a third one without touching the Gate."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import ringfence.backends as backends
from ringfence.backends import (
    SessionSpec,
    ShellResult,
    backend_names,
    register_backend,
    select_backend,
    start_session,
)
from ringfence.runtime import InvalidArguments


def test_selection_is_explicit_else_local_and_never_the_environment(monkeypatch) -> None:
    monkeypatch.delenv("RINGFENCE_EXECUTION_BACKEND", raising=False)
    assert select_backend(None) == "local"
    monkeypatch.setenv("RINGFENCE_EXECUTION_BACKEND", "host")  # the command line's, not ours
    assert select_backend(None) == "local"
    assert select_backend("docker") == "docker"


def test_unknown_backends_are_refused_naming_the_known_ones(monkeypatch) -> None:
    with pytest.raises(InvalidArguments) as info:
        select_backend("podman")
    assert info.value.field == "backend" and "local" in info.value.message


class EchoSession:
    """A third backend: answers every command with its argv, starts no process."""

    name = "echo"

    def __init__(self) -> None:
        self.closed = False

    @property
    def metadata(self):
        return {"confined": False, "sandbox": "none", "network": False}

    def environment(self, env=None):
        return dict(env or {})

    async def run(self, command, *, cwd, env, timeout, output_cap, on_output=None, redact=None):
        text = command if isinstance(command, str) else " ".join(command)
        if on_output:
            on_output("stdout", text)
        return ShellResult(0, None, 0.0, text, "")

    async def aclose(self) -> None:
        self.closed = True


async def test_a_third_backend_plugs_in_by_name(tmp_path: Path) -> None:
    async def start(spec: SessionSpec) -> EchoSession:
        return EchoSession()

    register_backend("echo-test", start)
    try:
        assert "echo-test" in backend_names()
        with pytest.raises(InvalidArguments):
            register_backend("echo-test", start)
        register_backend("echo-test", start, replace=True)
        session = await start_session("echo-test", SessionSpec(roots=(tmp_path,)))
        assert isinstance(session, backends.BackendSession)
        result = await session.run(["hi", "there"], cwd=tmp_path, env={}, timeout=1, output_cap=10)
        assert result.stdout == "hi there"
    finally:
        backends._registry._BACKENDS.pop("echo-test", None)


def test_session_spec_checks_its_fields(tmp_path: Path) -> None:
    with pytest.raises(InvalidArguments):
        SessionSpec(roots=(tmp_path,), passthrough_env=("NOT-A-NAME",))
    with pytest.raises(InvalidArguments):
        SessionSpec(roots=(tmp_path,), kill_grace=-1)
    with pytest.raises(InvalidArguments):
        SessionSpec(roots=(tmp_path,), shell=())


async def test_local_backend_takes_no_options(tmp_path: Path) -> None:
    with pytest.raises(InvalidArguments) as info:
        await start_session("local", SessionSpec(roots=(tmp_path,), options={"image": "x"}))
    assert info.value.field == "options"


def test_importing_backends_does_not_load_the_docker_sdk() -> None:
    code = (
        "import sys, ringfence.backends, ringfence.cli._main; "
        "print(sorted(m for m in ('docker', 'requests') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_public_name_resolves() -> None:
    public = [n for n in dir(backends) if not n.startswith("_")] + list(backends._LAZY)
    for name in public:
        assert getattr(backends, name) is not None, name
    with pytest.raises(AttributeError):
        backends.no_such_name  # noqa: B018

"""Start-up of the ``ringfence`` command: each verb loads only what it needs.

``ringfence --help`` and ``--version`` import no trio and no kernel; a verb's
module loads only when that verb runs, while ``--help`` still lists every verb
and each verb's own ``--help`` is complete. The bound on what ``ringfence call
read_file`` imports is in tests/test_architecture.py.
"""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from ringfence.cli._verbs import VERBS

PROBE = (
    "import sys\n"
    "from ringfence.cli import main\n"
    "try:\n"
    "    code = main(sys.argv[1:])\n"
    "except SystemExit as exc:\n"
    "    code = exc.code\n"
    "sys.stdout.flush()\n"
    "print('\\nMODULES', sorted(sys.modules))\n"
    "sys.exit(code)\n"
)


def _run(*argv: str) -> tuple[str, set[str], int]:
    out = subprocess.run(
        [sys.executable, "-I", "-c", PROBE, *argv], capture_output=True, text=True, timeout=60
    )
    text, _, modules = out.stdout.rpartition("\nMODULES ")
    return text, set(ast.literal_eval(modules)), out.returncode


HEAVY = ("trio", "ringfence.runtime", "jsonschema", "cryptography", "docker", "mcp")


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_load_no_kernel_and_no_trio(flag: str) -> None:
    text, modules, code = _run(flag)
    assert code == 0
    assert sorted(m for m in modules if m.split(".")[0] in HEAVY or m in HEAVY) == []
    assert sorted(m for m in modules if m.startswith("ringfence.runtime")) == []
    if flag == "--help":
        for name, verb in VERBS.items():
            assert name in text
            assert verb.help.split()[0] in text


def test_a_verb_loads_its_own_module_and_no_other() -> None:
    text, modules, code = _run("events", "--help")
    assert code == 0 and "verify" in text  # the events verb's own parser, complete
    others = {f"ringfence.cli.{v.module}" for n, v in VERBS.items() if n != "events"}
    assert sorted(modules & others) == []


@pytest.mark.parametrize("name", sorted(VERBS))
def test_every_verb_registers_with_its_listed_help(name: str) -> None:
    """The full parser (every module loaded) shows the same help lines as the stubs."""
    from ringfence.cli._main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "verb")
    helps = {c.dest: c.help for c in sub._choices_actions}
    assert helps[name] == VERBS[name].help


def test_a_misspelt_verb_is_a_usage_error_naming_the_choices() -> None:
    _, _, code = _run("calll", "x")
    assert code == 2
    out = subprocess.run(
        [sys.executable, "-I", "-c", PROBE, "calll", "x"], capture_output=True, text=True
    )
    assert "invalid choice: 'calll'" in out.stderr and "'call'" in out.stderr


def test_bench_peers_lists_every_peer() -> None:
    """``ringfence bench --peers --list``: the filesystem peer and the ones still to come."""
    out = subprocess.run(
        [sys.executable, "-I", "-c", PROBE, "bench", "--peers", "--list"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    for name in ("peer-filesystem", "peer-llm-sandbox", "peer-smolagents", "peer-srt"):
        assert name in out.stdout


# -- call run_shell: the tracking probe's nursery ------------------------------------------


@pytest.mark.parametrize(
    ("raised", "code", "said"),
    [
        (KeyboardInterrupt(), 130, "ringfence: interrupted"),
        ("usage", 2, "a usage mistake"),
    ],
)
def test_call_run_shell_reports_what_its_verb_raised_not_a_group(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    raised: object,
    code: int,
    said: str,
) -> None:
    """``call run_shell`` runs the process supervisor's probe in a nursery beside the kernel:
    what the verb raises still reaches the command's one boundary as itself (Ctrl-C exits
    130, a usage mistake 2), not wrapped in an exception group."""
    from ringfence.cli import _call, _main
    from ringfence.cli._verbs import UsageError

    def fail(*_a: object, **_k: object) -> None:
        raise UsageError(said) if raised == "usage" else raised  # type: ignore[misc]

    monkeypatch.setattr(_call, "kernel_from_args", fail)
    argv = ["call", "run_shell", "--backend", "host", "--args", '{"command": "true"}']
    assert _main.main(argv) == code
    assert said in capsys.readouterr().err

"""The verbs of the ``ringfence`` command: names, one-line help, the module behind each.

This module is what ``ringfence --help`` and ``--version`` import, and what
every invocation imports before it knows its verb: it imports only the
standard library (no trio, no ``ringfence.runtime``, no SDK). A verb's own
module, with its heavy imports, loads only when that verb runs
(:func:`ringfence.cli._main.build_parser`); the others appear in the parser
as stubs built from :data:`VERBS`, so ``--help`` lists them all and a
misspelt verb still gets argparse's ``invalid choice`` error.

Promised: the help line a verb shows is the same whether its module is loaded
or not (the module registers itself through :func:`add_verb_parser`, which
reads it from here). Not promised: a stub parses anything; only the loaded
verb's parser is complete.
"""

from __future__ import annotations

import argparse
from typing import Any, NamedTuple


class Verb(NamedTuple):
    """One top-level verb: the module (in ``ringfence.cli``) that registers it, its help line.

    A NamedTuple rather than a frozen dataclass: ``dataclasses`` (and the ``inspect``
    it imports) would double the cost of ``ringfence --version``.
    """

    module: str
    help: str


# The order here is the order in --help.
VERBS: dict[str, Verb] = {
    "tools": Verb("_tools", "list the tools a session would have"),
    "call": Verb("_call", "make one governed tool call"),
    "run-script": Verb(
        "_run_script", "run a Python tool script; every call_tool inside it is gated"
    ),
    "serve": Verb("_serve", "serve the session's governed tools to an MCP client"),
    "events": Verb("_events", "check or read event streams"),
    "plan": Verb("_plan", "review or apply a dry run's plan"),
    "checkpoints": Verb("_checkpoints", "list or show the change sets of file tool writes"),
    "undo": Verb("_checkpoints", "restore the before-images of change sets (a gated call)"),
    "recover": Verb(
        "_checkpoints", "roll back what a killed ringfence left half-written in the workspace"
    ),
    "review": Verb(
        "_review", "a local page to watch the calls, answer approvals, undo changes, apply plans"
    ),
    "worktree": Verb("_worktree", "list, diff or remove the worktrees of --worktree sessions"),
    "policy": Verb("_policy", "show, check and explain deny/ask/allow rules"),
    "mcp": Verb("_mcp", "configure and inspect MCP servers (mcp.toml)"),
    "plugin": Verb(
        "_plugin", "add, review, trust and remove plugins (hooks, skills, MCP servers, rules)"
    ),
    "skills": Verb("_plugin", "list and show the skills trusted plugins offer"),
    "images": Verb("_images", "build and list the docker backend's sandbox images"),
    "doctor": Verb(
        "_doctor",
        "check what can run here (Docker, images, namespaces, Landlock, seccomp, ripgrep)",
    ),
    "bench": Verb("_bench", "measure ringfence's overhead against baselines"),
}

EXIT_CODES_HELP = (
    "exit codes: 0 ok; 1 the tool failed, refused, or an unexpected error; "
    "2 usage error (bad option, argument or file); 3 denied by policy or approver"
)
DEBUG_ENV = "RINGFENCE_DEBUG"


class UsageError(Exception):
    """A command-line mistake: printed without a traceback, exit 2."""


def add_verb_parser(
    sub: argparse._SubParsersAction, name: str, **kwargs: Any
) -> argparse.ArgumentParser:
    """``sub.add_parser(name, help=VERBS[name].help, **kwargs)``: the one place a verb's help lives."""
    return sub.add_parser(name, help=VERBS[name].help, **kwargs)


WORKSPACE_HELP = (
    "a workspace root (repeatable); default $RINGFENCE_WORKSPACE_ROOTS or the current directory"
)


def add_workspace_option(parser: argparse.ArgumentParser, help: str = WORKSPACE_HELP) -> None:
    """``--workspace DIR`` (repeatable), as every verb that reads or runs in a workspace takes it."""
    parser.add_argument("--workspace", action="append", default=[], metavar="DIR", help=help)


def port_number(text: str) -> int:
    """An argparse ``type``: a TCP port, 0-65535 (0: a free one), refused at parse time."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is not in 0-65535")
    return port


def positive_seconds(text: str) -> float:
    """An argparse ``type``: a duration in seconds, finite and above 0, refused at parse time."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < seconds < float("inf"):  # also false for NaN
        raise argparse.ArgumentTypeError(f"{text} is not a number of seconds above 0")
    return seconds


def chosen_verb(argv: list[str]) -> str | None:
    """The verb ``argv`` names (its first word not starting with ``-``), if it is one of ours.

    The command's own options (``--help``, ``--version``) take no value, so the
    first positional word is the verb.
    """
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word if word in VERBS else None
    return None

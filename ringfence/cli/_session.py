"""Options shared by every verb that opens a session, and the kernel they build."""

from __future__ import annotations

import argparse
import os
import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._embed import create_kernel
from ..runtime._approval import (
    ApprovalAnswer,
    ApprovalRequest,
    Approver,
    HeadlessDenyApprover,
    ScriptedApprover,
    default_approver,
    posture_that_allows,
)
from ..runtime._kernel import Kernel
from ..runtime.policy._decide import Posture
from ..runtime.policy._files import PolicyLayers, cli_rules, load_policy
from ._environ import (
    backend_choice,
    managed_policy,
    posture_choice,
    script_sandbox_choice,
    show_and_record,
    weaker_choices,
)
from ._mcp_session import ELICITOR_KEY, mcp_setup
from ._output import check_output_file, naming_file
from ._verbs import add_workspace_option
from ._worktree import add_worktree_option, session_roots

if TYPE_CHECKING:
    from ._review_setup import ReviewSetup


def add_session_options(parser: argparse.ArgumentParser, *, dry_run: bool = True) -> None:
    add_workspace_option(parser)
    parser.add_argument(
        "--posture",
        choices=[p.value for p in Posture],
        default=None,  # Settings.posture_for: $RINGFENCE_POSTURE, else ask
        help="how much autonomy the session grants (default: ask)",
    )
    parser.add_argument(
        "--approve",
        choices=["yes", "no", "review"],
        help="answer every approval question without asking (yes, no), or ask on a local review "
        "page whose URL is printed (review); default: ask on a TTY, else no",
    )
    parser.add_argument(
        "--backend",
        default=None,
        metavar="NAME",
        help="where run_shell runs: local (confined), host (unconfined) or docker "
        "(default $RINGFENCE_EXECUTION_BACKEND or local)",
    )
    parser.add_argument(
        "--sandbox",
        choices=["strict", "best-effort"],
        default=None,
        help="the local backend's confinement: strict (default: every layer or refuse) or "
        "best-effort (apply what this machine offers; the gaps are recorded in events)",
    )
    parser.add_argument(
        "--network",
        action="store_true",
        help="give run_shell's sandbox the network (default: none); recorded in events and shown "
        "in every approval, and run_shell is then no longer reversible",
    )
    parser.add_argument(
        "--change-sets",
        dest="change_sets",
        action="store_true",
        default=None,
        help="keep run_shell's writes off the workspace and merge each command's as an undoable "
        "change set (the default on local and docker; off by default for docker on gVisor)",
    )
    parser.add_argument(
        "--persist-shell-state",
        action="store_true",
        help="run_shell keeps the shell's working directory and exported variables from one "
        "command to the next, like one long-lived shell (local and docker backends)",
    )
    parser.add_argument(
        "--no-change-sets",
        dest="change_sets",
        action="store_false",
        default=None,
        help="let run_shell write the workspace directly, without change sets (which the local "
        "and docker backends keep by default: each command's writes merged as an undoable "
        "change set, run_shell reversible)",
    )
    parser.add_argument(
        "--refuse-whole-change-set",
        action="store_true",
        help="refuse a command's whole change set when any entry is refused (default: merge "
        "the rest)",
    )
    if dry_run:
        parser.add_argument(
            "--dry-run",
            nargs="?",
            const="ringfence-plan.json",
            default=None,
            metavar="PLAN",
            help="stage non-read calls into PLAN (default ringfence-plan.json) instead of running them",
        )
    parser.add_argument(
        "--mcp",
        action="store_true",
        default=False,  # Settings.apply_defaults: True under RINGFENCE_MCP=1
        help="connect the MCP servers of $RINGFENCE_HOME/mcp.toml and <first root>/.ringfence/mcp.toml "
        "(starts their processes; default off, or RINGFENCE_MCP=1)",
    )
    add_worktree_option(parser)
    parser.add_argument("--events", metavar="FILE", help="append the event stream to FILE (JSONL)")
    parser.add_argument(
        "--events-sync",
        action="store_true",
        help="write and fsync every event record as it comes (default: a call's records are "
        "written together at its end)",
    )
    parser.add_argument(
        "--otel",
        action="store_true",
        default=False,  # Settings.apply_defaults: True under RINGFENCE_OTEL=1
        help="export the event stream as OpenTelemetry spans over OTLP/HTTP to "
        "$OTEL_EXPORTER_OTLP_ENDPOINT (default http://localhost:4318; or RINGFENCE_OTEL=1; "
        "needs the otel extra)",
    )
    parser.add_argument(
        "--otel-payloads",
        action="store_true",
        help="with --otel: also export arguments and results (redacted, capped at 1024 characters)",
    )
    parser.add_argument(
        "--json", action="store_true", help='print one JSON object: {"ok", "result"|"error"}'
    )
    add_policy_options(parser)


def add_policy_options(parser: argparse.ArgumentParser) -> None:
    """``--policy FILE`` and ``--deny/--ask/--allow RULE``: the session layer of the policy."""
    parser.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="FILE",
        help="a policy file for this session (repeatable; on top of the managed, user and "
        "project files)",
    )
    for effect, example in (
        ("deny", "'run_shell(curl *)'"),
        ("ask", "'write_file(path=deploy/**)'"),
        ("allow", "'run_shell(git status*)'"),
    ):
        parser.add_argument(
            f"--{effect}",
            dest=f"policy_{effect}",
            action="append",
            default=[],
            metavar="RULE",
            help=f"a {effect} rule for this session (repeatable), e.g. {example}",
        )


def policy_from_args(args: argparse.Namespace) -> PolicyLayers:
    """Every policy layer for this session; raises PolicyFileError (nothing loaded) on a bad one."""
    roots = args.settings.roots(args.workspace)
    return load_policy(
        roots,
        managed=managed_policy(args.settings),
        policy_files=args.policy,
        rules=cli_rules(args.policy_deny, args.policy_ask, args.policy_allow),
    )


def approver_from(choice: str | None) -> Approver:
    if choice == "yes":
        return ScriptedApprover(lambda _r: ApprovalAnswer.once("approved by --approve yes"))
    if choice == "no":
        return ScriptedApprover(lambda _r: ApprovalAnswer.deny("denied by --approve no"))
    return default_approver(HeadlessDenyApprover(cli_headless_fix))


def cli_headless_fix(request: ApprovalRequest) -> str:
    """What lets a call that asked run, in the command line's words (a headless denial's end)."""
    if request.rule.startswith("ask:"):
        return (
            f"the rule {request.rule} asks under every posture: answer it on a terminal, or "
            "pass --approve yes"
        )
    rule = shlex.quote(suggested_allow_rule(request))
    return (
        "to let it run, answer on a terminal, pass --approve yes (every question of this "
        f"command) or --posture {posture_that_allows(request)}, or allow it with a rule such "
        f"as --allow {rule} (in a policy file: allow = [...])"
    )


def suggested_allow_rule(request: ApprovalRequest) -> str:
    """An allow rule covering ``request``: its command or path when they read plainly."""
    args = request.arguments
    command = args.get("command")
    if isinstance(command, str) and 0 < len(command) <= 80 and not set(command) & set("()\n"):
        return f"{request.tool}({command})"
    for key in ("path", "cwd", "url"):
        value = args.get(key)
        if isinstance(value, str) and 0 < len(value) <= 120 and not set(value) & set(",()|\n"):
            return f"{request.tool}({key}={value})"
    return request.tool


def _check_plan_file(path: str | None) -> None:
    """An existing ``--dry-run`` PLAN must be a plan under this RINGFENCE_HOME's key.

    Staging appends to it, and would refuse every staged call (a session that
    serves or runs a script would go on with none staged); so it is refused before
    the session opens. Reads only: no plan key is created.
    """
    if path is None or not os.path.exists(path):
        return
    from pathlib import Path

    from ..runtime._plan import Plan

    with naming_file(path):
        Plan.load(Path(path), create_key=False)


# Run by ``main`` after the verb's trio.run returns (blocking flushes, e.g. OTLP export).
SHUTDOWN_HOOKS: list[Callable[[], None]] = []


def _otel_observer(args: argparse.Namespace) -> Any:
    if not getattr(args, "otel", False):
        return None
    from ..otel import OtelObserver, otlp_tracer_provider

    provider = otlp_tracer_provider()
    SHUTDOWN_HOOKS.append(provider.shutdown)
    return OtelObserver(provider, payloads=args.otel_payloads)


def kernel_from_args(
    args: argparse.Namespace,
    approver: Approver | None = None,
    *,
    mcp_tool: str | None = None,
    interactive: bool = False,
    event_observer: Any = None,
    review: ReviewSetup | None = None,
) -> Kernel:
    """The session's kernel; ``approver`` (default: from ``--approve``) is set at construction.

    ``mcp_tool``: the tool a ``call`` names; an ``mcp.<server>.…`` name connects
    that server even without ``--mcp``. ``interactive``: MCP elicitations are
    asked at the terminal (declined with a warning without one).
    ``event_observer``: also handed every event line (before OpenTelemetry's,
    which it must pass on through its ``next_observer``), e.g. serve's log forwarder.
    ``review``: serve the review page inside this session (``--approve review`` makes one).
    """
    dry = getattr(args, "dry_run", None)
    sandbox = getattr(args, "sandbox", None)
    check_output_file(args.events, "--events")
    check_output_file(dry, "--dry-run")
    _check_plan_file(dry)
    if review is None and getattr(args, "approve", None) == "review":
        from ._review_setup import ReviewSetup, announcer

        review = ReviewSetup.from_args(args, say=announcer("ringfence"))
    otel = _otel_observer(args)
    observer = otel
    if event_observer is not None:
        event_observer.next_observer = otel
        observer = event_observer
    if review is not None:
        observer = review.observer(observer)  # the page sees every line first
    if approver is None and review is not None and getattr(args, "approve", None) == "review":
        approver = review.approver
    roots = args.settings.roots(args.workspace)
    if getattr(args, "worktree", None) is not None:
        roots = session_roots(roots, args.worktree)
    mcp_manifest, mcp_options = mcp_setup(args, roots, mcp_tool, interactive=interactive)
    backend_options: dict[str, Any] = {"sandbox": sandbox} if sandbox else {}
    if getattr(args, "network", False):
        backend_options["network"] = True
    if getattr(args, "persist_shell_state", False):
        backend_options["persist_shell_state"] = True
    # The environment's defaults are read here, the command line's, and passed on:
    # create_kernel itself never reads them.
    backend = backend_choice(args.backend, args.settings)
    if backend.value == "docker" and args.settings.docker_image:
        backend_options.setdefault("image", args.settings.docker_image)
    script_sandbox = script_sandbox_choice(args.settings)
    posture = posture_choice(args.posture, args.settings)
    kernel = create_kernel(
        backend_options=backend_options or None,
        roots=roots,
        posture=posture.value,
        approver=approver if approver is not None else approver_from(args.approve),
        backend=backend.value,
        script_sandbox=script_sandbox.value,
        dry_run=dry is not None,
        plan_path=dry,
        events_path=args.events,
        events_sync=getattr(args, "events_sync", False),
        mcp_manifest=mcp_manifest,
        mcp_options=mcp_options,
        # read before create_kernel opens anything: a bad policy file refuses the session
        policy=policy_from_args(args),
        event_observer=observer,
        change_sets=getattr(args, "change_sets", None),
        merge_refused=not getattr(args, "refuse_whole_change_set", False),
        plugins=True,  # the added plugins (ringfence plugin): untrusted ones only tighten
        # A one-verb process of its own (not a caller's, e.g. tests): see _main._short_lived.
        pause_collector=getattr(args, "owns_process", False) is True,
        # what the environment set (Settings): the change-set store's bounds, more secret names
        retention=args.settings.retention(),
        secret_names=args.settings.secret_names,
    )
    show_and_record(kernel, weaker_choices(backend, script_sandbox, sandbox, posture))
    if review is not None:
        review.attach(kernel)
    if mcp_options and "elicitor" in mcp_options:
        kernel.extensions[ELICITOR_KEY] = mcp_options["elicitor"]  # its notes become warnings
    if otel is not None:
        registry = kernel.registry  # the records name tools, not their consequence
        otel.consequence_of = lambda tool: (
            registry.get(tool).consequence.value if tool in registry else None
        )
    return kernel

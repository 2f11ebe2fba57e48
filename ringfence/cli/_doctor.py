"""``ringfence doctor``: which backends can run here, and why not, one line per check."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import trio

from ..backends._registry import backend_names, select_backend
from ..runtime._errors import Unavailable
from ._output import print_error, print_ok, print_table
from ._verbs import add_verb_parser


def register(sub: argparse._SubParsersAction) -> None:
    doctor = add_verb_parser(sub, "doctor")
    doctor.add_argument(
        "--backend",
        choices=backend_names(),
        default=None,
        help="exit 1 unless this backend can run (default $RINGFENCE_EXECUTION_BACKEND or local)",
    )
    doctor.add_argument("--json", action="store_true", help="print one JSON object")
    doctor.set_defaults(func=run)


def _mcp_checks(keyring: bool) -> list[Any]:
    """What MCP servers need here: Node for the npm ones, and where OAuth tokens are sealed."""
    import shutil
    import subprocess

    from ..backends._doctor import Check
    from ..mcp_host.oauth._tokens import key_backend

    checks = []
    node = shutil.which("node")
    if node is None:
        checks.append(
            Check(
                "node",
                False,
                "not on PATH: MCP servers from npm (npx …) cannot start",
                "sudo apt-get install nodejs npm",
            )
        )
    else:
        try:
            version = subprocess.run(
                [node, "--version"], capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()
            checks.append(Check("node", True, f"{version} at {node} (MCP servers from npm)"))
        except (OSError, subprocess.SubprocessError) as exc:
            checks.append(Check("node", False, f"{node} does not run: {exc}", "reinstall nodejs"))
    checks.append(
        Check(
            "mcp token store",
            True,
            f"OAuth tokens sealed with a key in {key_backend(keyring=keyring)}",
        )
    )
    return checks


def _journal_check(roots: list[str]) -> Any:
    """Operations a killed process left half-written in this workspace (read, not rolled back)."""
    from ..backends._doctor import Check
    from ..runtime._errors import RingfenceError
    from ..workspace._workspace import Workspace
    from ..workspace.changes._journal import pending
    from ..workspace.changes._store import CheckpointStore

    try:
        with Workspace(roots) as workspace:
            store = CheckpointStore(workspace, recover=False)
            try:
                left = pending(store)
            finally:
                store.close()
    except RingfenceError as exc:
        return Check("interrupted writes", True, f"no workspace here to check ({exc.message})")
    if not left:
        return Check("interrupted writes", True, "none in this workspace")
    return Check(
        "interrupted writes",
        False,
        f"{len(left)} operation(s) a killed process left half-written: {', '.join(left[:5])}",
        "ringfence recover (any session's start does it too)",
    )


def _plugin_checks() -> list[Any]:
    """``plugin_trust``: each added plugin, trusted or not, and why (never a failed backend)."""
    from ..backends._doctor import Check
    from ..plugins._config import load_entries, plugins_path
    from ..plugins._plugin import inspect_plugin
    from ..runtime._errors import RingfenceError

    try:
        entries = load_entries()
    except RingfenceError as exc:
        return [Check("plugin_trust", False, exc.message, f"fix or remove {plugins_path()}")]
    if not entries:
        return [Check("plugin_trust", True, f"no plugins added ({plugins_path()})")]
    checks = []
    for state in map(inspect_plugin, entries):
        checks.append(
            Check(
                "plugin_trust",
                state.trusted,
                f"{state.name}: {state.why}",
                f"ringfence plugin show {state.name}; ringfence plugin trust {state.name}"
                if state.error is None
                else f"fix it, or ringfence plugin remove {state.name}",
            )
        )
    return checks


async def run(args: argparse.Namespace) -> int:
    from ..backends._doctor import backend_status, run_checks
    from ._environ import backend_choice

    backend = select_backend(backend_choice(args.backend, args.settings).value)
    checks = await trio.to_thread.run_sync(
        run_checks, args.settings.bwrap, args.settings.docker_image
    )
    checks += await trio.to_thread.run_sync(_mcp_checks, args.settings.keyring)
    checks += await trio.to_thread.run_sync(_plugin_checks)
    checks.append(await trio.to_thread.run_sync(_journal_check, args.settings.roots()))
    usable = {name: backend_status(checks, name) for name in backend_names()}
    if args.json:
        report = {
            "checks": [c.to_dict() for c in checks],
            "backends": {n: ok for n, (ok, _) in usable.items()},
        }
        ok, failed = usable[backend]
        if ok:
            return print_ok(report, True)
        missing = "; ".join(c.name for c in failed)
        error = Unavailable(f"backend {backend} cannot run here ({missing})", **report)
        print_error(error, True)
        return 1
    rows = [
        (
            "ok" if c.ok else "no",
            c.name,
            c.detail + (f"  → {c.fix}" if c.fix and not c.ok else ""),
        )
        for c in checks
    ]
    print_table(None, rows)
    for name, (ok, failed) in usable.items():
        why = "" if ok else " (" + "; ".join(c.name for c in failed) + ")"
        mark = " [selected]" if name == backend else ""
        sys.stdout.write(f"backend {name}: {'can run' if ok else 'cannot run'}{why}{mark}\n")
    return 0 if usable[backend][0] else 1

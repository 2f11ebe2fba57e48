"""``ringfence policy show|check|explain``: the merged policy, a file's validity, one decision."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..runtime._render import one_line
from ..runtime._tools import Consequence, ToolSpec
from ..runtime.policy._decide import Posture, Rules, decide, evaluate_policy
from ..runtime.policy._files import PolicyLayers, accept_project_policy, load_policy_file
from ._call import ARGS_HELP, parse_arguments
from ._output import print_ok
from ._session import add_policy_options, add_session_options, kernel_from_args, policy_from_args
from ._verbs import add_verb_parser, add_workspace_option


def register(sub: argparse._SubParsersAction) -> None:
    policy = add_verb_parser(sub, "policy")
    psub = policy.add_subparsers(dest="policy_verb", required=True, metavar="ACTION")

    show = psub.add_parser("show", help="the merged policy, each rule with its file:line and layer")
    _roots_options(show)
    show.set_defaults(func=run_show)

    check = psub.add_parser(
        "check", help="read FILE (or every layer) and report the first error, if any"
    )
    check.add_argument("file", nargs="?", help="a policy file (default: every layer)")
    _roots_options(check)
    check.set_defaults(func=run_check)

    accept = psub.add_parser(
        "accept",
        help="keep the project's policy file as it is now: deny and ask rules it no longer "
        "holds stop binding later sessions",
    )
    add_workspace_option(
        accept, "a workspace root (the project file is <first root>/.ringfence/policy.toml)"
    )
    accept.add_argument("--json", action="store_true", help="print one JSON object")
    accept.set_defaults(func=run_accept)

    explain = psub.add_parser(
        "explain", help="the decision for one call, the rule and layer behind it, and its parts"
    )
    explain.add_argument("tool", help="the tool name, e.g. run_shell or mcp.github.create_issue")
    explain.add_argument("--args", default="{}", metavar="JSON", help=ARGS_HELP)
    add_session_options(explain, dry_run=False)
    explain.set_defaults(func=run_explain)


def _roots_options(parser: argparse.ArgumentParser) -> None:
    add_workspace_option(
        parser, "a workspace root (the project file is <first root>/.ringfence/policy.toml)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_policy_options(parser)


async def run_show(args: argparse.Namespace) -> int:
    layers = policy_from_args(args)
    policy = layers.policy
    rules = [r.to_dict() for r in policy.rules]
    mcp = [m.to_dict() for m in layers.mcp.statements]
    project = _project_file(args, layers)
    if args.json:
        return print_ok(
            {"roots": list(policy.roots), "rules": rules, "mcp": mcp, "project_file": project},
            True,
        )
    if project is not None:
        sys.stdout.write(
            f"project file {one_line(project['path'])} (sha256 {project['sha256']}); to trust "
            f"exactly this content, add to $RINGFENCE_HOME/policy.toml under [trust] projects:\n"
            f'  {{ path = "{project["root"]}", sha256 = "{project["sha256"]}" }}\n'
        )
    if not rules:
        sys.stdout.write("no policy rules: the posture alone decides\n")
    # A rule, a source and a note are a policy file's text (a project's is the repository's):
    # each is shown on its line, so no rule can pose as another line of this listing.
    shown = [(one_line(str(r["rule"])), one_line(str(r["source"]))) for r in rules]
    width = max((len(rule) for rule, _ in shown), default=0)
    for r, (rule, source) in zip(rules, shown, strict=True):
        note = f"  [inactive: {one_line(str(r['inactive']))}]" if "inactive" in r else ""
        sys.stdout.write(f"{r['effect']:<5}  {rule:<{width}}  {r['layer']:<8} {source}{note}\n")
    if mcp:
        sys.stdout.write("MCP servers ([mcp.<server>]: which tools are read, trust)\n")
    texts = [one_line(f"{m['server']}: {m['key']} = {json.dumps(m['value'])}") for m in mcp]
    width = max(map(len, texts), default=0)
    for m, text in zip(mcp, texts, strict=True):
        note = f"  [inactive: {one_line(str(m['inactive']))}]" if "inactive" in m else ""
        source = one_line(str(m["source"]))
        sys.stdout.write(f"mcp    {text:<{width}}  {m['layer']:<8} {source}{note}\n")
    return 0


def _project_file(args: argparse.Namespace, layers: PolicyLayers) -> dict[str, str] | None:
    """The project file's digest from the bytes its rules were read from, never a second read
    (a file swapped between the two showed one content's rules beside another's digest)."""
    found = layers.project_file
    if found is None:
        return None
    root = args.settings.roots(args.workspace)[0]
    return {"path": str(found.path), "root": str(root.resolve()), "sha256": found.sha256}


async def run_accept(args: argparse.Namespace) -> int:
    root = args.settings.roots(args.workspace)[0]
    dropped, digest = accept_project_policy(root)
    if args.json:
        return print_ok({"root": str(root), "sha256": digest, "dropped": dropped}, True)
    what = f"sha256 {digest}" if digest else "no project policy file"
    sys.stdout.write(
        f"{one_line(str(root))}: kept the project's policy as it is now ({what}); "
        f"{dropped} earlier version{'s' if dropped != 1 else ''} no longer bind{'s' if dropped == 1 else ''}\n"
    )
    return 0


async def run_check(args: argparse.Namespace) -> int:
    if args.file:
        loaded = load_policy_file(args.file, "session")
        count = len(loaded.rules)
        where = args.file
    else:
        count = len(policy_from_args(args).policy.rules)
        where = "every layer"
    if args.json:
        return print_ok({"file": where, "rules": count}, True)
    else:
        sys.stdout.write(f"{where}: ok, {count} rule{'s' if count != 1 else ''}\n")
    return 0


async def run_explain(args: argparse.Namespace) -> int:
    arguments = parse_arguments(args.args)
    async with kernel_from_args(args) as kernel:
        registered = args.tool in kernel.registry
        spec = (
            kernel.registry.get(args.tool)
            if registered
            else ToolSpec(args.tool, "", {"type": "object"}, _never, Consequence.IRREVERSIBLE)
        )
        rules: Rules = kernel.rules
        posture = Posture.parse(args.settings.posture_for(args.posture))
        decision = decide(spec, posture, rules, arguments)
        if kernel.hooks():  # pre_call hooks (a plugin's): their reason is the Gate's too
            decision = await kernel.check_hooks(spec, arguments, decision)
        verdict = evaluate_policy(spec, rules, arguments)
    out: dict[str, Any] = {
        "tool": args.tool,
        "registered": registered,
        "posture": posture.value,
        "decision": decision.to_dict(),
        "parts": [p.to_dict() for p in verdict.parts] if verdict is not None else [],
    }
    if not registered:
        out["note"] = "not a tool of this session: judged as an irreversible tool"
    if args.json:
        return print_ok(out, True)
    d = decision
    sys.stdout.write(f"{one_line(args.tool)}: {d.verdict.value}  (posture {posture.value})\n")
    # The rule and its reason are a policy file's or a plugin hook's text: on their line.
    sys.stdout.write(f"  rule:   {one_line(str(d.rule))}\n")
    if d.source or d.layer:
        sys.stdout.write(f"  from:   {one_line(str(d.source))} ({d.layer})\n")
    sys.stdout.write(f"  reason: {one_line(str(d.reason))}\n")
    if "note" in out:
        sys.stdout.write(f"  note:   {out['note']}\n")
    if out["parts"]:
        sys.stdout.write("  parts:\n")
        for p in out["parts"]:
            rule = (
                f"  by {one_line(str(p['rule']))} ({one_line(str(p['source']))})"
                if "rule" in p
                else ""
            )
            why = f"  — {one_line(str(p['reason']))}" if "reason" in p else ""
            via = f"  via {' '.join(one_line(str(v)) for v in p['via'])}" if "via" in p else ""
            text = one_line(str(p["text"]))
            sys.stdout.write(f"    {p['verdict']:<9} {p['part']:<10} {text}{via}{rule}{why}\n")
    return 0


async def _never(arguments: dict[str, Any], ctx: Any) -> Any:  # explain never runs a tool
    raise AssertionError("policy explain does not run tools")

"""``ringfence plugin add|list|show|trust|remove`` and ``ringfence skills list|show``.

Every command takes ``--json`` and ``--config FILE`` (default
``$RINGFENCE_HOME/plugins.toml``). Nothing here runs a plugin's code or
contacts anything: ``add`` reads and validates a folder (or finds the one
an installed distribution ships), ``trust`` pins the digest of exactly what
it read and shows what it grants (hooks and their commands, the network,
servers, skills), ``show`` prints all of it first. No network install.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import trio

from ..plugins._bundle import read_bundle
from ..plugins._config import (
    PluginEntry,
    add_entry,
    load_entries,
    plugins_path,
    remove_entry,
    set_trust,
)
from ..plugins._manifest import parse_plugin_manifest
from ..plugins._plugin import PluginState, inspect_plugin
from ..runtime._errors import InvalidArguments, NotFound
from ..runtime._render import one_line, visible
from ._output import print_ok
from ._verbs import add_verb_parser


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        metavar="FILE",
        help="the plugins file to use (default $RINGFENCE_HOME/plugins.toml)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb_parser(sub, "plugin")
    psub = p.add_subparsers(dest="plugin_verb", required=True, metavar="ACTION")

    add = psub.add_parser("add", help="add a plugin folder (or --package NAME), untrusted")
    add.add_argument("path", nargs="?", help="the plugin's folder (holding ringfence-plugin.toml)")
    add.add_argument(
        "--package",
        metavar="NAME",
        help="an installed Python distribution that ships one plugin folder (nothing is "
        "downloaded or imported)",
    )
    _common(add)
    add.set_defaults(func=run_add)

    lst = psub.add_parser("list", help="list the added plugins: trusted or not, and why")
    _common(lst)
    lst.set_defaults(func=run_list)

    show = psub.add_parser("show", help="everything a plugin would run and offer (review it)")
    show.add_argument("name", help="the plugin's name (plugin list)")
    _common(show)
    show.set_defaults(func=run_show)

    trust = psub.add_parser(
        "trust", help="trust a plugin as it is now (its hooks run confined; its servers start)"
    )
    trust.add_argument("name", help="the plugin's name (plugin list)")
    trust.add_argument(
        "--sha256",
        metavar="HEX",
        help="trust only if the plugin is still exactly this (the digest `plugin show` printed)",
    )
    trust.add_argument("--revoke", action="store_true", help="withdraw the trust instead")
    _common(trust)
    trust.set_defaults(func=run_trust)

    remove = psub.add_parser("remove", help="remove a plugin (and its trust)")
    remove.add_argument("name", help="the plugin's name (plugin list)")
    _common(remove)
    remove.set_defaults(func=run_remove)
    _register_skills(sub)


def _register_skills(sub: argparse._SubParsersAction) -> None:
    p = add_verb_parser(sub, "skills")
    ssub = p.add_subparsers(dest="skills_verb", required=True, metavar="ACTION")
    lst = ssub.add_parser("list", help="the skills trusted plugins offer")
    _common(lst)
    lst.set_defaults(func=run_skills_list)
    show = ssub.add_parser("show", help="one skill: its instructions and files")
    show.add_argument("name", help="PLUGIN:SKILL, as skills list names it")
    _common(show)
    show.set_defaults(func=run_skills_show)


def _config(args: argparse.Namespace) -> str:
    return args.config or str(plugins_path())


async def _states(args: argparse.Namespace) -> list[PluginState]:
    entries = await trio.to_thread.run_sync(load_entries, _config(args))
    return [await trio.to_thread.run_sync(inspect_plugin, e) for e in entries]


async def _state(args: argparse.Namespace, name: str) -> PluginState:
    entries = await trio.to_thread.run_sync(load_entries, _config(args))
    for entry in entries:
        if entry.name == name:
            return await trio.to_thread.run_sync(inspect_plugin, entry)
    raise NotFound(
        f"no plugin named {name!r} in {_config(args)} (ringfence plugin list)", field="name"
    )


def _words(values: Any) -> str:
    """Argv-like values as shown: each one on the line (``one_line``), joined by spaces."""
    return " ".join(one_line(str(v)) for v in values)


def _summary_lines(state: PluginState) -> list[str]:
    """What a plugin runs and offers, one line each, for a person deciding to trust it.

    Everything the plugin's author wrote (description, version, commands, patterns, names)
    is shown through ``one_line``: it stays on its line and cannot pose as one of these."""
    d = state.to_dict(detail=True)
    version, description = (
        one_line(str(d.get("version", ""))),
        one_line(str(d.get("description", ""))),
    )
    lines = [
        f"plugin {one_line(state.name)} {version}: {description}".rstrip(": "),
        f"  from:    {one_line(str(state.entry.source))}",
        f"  sha256:  {d['sha256'] or '-'}",
        f"  trust:   {one_line(state.why)}",
    ]
    for hook in d.get("hooks", []):
        where = ", ".join(one_line(str(m)) for m in hook["match"]) or "every call"
        net = "; NETWORK" if hook["network"] else "; no network"
        lines.append(
            f"  hook:    {one_line(str(hook['name']))} at {', '.join(hook['points'])} on "
            f"{where}: {_words(hook['command'])} (confined, read-only workspace{net}, "
            f"timeout {hook['timeout_seconds']:g}s)"
        )
    access = d.get("server_access", {})
    for server, argv in d.get("server_commands", {}).items():
        how = access.get(server, {})
        lines.append(f"  server:  {one_line(str(server))}: {_words(argv)} ({_confinement(how)})")
        if how.get("sets") or how.get("cwd"):
            sets = [f"{name}={value}" for name, value in how.get("sets", {}).items()]
            where = [f"(in {how['cwd']})"] if how.get("cwd") else []
            lines.append(f"  env:     {one_line(str(server))} sets {_words([*sets, *where])}")
        if how.get("environment"):
            lines.append(
                f"  env:     {one_line(str(server))} is handed your "
                f"{_words('$' + name for name in how['environment'])}"
            )
    for skill in d.get("skills", []):
        lines.append(f"  skill:   {one_line(str(skill))}")
    for rule in d.get("policy_rules", []):
        lines.append(
            f"  rule:    {rule['effect']} {one_line(str(rule['rule']))} "
            f"({one_line(str(rule['source']))})"
        )
    if d.get("network"):
        lines.append(f"  network: {_words(d['network'])} may reach the network")
    return lines


def _confinement(how: dict[str, Any]) -> str:
    """How a plugin's server runs, in the review's words."""
    sandbox = how.get("sandbox")
    if sandbox == "none":
        return "unconfined: runs as you, with your files and network"
    if sandbox == "remote":
        return "a remote server"
    workspace = "writable workspace" if how.get("writable") else "read-only workspace"
    return f"confined, {workspace}, {'network' if how.get('network') else 'no network'}"


async def run_add(args: argparse.Namespace) -> int:
    if (args.path is None) == (args.package is None):
        raise InvalidArguments(
            "give the plugin's folder or --package NAME (one of them)", field="path"
        )
    if args.path is not None:
        bundle = await trio.to_thread.run_sync(read_bundle, args.path)
        manifest = await trio.to_thread.run_sync(parse_plugin_manifest, bundle)
        entry = PluginEntry(manifest.name, path=os.path.abspath(args.path))
    else:
        from ..plugins._plugin import locate_plugin

        probe = PluginEntry("package", package=args.package)
        where = await trio.to_thread.run_sync(locate_plugin, probe)
        bundle = await trio.to_thread.run_sync(read_bundle, where)
        manifest = await trio.to_thread.run_sync(parse_plugin_manifest, bundle)
        entry = PluginEntry(manifest.name, package=args.package)
    state = await trio.to_thread.run_sync(inspect_plugin, entry)
    if state.error is not None:
        raise state.error  # the whole plugin validates before it is added
    await trio.to_thread.run_sync(add_entry, entry, _config(args))
    state = await trio.to_thread.run_sync(inspect_plugin, entry)
    if args.json:
        return print_ok({"added": state.to_dict(detail=True), "config": _config(args)}, True)
    sys.stdout.write("\n".join([*_summary_lines(state), f"added to {_config(args)}"]) + "\n")
    return 0


async def run_list(args: argparse.Namespace) -> int:
    states = await _states(args)
    if args.json:
        return print_ok({"config": _config(args), "plugins": [s.to_dict() for s in states]}, True)
    if not states:
        sys.stdout.write(f"no plugins added in {_config(args)}\n")
        return 0
    for s in states:
        mark = "trusted" if s.trusted else "untrusted"
        sys.stdout.write(
            f"{one_line(s.name)}  {mark}  {one_line(str(s.entry.source))}\n  {one_line(s.why)}\n"
        )
    return 0


async def run_show(args: argparse.Namespace) -> int:
    state = await _state(args, args.name)
    if args.json:
        return print_ok(state.to_dict(detail=True), True)
    lines = _summary_lines(state)
    if state.error is not None:
        lines.append(f"  error:   {one_line(state.error.message)}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


async def run_trust(args: argparse.Namespace) -> int:
    state = await _state(args, args.name)
    if args.revoke:
        await trio.to_thread.run_sync(set_trust, args.name, None, _config(args))
        result: dict[str, Any] = {"name": args.name, "trusted": False}
        if args.json:
            return print_ok(result, True)
        sys.stdout.write(f"plugin {args.name}: trust withdrawn\n")
        return 0
    if state.error is not None:
        raise state.error
    assert state.bundle is not None
    if args.sha256 is not None and args.sha256.lower() != state.bundle.sha256:
        raise InvalidArguments(
            f"plugin {args.name} is not the one reviewed: its sha256 is now "
            f"{state.bundle.sha256}, not {args.sha256}; review it again (ringfence plugin show "
            f"{args.name})",
            field="--sha256",
        )
    await trio.to_thread.run_sync(set_trust, args.name, state.bundle.sha256, _config(args))
    state = await _state(args, args.name)
    if args.json:
        return print_ok(state.to_dict(detail=True), True)
    sys.stdout.write("\n".join(_summary_lines(state)) + "\n")
    return 0


async def run_remove(args: argparse.Namespace) -> int:
    await trio.to_thread.run_sync(remove_entry, args.name, _config(args))
    if args.json:
        return print_ok({"removed": args.name}, True)
    sys.stdout.write(f"plugin {args.name} removed from {_config(args)}\n")
    return 0


async def _skills(args: argparse.Namespace) -> list[Any]:
    return [skill for s in await _states(args) if s.trusted for skill in s.skills]


async def run_skills_list(args: argparse.Namespace) -> int:
    skills = await _skills(args)
    if args.json:
        return print_ok({"skills": [s.to_dict(instructions=False) for s in skills]}, True)
    if not skills:
        sys.stdout.write("no skills: no trusted plugin offers one (ringfence plugin list)\n")
        return 0
    for skill in skills:
        sys.stdout.write(f"{one_line(skill.name)}  {one_line(skill.description)}\n")
    return 0


async def run_skills_show(args: argparse.Namespace) -> int:
    for skill in await _skills(args):
        if skill.name == args.name:
            if args.json:
                return print_ok(skill.to_dict(), True)
            files = ", ".join(one_line(f) for f in skill.file_names()) or "none"
            sys.stdout.write(
                f"{one_line(skill.name)} ({one_line(skill.source)})\n{one_line(skill.description)}"
                f"\nfiles: {files}\n\n{visible(skill.instructions)}"
            )
            return 0
    raise NotFound(
        f"no skill named {args.name!r} among the trusted plugins' (ringfence skills list)",
        field="name",
    )

"""The deny rules a ``run_shell`` command's execs are checked against, for the sandbox.

The kernel's policy (:class:`ringfence.runtime.Policy`) is turned, per call, into
the form the confined supervisor evaluates (:mod:`._execcheck`, standard
library only): JSON, one entry per deny rule whose tool glob covers ``run_shell``,
that has an argv pattern over ``command`` and whose other argument matchers (``cwd``,
…) match this call. Each pattern word is ``"**"``, ``["L", literal]`` or ``["G",
regex, has_slash]`` where the regex is the runtime's own translation of the glob
(``fnmatch.translate``, compiled with ``re.DOTALL`` on both sides), so a word matches
in the sandbox exactly when :func:`ringfence.runtime.element_matches` says so.

Not carried: ``ask`` rules (an exec cannot stop to ask; the Gate asks about the
line), and regex rules over ``command`` (``command~…``: a pattern over the line's
text, judged by the Gate).
"""

from __future__ import annotations

import fnmatch
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...runtime.policy._judge import Policy, with_defaults
from ...runtime.policy._matchers import split_long_pattern

__all__ = ["ExecRules", "exec_checks_expected", "exec_rules"]

SHELL_TOOL = "run_shell"


@dataclass(frozen=True)
class ExecRules:
    """The payload for the supervisor, and the rules it stands for (their labels)."""

    payload: bytes
    labels: tuple[str, ...]


def _word(element: str) -> Any:
    if element == "**":
        return "**"
    if any(c in element for c in "*?["):  # (the runtime's element_matches test)
        return ["G", fnmatch.translate(element), "/" in element, element]
    return ["L", element]


def exec_rules(
    policy: Policy | None, arguments: Mapping[str, Any], meta: Mapping[str, Any] | None = None
) -> ExecRules | None:
    """The deny rules this ``run_shell`` call's execs must meet; None when there are none."""
    if policy is None:
        return None
    arguments = with_defaults(arguments, meta)  # a left-out cwd is the directory it starts in
    declared = (meta or {}).get("path_arguments", ())
    path_args = frozenset(declared) if isinstance(declared, (list, tuple, set)) else frozenset()
    entries = []
    labels = []
    for rule in policy.for_tool(SHELL_TOOL):
        if rule.effect.value != "deny" or rule.command is None:
            continue
        if rule.arguments and not rule.matches_arguments(arguments, policy.roots, path_args):
            continue
        entry: dict[str, object] = {
            "label": rule.label(),
            "source": rule.source,
            "patterns": [[_word(e) for e in p] for p in rule.command.patterns],
        }
        # `--opt=value` elements also as `--opt value`, met by an argv read the same way
        # (the runtime's split reading, tried for every pattern)
        entry["split"] = [[_word(e) for e in split_long_pattern(p)] for p in rule.command.patterns]
        entries.append(entry)
        labels.append(rule.label())
    if not entries:
        return None
    payload = json.dumps({"rules": entries}, sort_keys=True, separators=(",", ":"))
    return ExecRules(payload.encode("utf-8", "surrogateescape"), tuple(labels))


def exec_checks_expected() -> bool:
    """Whether this machine should give the confined backend exec checks (x86-64, Linux >=
    5.5: seccomp user notification that can let a checked call continue). The session
    probes it for real at its start and fails closed if it does not hold."""
    uname = os.uname()
    if uname.sysname != "Linux" or uname.machine != "x86_64":
        return False
    try:
        major, minor = (int(x) for x in uname.release.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (5, 5)

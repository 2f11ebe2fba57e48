"""The bridge's public names resolve, and its runner files need nothing but the stdlib."""

from __future__ import annotations

import ast

import ringfence.bridge
from ringfence.bridge._launch import RUNNER_PATH

CHILD_MODULES = (
    "_runner.py",
    "_restricted.py",
    "_allowlist.py",
    "_wire.py",
    "_sandbox.py",
    "_typed.py",
)


def test_public_names_resolve() -> None:
    public = [n for n in dir(ringfence.bridge) if not n.startswith("_")]
    assert {"register_script_tool", "describe_tools", "ScriptConfig", "ScriptResult"} <= set(public)
    for name in public:
        assert getattr(ringfence.bridge, name) is not None, name


def test_the_child_side_imports_only_the_stdlib_and_restrictedpython() -> None:
    """The runner runs under ``python -I -S`` (in containers too, from the bridge's and
    ``_confine``'s mounted directories): of ringfence it imports its siblings and the Linux
    primitives (``ringfence._confine``) alone; no SDK."""
    siblings = {name.removesuffix(".py") for name in CHILD_MODULES}
    for name in CHILD_MODULES:
        tree = ast.parse((RUNNER_PATH.parent / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                roots = {(node.module or "").split(".")[0]}
            elif isinstance(node, ast.ImportFrom) and node.level == 1:  # from . import _wire
                assert node.module is None, (name, node.module)
                assert {a.name for a in node.names} <= siblings, (name, node.lineno)
                continue
            elif isinstance(node, ast.ImportFrom):  # from .._confine import landlock
                assert node.level == 2 and (node.module or "").split(".")[0] == "_confine", (
                    name,
                    node.lineno,
                )
                continue
            else:
                continue
            for root in roots:
                assert root == "RestrictedPython" or root in _stdlib(), (name, root)


def _stdlib() -> frozenset[str]:
    import sys

    return frozenset(sys.stdlib_module_names) | {"__future__"}

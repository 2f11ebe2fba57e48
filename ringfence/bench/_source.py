"""Files the suite borrows from ringfence's source tree, and the skip when there is none.

A few scenarios run servers that live only in a checkout: the npm reference
servers (``tests/npm``, installed by ``make npm-servers``) and the Python SDK
test peer (``tests/mcp_host/servers``). Everything else the suite needs ships
in the package (``peers/sdk_files.py`` included).

Promised: :data:`SOURCE_TREE` is the checkout this ``ringfence`` package was
imported from (an editable install, or ``python -m`` inside the checkout),
recognised by the ``pyproject.toml`` beside the package naming the
``ringfence`` project; it is None for an installed package (a wheel).
:func:`source_file` returns a file of that tree or raises :class:`Skip`
saying which file is missing and why (no source tree at all, or not
installed in it). :data:`ROOT` is :data:`SOURCE_TREE`, or where it would be
(the directory holding the installed package), for modules that build paths
at import time and test them with ``exists()``. Not promised: that a file
found is usable (``node`` on ``PATH`` is the scenario's own check).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from ._suite import Skip

__all__ = ["ROOT", "SOURCE_TREE", "source_file"]

_CANDIDATE = Path(__file__).resolve().parents[2]  # ringfence/bench/_source.py -> the checkout


def _is_checkout(root: Path) -> bool:
    """True when ``root`` holds ringfence's own ``pyproject.toml`` (not some other project's)."""
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text()).get("project", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    return isinstance(project, dict) and project.get("name") == "ringfence"


SOURCE_TREE: Path | None = _CANDIDATE if _is_checkout(_CANDIDATE) else None
ROOT: Path = SOURCE_TREE or _CANDIDATE


def source_file(relative: str, *, what: str, fix: str | None = None) -> Path:
    """``SOURCE_TREE / relative`` if it exists; else :class:`Skip` naming ``what`` and the file.

    ``what`` names the thing for a person ("the npm MCP servers"); ``fix`` is
    how to get the file in a checkout ("make npm-servers"), None when every
    checkout has it. Both appear in the reason.
    """
    if SOURCE_TREE is None:
        after = f", after `{fix}`" if fix else ""
        raise Skip(
            f"{what}: {relative} is part of ringfence's source tree, and this ringfence is "
            f"installed without one (in {_CANDIDATE}); run the suite from a checkout{after}"
        )
    path = SOURCE_TREE / relative
    if not path.exists():
        raise Skip(f"{what}: {path} is missing" + (f" ({fix})" if fix else ""))
    return path

"""What ``mcp add --trusted/--read-only-tool`` says, written where policy lives: the user's policy file.

Trust and ``read`` tools are policy (:mod:`ringfence.runtime.policy._mcp`), kept
in ``[mcp.<server>]`` of ``$RINGFENCE_HOME/policy.toml``, not in the manifest.
:func:`plan_server_policy` computes the edited file and checks it as a load
would, before anything is written; :meth:`PolicyEdit.write` replaces the file
atomically (mode ``0600``). Comments and every other table stay as they were
(``tomlkit``).

Contract: the edit sets exactly the two keys of one server, ``trusted`` and
``read_only_tools``, to what was asked, and removes each that was not asked
for (a table left empty goes too). Removing them can only tighten: with no
statement a server is untrusted and none of its tools is ``read``. So
re-adding or removing a server never leaves a grant of an earlier server of
the same name behind. Not promised: that other layers (managed, session,
project) agree; they combine as :mod:`._mcppolicy` says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import tomlkit
from tomlkit.items import Table

from ...runtime._errors import InvalidArguments
from ...runtime._files import atomic_write, ringfence_home
from ...runtime.policy._files import parse_policy_file

__all__ = ["PolicyEdit", "plan_server_policy", "user_policy_path"]

_KEYS = ("trusted", "read_only_tools")


def user_policy_path() -> Path:
    return ringfence_home() / "policy.toml"


@dataclass(frozen=True)
class PolicyEdit:
    """The user policy file as it will be; ``changed`` is False when writing would change nothing."""

    path: Path
    text: str
    changed: bool

    def write(self) -> None:
        if self.changed:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            atomic_write(self.path, self.text.encode("utf-8"), mode=0o600)


def plan_server_policy(
    name: str,
    *,
    trusted: bool = False,
    read_only_tools: Sequence[str] = (),
    path: Path | None = None,
) -> PolicyEdit:
    """The user policy file with ``[mcp.<name>]`` saying exactly ``trusted``/``read_only_tools``.

    Raises ``InvalidArguments`` naming the file when it does not load now, or
    would not load after the edit; nothing is written here.
    """
    path = path or user_policy_path()
    for index, glob in enumerate(read_only_tools):
        if not glob:  # said before the file is read: the file is not what is wrong
            raise InvalidArguments(
                f"read_only_tools: item {index + 1} is empty (a name or glob is needed)",
                field="read_only_tools",
            )
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raw = b""
    except OSError as exc:
        raise InvalidArguments(
            f"{path}: cannot be read ({exc.strerror or exc})", field="policy", file=str(path)
        ) from None
    if raw:
        parse_policy_file(path, raw, "user")  # a file that does not load is never rewritten
    old = raw.decode("utf-8")
    doc = tomlkit.parse(old) if raw.strip() else tomlkit.document()
    mcp = doc.get("mcp")
    if mcp is None:
        if not trusted and not read_only_tools:
            return PolicyEdit(path, old, False)
        mcp = tomlkit.table(is_super_table=True)
        doc["mcp"] = mcp
    table = mcp.get(name)
    if table is None:
        table = tomlkit.table()
        mcp[name] = table
    for key in _KEYS:
        if key in table:
            del table[key]
    if trusted:
        table["trusted"] = True
    if read_only_tools:
        table["read_only_tools"] = list(read_only_tools)
    if isinstance(table, Table) and not table:
        del mcp[name]
    if not mcp:
        del doc["mcp"]
    text = tomlkit.dumps(doc)
    if text == old:
        return PolicyEdit(path, old, False)
    parse_policy_file(path, text.encode("utf-8"), "user")  # the result loads (size included)
    return PolicyEdit(path, text, True)

"""Skills: instructions and files a host may put in a model's prompt.

A :class:`Skill` is what a ``SKILL.md`` folder holds (Agent Skills' shape:
front matter ``name`` and ``description``, then the instructions), read
once into memory. The kernel only keeps and lists them (``Kernel.skills()``);
it never runs a skill's files: a script a skill names runs only as a
``run_shell`` or ``run_tool_script`` proposal through the Gate, like any
other call. Reading them is ``ringfence.plugins``' (``read_skill``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ._errors import NotFound

__all__ = ["Skill"]


@dataclass(frozen=True)
class Skill:
    """One skill: its name, description and instructions, and its other files' bytes.

    ``source`` says where it came from (``plugin:<name>``); ``files`` maps
    each file's name below the skill's folder (``scripts/run.sh``) to its
    bytes, ``SKILL.md`` excluded. Immutable: what the host was shown is what
    :meth:`read` returns for the rest of the session.
    """

    name: str
    description: str
    instructions: str
    source: str = ""
    files: Mapping[str, bytes] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "files", MappingProxyType(dict(self.files)))

    def file_names(self) -> list[str]:
        return sorted(self.files)

    def read(self, name: str) -> bytes:
        """One of the skill's files; NotFound for a name it does not have."""
        try:
            return self.files[name]
        except KeyError:
            raise NotFound(
                f"skill {self.name!r} has no file {name!r} (it has: "
                f"{', '.join(self.file_names()) or 'none'})",
                field="name",
            ) from None

    def to_dict(self, *, instructions: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "source": self.source,
            "files": self.file_names(),
        }
        if instructions:
            out["instructions"] = self.instructions
        return out

"""Skills from a plugin: each folder with a ``SKILL.md`` (Agent Skills' shape), read from the bundle.

``SKILL.md`` starts with front matter between ``---`` lines holding
``name:`` and ``description:`` (one line each; other keys are kept out);
the rest is the instructions. The skill's other files come along as bytes.
Nothing here runs anything: a skill's script runs only as a ``run_shell``
or ``run_tool_script`` proposal through the Gate.
"""

from __future__ import annotations

import re

from ..runtime._errors import InvalidArguments
from ..runtime._skills import Skill
from ._bundle import Bundle

__all__ = ["read_skills"]

SKILL_FILE = "SKILL.md"
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}\Z")
MAX_DESCRIPTION = 1024


def _front_matter(text: str, where: str) -> tuple[dict[str, str], str]:
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise InvalidArguments(
            f"{where}: a SKILL.md starts with front matter (---, name: …, description: …, ---)",
            field="SKILL.md",
        )
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise InvalidArguments(
            f"{where}: the front matter has no closing ---", field="SKILL.md"
        ) from None
    keys: dict[str, str] = {}
    for line in lines[1:end]:
        key, colon, value = line.partition(":")
        if colon and key.strip() and not key.startswith((" ", "\t")):
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            keys[key.strip()] = value
    return keys, "\n".join(lines[end + 1 :]).strip("\n") + "\n"


def read_skills(bundle: Bundle, directory: str, plugin: str) -> tuple[Skill, ...]:
    """The skills below ``directory`` of ``bundle``, named ``<plugin>:<name>``, by name."""
    below = bundle.below(directory)
    folders = sorted(
        name.rsplit("/", 1)[0] if "/" in name else ""
        for name, entry in below.items()
        if entry.kind == "file" and (name == SKILL_FILE or name.endswith("/" + SKILL_FILE))
    )
    skills: list[Skill] = []
    for folder in folders:
        where = bundle.root / directory / folder / SKILL_FILE
        rel = f"{directory}/{folder}/{SKILL_FILE}" if folder else f"{directory}/{SKILL_FILE}"
        keys, instructions = _front_matter(bundle.text(rel), str(where))
        name = keys.get("name", "")
        if not _NAME.match(name):
            raise InvalidArguments(
                f"{where}: name: must be 1-64 characters of a-z, 0-9 and - (not {name!r})",
                field="name",
            )
        description = keys.get("description", "")
        if not description or len(description) > MAX_DESCRIPTION:
            raise InvalidArguments(
                f"{where}: description: must be a non-empty line of at most {MAX_DESCRIPTION} "
                "characters (it tells a host when to use the skill)",
                field="description",
            )
        prefix = f"{folder}/" if folder else ""
        files = {
            name_[len(prefix) :]: entry.data
            for name_, entry in below.items()
            if entry.kind == "file"
            and name_.startswith(prefix)
            and name_ != f"{prefix}{SKILL_FILE}"
            and not any(  # a nested skill's files are its own
                name_.startswith(f"{other}/")
                for other in folders
                if other != folder and other.startswith(prefix)
            )
        }
        skills.append(
            Skill(f"{plugin}:{name}", description, instructions, f"plugin:{plugin}", files)
        )
    seen: set[str] = set()
    for skill in skills:
        if skill.name in seen:
            raise InvalidArguments(
                f"{bundle.root / directory}: two skills are named {skill.name.split(':', 1)[1]!r}",
                field="name",
            )
        seen.add(skill.name)
    return tuple(skills)

"""``SkillLibraryComponent`` (kind ``skill``): the skill catalogue and ``ReadSkill``
(docs/formats.md §5.6)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from rsi_common.kernel.components.base import Component
from rsi_common.kernel.types import ToolDef, ToolOutput, ToolResult

if TYPE_CHECKING:
    from rsi_common.kernel.runtime import TurnRuntime

__all__ = ["DEFAULT_HEADER", "READ_SKILL", "Skill", "SkillLibraryComponent", "parse_skill"]

READ_SKILL = "ReadSkill"
DEFAULT_HEADER = "# Skills\nProcedures you can load with ReadSkill(name) when the task matches:"
_SKILL_PATH = re.compile(r"^skills/([^/]+)/SKILL\.md$")


@dataclass(frozen=True)
class Skill:
    """One skill: ``name``, one-line ``description`` (≤ 160 chars) and the full ``body``."""

    name: str
    description: str
    body: str


def _front_matter(text: str) -> tuple[dict[str, str], str]:
    """``(front-matter fields, body)``; no front matter → ``({}, text)``."""
    if not text.startswith("---\n"):
        return {}, text
    end = text.find("\n---", 3)
    if end == -1:
        return {}, text
    fields: dict[str, str] = {}
    for line in text[4:end].split("\n"):
        key, sep, value = line.partition(":")
        if sep and key.strip():
            fields[key.strip()] = value.strip().strip("\"'")
    rest = text[end + 4:]
    nl = rest.find("\n")
    body = rest[nl + 1:] if nl != -1 else ""
    return fields, body


def parse_skill(path: str, text: str) -> Skill | None:
    """The skill stored at ``skills/<name>/SKILL.md``, or None for any other path."""
    m = _SKILL_PATH.match(path)
    if m is None:
        return None
    fields, body = _front_matter(text)
    name = fields.get("name") or m.group(1)
    description = fields.get("description", "")
    if not description:
        first = next((ln for ln in body.split("\n") if ln.strip()), "")
        description = first.strip().lstrip("#").strip()
    return Skill(name=name, description=description[:160], body=body)


class SkillLibraryComponent(Component):
    """Each file ``skills/<name>/SKILL.md`` is a skill; contributes ``ReadSkill`` and a catalogue block.

    Name = front-matter ``name``, else the directory name; description = front-matter
    ``description``, else the first non-empty body line without leading ``#`` (≤ 160 chars).
    ``header`` is read when the catalogue block is built (only when the library holds a skill).
    """

    KIND: ClassVar[str] = "skill"
    PARAMS: ClassVar[dict[str, tuple[Any, str]]] = {
        "header": (DEFAULT_HEADER, "heading of the skill catalogue in the system prompt"),
    }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        skills = [parse_skill(p, t) for p, t in sorted(self.files.items())]
        self.skills: dict[str, Skill] = {s.name: s for s in skills if s is not None}

    def tools(self, rt: TurnRuntime) -> list[ToolDef]:
        """``ReadSkill(name)`` when the library holds at least one skill."""
        if not self.skills:
            return []
        return [
            ToolDef(
                name=READ_SKILL,
                description="Load the full procedure of a skill from the skill catalogue by its name.",
                input_schema={
                    "type": "object",
                    "properties": {"name": {"type": "string", "description": "Skill name."}},
                    "required": ["name"],
                },
                core=True,
                read_only=True,
                executor=self._read,
            )
        ]

    def _read(self, tool_input: dict[str, Any]) -> ToolOutput:
        name = str(tool_input.get("name", ""))
        skill = self.skills.get(name)
        if skill is None:
            available = ", ".join(sorted(self.skills)) or "(none)"
            return ToolResult(f"Unknown skill '{name}'. Available skills: {available}", is_error=True)
        return skill.body

    def prompt_blocks(self, rt: TurnRuntime) -> list[tuple[str, str]]:
        """``("skills", "\\n\\n" + header + "\\n" + "- {name}: {description}" lines sorted by name)``."""
        if not self.skills:
            return []
        lines = [f"- {s.name}: {s.description}" for s in sorted(self.skills.values(), key=lambda s: s.name)]
        return [("skills", "\n\n" + self.param_str("header") + "\n" + "\n".join(lines))]

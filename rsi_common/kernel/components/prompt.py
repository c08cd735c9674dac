"""``SystemPromptComponent`` (kind ``prompt``): system text and turn context (docs/formats.md §5.6
*Prompt*)."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, ClassVar

from rsi_common.kernel.components.base import Component

if TYPE_CHECKING:
    from rsi_common.kernel.runtime import TurnRuntime

__all__ = ["SCHEMA_INSTRUCTION", "SystemPromptComponent"]

SCHEMA_INSTRUCTION = "\n\nOutput format: reply with one JSON object that satisfies this JSON schema:\n"


def _as_parts(system_parts: Any) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for item in system_parts or ():
        if isinstance(item, list | tuple) and len(item) == 2:
            out.append((str(item[0]), str(item[1])))
    return out


class SystemPromptComponent(Component):
    """Builds the system text from the host's system parts plus harness blocks.

    ``build(rt) -> (system, turn_context)``: part overrides (null deletes, a string replaces), extra
    blocks, other components' prompt blocks, part order, the output-schema instruction, pinned facts
    (stable); date/time, retrieved memory and turn notes (volatile, into the turn context unless
    ``volatile_placement == "system"``); finally the deferred-tool listing. Params that cannot change
    this turn's text are not read (``schema_instruction`` without an output schema, ``memory_blocks``
    without chunks, ``turn_notes`` without notes, ``volatile_placement`` without volatile blocks).
    """

    KIND: ClassVar[str] = "prompt"
    PARAMS: ClassVar[dict[str, tuple[Any, str]]] = {
        "part_overrides": ({}, "part id -> replacement text, or null to delete every part with that id"),
        "part_order": ([], "part ids in the order they should appear; unlisted parts keep their order after"),
        "extra_blocks": ([], "extra system text: strings or {id, text} objects, after the host parts"),
        "memory_blocks": (True, "render pinned facts and retrieved memory into the prompt"),
        "datetime": (True, "add 'Current date and time (UTC)' from the turn clock"),
        "turn_notes": (True, "add the host's notes for this turn"),
        "volatile_placement": ("turn_context", "'turn_context' (latest user message) or 'system'"),
        "schema_instruction": (True, "append the output JSON schema instruction when a schema is set"),
    }

    def _parts(self, rt: TurnRuntime) -> list[tuple[str, str]]:
        parts = _as_parts(rt.plan.system_parts)
        for pid, value in self.param_dict("part_overrides").items():
            if value is None:
                parts = [p for p in parts if p[0] != pid]
            elif isinstance(value, str):
                parts = [(p[0], value) if p[0] == pid else p for p in parts]
        for block in self.param_list("extra_blocks"):
            if isinstance(block, str):
                pid, text = "extra", block
            elif isinstance(block, dict) and isinstance(block.get("text"), str):
                pid, text = str(block.get("id") or "extra"), block["text"]
            else:
                continue
            if text:
                parts.append((pid, text if text.startswith("\n") else "\n\n" + text))
        for comp in rt.components:
            if comp is self:
                continue
            blocks = comp.prompt_blocks(rt)
            if blocks:
                rt.fire(comp)
                parts.extend((str(i), str(t)) for i, t in blocks if t)
        order = [str(x) for x in self.param_list("part_order")]
        rank = {pid: i for i, pid in reversed(list(enumerate(order)))}
        return sorted(parts, key=lambda p: rank.get(p[0], len(order)))

    def _stable(self, rt: TurnRuntime, parts: list[tuple[str, str]]) -> str:
        text = "".join(t for _, t in parts)
        schema = rt.config.output_schema
        if schema and self.param_bool("schema_instruction"):
            text += SCHEMA_INSTRUCTION + json.dumps(schema, indent=2, ensure_ascii=False)
        chunks = rt.memory_chunks or []
        pinned = [c for c in chunks if isinstance(c, dict) and c.get("pinned")]
        if chunks and self.param_bool("memory_blocks") and pinned:
            lines = [f"- {c.get('key')}: {c.get('content')}" for c in pinned]
            text += "\n\n# Pinned facts\n" + "\n".join(lines)
        return text

    def _volatile(self, rt: TurnRuntime) -> list[str]:
        blocks: list[str] = []
        if self.param_bool("datetime"):
            stamp = time.strftime("%Y-%m-%d %H:%M", time.gmtime(rt.clock))
            blocks.append(f"Current date and time (UTC): {stamp}")
        chunks = rt.memory_chunks or []
        loose = [c for c in chunks if isinstance(c, dict) and not c.get("pinned")]
        if chunks and self.param_bool("memory_blocks") and loose:
            lines = [f"- [{c.get('source')}] {c.get('key')}: {c.get('content')}" for c in loose]
            blocks.append("Relevant memory:\n" + "\n".join(lines))
        notes = [str(n) for n in rt.plan.turn_notes or ()]
        if notes and self.param_bool("turn_notes"):
            blocks.append("Notes for this turn:\n" + "\n".join(f"- {n}" for n in notes))
        return blocks

    def build(self, rt: TurnRuntime) -> tuple[str, str]:
        """Return ``(system, turn_context)`` for this iteration."""
        system = self._stable(rt, self._parts(rt))
        volatile = self._volatile(rt)
        context = ""
        if volatile:
            if self.param_str("volatile_placement") == "system":
                system += "\n\n" + "\n\n".join(volatile)
            else:
                context = "\n\n".join(volatile)
        deferred = rt.tools.deferred()
        if deferred:
            lines = [f"- {t.name}: {(t.description or '').splitlines()[0] if t.description else ''}"
                     for t in deferred]
            system += "\n\n# More tools (activate with ToolSearch)\n" + "\n".join(lines)
        return system, context

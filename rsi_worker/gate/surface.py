"""The effective surface of a harness, and the three checks that read it (docs/security/gate.md,
"No-op, duplicate and growth").

The **surface** is what a harness makes the model see and the kernel do, without the accidents of
its layout:

* *instructions*: the set of normalised sentences of the enabled components' text — the prompt
  component's ``extra_blocks`` and ``part_overrides`` texts, and the files of enabled components (a
  skill's front matter contributes its ``description``, not its ``name``). A set: a duplicated
  sentence and a re-ordered block change nothing;
* *mechanics*: for every enabled component, its kind, impl and effective params (class defaults
  filled in) other than the text params above and ``part_order``. Component ids do not count.

Checks, before any replay:

* **no-op** — the candidate's surface equals the incumbent's;
* **duplicate** — the candidate removes no instruction and one of its added texts holds no
  sentence the incumbent does not already have (a block that repeats an existing block, in the same
  or in another component: a skill that restates a prompt block);
* **growth budget** — the candidate's instruction text (characters of the distinct sentences) is
  above ``ConsolidationParams.max_instruction_chars`` and larger than the incumbent's. The proposer is
  told the budget and may merge or remove blocks.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from rsi_common.harness import Harness, canonical_json
from rsi_common.harness.manifest import ComponentSpec
from rsi_common.kernel.components import effective_params
from rsi_worker.gate.added import Added
from rsi_worker.gate.text import normalized

__all__ = ["TEXT_PARAMS", "Surface", "instruction_chars", "sentences", "surface", "surface_reasons"]

TEXT_PARAMS = ("extra_blocks", "part_overrides", "part_order")
"""Params that carry text or its order: read into *instructions*, left out of *mechanics*."""
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|\n+")
_FRONT_MATTER = re.compile(r"\A---\n(.*?)\n---\n?", re.DOTALL)


def sentences(text: str) -> Iterator[str]:
    """The normalised sentences of ``text`` (split at ``.``, ``!``, ``?`` and line breaks)."""
    for part in _SENTENCE_BREAK.split(text):
        norm = normalized(part)
        if norm:
            yield norm


def _file_text(text: str) -> str:
    m = _FRONT_MATTER.match(text)
    if m is None:
        return text
    described = [
        line.split(":", 1)[1]
        for line in m.group(1).splitlines()
        if line.strip().lower().startswith("description:")
    ]
    return "\n".join([*described, text[m.end() :]])


def _texts(c: ComponentSpec, files: Mapping[str, str]) -> Iterator[str]:
    blocks = c.params.get("extra_blocks")
    for b in blocks if isinstance(blocks, list) else ():
        if isinstance(b, str):
            yield b
        elif isinstance(b, Mapping) and isinstance(b.get("text"), str):
            yield b["text"]
    overrides = c.params.get("part_overrides")
    if isinstance(overrides, Mapping):
        yield from (v for v in overrides.values() if isinstance(v, str))
    for p in c.files:
        yield _file_text(files.get(p, ""))


def _effective(c: ComponentSpec) -> dict[str, Any]:
    return {k: v for k, v in effective_params(c).items() if k not in TEXT_PARAMS}


@dataclass(frozen=True)
class Surface:
    """The effective surface (module docstring)."""

    instructions: frozenset[str]
    mechanics: tuple[str, ...]


def surface(h: Harness) -> Surface:
    """The effective surface of ``h``."""
    enabled = h.manifest.enabled_components()
    texts = {s for c in enabled for t in _texts(c, h.files) for s in sentences(t)}
    mechanics = sorted(canonical_json([c.kind, c.impl, _effective(c)]) for c in enabled)
    return Surface(frozenset(texts), tuple(mechanics))


def instruction_chars(s: Surface) -> int:
    """Characters of the distinct normalised instruction sentences (the growth budget's measure)."""
    return sum(len(x) for x in s.instructions)


def surface_reasons(inc: Harness, cand: Harness, added: list[Added], max_chars: int) -> list[str]:
    """The reasons of the three checks (module docstring); ``[]`` = none applies."""
    a, b = surface(inc), surface(cand)
    if a == b:
        return [
            "no-op: the edit leaves the effective prompt, tool and skill surface unchanged "
            "(duplicated or re-ordered text, renamed ids or default values change nothing)"
        ]
    out: list[str] = []
    if a.instructions <= b.instructions:
        for item in added:
            own = set(sentences(_file_text(item.text) if ".files." in item.address else item.text))
            if own and own <= a.instructions and _is_text(item.address):
                out.append(
                    f"duplicate: the text added at {item.address} repeats instructions the harness "
                    f"already has: '{item.text[:100]}'"
                )
    size, before = instruction_chars(b), instruction_chars(a)
    if size > max_chars and size > before:
        out.append(
            f"growth budget: the harness would hold {size} characters of instructions "
            f"(budget {max_chars}, now {before}); merge or remove blocks instead of adding"
        )
    return out


def _is_text(address: str) -> bool:
    return ".files." in address or any(f".params.{p}" in address for p in TEXT_PARAMS[:2])

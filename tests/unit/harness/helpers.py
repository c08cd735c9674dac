"""Shared builders for the harness tests."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from rsi_common.harness import BUILTIN_ROOT

SKILL_IMPL = "rsi_common.kernel.components.skills:SkillLibraryComponent"
SKILL_PATH = "skills/cite-sources/SKILL.md"
SKILL_TEXT = (
    "---\nname: cite-sources\ndescription: Show the query behind every number.\n---\n"
    "When you report a number from a tool, name the tool call that produced it.\n"
)
H0_SKILL_VERSION = "sha256:c7d856c2ea3ea6a192dda3bff0c9fca7ad414597883c7cac84aad57e03858315"


def h0_obj() -> dict[str, Any]:
    """A fresh copy of the bundled H0 manifest object."""
    data: dict[str, Any] = json.loads(Path(BUILTIN_ROOT / "h0" / "manifest.json").read_text("utf-8"))
    return copy.deepcopy(data)


def with_skill(obj: dict[str, Any] | None = None) -> dict[str, Any]:
    """H0 plus the docs/check-vectors.md §9.11 skill-library component."""
    m = h0_obj() if obj is None else copy.deepcopy(obj)
    m["components"].append(
        {"id": "skills.library", "kind": "skill", "impl": SKILL_IMPL, "files": [SKILL_PATH]}
    )
    return m


def comp(obj: dict[str, Any], cid: str) -> dict[str, Any]:
    """The component object with this id (mutable, inside ``obj``)."""
    return next(c for c in obj["components"] if c["id"] == cid)

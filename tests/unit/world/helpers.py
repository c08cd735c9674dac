"""Builders for the world tests: a captured turn based on the golden record."""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "world"


@lru_cache(maxsize=4)
def _golden_text(name: str) -> str:
    return (GOLDEN / name).read_text("utf-8")


def golden(name: str = "rsi-world-1.json") -> dict[str, Any]:
    """A fresh copy of a golden world file."""
    data: dict[str, Any] = json.loads(_golden_text(name))
    return data


def captured(**top: Any) -> dict[str, Any]:
    """A turn as K0 hands it to finalize_world (the golden record without the computed fields)."""
    w = copy.deepcopy(golden())
    for key in ("bytes", "truncated", "images_dropped", "replayable"):
        w.pop(key)
    w.update(top)
    return w

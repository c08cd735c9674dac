"""The input boundary applied to a world record: one walk over every field with its own limit
(:mod:`rsi_common.boundary`; the table is in docs/security/input-boundary.md).

:func:`guard_world` runs inside :func:`rsi_common.world.finalize_world` on the JSON-safe private copy,
after images are replaced and contents clipped, before validation. World *content* is repaired (a
lone surrogate or U+0000 becomes U+FFFD and is listed in ``defects``); ids, labels and dict keys are
refused. Each node is visited once: the fields are disjoint and every field is scanned by one
:func:`~rsi_common.boundary.scan`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from rsi_common.boundary import (
    MAX_CAPTURED_WORLD_BYTES,
    MAX_FINAL_TEXT_BYTES,
    MAX_HARNESS_VERSION_CHARS,
    MAX_INPUT_BYTES,
    MAX_MEMORY_BYTES,
    MAX_MESSAGE_BYTES,
    MAX_METADATA_BYTES,
    MAX_MODEL_CHARS,
    MAX_PLAN_BYTES,
    MAX_PROVIDER_CHARS,
    MAX_SAFE_INT,
    MAX_SYSTEM_PARTS_BYTES,
    MAX_TOOL_CALL_BYTES,
    MAX_TOOL_DEFS_BYTES,
    MAX_TOOL_INPUT_BYTES,
    MAX_WORLD_OTHER_BYTES,
    Defect,
    check_id,
    check_label,
    key_segment,
    scan,
)
from rsi_common.errors import WorldLimitError

__all__ = ["WORLD_IDS", "WORLD_LABELS", "guard_world"]

WORLD_IDS: tuple[str, ...] = ("agent_id", "io_id", "interaction_id")
"""Top-level world fields that follow the id grammar (empty allowed; ``state.session_id`` too)."""
WORLD_LABELS: dict[str, int] = {
    "harness_version": MAX_HARNESS_VERSION_CHARS,
    "provider": MAX_PROVIDER_CHARS,
    "model": MAX_MODEL_CHARS,
}
"""Top-level world fields stored in a ``String(n)`` column of ``rsi_worlds``: field → n."""


class _Pool:
    """A size limit shared by several fields."""

    def __init__(self, limit: int, what: str) -> None:
        self.limit = limit
        self.used = 0
        self.what = f"{limit:,} bytes for {what}, together"


class _Guard:
    """Scans the fields of one world, collecting defects and the captured size."""

    def __init__(self) -> None:
        self.defects: list[Defect] = []
        self.total = 0
        self.other = _Pool(MAX_WORLD_OTHER_BYTES, "the other world fields")

    def field(self, parent: Any, key: Any, path: str, depth: int, limit: int | _Pool) -> None:
        """Scan ``parent[key]`` (depth = its level in the world) against a limit or a shared pool."""
        if isinstance(limit, _Pool):
            pool: _Pool | None = limit
            max_bytes = limit.limit - limit.used
        else:
            pool, max_bytes = None, limit
        value = parent[key]
        size = _leaf_bytes(value)
        if size < 0 or size > max_bytes:  # a container, a bad character or number, or over: the walker
            res = scan(value, path, max_bytes=max_bytes, repair=True, depth=depth, error=WorldLimitError,
                       limit_text=None if pool is None else pool.what)
            if res.value is not value:
                parent[key] = res.value
            self.defects.extend(res.defects)
            size = res.bytes
        if pool is not None:
            pool.used += size
        self.total += size
        if self.total > MAX_CAPTURED_WORLD_BYTES:
            raise WorldLimitError(f"{path}: the world is over the capture limit of "
                                  f"{MAX_CAPTURED_WORLD_BYTES:,} bytes")

    def items(self, parent: Any, key: str, path: str, depth: int, limit: int) -> None:
        """Each item of the list ``parent[key]`` (at level ``depth``) against ``limit``; not a list: the
        value as a whole against the shared pool."""
        value = parent[key]
        if not isinstance(value, list):
            self.field(parent, key, path, depth, self.other)
            return
        for i in range(len(value)):
            self.field(value, i, f"{path}[{i}]", depth + 1, limit)

    def section(self, w: dict[str, Any], key: str, fields: dict[str, Callable[[dict[str, Any], str], None]],
                rest: int | _Pool) -> None:
        """A top-level object: named fields by their handler, the others against ``rest``."""
        value = w[key]
        if not isinstance(value, dict):
            self.field(w, key, key, 2, self.other)
            return
        self.total += 2
        for i, sub in enumerate(list(value)):
            handler = fields.get(sub)
            if handler is not None:
                handler(value, sub)
            else:
                self.field(value, sub, key + key_segment(sub, i), 3, rest)

    def plan(self, w: dict[str, Any]) -> None:
        rest = _Pool(MAX_PLAN_BYTES, "plan fields other than system_parts")
        self.section(w, "plan", {
            "system_parts": lambda p, k: self.field(p, k, "plan.system_parts", 3, MAX_SYSTEM_PARTS_BYTES),
        }, rest)

    def state(self, w: dict[str, Any]) -> None:
        self.section(w, "state", {
            "session_id": lambda p, k: _id(p[k], "state.session_id"),
            "messages": lambda p, k: self.items(p, k, "state.messages", 3, MAX_MESSAGE_BYTES),
            "metadata": lambda p, k: self.field(p, k, "state.metadata", 3, MAX_METADATA_BYTES),
        }, self.other)

    def tools(self, w: dict[str, Any]) -> None:
        rest = _Pool(MAX_TOOL_DEFS_BYTES, "tool definitions and contributed names")
        self.section(w, "tools", {"calls": lambda p, k: self.calls(p, k)}, rest)

    def calls(self, tools: dict[str, Any], key: str) -> None:
        calls = tools[key]
        if not isinstance(calls, list):
            self.field(tools, key, "tools.calls", 3, self.other)
            return
        for i, call in enumerate(calls):
            path = f"tools.calls[{i}]"
            if not isinstance(call, dict):
                self.field(calls, i, path, 4, MAX_TOOL_CALL_BYTES)
                continue
            rest = _Pool(MAX_TOOL_CALL_BYTES, "one tool call without its input")
            for j, sub in enumerate(list(call)):
                self.field(call, sub, path + key_segment(sub, j), 5,
                           MAX_TOOL_INPUT_BYTES if sub == "input" else rest)

    def outcome(self, w: dict[str, Any]) -> None:
        self.section(w, "outcome", {
            "final_text": lambda p, k: self.field(p, k, "outcome.final_text", 3, MAX_FINAL_TEXT_BYTES),
            "transcript": lambda p, k: self.items(p, k, "outcome.transcript", 3, MAX_MESSAGE_BYTES),
        }, self.other)


def _leaf_bytes(v: Any) -> int:
    """The size :func:`~rsi_common.boundary.scan` measures for a leaf it would accept as is (an ASCII
    string without U+0000, a bool, None, an integer within ±``MAX_SAFE_INT``, a finite float); ``-1``
    for anything else, which the walker itself checks (docs/performance/turn-checks.md)."""
    t = type(v)
    if t is str:
        return len(v) + 2 if v.isascii() and "\x00" not in v else -1
    if v is None or v is True:
        return 4
    if v is False:
        return 5
    if t is int:
        return len(int.__repr__(v)) if -MAX_SAFE_INT <= v <= MAX_SAFE_INT else -1
    if t is float:
        return len(float.__repr__(v)) if math.isfinite(v) else -1
    return -1


def _id(value: Any, path: str) -> None:
    if isinstance(value, str):  # another type is left to the schema's message
        check_id(value, path, empty_ok=True, error=WorldLimitError)


def guard_world(w: dict[str, Any]) -> list[Defect]:
    """Apply the input boundary to a prepared world, in place.

    Args:
        w: a JSON-safe private copy (``finalize_world`` after images and clipping); its depth was
            checked before any recursive code touched it.

    Returns:
        The repairs made (path and kind), in walk order.

    Raises:
        WorldLimitError: an id, label, key, number or size breaks the boundary; the message starts
            with the field path and names the limit.
    """
    g = _Guard()
    sections: dict[str, Callable[[dict[str, Any]], None]] = {
        "plan": g.plan, "state": g.state, "tools": g.tools, "outcome": g.outcome,
        "input": lambda d: g.field(d, "input", "input", 2, MAX_INPUT_BYTES),
        "memory": lambda d: g.field(d, "memory", "memory", 2, MAX_MEMORY_BYTES),
    }
    keys: list[Any] = list(w)  # not str: a key of another type must reach key_segment, not a type check
    for i, key in enumerate(keys):
        value = w[key]
        if key in WORLD_IDS:
            _id(value, key)
        elif key in WORLD_LABELS and isinstance(value, str):
            check_label(value, key, max_chars=WORLD_LABELS[key], error=WorldLimitError)
        elif key in sections:
            sections[key](w)
        else:
            g.field(w, key, key_segment(key, i)[1:], 2, g.other)
    return g.defects

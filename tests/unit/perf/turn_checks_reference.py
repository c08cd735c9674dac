"""The turn's checks as they were before they were fused (docs/performance/turn-checks.md): the
reference the differential test compares :func:`rsi_common.world.finalize_world` with. Copied from
``rsi_common/world.py`` and ``rsi_common/world_boundary.py`` at c26ebef; the helpers the change left
alone are imported. The credential refusal is the plain text-by-text scan of
``tests/adversarial/test_credential_scan_equivalence.py``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
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
    MAX_STORED_WORLD_BYTES,
    MAX_SYSTEM_PARTS_BYTES,
    MAX_TOOL_CALL_BYTES,
    MAX_TOOL_DEFS_BYTES,
    MAX_TOOL_INPUT_BYTES,
    MAX_WORLD_OTHER_BYTES,
    Defect,
    check_depth,
    check_id,
    check_label,
    key_segment,
    scan,
)
from rsi_common.credentials import describe
from rsi_common.errors import CredentialError, WorldLimitError
from rsi_common.world import (
    MAX_WORLD_BYTES,
    SAFE_KWARGS,
    WORLD_SCHEMA,
    _add_defects,
    _chunk,
    _clip_world,
    _jsonable,
    _replace_images,
    _scrub,
    _serializable,
    _validate,
    world_bytes,
)
from tests.adversarial.test_credential_scan_equivalence import reference_find_in

__all__ = ["reference_finalize_world"]

WORLD_IDS: tuple[str, ...] = ("agent_id", "io_id", "interaction_id")
WORLD_LABELS: dict[str, int] = {
    "harness_version": MAX_HARNESS_VERSION_CHARS,
    "provider": MAX_PROVIDER_CHARS,
    "model": MAX_MODEL_CHARS,
}


def _refuse_credentials(world: Mapping[str, Any]) -> None:
    hit = reference_find_in(dict(world), "")
    if hit is not None:
        path, labels = hit
        raise CredentialError(
            f"{path or '<world>'}: contains text matching the credential pattern(s) {describe(labels)}; "
            "the world is refused"
        )


def _prepare(data: Mapping[str, Any]) -> dict[str, Any]:
    """JSON safety, metadata rules, kwargs and defs filtering (before validation)."""
    raw = dict(data)
    state = raw.get("state")
    metadata = state.get("metadata") if isinstance(state, Mapping) else None
    w: dict[str, Any] = _jsonable({k: v for k, v in raw.items() if k != "bytes"}, metadata=False)
    if isinstance(w.get("state"), dict) and isinstance(metadata, Mapping):
        w["state"]["metadata"] = _scrub(_jsonable(metadata, metadata=True))
    plan = w.get("plan")
    if isinstance(plan, dict) and isinstance(plan.get("kwargs"), dict):
        plan["kwargs"] = {k: v for k, v in plan["kwargs"].items() if k in SAFE_KWARGS}
    tools, raw_tools = w.get("tools"), raw.get("tools")
    if isinstance(tools, dict) and isinstance(raw_tools, Mapping) and isinstance(raw_tools.get("defs"), list):
        contributed = set(tools.get("contributed") or ())
        tools["defs"] = [_jsonable(d, metadata=False) for d in raw_tools["defs"]
                         if _serializable(d) and d.get("name") not in contributed]
    memory = w.get("memory")
    if isinstance(memory, dict) and isinstance(memory.get("chunks"), list):
        memory["chunks"] = [_chunk(c) for c in memory["chunks"]]
    w.setdefault("schema", WORLD_SCHEMA)
    w.setdefault("replayable", True)
    return w



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
            max_bytes, limit_text = limit.limit - limit.used, limit.what
        else:
            max_bytes, limit_text = limit, None
        res = scan(parent[key], path, max_bytes=max_bytes, repair=True, depth=depth, error=WorldLimitError,
                   limit_text=limit_text)
        if res.value is not parent[key]:
            parent[key] = res.value
        self.defects.extend(res.defects)
        if isinstance(limit, _Pool):
            limit.used += res.bytes
        self.total += res.bytes
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
    for i, key in enumerate(list(w)):
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


def reference_finalize_world(data: Mapping[str, Any]) -> dict[str, Any]:
    """Turn a captured turn into a storable ``rsi-world/1`` record (docs/formats.md §4.1). Idempotent.

    In order: the depth check of the input boundary; JSON safety and metadata rules; image blocks
    anywhere → ``IMAGE_PLACEHOLDER`` text blocks (sets ``images_dropped``); ``plan.kwargs`` kept to
    :data:`SAFE_KWARGS`; tool-call contents and transcript strings clipped (sets ``truncated``); the
    boundary walk (field limits, ids, numbers; bad characters of content → U+FFFD, listed in
    ``defects``); validation; the size limit (above :data:`MAX_WORLD_BYTES`: ``replayable = false``,
    ``state.messages``, ``outcome.transcript`` emptied, every tool-call content ``""``); the hard limit
    ``MAX_STORED_WORLD_BYTES``; the credential check; ``bytes``.

    Raises:
        CredentialError: a credential pattern matches a stored field (the message names the path and
            the label only).
        WorldLimitError: the input boundary refuses the record (the message names the field path and
            the limit, never the value).
        WorldError: the record is malformed (the message names the field).
    """
    check_depth(data, "", error=WorldLimitError)
    w = _prepare(data)
    w, dropped = _replace_images(w)
    cut = _clip_world(w)
    w["images_dropped"] = bool(w.get("images_dropped")) or dropped
    w["truncated"] = bool(w.get("truncated")) or cut
    _add_defects(w, guard_world(w))
    out = _validate(w, prepared=True)
    size = out["bytes"]  # computed by the validation (the prepared copy has no "bytes")
    if size > MAX_WORLD_BYTES:
        out["replayable"] = False
        out["state"]["messages"] = []
        out["outcome"]["transcript"] = []
        for call in out["tools"]["calls"]:
            call["content"] = ""
        size = world_bytes(out)
    if size > MAX_STORED_WORLD_BYTES:
        raise WorldLimitError(f"<world>: {size:,} bytes after emptying the contents is over the stored-world "
                              f"limit of {MAX_STORED_WORLD_BYTES:,} bytes")
    _refuse_credentials(out)
    out["bytes"] = size
    return out

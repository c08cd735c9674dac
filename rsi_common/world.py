"""The world record ``rsi-world/1``: one captured turn, the unit of replay (docs/formats.md §4.1).

The schema (pydantic models) and constants live in :mod:`rsi_common.world_schema`; this module holds
capture, validation, migration and the read side, and re-exports the constants and :class:`World`.

:func:`finalize_world` turns what K0 captured into a storable record; :func:`validate_world` checks (and
migrates) a stored one; :class:`TurnWorld` is the read-side view the consolidation uses.

Decisions where docs/formats.md §4.1 is silent:

* **Credentials** (``docs/security/credentials.md``). The stored record is scanned with the credential
  table (:mod:`rsi_common.credentials`, text normalised first) after clipping and the size limit, i.e.
  exactly what would be stored. A hit anywhere the replay feeds to the model (input, messages, tool
  calls, memory, plan, outcome) refuses the whole world with :class:`~rsi_common.errors.CredentialError`
  naming the field path and the pattern labels, never the text: a redacted world would replay a
  different turn. A path component that is itself credential-shaped (a dict key) is shown as
  ``<redacted key>``. Only ``state.metadata`` (host bookkeeping no component reads) is **scrubbed**:
  entries whose key, string value or key/value pair matches are dropped. Dict entries are scanned both
  as values and as ``{"key": value}`` JSON, so ``{"api_key": "…"}`` is caught by the assignment patterns.
* **JSON safety.** Outside ``state.metadata`` a value that does not survive a JSON round trip becomes
  ``str(value)``; tuples become lists, non-string keys ``str(key)``, non-finite floats strings. In
  ``state.metadata`` such values are *dropped* instead (a ``str()`` of a host object may leak it), and
  keys starting with ``_`` are dropped at every depth.
* ``tools.defs`` entries named in ``tools.contributed`` or not serialisable are dropped.
* ``memory.chunks`` entries are projected on the six fields of docs/formats.md §4.1 (other keys dropped;
  ``key``,
  ``source`` and ``content`` as strings, ``None`` → ``""``; a non-numeric score → null; ``pinned`` as a
  bool), so a host memory provider's extra fields cannot make a world invalid.
* A tool call with an empty ``name`` is kept (the replay simply never matches it); a tool *definition*
  needs a non-empty name.
* :func:`clip` leaves an already clipped string (head, marker, tail of the exact shape) unchanged, so
  :func:`finalize_world` is idempotent.
* Above the size limit the emptied record is kept even if it is still larger (e.g. a huge ``input``),
  up to the hard limit of the input boundary (below).
* **The input boundary** (:mod:`rsi_common.world_boundary`, docs/security/input-boundary.md): the
  nesting depth is checked first, without recursion; after clipping, one walk checks every field
  against its size limit, ids, labels, keys and numbers, and repairs world content: a lone surrogate
  or U+0000 becomes U+FFFD and is listed in ``defects``. A world still larger than
  ``MAX_STORED_WORLD_BYTES`` after the emptying is refused.

**Versions and migration.** ``rsi-world/1`` is the first schema; :data:`MIGRATIONS` maps an older schema
id to a function producing the next one and is empty. Within ``rsi-world/1``, the *late fields* —
``truncated``, ``images_dropped``, ``bytes``, ``tools.contributed``, ``plan.turn_notes``, ``plan.kwargs``,
``memory`` and ``defects`` — may be absent in records written by the first capture code ("old format");
they load as ``false``, ``false``, the recomputed size, ``[]``, ``[]``, ``{}``, ``{"present": false,
"chunks": null}`` and ``[]``. ``defects`` is written only when non-empty, so a world without repairs
has exactly the earlier format. Every other field is required. Golden files live in
``tests/golden/world/``.
"""

from __future__ import annotations

import copy
import json
import math
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from rsi_common.boundary import (
    MAX_DEPTH,
    MAX_SAFE_INT,
    MAX_STORED_WORLD_BYTES,
    Defect,
    check_depth,
    merge_defects,
)
from rsi_common.credentials import describe, find_credentials, find_in, safe_key, safe_repr
from rsi_common.errors import CredentialError, WorldError, WorldLimitError
from rsi_common.world_boundary import guard_world
from rsi_common.world_schema import (
    CLIP_MARKER,
    IMAGE_PLACEHOLDER,
    IMAGE_TYPES,
    MAX_RESULT_CHARS,
    MAX_WORLD_BYTES,
    SAFE_KWARGS,
    WORLD_SCHEMA,
    World,
)

__all__ = [
    "CLIP_MARKER",
    "IMAGE_PLACEHOLDER",
    "IMAGE_TYPES",
    "MAX_RESULT_CHARS",
    "MAX_WORLD_BYTES",
    "MIGRATIONS",
    "SAFE_KWARGS",
    "WORLD_SCHEMA",
    "TurnWorld",
    "World",
    "clip",
    "finalize_world",
    "migrate_world",
    "new_world_id",
    "previous_in_conversation",
    "text_of",
    "validate_world",
    "world_bytes",
]

_CLIP_MARKER_RE = re.compile(r"\n\[… (\d+) characters cut …\]\n")


# --- helpers -----------------------------------------------------------------------------------


def _path(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{safe_key(part)}" if out else safe_key(part))
    return out or "<world>"


def world_bytes(world: Mapping[Any, Any]) -> int:
    """UTF-8 length of ``json.dumps(world without "bytes", ensure_ascii=False, separators=(",", ":"))``."""
    body = {k: v for k, v in world.items() if k != "bytes"}
    return len(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def clip(s: str, limit: int = MAX_RESULT_CHARS) -> str:
    """Keep the first ``⌊3·limit/4⌋`` and last ``limit − head`` characters of a string longer than
    ``limit``, with ``CLIP_MARKER`` (n = ``len(s) − limit``) between them. An already clipped string
    is returned unchanged.

    Raises:
        ValueError: ``limit < 0``.
    """
    if limit < 0:
        raise ValueError("limit must be >= 0")
    if len(s) <= limit:
        return s
    head = 3 * limit // 4
    tail = limit - head
    m = _CLIP_MARKER_RE.match(s, head)
    if m is not None and len(s) - m.end() == tail:
        return s
    return s[:head] + CLIP_MARKER.format(n=len(s) - limit) + s[len(s) - tail:]


_DROP: Any = object()


def _jsonable(v: Any, metadata: bool) -> Any:
    """A JSON-safe deep copy; ``metadata`` drops (``_DROP``) what the lax mode would ``str()``."""
    t = type(v)
    if v is None or t is str or t is bool or t is int:
        return v
    if t is float and math.isfinite(v):  # a plain float survives the JSON round trip unchanged
        return v
    if t is list:
        items = [_jsonable(i, metadata) for i in v]
        return [i for i in items if i is not _DROP]
    if isinstance(v, (str, int, float)):  # floats and subclasses (enums, numpy floats): as JSON reads them
        if isinstance(v, float) and not math.isfinite(v):
            return _DROP if metadata else str(v)
        return json.loads(json.dumps(v))
    if isinstance(v, Mapping):
        out: dict[str, Any] = {}
        for k, item in v.items():
            if metadata and (not isinstance(k, str) or k.startswith("_")):
                continue
            conv = _jsonable(item, metadata)
            if conv is not _DROP:
                out[k if isinstance(k, str) else str(k)] = conv
        return out
    if isinstance(v, (list, tuple)):
        items = [_jsonable(i, metadata) for i in v]
        return [i for i in items if i is not _DROP]
    return _DROP if metadata else str(v)


def _replace_images(v: Any) -> tuple[Any, bool]:
    if isinstance(v, dict):
        if v.get("type") in IMAGE_TYPES:
            return {"type": "text", "text": IMAGE_PLACEHOLDER}, True
        dropped = False
        for k, item in v.items():
            v[k], d = _replace_images(item)
            dropped |= d
        return v, dropped
    if isinstance(v, list):
        dropped = False
        for i, item in enumerate(v):
            v[i], d = _replace_images(item)
            dropped |= d
        return v, dropped
    return v, False


def _clip_walk(v: Any) -> tuple[Any, bool]:
    """Clip a content value: strings, list items, and the ``text``/``content`` fields of dicts."""
    if isinstance(v, str):
        c = clip(v)
        return c, c != v
    if isinstance(v, list):
        cut = False
        for i, item in enumerate(v):
            v[i], sub = _clip_walk(item)
            cut |= sub
        return v, cut
    if isinstance(v, dict):
        cut = False
        for key in ("text", "content"):
            if key in v:
                v[key], sub = _clip_walk(v[key])
                cut |= sub
        return v, cut
    return v, False


def _credential_entry(key: Any, item: Any) -> bool:
    texts = [str(key)]
    if isinstance(item, str):
        texts += [item, json.dumps({str(key): item}, ensure_ascii=False)]
    return any(find_credentials(t) for t in texts)


def _scrub(v: Any) -> Any:
    """``v`` without the dict entries (key, string value or pair) and list strings a pattern matches."""
    if isinstance(v, dict):
        return {k: _scrub(item) for k, item in v.items() if not _credential_entry(k, item)}
    if isinstance(v, list):
        return [_scrub(i) for i in v if not (isinstance(i, str) and find_credentials(i))]
    return v


def _refuse_credentials(world: Mapping[str, Any]) -> None:
    hit = find_in(dict(world), "")
    if hit is not None:
        path, labels = hit
        raise CredentialError(
            f"{path or '<world>'}: contains text matching the credential pattern(s) {describe(labels)}; "
            "the world is refused"
        )


# --- validation and migration --------------------------------------------------------------------

MIGRATIONS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {}
"""Older schema id → function returning the record in the next schema (applied until ``rsi-world/1``).
Empty: ``rsi-world/1`` is the first schema."""


def migrate_world(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of ``obj`` in schema ``rsi-world/1`` with the late fields filled (module docstring).

    ``bytes`` is not filled here (it is recomputed by :func:`validate_world`).

    Raises:
        WorldError: not an object, or an unknown schema id.
    """
    if not isinstance(obj, Mapping):
        raise WorldError(f"<world>: a world must be a JSON object, got {type(obj).__name__}")
    out = copy.deepcopy(dict(obj))
    seen: set[Any] = set()
    while (schema := out.get("schema")) != WORLD_SCHEMA:
        step = MIGRATIONS.get(schema) if isinstance(schema, str) else None
        if step is None or schema in seen:
            raise WorldError(
                f"schema: unknown world schema {safe_repr(schema)} (this code reads {WORLD_SCHEMA})"
            )
        seen.add(schema)
        out = step(out)
    return _fill_late_fields(out)


def _fill_late_fields(out: dict[str, Any]) -> dict[str, Any]:
    """Fill the late fields of ``rsi-world/1`` in place (module docstring) and return ``out``."""
    out.setdefault("truncated", False)
    out.setdefault("images_dropped", False)
    out.setdefault("memory", {"present": False, "chunks": None})
    for section, key, default in (("tools", "contributed", []), ("plan", "turn_notes", []),
                                  ("plan", "kwargs", {})):
        if isinstance(out.get(section), dict):
            out[section].setdefault(key, default)
    return out


def _first_non_json(v: Any) -> str | None:
    """The path of the first value under ``v`` that is not JSON (for a non-string key: its dict's
    path), else ``None``. Depth first in document order; the path is built only for the value found."""
    stack: list[tuple[Any, Any, Any]] = [((), None, v)]  # (where, the dict of a non-string key, value)
    while stack:
        where, bad_key_of, item = stack.pop()
        if bad_key_of is not None:
            return _render(bad_key_of)
        if item is None or type(item) in (str, bool, int):
            continue
        if isinstance(item, float):
            if math.isfinite(item):
                continue
            return _render(where)
        if isinstance(item, dict):
            stack.extend(reversed([((where, k), None if isinstance(k, str) else where, sub)
                                   for k, sub in item.items()]))
        elif isinstance(item, list):
            stack.extend(reversed([((where, i), None, sub) for i, sub in enumerate(item)]))
        else:
            return _render(where) or "<world>"
    return None


def _render(where: Any) -> str:
    """``(parent, key or index)`` links → ``a.b[2].c`` (keys through :func:`safe_key`)."""
    parts: list[Any] = []
    while where:
        where, part = where
        parts.append(part)
    out = ""
    parts.reverse()  # (not reversed(): mypyc cannot compile that loop, docs/dev/compiled.md)
    for part in parts:
        if isinstance(part, int):
            out = f"{out}[{part}]"
        else:
            out = f"{out}.{safe_key(part)}" if out else safe_key(part)
    return out


def validate_world(obj: Any) -> dict[str, Any]:
    """Check a world record (after :func:`migrate_world`) and return it normalised.

    Returns:
        The record as plain JSON in field order, defaults filled, ``bytes`` recomputed if absent
        (a stored ``bytes`` is kept as is).

    Raises:
        WorldError: the message starts with the offending field path, e.g. ``tools.calls[0].name: …``
            (``WorldLimitError`` when nested deeper than the input boundary allows).
    """
    check_depth(obj, "", error=WorldLimitError)
    return _validate(obj)


def _validate(obj: Any, *, prepared: bool = False) -> dict[str, Any]:
    """:func:`validate_world` after the depth check.

    ``prepared``: ``obj`` is :func:`finalize_world`'s private, JSON-safe copy in ``rsi-world/1``
    (:func:`_prepare` made every value JSON), so neither the copy of the migration nor the JSON walk
    is needed.
    """
    had_bytes = isinstance(obj, Mapping) and "bytes" in obj
    data = _fill_late_fields(obj) if prepared and obj.get("schema") == WORLD_SCHEMA else migrate_world(obj)
    bad = None if prepared else _first_non_json(data)
    if bad is not None:
        raise WorldError(f"{bad}: not a JSON value")
    try:
        model = World.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        parts = [f"{_path(e['loc'])}: {e['msg']}" for e in errors[:5]]
        more = f" (+{len(errors) - 5} more)" if len(errors) > 5 else ""
        raise WorldError("; ".join(parts) + more) from None
    out = model.model_dump(mode="json", by_alias=True)
    if out.get("runtime") is None:
        out.pop("runtime", None)
    if not out["defects"]:
        del out["defects"]
    if not had_bytes:
        out["bytes"] = world_bytes(out)
    return out


# --- capture -----------------------------------------------------------------------------------


def _prepare(data: Mapping[str, Any]) -> dict[str, Any]:
    """JSON safety, metadata rules, kwargs and defs filtering (before validation)."""
    raw: dict[Any, Any] = dict(data)  # keys of any type (Any: compiled code checks declared types)
    return _prepared(raw, _jsonable({k: v for k, v in raw.items() if k != "bytes"}, metadata=False))


def _prepared(raw: dict[Any, Any], w: dict[str, Any], *, plain: bool = False) -> dict[str, Any]:
    """:func:`_prepare` after the JSON-safe copy ``w`` of ``raw`` (without ``bytes``) was made.

    ``plain``: ``w`` was made by :func:`_copy_checked`, so every tool definition that is a dict is
    JSON that ``json.dumps`` writes (no integer beyond ±``MAX_SAFE_INT``, no non-finite float) and its
    copy in ``w`` is the one :func:`_jsonable` would make again.
    """
    state = raw.get("state")
    metadata = state.get("metadata") if isinstance(state, Mapping) else None
    if isinstance(w.get("state"), dict) and isinstance(metadata, Mapping):
        w["state"]["metadata"] = _scrub(_jsonable(metadata, metadata=True))
    plan = w.get("plan")
    if isinstance(plan, dict) and isinstance(plan.get("kwargs"), dict):
        plan["kwargs"] = {k: v for k, v in plan["kwargs"].items() if k in SAFE_KWARGS}
    tools, raw_tools = w.get("tools"), raw.get("tools")
    if isinstance(tools, dict) and isinstance(raw_tools, Mapping) and isinstance(raw_tools.get("defs"), list):
        contributed = set(tools.get("contributed") or ())
        if plain:
            tools["defs"] = [copied for copied, d in zip(tools["defs"], raw_tools["defs"], strict=True)
                             if type(d) is dict and d.get("name") not in contributed]
        else:
            tools["defs"] = [_jsonable(d, metadata=False) for d in raw_tools["defs"]
                             if _serializable(d) and d.get("name") not in contributed]
    memory = w.get("memory")
    if isinstance(memory, dict) and isinstance(memory.get("chunks"), list):
        memory["chunks"] = [_chunk(c) for c in memory["chunks"]]
    w.setdefault("schema", WORLD_SCHEMA)
    w.setdefault("replayable", True)
    return w


class _Slow(Exception):
    """The one-walk copy (:func:`_copy_checked`) met a case it leaves to the checks one by one."""


_IMAGE = frozenset(IMAGE_TYPES)


def _copy_checked(v: Any, level: int, images: list[bool]) -> Any:
    """:func:`_jsonable` (``metadata=False``) of ``v`` at nesting ``level`` (the world is 1), with the
    depth rule and the image test in the same walk (docs/performance/turn-checks.md).

    Plain JSON only (exact ``dict``, ``list``, ``str``, ``bool``, finite ``float``, None, ``int``
    within ±:data:`MAX_SAFE_INT`, which the boundary walk refuses beyond); anything else, or a
    container deeper than :data:`MAX_DEPTH`, raises :class:`_Slow` before any deeper recursion.
    Sets ``images[0]`` when a dict of the copy has a ``type`` in
    :data:`IMAGE_TYPES`.
    """
    t = type(v)
    if t is str or t is bool or v is None:
        return v
    if t is int:
        if -MAX_SAFE_INT <= v <= MAX_SAFE_INT:
            return v
        raise _Slow
    if t is float and math.isfinite(v):
        return v
    if level > MAX_DEPTH or (t is not dict and t is not list):
        raise _Slow
    if t is list:
        return [_copy_checked(i, level + 1, images) for i in v]
    out: dict[str, Any] = {}
    for k, item in v.items():
        if type(k) is not str:
            raise _Slow
        out[k] = _copy_checked(item, level + 1, images)
    kind = out.get("type")
    if type(kind) is str and kind in _IMAGE:
        images[0] = True
    return out


def _has_image(v: Any) -> bool:
    """Whether a dict under the JSON value ``v`` (itself included) has a ``type`` in :data:`IMAGE_TYPES`."""
    stack = [v]
    while stack:
        item = stack.pop()
        if type(item) is dict:
            kind = item.get("type")
            if type(kind) is str and kind in _IMAGE:
                return True
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)
    return False


def _prepare_checked(data: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """The depth check, :func:`_prepare` and :func:`_replace_images` of :func:`finalize_world`: one walk
    for plain JSON (:func:`_copy_checked`); anything else through the three steps one by one, which
    raise what they always raised. Returns the prepared copy and whether an image was replaced."""
    if type(data) is dict and not isinstance(data.get("bytes"), (Mapping, list, tuple)):
        raw: dict[Any, Any] = dict(data)  # keys of any type (as in _prepare)
        images = [False]
        try:
            body = _copy_checked({k: v for k, v in raw.items() if k != "bytes"}, 1, images)
        except _Slow:
            pass
        else:
            w = _prepared(raw, body, plain=True)
            metadata = w["state"].get("metadata") if isinstance(w.get("state"), dict) else None
            if not images[0] and not _has_image(metadata):
                return w, False  # no dict of w is an image: _replace_images would change nothing
            return _replace_images(w)
    check_depth(data, "", error=WorldLimitError)
    return _replace_images(_prepare(data))


def _chunk(c: Any) -> Any:
    """A memory chunk projected on ``{key, source, content, relevance_score, metadata, pinned}``."""
    if not isinstance(c, dict):
        return c
    score: Any = c.get("relevance_score")
    text: dict[str, str] = {}
    for k in ("key", "source", "content"):
        v = c.get(k)
        text[k] = v if isinstance(v, str) else ("" if v is None else str(v))
    if not (isinstance(score, (int, float)) and not isinstance(score, bool) and math.isfinite(score)):
        score = None
    return {**text, "relevance_score": None if score is None else float(score),
            "metadata": c.get("metadata") if isinstance(c.get("metadata"), dict) else {},
            "pinned": bool(c.get("pinned"))}


def _serializable(d: Any) -> bool:
    if not isinstance(d, dict):
        return False
    try:
        json.dumps(d, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def _clip_world(w: dict[str, Any]) -> bool:
    cut = False
    for section, key in (("tools", "calls"), ("outcome", "transcript")):
        items = w[section].get(key) if isinstance(w.get(section), dict) else None
        for item in items if isinstance(items, list) else ():
            if isinstance(item, dict) and "content" in item:
                item["content"], c = _clip_walk(item["content"])
                cut |= c
    return cut


def _add_defects(w: dict[str, Any], new: list[Defect]) -> None:
    """Append new repairs to the record's ``defects`` (a malformed list is left to validation)."""
    earlier = w.get("defects", [])
    well_formed = isinstance(earlier, list) and all(
        isinstance(d, dict) and isinstance(d.get("path"), str) and isinstance(d.get("defect"), str)
        for d in earlier)
    if new and well_formed:
        w["defects"] = merge_defects(earlier, new)


def finalize_world(data: Mapping[str, Any]) -> dict[str, Any]:
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
    w, dropped = _prepare_checked(data)
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


# --- the read side -----------------------------------------------------------------------------


def text_of(x: Any) -> str:
    """Plain text of a content value (docs/formats.md §4.1).

    A string as is; a mapping with a string ``text`` and ``type`` None or ``"text"`` → that text; a
    mapping with ``content`` → ``text_of(content)``; a list → newline-join of the non-empty texts of its
    items, skipping ``tool_use``, ``tool_result`` and ``thinking`` blocks; anything else → ``""``.
    """
    if isinstance(x, str):
        return x
    if isinstance(x, Mapping):
        if isinstance(x.get("text"), str) and x.get("type") in (None, "text"):
            return str(x["text"])
        if "content" in x:
            return text_of(x["content"])
        return ""
    if isinstance(x, list):
        skip = ("tool_use", "tool_result", "thinking")
        texts = [text_of(i) for i in x if not (isinstance(i, Mapping) and i.get("type") in skip)]
        return "\n".join(t for t in texts if t)
    return ""


def new_world_id() -> str:
    """``"w_" + 24 lowercase hex`` (random)."""
    return "w_" + secrets.token_hex(12)


def _section(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    v = data.get(key)
    return v if isinstance(v, Mapping) else {}


@dataclass
class TurnWorld:
    """A stored world with its row fields. Properties read ``data`` defensively (any stored version)."""

    id: str
    data: dict[str, Any]
    signals: dict[str, Any] = field(default_factory=dict)
    interaction_id: str = ""
    seq: int = 0
    """Position in its conversation (SQL), 1-based; 0 = unknown."""

    @property
    def replayable(self) -> bool:
        """``schema == rsi-world/1``, ``replayable`` (default true) and a non-empty ``plan``."""
        return (self.data.get("schema") == WORLD_SCHEMA and bool(self.data.get("replayable", True))
                and bool(self.data.get("plan")))

    @property
    def request(self) -> str:
        """``text_of(input)``, stripped."""
        return text_of(self.data.get("input")).strip()

    @property
    def answer(self) -> str:
        """``outcome.final_text``."""
        return str(_section(self.data, "outcome").get("final_text") or "")

    @property
    def history(self) -> list[Any]:
        """``state.messages`` (the earlier conversation)."""
        return list(_section(self.data, "state").get("messages") or [])

    @property
    def tool_calls(self) -> list[Any]:
        """``tools.calls``."""
        return list(_section(self.data, "tools").get("calls") or [])

    @property
    def clock(self) -> float:
        """Turn start, epoch seconds (0.0 if absent)."""
        return float(self.data.get("clock") or 0.0)

    @property
    def harness_version(self) -> str | None:
        """The version that ran the turn."""
        v = self.data.get("harness_version")
        return v if isinstance(v, str) else None

    @property
    def model(self) -> str | None:
        """The policy model of the turn."""
        v = self.data.get("model")
        return v if isinstance(v, str) else None

    @property
    def conversation(self) -> str:
        """The conversation key: the row's ``interaction_id``, else the record's."""
        return self.interaction_id or str(self.data.get("interaction_id") or "")

    def preview(self, n: int = 160) -> str:
        """The request with whitespace collapsed, cut to ``n`` characters (last one ``…`` when cut)."""
        text = " ".join(self.request.split())
        return text if len(text) <= n else text[: max(0, n - 1)] + "…"


def previous_in_conversation(worlds: Sequence[TurnWorld], cur: TurnWorld) -> TurnWorld | None:
    """The latest world of ``cur``'s conversation before it, by ``(seq, clock)``; None if there is none
    or ``cur`` has no conversation key."""
    conv = cur.conversation
    if not conv:
        return None
    key = (cur.seq, cur.clock)
    earlier = [w for w in worlds if w.id != cur.id and w.conversation == conv and (w.seq, w.clock) < key]
    return max(earlier, key=lambda w: (w.seq, w.clock), default=None)

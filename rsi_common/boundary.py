"""The one input boundary: what every value from outside must satisfy before it is stored or handed to
recursive code (json, pydantic, the credential walker). See docs/security/input-boundary.md.

* **Unicode**: strings hold Unicode scalar values only. A lone surrogate (U+D800..U+DFFF) or U+0000
  (which PostgreSQL cannot store in text) is *repaired* in world content — replaced by U+FFFD and
  reported as a :class:`Defect` — and *refused* everywhere else (ids, dict keys, signals, trajectories,
  harness manifests and files).
* **Nesting**: at most :data:`MAX_DEPTH` levels, checked with an explicit stack, never by recursion.
* **Sizes**: the limits below, in bytes as measured by :func:`scan` (compact JSON: strings and keys by
  their UTF-8 bytes plus quotes, numbers by their digits, punctuation; escape sequences not counted),
  or in characters where a name says ``_CHARS``.
* **Ids**: :func:`check_id`, one grammar on every database (ASCII letters, digits and ``._:@+=-``,
  starting with a letter or digit, at most :data:`MAX_ID_CHARS` characters).
* **Numbers**: integers within ±:data:`MAX_SAFE_INT` (the I-JSON range, RFC 7493), floats finite.

A refusal raises :class:`~rsi_common.errors.InputLimitError` (or the subclass the caller passes as
``error``): the message starts with the field path and names the limit; it never contains the value.
Paths show a dict key only when it is a short identifier (:func:`key_segment`), so neither a secret
key name nor a bad character reaches a message.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Literal, TypedDict

from rsi_common.errors import InputLimitError, InvalidInput

__all__ = [
    "ID_CHARS",
    "MAX_CAPTURED_WORLD_BYTES",
    "MAX_CHECKPOINT_BYTES",
    "MAX_COMMENT_BYTES",
    "MAX_CRITERIA",
    "MAX_CRITERION_BYTES",
    "MAX_DEFECTS",
    "MAX_DEPTH",
    "MAX_EXPECTED_BYTES",
    "MAX_FINAL_TEXT_BYTES",
    "MAX_HARNESS_FILE_BYTES",
    "MAX_HARNESS_VERSION_CHARS",
    "MAX_ID_CHARS",
    "MAX_IMPLICIT_BYTES",
    "MAX_INPUT_BYTES",
    "MAX_INT32",
    "MAX_ISSUE_BYTES",
    "MAX_LINE_BYTES",
    "MAX_MANIFEST_BYTES",
    "MAX_MEMORY_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_METADATA_BYTES",
    "MAX_MODEL_CHARS",
    "MAX_PLAN_BYTES",
    "MAX_PROVIDER_CHARS",
    "MAX_SAFE_INT",
    "MAX_STORED_WORLD_BYTES",
    "MAX_SYSTEM_PARTS_BYTES",
    "MAX_TOOL_CALL_BYTES",
    "MAX_TOOL_DEFS_BYTES",
    "MAX_TOOL_INPUT_BYTES",
    "MAX_TRAJECTORY_BYTES",
    "MAX_WORLD_OTHER_BYTES",
    "REPLACEMENT_CHAR",
    "Defect",
    "DefectKind",
    "Scan",
    "check_depth",
    "check_id",
    "check_int",
    "check_label",
    "check_text",
    "is_id",
    "json_text_depth",
    "key_segment",
    "merge_defects",
    "parse_json",
    "scan",
]

# --- the limits (docs/security/input-boundary.md has the same table) ----------------------------

MAX_DEPTH = 64
"""JSON nesting limit, in levels; the checked document (world, signals, manifest, …) is level 1."""
MAX_ID_CHARS = 128
"""Longest id (agent, io, interaction, session), in characters (= bytes: ids are ASCII)."""
ID_CHARS = "A-Z a-z 0-9 . _ : @ + = -"
"""The characters of an id, for messages and docs."""
MAX_SAFE_INT = 2**53 - 1
"""Largest integer magnitude anywhere in stored JSON (I-JSON, RFC 7493 docs/algorithm/formulas.md §2.2)."""
MAX_INT32 = 2**31 - 1
"""Largest value of an ``INTEGER`` column (PostgreSQL's range; SQLite's is wider)."""
MAX_DEFECTS = 50
"""Repairs listed in a world's ``defects`` (the first ones; later repairs are still made)."""

MAX_INPUT_BYTES = 4_000_000
"""World ``input``. Not emptied above the 2 MB world size, so the hard limit sits above it."""
MAX_MESSAGE_BYTES = 4_000_000
"""Each message of ``state.messages`` and ``outcome.transcript``."""
MAX_FINAL_TEXT_BYTES = 4_000_000
"""``outcome.final_text``."""
MAX_SYSTEM_PARTS_BYTES = 1_000_000
"""``plan.system_parts``, all parts together."""
MAX_PLAN_BYTES = 1_000_000
"""The other ``plan`` fields together (name, output schema, turn notes, kwargs, …)."""
MAX_METADATA_BYTES = 256_000
"""``state.metadata``."""
MAX_MEMORY_BYTES = 1_000_000
"""``memory`` (the first-iteration retrieval)."""
MAX_TOOL_DEFS_BYTES = 1_000_000
"""``tools`` without its calls (definitions and contributed names) together."""
MAX_TOOL_INPUT_BYTES = 1_000_000
"""Each ``tools.calls[i].input``."""
MAX_TOOL_CALL_BYTES = 4_000_000
"""Each tool call without its input (the content is clipped to 32,000 characters anyway)."""
MAX_WORLD_OTHER_BYTES = 100_000
"""Every other world field together (schema, flags, created_at, clock, defects, …)."""
MAX_CAPTURED_WORLD_BYTES = 64_000_000
"""A whole world as captured, before the 2,000,000-byte rule empties messages and tool contents."""
MAX_STORED_WORLD_BYTES = 8_000_000
"""A whole world as stored (after that rule): the hard limit above the spec's 2 MB."""
MAX_HARNESS_VERSION_CHARS = 100
"""World ``harness_version`` and every version argument (the ``String(100)`` columns)."""
MAX_PROVIDER_CHARS = 64
"""World ``provider`` (its column)."""
MAX_MODEL_CHARS = 255
"""World ``model`` (its column)."""

MAX_EXPECTED_BYTES = 100_000
"""Signal ``expected``."""
MAX_COMMENT_BYTES = 20_000
"""Signal ``comment``."""
MAX_ISSUE_BYTES = 20_000
"""Signal ``issue``."""
MAX_CRITERION_BYTES = 2_000
"""Each signal criterion."""
MAX_CRITERIA = 50
"""Number of signal criteria."""
MAX_IMPLICIT_BYTES = 100_000
"""``signals.implicit`` in an imported line (written by consolidation)."""
MAX_TRAJECTORY_BYTES = 256_000
"""A trajectory record (content-free by construction)."""
MAX_MANIFEST_BYTES = 256_000
"""A harness manifest."""
MAX_HARNESS_FILE_BYTES = 256_000
"""Each harness file's text."""
MAX_CHECKPOINT_BYTES = 32_000_000
"""A harness checkpoint file (``rsi import``), checked before it is parsed."""
MAX_LINE_BYTES = 16_000_000
"""One line of ``rsi worlds import``, checked before it is decoded or parsed."""

REPLACEMENT_CHAR = "\ufffd"
"""What a lone surrogate or U+0000 in world content becomes."""

DefectKind = Literal["lone_surrogate", "nul"]
"""A repair: a lone surrogate, or U+0000, replaced by U+FFFD."""


class Defect(TypedDict):
    """One repair recorded in a world's ``defects``: the field path and what was replaced."""

    path: str
    defect: DefectKind


@dataclass(frozen=True)
class Scan:
    """What :func:`scan` found.

    Attributes:
        value: the value, with bad characters replaced when repairing (a new string at the root,
            containers changed in place).
        bytes: the measured JSON size, in bytes.
        defects: the repairs, in walk order.
    """

    value: Any
    bytes: int
    defects: list[Defect]


_SURROGATES = f"{chr(0xD800)}-{chr(0xDFFF)}"  # no surrogate literal: mypyc refuses one (docs/dev/compiled.md)
_BAD_CHARS = re.compile(f"[\x00{_SURROGATES}]")
_SURROGATE = re.compile(f"[{_SURROGATES}]")
_LABEL_BAD = re.compile(f"[\x00-\x1f\x7f{_SURROGATES}]")
_SAFE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,31}")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+=-]*")
_ESCAPE = re.compile(r"\\.", re.DOTALL)
_STRING = re.compile(r'"[^"]*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DELTA = {"[": 1, "{": 1, "]": -1, "}": -1}
_CONTAINERS = (Mapping, list, tuple)
_SHOWN_PATH = 160


def _fmt(path: str | None, message: str) -> str:
    if not path:
        return message
    if len(path) > _SHOWN_PATH:
        path = path[:90] + "…" + path[-60:]
    return f"{path}: {message}"


def key_segment(key: object, index: int) -> str:
    """The path segment of a dict entry: ``.key`` for an identifier of at most 32 characters, else
    ``.<key N>`` (N = the entry's 0-based position), so a path never shows a key's raw text."""
    if isinstance(key, str) and _SAFE_KEY.fullmatch(key):
        return f".{key}"
    return f".<key {index}>"


def _key_path(parent: str, key: object, index: int) -> str:
    """``parent`` + the key's segment; a root path ``""`` gives ``key`` without the dot."""
    seg = key_segment(key, index)
    return parent + seg if parent else seg[1:]


def _child(parent: str, key: object, index: int) -> str:
    if index < 0:
        return parent
    return f"{parent}[{index}]" if key is None else _key_path(parent, key, index)


def _too_deep(path: str | None, max_depth: int) -> str:
    return _fmt(path, f"nested deeper than {max_depth} levels (the JSON depth limit)")


def check_depth(value: Any, path: str, *, max_depth: int = MAX_DEPTH, depth: int = 1,
                error: type[InputLimitError] = InputLimitError) -> None:
    """Refuse a value nested deeper than ``max_depth`` levels, without recursion.

    Only containers are visited (mappings, lists, tuples); other values are leaves. A cycle counts as
    infinitely deep. Run it before any recursive code (``json.dumps``, ``copy.deepcopy``, pydantic)
    touches a value from outside.

    Args:
        value: the value.
        path: its field path, for the message (``""`` for a document root: paths then start with
            the first key).
        max_depth: the limit, in levels.
        depth: the level of ``value`` itself (1 for a document root).
        error: the exception class to raise.

    Raises:
        InputLimitError: too deep (the message names the path where the limit was crossed).
    """
    if not isinstance(value, _CONTAINERS):
        return
    # (node, where, level); where = (parent where, key or None for a list item, index), built into a
    # path only for the message
    stack: list[tuple[Any, Any, int]] = [(value, None, depth)]
    while stack:
        node, where, d = stack.pop()
        if d > max_depth:
            raise error(_too_deep(_link_path(path, where), max_depth))
        t = type(node)
        if t is dict or (t is not list and t is not tuple and isinstance(node, Mapping)):
            for i, (k, item) in enumerate(node.items()):
                ti = type(item)
                if ti is dict or ti is list or (ti not in _SCALARS and isinstance(item, _CONTAINERS)):
                    stack.append((item, (where, k, i), d + 1))
        else:
            for i, item in enumerate(node):
                ti = type(item)
                if ti is dict or ti is list or (ti not in _SCALARS and isinstance(item, _CONTAINERS)):
                    stack.append((item, (where, None, i), d + 1))


_SCALARS = frozenset({str, int, float, bool, type(None)})
"""Exact types that are never containers (a fast path before the ``Mapping`` check)."""


def _link_path(path: str, where: Any) -> str:
    """The field path of a ``(parent, key or None, index)`` link under ``path``."""
    links: list[tuple[Any, int]] = []
    while where is not None:
        where, key, index = where
        links.append((key, index))
    links.reverse()  # (not reversed(): mypyc cannot compile that loop, docs/dev/compiled.md)
    for link_key, link_index in links:
        path = f"{path}[{link_index}]" if link_key is None else _key_path(path, link_key, link_index)
    return path


class _Walker:
    """One pass over a JSON value: depth, characters, keys, numbers and the measured size."""

    def __init__(self, max_bytes: int, repair: bool, max_depth: int, error: type[InputLimitError],
                 limit_text: str | None) -> None:
        self.max_bytes = max_bytes
        self.repair = repair
        self.max_depth = max_depth
        self.error = error
        self.limit_text = limit_text
        self.size = 0
        self.defects: list[Defect] = []

    def over(self, path: str) -> InputLimitError:
        limit = self.limit_text or f"{self.max_bytes:,} bytes"  # formatted only for the message
        return self.error(_fmt(path, f"over the size limit of {limit}"))

    def walk(self, value: Any, path: str, depth: int) -> Any:
        if isinstance(value, str):
            return self.text(value, path, None, -1, self.repair)
        if not isinstance(value, _CONTAINERS):
            self.scalar(value, path, None, -1)
            return value
        stack: list[tuple[Any, str, int]] = [(value, path, depth)]
        while stack:
            node, p, d = stack.pop()
            if d > self.max_depth:
                raise self.error(_too_deep(p, self.max_depth))
            self.size += 2 + max(len(node) - 1, 0)
            t = type(node)
            mutable = self.repair and (t is dict or t is list)
            keyed = t is dict or (t is not list and isinstance(node, Mapping))
            entries: Iterable[tuple[Any, Any]] = node.items() if keyed else enumerate(node)
            for i, (k, item) in enumerate(entries):
                key = k if keyed else None
                if keyed:  # an ASCII key without U+0000 within the budget: counted here
                    if (type(k) is str and k.isascii() and "\x00" not in k
                            and len(k) <= self.max_bytes - self.size):
                        self.size += len(k) + 3
                    else:
                        self.key(k, p, i)
                t = type(item)
                if t is str and item.isascii() and "\x00" not in item:  # the common case of text()
                    if len(item) > self.max_bytes - self.size:
                        raise self.over(_child(p, key, i))
                    self.size += len(item) + 2
                    if self.size > self.max_bytes:
                        raise self.over(_child(p, key, i))
                elif t is str or (t not in _SCALARS and isinstance(item, str)):
                    new = self.text(item, p, key, i, mutable)
                    if new is not item:
                        node[k] = new
                elif t is dict or t is list or (t not in _SCALARS and isinstance(item, _CONTAINERS)):
                    stack.append((item, _child(p, key, i), d + 1))
                else:
                    self.scalar(item, p, key, i)
        return value

    def text(self, s: str, parent: str, key: object, index: int, repair: bool) -> str:
        if len(s) > self.max_bytes - self.size:  # characters <= UTF-8 bytes: over for sure
            raise self.over(_child(parent, key, index))
        surrogate = False
        if s.isascii():
            self.size += len(s) + 2
        else:
            try:
                self.size += len(s.encode("utf-8")) + 2
            except UnicodeEncodeError:
                surrogate = True
                self.size += len(s.encode("utf-8", "surrogatepass")) + 2
        if self.size > self.max_bytes:
            raise self.over(_child(parent, key, index))
        nul = "\x00" in s
        if not (nul or surrogate):
            return s
        path = _child(parent, key, index)
        if not repair:
            what = "a lone surrogate (U+D800..U+DFFF)" if surrogate else "U+0000 (NUL)"
            raise self.error(_fmt(path, f"contains {what}; only Unicode scalar values other than U+0000 "
                                        "are accepted here"))
        if surrogate:
            self.defects.append({"path": path, "defect": "lone_surrogate"})
        if nul:
            self.defects.append({"path": path, "defect": "nul"})
        return _BAD_CHARS.sub(REPLACEMENT_CHAR, s)

    def key(self, k: object, parent: str, index: int) -> None:
        if not isinstance(k, str):
            raise self.error(_fmt(_child(parent, k, index), "a dict key is not a string"))
        if len(k) > self.max_bytes - self.size:
            raise self.over(_child(parent, k, index))
        if k.isascii():
            self.size += len(k) + 3
            bad = "\x00" in k
        else:
            bad = "\x00" in k or _SURROGATE.search(k) is not None
            if not bad:
                self.size += len(k.encode("utf-8")) + 3
        if bad:
            raise self.error(_fmt(_child(parent, k, index), "a dict key contains a lone surrogate or U+0000; "
                                                            "keys are refused, never repaired"))

    def scalar(self, v: Any, parent: str, key: object, index: int) -> None:
        if v is None or v is True:
            self.size += 4
        elif v is False:
            self.size += 5
        elif isinstance(v, int):
            if not -MAX_SAFE_INT <= v <= MAX_SAFE_INT:
                raise self.error(_fmt(_child(parent, key, index),
                                      f"integer outside ±{MAX_SAFE_INT:,} (2**53 - 1, the I-JSON range)"))
            self.size += len(int.__repr__(v))
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise self.error(_fmt(_child(parent, key, index), "is not a finite JSON number"))
            self.size += len(float.__repr__(v))
        else:
            raise self.error(_fmt(_child(parent, key, index), f"a {type(v).__name__} is not JSON"))
        if self.size > self.max_bytes:
            raise self.over(_child(parent, key, index))


def scan(value: Any, path: str, *, max_bytes: int, repair: bool = False, depth: int = 1,
         max_depth: int = MAX_DEPTH, error: type[InputLimitError] = InputLimitError,
         limit_text: str | None = None) -> Scan:
    """Check a JSON value in one pass: depth, characters, keys, numbers and size.

    Args:
        value: dicts, lists (tuples and other mappings are read, never repaired), strings, finite
            numbers, booleans and None.
        path: the value's field path, for messages and defects.
        max_bytes: the size limit, in measured bytes (module docstring); the walk stops as soon as
            it is crossed, so a huge value costs no more than the limit.
        repair: replace lone surrogates and U+0000 in string *values* by U+FFFD and report them
            (containers are changed in place: pass a private copy); False refuses them.
        depth: the level of ``value`` in its document (1 = root).
        max_depth: the depth limit, in levels.
        error: the exception class to raise.
        limit_text: how the size limit is named in the message (default ``"<max_bytes> bytes"``).

    Returns:
        The :class:`Scan`.

    Raises:
        InputLimitError: a rule is broken (the message names the path and the limit, never the value).
    """
    walker = _Walker(max_bytes, repair, max_depth, error, limit_text)
    out = walker.walk(value, path, depth)
    return Scan(out, walker.size, walker.defects)


def check_text(value: Any, path: str, *, max_bytes: int,
               error: type[InputLimitError] = InputLimitError) -> str:
    """A string of Unicode scalar values without U+0000, at most ``max_bytes`` UTF-8 bytes.

    Raises:
        InputLimitError: not a string, or a rule is broken.
    """
    if not isinstance(value, str):
        raise error(_fmt(path, f"must be a string, got {type(value).__name__}"))
    scan(value, path, max_bytes=max_bytes + 2, error=error, limit_text=f"{max_bytes:,} bytes")
    return value


def is_id(value: object, *, max_chars: int = MAX_ID_CHARS) -> bool:
    """Whether ``value`` follows the id grammar (module docstring)."""
    return (isinstance(value, str) and 0 < len(value) <= max_chars
            and _ID.fullmatch(value) is not None)


def check_id(value: object, path: str, *, empty_ok: bool = False, max_chars: int = MAX_ID_CHARS,
             error: type[InputLimitError] = InputLimitError) -> str:
    """Return ``value`` if it follows the id grammar (``""`` too when ``empty_ok``).

    The grammar is checked before any database sees the id, so SQLite and PostgreSQL accept and
    refuse exactly the same ids.

    Raises:
        InputLimitError: not a string or not a valid id (the id itself is not shown).
    """
    if not isinstance(value, str):
        raise error(_fmt(path, f"must be a string id, got {type(value).__name__}"))
    if (empty_ok and value == "") or is_id(value, max_chars=max_chars):
        return value
    raise error(_fmt(path, f"not a valid id: 1 to {max_chars} characters from {ID_CHARS}, "
                           "starting with a letter or digit"))


def check_label(value: object, path: str, *, max_chars: int,
                error: type[InputLimitError] = InputLimitError) -> str:
    """A short single-line text stored in a ``String(max_chars)`` column (a model or provider name,
    a version): at most ``max_chars`` characters, no control character, U+0000 or lone surrogate.

    Raises:
        InputLimitError: not a string or a rule is broken.
    """
    if not isinstance(value, str):
        raise error(_fmt(path, f"must be a string, got {type(value).__name__}"))
    if len(value) > max_chars:
        raise error(_fmt(path, f"longer than {max_chars} characters (its column)"))
    if _LABEL_BAD.search(value):
        raise error(_fmt(path, "contains a control character, U+0000 or a lone surrogate"))
    return value


def check_int(value: object, path: str, *, lo: int = -MAX_SAFE_INT, hi: int = MAX_SAFE_INT,
              error: type[InputLimitError] = InputLimitError) -> int:
    """An integer (not a bool) within ``lo..hi``.

    Raises:
        InputLimitError: not an integer, or out of range.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(_fmt(path, f"must be an integer, got {type(value).__name__}"))
    if not lo <= value <= hi:
        raise error(_fmt(path, f"must be an integer from {lo:,} to {hi:,}"))
    return value


def merge_defects(earlier: Iterable[Defect], new: Iterable[Defect]) -> list[Defect]:
    """``earlier`` then the ``new`` defects not already listed, at most :data:`MAX_DEFECTS`."""
    out = list(earlier)[:MAX_DEFECTS]
    seen = {(d["path"], d["defect"]) for d in out}
    for d in new:
        if len(out) >= MAX_DEFECTS:
            break
        if (d["path"], d["defect"]) not in seen:
            seen.add((d["path"], d["defect"]))
            out.append(d)
    return out


def json_text_depth(text: str) -> int:
    """The deepest bracket nesting of JSON text, without parsing it (linear time, no recursion).

    Escape pairs are removed first, then strings, then everything but brackets. For valid JSON the
    result is exact; for invalid JSON it is exact up to the first error (where ``json.loads`` stops),
    so a parser never goes deeper than the result.
    """
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", _ESCAPE.sub("", text)))
    return max(accumulate(map(_DELTA.__getitem__, brackets)), default=0)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(text: str | bytes, path: str | None, *, max_bytes: int, max_depth: int = MAX_DEPTH,
               error: type[InputLimitError] = InputLimitError) -> Any:
    """Parse JSON text from outside: size, UTF-8, depth, then ``json.loads``.

    Args:
        text: the text, or its UTF-8 bytes (decoded strictly).
        path: where the text comes from, for messages (None: no prefix).
        max_bytes: the size limit of the text, in bytes.
        max_depth: the nesting limit, in levels (the text's root is level 1).
        error: the exception class of limit refusals.

    Returns:
        The parsed value (strings may still hold lone surrogates from ``\\ud800`` escapes: scan it).

    Raises:
        InputLimitError: over the size or depth limit, or a number JSON cannot hold.
        InvalidInput: not valid UTF-8, or malformed JSON.
    """
    if len(text) > max_bytes:
        raise error(_fmt(path, f"over the size limit of {max_bytes:,} bytes"))
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(_fmt(path, f"not valid UTF-8 (byte {exc.start + 1})")) from None
    elif not text.isascii() and len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise error(_fmt(path, f"over the size limit of {max_bytes:,} bytes"))
    if json_text_depth(text) > max_depth:
        raise error(_too_deep(path, max_depth))
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InvalidInput(_fmt(path, f"malformed JSON: {exc.msg} (column {exc.colno})")) from None
    except ValueError:  # NaN/Infinity, or an integer literal longer than Python converts
        raise error(_fmt(path, "a number is not a finite JSON number within range")) from None

"""Reading stored JSON defensively, and reasons that are safe to store or print.

The input boundary refuses or repairs bad input before it is stored, but a row can still be bad
when it is read back: written by an older version, by hand, or by a future bug. Such a row must
never fail every later run of its agent or an export (``docs/operations/failure-recovery.md``,
*Poison rows*). This module decides whether a decoded value can go through the pipeline:

* **valid text** — every string and object key is made of Unicode scalar values (no lone
  surrogate such as ``"\\ud800"``, which cannot be encoded as UTF-8: hashing, HTTP bodies and files
  fail on it);
* **finite numbers** — ``NaN`` / ``Infinity`` cannot be written back (JSON columns refuse them);
* **bounded nesting** — at most :data:`MAX_STORED_DEPTH` levels, checked without recursion.

Reasons and error messages built here never quote stored content: they name a field path made
of plain keys only, and any text is cleaned by :func:`safe_text` (invalid characters replaced,
credential-shaped text withheld, length cut).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypedDict

from rsi_common.credentials import find_credentials
from rsi_common.errors import RsiError

__all__ = [
    "MAX_STORED_DEPTH",
    "ErrorRecord",
    "StoredDataError",
    "decode_stored",
    "error_record",
    "first_problem",
    "repair",
    "safe_reason",
    "safe_text",
]

MAX_STORED_DEPTH = 128
"""Deepest nesting of a stored JSON value the pipeline reads (containers count one level each).
It must stay at or above the input boundary's nesting limit, so a row the boundary let through is
never skipped (real worlds nest about ten levels), and well below the depth where Python's
recursive JSON walkers fail (about 900 levels)."""
REPLACEMENT = "\ufffd"
_BAD_CHAR = re.compile(r"[\ud800-\udfff\x00]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")
_WITHHELD = "[withheld: looks like a credential]"
_MAX_PATH = 100


class StoredDataError(ValueError):
    """A stored value cannot be decoded or used; ``str()`` is a safe reason (no stored content)."""


def safe_text(text: object, limit: int = 300) -> str:
    """``text`` as a string that is safe to store, log or print.

    Lone surrogates and NUL characters become U+FFFD, and text in which a credential pattern is
    found is replaced as a whole by a fixed note (the pattern labels are not shown either).
    """
    s = _BAD_CHAR.sub(REPLACEMENT, str(text))
    if find_credentials(s):
        return _WITHHELD
    return s if len(s) <= limit else s[: max(0, limit - 1)] + "…"


def safe_reason(exc: BaseException, limit: int = 300) -> str:
    """``"<ExceptionClass>: <message>"`` for the project's own errors and Unicode errors (their
    messages name fields and positions, not values), the class name alone for any other exception
    (a database or library message may quote the data), always through :func:`safe_text`."""
    name = type(exc).__name__
    if isinstance(exc, RsiError | UnicodeError | StoredDataError):
        message = str(exc)
        return safe_text(f"{name}: {message}" if message else name, limit)
    return name


class ErrorRecord(TypedDict):
    """A failure stored as data."""

    type: str
    message: str


def error_record(exc: BaseException, limit: int = 300) -> ErrorRecord:
    """Return ``{type, message}`` for ``exc``, the message cut to ``limit`` characters.

    The message is safe to store and show (:func:`safe_text`: invalid characters replaced,
    credential-shaped text withheld); a database error's message, which quotes the statement and
    its parameters, is not kept at all.
    """
    if type(exc).__module__.split(".")[0] == "sqlalchemy":
        return {"type": type(exc).__name__, "message": "database error (statement and parameters not shown)"}
    return {"type": type(exc).__name__, "message": safe_text(str(exc), limit)}


def _key_path(path: str, key: object) -> str:
    name = key if isinstance(key, str) and _PLAIN_KEY.fullmatch(key) else "<key>"
    return f"{path}.{name}" if path else str(name)


@dataclass(frozen=True)
class _Node:
    value: Any
    path: str
    depth: int


def _walk(value: Any, root: str) -> Iterator[tuple[_Node, str | None]]:
    """Every node of ``value`` (depth first, iteratively) with the text of its key, if any."""
    stack: list[tuple[_Node, str | None]] = [(_Node(value, root, 1), None)]
    while stack:
        node, key = stack.pop()
        yield node, key
        v = node.value
        if isinstance(v, dict):
            stack.extend((_Node(item, _key_path(node.path, k), node.depth + 1), k if isinstance(k, str)
                          else None) for k, item in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend((_Node(item, f"{node.path}[{i}]", node.depth + 1), None)
                         for i, item in reversed(list(enumerate(v))))


def _text_problem(s: str) -> str | None:
    m = None if s.isascii() else _SURROGATE.search(s)
    return None if m is None else f"lone surrogate U+{ord(m.group()):04X} (not a Unicode scalar value)"


def _clean(value: Any) -> bool:
    """Fast check without field paths: True when :func:`first_problem` has nothing to report."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, str):
            if _text_problem(v) is not None:
                return False
        elif isinstance(v, float):
            if not math.isfinite(v):
                return False
        elif isinstance(v, dict | list):
            if depth > MAX_STORED_DEPTH:
                return False
            items = v.values() if isinstance(v, dict) else v
            if isinstance(v, dict) and any(isinstance(k, str) and _text_problem(k) for k in v):
                return False
            stack.extend((item, depth + 1) for item in items)
    return True


def first_problem(value: Any, root: str = "") -> str | None:
    """The first reason ``value`` cannot go through the pipeline (module docstring), or ``None``.

    NUL characters are not a problem here: JSON columns store them escaped on both databases.

    Args:
        value: a decoded JSON value.
        root: the field path prefix of the reason (e.g. ``"signals"``).
    """
    if _clean(value):
        return None
    for node, key in _walk(value, root):  # slower: builds the field paths, for the reason
        if node.depth > MAX_STORED_DEPTH:
            return f"{root or '<value>'}: nested deeper than {MAX_STORED_DEPTH} levels"
        where = node.path or "<value>"
        where = where if len(where) <= _MAX_PATH else where[: _MAX_PATH - 1] + "…"
        for text in (key, node.value if isinstance(node.value, str) else None):
            if text is not None and (problem := _text_problem(text)) is not None:
                return f"{where}: {problem}"
        if isinstance(node.value, float) and not math.isfinite(node.value):
            return f"{where}: non-finite number"
    return None


def decode_stored(text: str | bytes | None, root: str, *, want_object: bool = True) -> Any:
    """Decode a stored JSON text and check it with :func:`first_problem`.

    Returns:
        The decoded value (``None`` for SQL ``NULL``).

    Raises:
        StoredDataError: not JSON, too deeply nested to decode, not an object when ``want_object``,
            or a problem found by :func:`first_problem`; the message starts with ``root``.
    """
    if text is None:
        return None
    try:
        value = json.loads(text)
    except RecursionError:
        raise StoredDataError(f"{root}: nested too deeply to decode") from None
    except ValueError as exc:  # JSONDecodeError, and UnicodeDecodeError of bytes
        detail = f" at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise StoredDataError(f"{root}: not valid JSON{detail}") from None
    if want_object and not isinstance(value, dict):
        raise StoredDataError(f"{root}: a JSON object was expected, got {type(value).__name__}")
    problem = first_problem(value, root)
    if problem is not None:
        raise StoredDataError(problem)
    return value


def repair(value: Any) -> tuple[Any, int]:
    """A copy of ``value`` with every lone surrogate replaced by U+FFFD (in strings and keys) and
    every non-finite number replaced by ``null``; returns ``(copy, number of replacements)``.

    Built without recursion; the nesting depth is not changed (check it first).
    """
    count = 0

    def fix(v: Any) -> Any:
        nonlocal count
        if isinstance(v, str):
            out, n = _SURROGATE.subn(REPLACEMENT, v)
            count += n
            return out
        if isinstance(v, float) and not math.isfinite(v):
            count += 1
            return None
        return v

    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while stack:
        v, parent, slot = stack.pop()
        if isinstance(v, dict):
            copy: dict[str, Any] = {}
            parent[slot] = copy
            for k, item in v.items():
                key = fix(k)
                copy[key] = None
                stack.append((item, copy, key))
        elif isinstance(v, list):
            items: list[Any] = [None] * len(v)
            parent[slot] = items
            stack.extend((item, items, i) for i, item in enumerate(v))
        else:
            parent[slot] = fix(v)
    return root[0], count

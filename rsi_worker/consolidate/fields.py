"""Strict readers for the pipeline's stored records (the run context and the consolidation state).

A stored record is read back from SQL and may have been written by an older version, by hand or
by a bug, so it is hostile input (docs/formats.md#versions-and-golden-files): every reader here
checks one field and raises :class:`~rsi_common.stored.StoredDataError` naming the field path,
e.g. ``params.round.delta: must be a number``. Objects are closed: :func:`closed` refuses a key
the format does not define and names it. Messages never quote stored text beyond a key name
shown through :func:`~rsi_common.credentials.safe_repr` (credential-shaped keys are redacted,
long ones cut); numbers must be finite and ``bool`` never passes as a number.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from typing import Any

from rsi_common.credentials import safe_repr
from rsi_common.stored import StoredDataError

__all__ = [
    "array_map",
    "boolean",
    "closed",
    "integer",
    "json_array",
    "json_object",
    "json_objects",
    "number",
    "obj",
    "object_lists",
    "optional_number",
    "optional_text",
    "sub",
    "text",
    "text_map",
    "texts",
]

_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.:\-]{1,64}")


def sub(path: str, key: object) -> str:
    """``path.key`` for a plain key (letters, digits, ``_ . : -``, at most 64), else ``path.<key>``;
    ``path[i]`` for a list index."""
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{path}[{key}]"
    name = key if isinstance(key, str) and _PLAIN_KEY.fullmatch(key) else "<key>"
    return f"{path}.{name}"


def _fail(path: str, problem: str) -> StoredDataError:
    return StoredDataError(f"{path}: {problem}")


def obj(path: str, x: object) -> Mapping[str, Any]:
    """``x`` if it is a JSON object with string keys (the keys of an object the format leaves open
    are not checked: decoded JSON has string keys only)."""
    if not isinstance(x, Mapping):
        raise _fail(path, f"must be a JSON object, got {type(x).__name__}")
    if not all(isinstance(k, str) for k in x):
        raise _fail(path, "every key must be a string")
    return x


def closed(path: str, d: Mapping[str, Any], allowed: Collection[str]) -> None:
    """Refuse the first key of ``d`` not in ``allowed``, naming it."""
    for key in d:
        if key not in allowed:
            raise _fail(path, f"unknown key {safe_repr(key)} (this format has no such field)")


def text(path: str, x: object) -> str:
    """``x`` if it is a string."""
    if not isinstance(x, str):
        raise _fail(path, f"must be a string, got {type(x).__name__}")
    return x


def optional_text(path: str, x: object) -> str | None:
    """``None`` or a string."""
    return None if x is None else text(path, x)


def integer(path: str, x: object, minimum: int | None = None) -> int:
    """``x`` if it is an integer (not a bool), at least ``minimum``."""
    if isinstance(x, bool) or not isinstance(x, int):
        raise _fail(path, f"must be an integer, got {type(x).__name__}")
    if minimum is not None and x < minimum:
        raise _fail(path, f"must be >= {minimum}, got {x}")
    return x


def number(path: str, x: object) -> float:
    """``x`` as a finite float (an int is accepted, a bool is not)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise _fail(path, f"must be a number, got {type(x).__name__}")
    if not math.isfinite(x):
        raise _fail(path, "must be finite")
    return float(x)


def optional_number(path: str, x: object) -> float | None:
    """``None`` or a finite number."""
    return None if x is None else number(path, x)


def boolean(path: str, x: object) -> bool:
    """``x`` if it is a bool."""
    if not isinstance(x, bool):
        raise _fail(path, f"must be true or false, got {type(x).__name__}")
    return x


def json_array(path: str, xs: object) -> list[Any]:
    """A JSON array (a list or tuple), as a new list."""
    if not isinstance(xs, (list, tuple)):
        raise _fail(path, f"must be a JSON array, got {type(xs).__name__}")
    return list(xs)


def texts(path: str, xs: object) -> list[str]:
    """A JSON array of strings."""
    out = json_array(path, xs)
    for i, x in enumerate(out):
        if not isinstance(x, str):
            text(sub(path, i), x)
    return out


def text_map(path: str, d: object) -> dict[str, str]:
    """A JSON object whose values are strings (a copy)."""
    out = dict(obj(path, d))
    for k, x in out.items():
        if not isinstance(x, str):
            text(sub(path, k), x)
    return out


def json_object(path: str, x: object) -> dict[str, Any]:
    """A shallow copy of a JSON object whose content the format leaves open."""
    if not isinstance(x, Mapping):
        raise _fail(path, f"must be a JSON object, got {type(x).__name__}")
    return dict(x)


def json_objects(path: str, xs: object) -> list[dict[str, Any]]:
    """A JSON array of objects whose content the format leaves open (shallow copies)."""
    out = json_array(path, xs)
    for i, x in enumerate(out):
        if not isinstance(x, Mapping):
            json_object(sub(path, i), x)
        out[i] = dict(x)
    return out


def array_map(path: str, d: object) -> dict[str, list[Any]]:
    """A JSON object whose values are JSON arrays (copies of the arrays)."""
    out: dict[str, list[Any]] = {}
    for k, x in obj(path, d).items():
        out[k] = list(x) if isinstance(x, list) else json_array(sub(path, k), x)
    return out


def object_lists(path: str, d: object) -> dict[str, list[dict[str, Any]]]:
    """A JSON object whose values are arrays of objects the format leaves open (shallow copies)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for k, xs in obj(path, d).items():
        if isinstance(xs, list) and all(isinstance(x, Mapping) for x in xs):
            out[k] = [dict(x) for x in xs]
        else:
            out[k] = json_objects(sub(path, k), xs)  # refuses, naming the entry
    return out

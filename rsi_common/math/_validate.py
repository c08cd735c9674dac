"""Argument checks and JSON readers shared by the formula modules (private).

Every check raises :class:`~rsi_common.errors.InvalidInput` (a ``ValueError``) with a message that
names the offending argument. ``bool`` is never accepted where a number is expected, because
``True`` silently passing as ``1`` hides caller bugs.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

from rsi_common.errors import InvalidInput


def number(name: str, x: object) -> float:
    """``x`` as a float; rejects bool, non-numbers and NaN (infinities pass)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise InvalidInput(f"{name} must be a number, got {x!r}")
    if math.isnan(x):
        raise InvalidInput(f"{name} must not be NaN")
    return float(x)


def finite(name: str, x: object) -> float:
    """``x`` as a finite float."""
    v = number(name, x)
    if not math.isfinite(v):
        raise InvalidInput(f"{name} must be finite, got {x!r}")
    return v


def non_negative(name: str, x: object) -> float:
    """``x`` as a finite float ≥ 0."""
    v = finite(name, x)
    if v < 0:
        raise InvalidInput(f"{name} must be >= 0, got {x!r}")
    return v


def unit_interval(name: str, x: object) -> float:
    """``x`` as a float in [0, 1]."""
    v = finite(name, x)
    if not 0.0 <= v <= 1.0:
        raise InvalidInput(f"{name} must lie in [0, 1], got {x!r}")
    return v


def optional_number(name: str, x: object) -> float | None:
    """``None`` or a finite float."""
    return None if x is None else finite(name, x)


def integer(name: str, x: object, minimum: int | None = None) -> int:
    """``x`` as an int (bool rejected), optionally ≥ ``minimum``."""
    if isinstance(x, bool) or not isinstance(x, int):
        raise InvalidInput(f"{name} must be an integer, got {x!r}")
    if minimum is not None and x < minimum:
        raise InvalidInput(f"{name} must be >= {minimum}, got {x}")
    return x


def optional_integer(name: str, x: object, minimum: int | None = None) -> int | None:
    """``None`` or an int ≥ ``minimum``."""
    return None if x is None else integer(name, x, minimum)


def text(name: str, x: object) -> str:
    """``x`` if it is a string."""
    if not isinstance(x, str):
        raise InvalidInput(f"{name} must be a string, got {x!r}")
    return x


def optional_text(name: str, x: object) -> str | None:
    """``None`` or a string."""
    return None if x is None else text(name, x)


def strings(name: str, xs: object) -> tuple[str, ...]:
    """A tuple of strings from a list or tuple (a bare string is rejected)."""
    if isinstance(xs, (str, bytes)) or not isinstance(xs, Iterable):
        raise InvalidInput(f"{name} must be a list of strings, got {xs!r}")
    out = tuple(xs)
    for i, s in enumerate(out):
        text(f"{name}[{i}]", s)
    return out


def mapping(name: str, obj: object) -> Mapping[str, Any]:
    """``obj`` if it is a mapping (a JSON object)."""
    if not isinstance(obj, Mapping):
        raise InvalidInput(f"{name} must be a JSON object, got {type(obj).__name__}")
    return obj


def sequence(name: str, obj: object) -> list[Any]:
    """``obj`` as a list if it is a list or tuple (a JSON array)."""
    if not isinstance(obj, (list, tuple)):
        raise InvalidInput(f"{name} must be a JSON array, got {type(obj).__name__}")
    return list(obj)


def required(d: Mapping[str, Any], key: str, what: str) -> Any:
    """``d[key]``; a missing key is an :class:`InvalidInput` naming the type and the key."""
    if key not in d:
        raise InvalidInput(f"{what}: missing key {key!r}")
    return d[key]


class ReadOnlyDict(dict[str, Any]):
    """A ``dict`` whose mutating methods raise ``TypeError``.

    Used for the mappings held by frozen value types: unlike ``MappingProxyType`` it survives
    ``copy.deepcopy``, ``dataclasses.asdict`` and ``json.dumps``. (Nested values are not frozen.)
    """

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("this mapping is read-only")

    __setitem__ = _refuse
    __delitem__ = _refuse
    __ior__ = _refuse
    clear = _refuse
    pop = _refuse
    popitem = _refuse
    setdefault = _refuse
    update = _refuse

    def __deepcopy__(self, memo: dict[int, Any]) -> ReadOnlyDict:
        return type(self)(copy.deepcopy(dict(self), memo))

    def __copy__(self) -> ReadOnlyDict:
        return self


def frozen_map(name: str, m: Mapping[str, Any] | None) -> ReadOnlyDict:
    """A read-only copy of the JSON object ``m`` (``{}`` for ``None``)."""
    return ReadOnlyDict(mapping(name, {} if m is None else m))

"""Regular expressions from hostile sources (a suite's ``regex`` check, a model's ``grep`` call): the shapes
whose backtracking is exponential in the searched text's length, refused before a pattern runs (Python's
``re`` has no time limit and a search cannot be interrupted)."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["backtracks"]

_REPEATS = {"MAX_REPEAT", "MIN_REPEAT"}


def backtracks(pattern: str) -> bool:
    """Whether ``pattern`` (one that compiles) repeats, more than once, a part that itself holds a repetition
    or an alternation — ``(a+)+``, ``(a|ab)*``, ``(\\w+\\s?)*`` —, the shapes whose backtracking is
    exponential in the searched text's length. Possessive repeats and atomic groups never backtrack and
    are not counted; one-character alternatives are a character class after parsing, not counted either.
    Conservative: ``(foo|bar)+`` is refused too. Polynomial shapes (``.*x.*y``) pass: callers bound the
    searched text instead."""
    parser: Any = importlib.import_module("re._parser")  # the stdlib's own parse (typeshed has no stub)
    stack: list[tuple[Any, bool]] = [(parser.parse(pattern), False)]
    while stack:
        items, inside = stack.pop()
        for op, av in items:
            kind = str(op)
            if kind in _REPEATS:
                _lo, hi, body = av
                if hi > 1 and inside:
                    return True
                stack.append((body, inside or hi > 1))
            elif kind == "BRANCH":
                if inside:
                    return True
                stack.extend((alt, inside) for alt in av[1])
            elif kind == "SUBPATTERN":
                stack.append((av[3], inside))
            elif kind in ("ASSERT", "ASSERT_NOT"):
                stack.append((av[1], inside))
            elif kind == "GROUPREF_EXISTS":
                stack.extend((p, inside) for p in av[1:] if p is not None)
    return False

"""User task adapters for live cycles: ``rsi dream cycle --adapter module:factory``
(docs/dream/cycle.md#task-adapters).

``factory(task_id)`` returns a :class:`~rsi_worker.dream.simtasks.SearchTask` (``task_id``,
``baseline``, ``grid``, ``evaluate(branch, attempt)``). The specification is hostile input: it must be
``dotted.module:name`` (identifiers only, no name starting with ``_``, at most 200 characters); the
module is imported as installed (on ``sys.path``/``PYTHONPATH``; the current directory is not added);
every task the factory returns and every outcome of its ``evaluate`` are checked, and each refusal
names the flag and the field.
"""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Callable
from typing import Any

from rsi_common.errors import InvalidInput
from rsi_worker.dream.simtasks import CellOutcome, SearchTask

__all__ = ["FLAG", "MAX_SPEC_CHARS", "load_adapter"]

FLAG = "--adapter"
MAX_SPEC_CHARS = 200
_NAME = r"[A-Za-z][A-Za-z0-9_]*"
_SPEC = re.compile(rf"({_NAME}(?:\.{_NAME})*):({_NAME})")
_MAX_GRID = (64, 64)
"""Largest ``grid`` a task may declare: (branches, refinements)."""


def _bad(what: str) -> InvalidInput:
    return InvalidInput(f"{FLAG}: {what}")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class _CheckedTask:
    """A user's task with its declared fields checked once and every outcome checked as it comes."""

    def __init__(self, task: Any, asked: str) -> None:
        tid = getattr(task, "task_id", None)
        if not isinstance(tid, str) or not tid or len(tid) > 200:
            raise _bad(f"the factory's task for {asked[:60]!r} has no task_id (a non-empty string ≤ 200)")
        base: Any = getattr(task, "baseline", None)
        if not _number(base):
            raise _bad(f"task {tid[:60]!r}: baseline must be a finite number, got {type(base).__name__}")
        grid = getattr(task, "grid", None)
        if (
            not isinstance(grid, (tuple, list))
            or len(grid) != 2
            or not all(isinstance(g, int) and not isinstance(g, bool) for g in grid)
            or not (1 <= grid[0] <= _MAX_GRID[0] and 0 <= grid[1] <= _MAX_GRID[1])
        ):
            raise _bad(
                f"task {tid[:60]!r}: grid must be (branches 1..{_MAX_GRID[0]}, refinements 0..{_MAX_GRID[1]})"
            )
        if not callable(getattr(task, "evaluate", None)):
            raise _bad(f"task {tid[:60]!r}: evaluate(branch, attempt) is missing")
        self._task = task
        self.task_id, self.baseline = tid, float(base)
        self._grid = (int(grid[0]), int(grid[1]))

    @property
    def grid(self) -> tuple[int, int]:
        """``(branch_count, refine_count)`` the task allows."""
        return self._grid

    def evaluate(self, branch: int, attempt: int) -> CellOutcome:
        """The user's outcome, checked field by field.

        Raises:
            InvalidInput: a field of the outcome is malformed (the episode stops with ``error``).
        """
        out = self._task.evaluate(branch, attempt)
        where = f"task {self.task_id[:60]!r} evaluate({branch}, {attempt})"
        fields = {k: getattr(out, k, None) for k in ("score", "valid", "fail_class", "error", "tokens")}
        score, valid, tokens = fields["score"], fields["valid"], fields["tokens"]
        if score is not None and not _number(score):
            raise _bad(f"{where}: score must be a finite number or None")
        if not isinstance(valid, bool):
            raise _bad(f"{where}: valid must be a boolean")
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
            raise _bad(f"{where}: tokens must be a non-negative integer")
        for key in ("fail_class", "error"):
            if fields[key] is not None and not isinstance(fields[key], str):
                raise _bad(f"{where}: {key} must be a string or None")
        return CellOutcome(
            None if score is None else float(score),
            valid,
            None if fields["fail_class"] is None else str(fields["fail_class"])[:80],
            None if fields["error"] is None else str(fields["error"])[:500],
            tokens,
        )


def load_adapter(spec: str) -> Callable[[str], SearchTask]:
    """The checked task factory named by ``spec`` (module docstring).

    Raises:
        InvalidInput: a malformed specification, a module that cannot be imported, a missing or
            non-callable factory; later, a task or an outcome that is malformed.
    """
    if not isinstance(spec, str) or len(spec) > MAX_SPEC_CHARS:
        raise _bad(f"expected module:factory of at most {MAX_SPEC_CHARS} characters")
    m = _SPEC.fullmatch(spec)
    if m is None:
        raise _bad(f"expected module:factory (dotted identifiers, none starting with '_'), got {spec[:80]!r}")
    module_name, attr = m.groups()
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module may raise anything while importing
        raise _bad(f"cannot import {module_name!r}: {type(exc).__name__}: {str(exc)[:200]}") from None
    factory = getattr(module, attr, None)
    if factory is None:
        raise _bad(f"module {module_name!r} has no {attr!r}")
    if not callable(factory):
        raise _bad(f"{module_name}:{attr} is not callable")

    def make(task_id: str) -> SearchTask:
        try:
            task = factory(task_id)
        except InvalidInput:
            raise
        except Exception as exc:
            raise _bad(
                f"{module_name}:{attr}({task_id[:60]!r}) raised {type(exc).__name__}: {str(exc)[:200]}"
            ) from None
        return _CheckedTask(task, task_id)

    return make

"""Tree worlds ``rsi-dream-world/1``: frozen exploration trees (docs/dream/worlds.md).

A world is a root r (score = the baseline) and cells ``b{branch}a{attempt}``; the parent of ``a0``
is r, the parent of ``a{i}`` is ``a{i-1}`` of the same branch. :func:`load_world` is the one way in
from outside: the input boundary first (size, depth, characters, numbers), then the rules, each error
naming its field (``cells[3].seq``) and never echoing a value.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from rsi_common.boundary import check_id, check_int, parse_json, scan
from rsi_common.errors import InputLimitError, InvalidInput

__all__ = [
    "MAX_ATTEMPTS",
    "MAX_BRANCHES",
    "MAX_CELLS",
    "MAX_ERROR_CHARS",
    "MAX_WORLD_BYTES",
    "SCHEMA",
    "Cell",
    "TreeWorld",
    "cell_id",
    "dump_lines",
    "load_world",
    "read_lines",
]

SCHEMA = "rsi-dream-world/1"
MAX_WORLD_BYTES = 2_000_000
"""Serialized size limit of one world (UTF-8 bytes)."""
MAX_CELLS = 5_000
MAX_BRANCHES = 1_000
MAX_ATTEMPTS = 1_000
MAX_ERROR_CHARS = 2_000
MAX_LABEL_CHARS = 100
_CELL_KEYS = frozenset({"branch", "attempt", "seq", "score", "valid", "fail_class", "error", "tokens"})
_WORLD_KEYS = frozenset({"schema", "world_id", "task_id", "baseline", "cells", "grid", "meta"})


def cell_id(branch: int, attempt: int) -> str:
    """``"b{branch}a{attempt}"``."""
    return f"b{branch}a{attempt}"


@dataclass(frozen=True)
class Cell:
    """One recorded attempt. ``score`` is None when the cell was not evaluated; ``tokens`` is what the
    attempt cost to generate (0 when unknown)."""

    branch: int
    attempt: int
    seq: int
    score: float | None
    valid: bool = True
    fail_class: str | None = None
    error: str | None = None
    tokens: int = 0

    @property
    def id(self) -> str:
        """``b{branch}a{attempt}``."""
        return cell_id(self.branch, self.attempt)

    @property
    def parent(self) -> str:
        """``"r"`` for ``a0``, else the previous attempt's id."""
        return "r" if self.attempt == 0 else cell_id(self.branch, self.attempt - 1)

    def to_json(self) -> dict[str, Any]:
        """Keys ``branch, attempt, seq, score, valid, fail_class, error, tokens``."""
        return {
            "branch": self.branch,
            "attempt": self.attempt,
            "seq": self.seq,
            "score": self.score,
            "valid": self.valid,
            "fail_class": self.fail_class,
            "error": self.error,
            "tokens": self.tokens,
        }


@dataclass(frozen=True)
class TreeWorld:
    """A validated frozen tree (build with :func:`load_world` or :meth:`build`)."""

    world_id: str
    task_id: str
    baseline: float
    cells: tuple[Cell, ...]
    """Sorted by seq (creation order)."""
    grid: tuple[int, int]
    """The recorded grid plan ``(branch_count, refine_count)``: what a replayed plan may not exceed."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    by_id: Mapping[str, Cell] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def build(
        cls,
        world_id: str,
        task_id: str,
        baseline: float,
        cells: Iterable[Cell],
        grid: tuple[int, int] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> TreeWorld:
        """Validate through :func:`load_world` (the same rules as an imported world)."""
        obj: dict[str, Any] = {
            "schema": SCHEMA,
            "world_id": world_id,
            "task_id": task_id,
            "baseline": baseline,
            "cells": [c.to_json() for c in cells],
            "meta": dict(meta or {}),
        }
        if grid is not None:
            obj["grid"] = {"branch_count": grid[0], "refine_count": grid[1]}
        return load_world(obj)

    @property
    def n_cells(self) -> int:
        """N_max: the number of non-root cells."""
        return len(self.cells)

    @property
    def floor(self) -> float:
        """min(baseline, every recorded score): what an unscored revealed cell counts."""
        return min([self.baseline, *(c.score for c in self.cells if c.score is not None)])

    @property
    def recorded_scores(self) -> list[float]:
        """The baseline and every recorded score (the normaliser's input)."""
        return [self.baseline, *(c.score for c in self.cells if c.score is not None)]

    @property
    def best_score(self) -> float:
        """The best recorded score, the baseline included."""
        return max(self.recorded_scores)

    def chain(self, branch: int) -> list[Cell]:
        """The branch's cells by attempt."""
        return sorted((c for c in self.cells if c.branch == branch), key=lambda c: c.attempt)

    def to_json(self) -> dict[str, Any]:
        """The ``rsi-dream-world/1`` object (cells by seq)."""
        return {
            "schema": SCHEMA,
            "world_id": self.world_id,
            "task_id": self.task_id,
            "baseline": self.baseline,
            "cells": [c.to_json() for c in self.cells],
            "grid": {"branch_count": self.grid[0], "refine_count": self.grid[1]},
            "meta": dict(self.meta),
        }


def _bad(path: str, message: str) -> InvalidInput:
    return InvalidInput(f"{path}: {message}")


def _number(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad(path, "must be a finite number")
    return float(value)


def _optional_label(value: Any, path: str, max_chars: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _bad(path, f"must be a string or null, got {type(value).__name__}")
    if len(value) > max_chars:
        raise _bad(path, f"longer than {max_chars} characters")
    return value


def _cell(raw: Any, path: str) -> Cell:
    if not isinstance(raw, Mapping):
        raise _bad(path, f"must be an object, got {type(raw).__name__}")
    unknown = sorted(str(k)[:40] for k in raw if k not in _CELL_KEYS)
    if unknown:
        raise _bad(path, f"unknown key(s) {', '.join(map(repr, unknown))}")
    for key in ("branch", "attempt", "seq"):
        if key not in raw:
            raise _bad(f"{path}.{key}", "is required")
    valid = raw.get("valid", True)
    if not isinstance(valid, bool):
        raise _bad(f"{path}.valid", "must be a boolean")
    score = raw.get("score")
    return Cell(
        branch=check_int(raw["branch"], f"{path}.branch", lo=0, hi=MAX_BRANCHES - 1),
        attempt=check_int(raw["attempt"], f"{path}.attempt", lo=0, hi=MAX_ATTEMPTS - 1),
        seq=check_int(raw["seq"], f"{path}.seq", lo=0),
        score=None if score is None else _number(score, f"{path}.score"),
        valid=valid,
        fail_class=_optional_label(raw.get("fail_class"), f"{path}.fail_class", MAX_LABEL_CHARS),
        error=_optional_label(raw.get("error"), f"{path}.error", MAX_ERROR_CHARS),
        tokens=check_int(raw.get("tokens", 0), f"{path}.tokens", lo=0),
    )


def _check_tree(cells: list[Cell]) -> None:
    seqs: dict[int, int] = {}
    for i, c in enumerate(cells):
        if c.seq in seqs:
            raise _bad(f"cells[{i}].seq", f"duplicates the seq of cells[{seqs[c.seq]}] (seqs must be unique)")
        seqs[c.seq] = i
    by_branch: dict[int, dict[int, int]] = {}
    for i, c in enumerate(cells):
        attempts = by_branch.setdefault(c.branch, {})
        if c.attempt in attempts:
            raise _bad(f"cells[{i}].attempt", f"branch {c.branch} records attempt {c.attempt} twice")
        attempts[c.attempt] = i
    for branch, attempts in by_branch.items():
        for a in range(len(attempts)):
            if a not in attempts:
                raise _bad(
                    f"cells[{attempts[max(attempts)]}].attempt",
                    f"branch {branch}: attempts must be consecutive from 0 (attempt {a} is missing)",
                )
            if a > 0 and cells[attempts[a]].seq < cells[attempts[a - 1]].seq:
                raise _bad(
                    f"cells[{attempts[a]}].seq",
                    f"branch {branch}: attempt {a} was created before its parent (seq order)",
                )


def _grid(raw: Any, cells: list[Cell]) -> tuple[int, int]:
    branches = len({c.branch for c in cells})
    refine = max((c.attempt for c in cells), default=0)
    if raw is None:
        return max(1, branches), refine
    if not isinstance(raw, Mapping):
        raise _bad("grid", "must be an object {branch_count, refine_count} or absent")
    b = check_int(raw.get("branch_count"), "grid.branch_count", lo=1, hi=MAX_BRANCHES)
    r = check_int(raw.get("refine_count"), "grid.refine_count", lo=0, hi=MAX_ATTEMPTS - 1)
    if b < branches or r < refine:
        raise _bad("grid", f"records {branches} branch(es) and attempts up to {refine}, more than its plan")
    return b, r


def load_world(obj: Any) -> TreeWorld:
    """Validate a world object (already parsed JSON) and build the :class:`TreeWorld`.

    Raises:
        InputLimitError: the input boundary refuses it (too large, too deep, a lone surrogate, U+0000,
            a non-finite number); the message names the path.
        InvalidInput: a rule is broken: schema, ids, a cell's fields, attempts not consecutive from 0
            per branch, a duplicated seq, a child created before its parent.
    """
    scan(obj, "world", max_bytes=MAX_WORLD_BYTES)
    if not isinstance(obj, Mapping):
        raise _bad("world", f"must be an object, got {type(obj).__name__}")
    unknown = sorted(str(k)[:40] for k in obj if k not in _WORLD_KEYS)
    if unknown:
        raise _bad("world", f"unknown key(s) {', '.join(map(repr, unknown))}")
    if obj.get("schema") != SCHEMA:
        raise _bad("schema", f"must be {SCHEMA!r}")
    world_id = check_id(obj.get("world_id"), "world_id")
    task_id = check_id(obj.get("task_id"), "task_id")
    baseline = _number(obj.get("baseline"), "baseline")
    raw_cells = obj.get("cells")
    if not isinstance(raw_cells, list):
        raise _bad("cells", "must be a list")
    if len(raw_cells) > MAX_CELLS:
        raise _bad("cells", f"more than {MAX_CELLS} cells")
    cells = [_cell(c, f"cells[{i}]") for i, c in enumerate(raw_cells)]
    _check_tree(cells)
    grid = _grid(obj.get("grid"), cells)
    meta = obj.get("meta", {})
    if not isinstance(meta, Mapping):
        raise _bad("meta", "must be an object")
    ordered = tuple(sorted(cells, key=lambda c: c.seq))
    return TreeWorld(world_id, task_id, baseline, ordered, grid, dict(meta), {c.id: c for c in ordered})


def dump_lines(worlds: Iterable[TreeWorld]) -> Iterator[str]:
    """One compact JSON line per world (no trailing newline)."""
    for w in worlds:
        yield json.dumps(w.to_json(), ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def read_lines(lines: Iterable[str | bytes]) -> Iterator[tuple[int, TreeWorld | InvalidInput]]:
    """Parse JSON Lines: ``(line number, world or the error naming the line and the field)``; blank
    lines skipped.

    A bad line never stops the reading; the caller decides whether one bad line refuses the file.
    """
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = parse_json(line, f"line {n}", max_bytes=MAX_WORLD_BYTES)
        except (InvalidInput, InputLimitError) as exc:
            yield n, exc
            continue
        try:
            yield n, load_world(value)
        except (InvalidInput, InputLimitError) as exc:
            yield n, type(exc)(f"line {n}: {exc}")

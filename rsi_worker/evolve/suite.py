"""Task suites of offline evolve (docs/algorithm/evolve.md#suites): the format, its validation, building.

A suite (``rsi-suite/1``) is ``{schema, name, agent, system, tasks: [{id, world_id | request, checks}],
heldout: [ids]}``:

* a task backed by a recorded world (``world_id``) is replayed (docs/formats.md §4.2) under the
  harness; the world must be one of ``agent``'s stored worlds;
* a task backed by a ``request`` runs through the request adapter (:mod:`rsi_worker.evolve.trials`):
  one fresh turn with the suite's ``system`` prompt and no tools;
* ``checks``: ``answer_criteria`` (``criterion``, optional ``reference``; graded by the criteria
  judge, docs/algorithm/consolidation.md §3.7) or a deterministic verifier, ``contains`` (``text``,
  case-insensitive) or ``regex`` (``pattern``, Python syntax, searched in the answer);
* ``heldout``: task ids evaluated for reporting only, never shown to any role.

A trial's reward is passed checks / checks and its weight the number of checks. Validation refuses,
naming the field: a duplicate id, an unknown world, a check that cannot run (unknown kind, empty
text, a pattern that does not compile), a held-out id that is no task, a task with both or neither
of ``world_id``/``request``, credential-shaped text, and anything over the limits below.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rsi_common.boundary import MAX_LINE_BYTES, check_id, check_label, key_segment, parse_json, scan
from rsi_common.credentials import describe, find_in
from rsi_common.errors import InvalidInput
from rsi_worker.gate.regex_risk import backtracks

__all__ = [
    "CHECK_KINDS",
    "DEFAULT_SYSTEM",
    "MAX_REGEX_ANSWER",
    "MAX_TASKS",
    "SUITE_SCHEMA",
    "Suite",
    "Task",
    "from_jsonl",
    "from_worlds",
    "refuse_unknown_keys",
    "split_heldout",
    "validate_suite",
]

SUITE_SCHEMA = "rsi-suite/1"
CHECK_KINDS = ("answer_criteria", "contains", "regex")
DEFAULT_SYSTEM = "You are a helpful assistant."
MAX_TASKS = 5_000
MAX_CHECKS = 32
MAX_TEXT = 20_000
MAX_CHECK_TEXT = 2_000
MAX_SUITE_BYTES = 64_000_000
"""A whole suite, as measured by :func:`rsi_common.boundary.scan` (above what the per-field limits allow)."""
MAX_REGEX_ANSWER = 20_000
"""A ``regex`` check searches the first this many characters of an answer (a model's answer is hostile:
even a plain ``.*x`` is quadratic in its length)."""
MAX_NAME_CHARS = 200
"""A check's name (shown in views and reports: one line, no control character)."""
_KEYS = {"schema", "name", "agent", "system", "tasks", "heldout"}
_TASK_KEYS = {"id", "world_id", "request", "checks"}
_CHECK_KEYS = {
    "answer_criteria": {"kind", "name", "criterion", "reference"},
    "contains": {"kind", "name", "text", "criterion"},
    "regex": {"kind", "name", "pattern", "criterion"},
}
"""A deterministic check's ``criterion`` is derived (views and reports show it); a given one is replaced."""


@dataclass(frozen=True)
class Task:
    """One task: a recorded world or a request, and its checks (plain JSON objects)."""

    id: str
    checks: tuple[Mapping[str, Any], ...]
    world_id: str | None = None
    request: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id}
        if self.world_id is not None:
            out["world_id"] = self.world_id
        else:
            out["request"] = self.request
        out["checks"] = [dict(c) for c in self.checks]
        return out


@dataclass(frozen=True)
class Suite:
    """A validated suite (module docstring)."""

    name: str
    tasks: tuple[Task, ...]
    heldout: tuple[str, ...] = ()
    agent: str | None = None
    system: str = DEFAULT_SYSTEM

    @property
    def evolve_ids(self) -> list[str]:
        """The evolve split: every task not held out, in suite order."""
        held = set(self.heldout)
        return [t.id for t in self.tasks if t.id not in held]

    @property
    def heldout_ids(self) -> list[str]:
        """The held-out split, in suite order."""
        held = set(self.heldout)
        return [t.id for t in self.tasks if t.id in held]

    def task(self, task_id: str) -> Task:
        for t in self.tasks:
            if t.id == task_id:
                return t
        raise KeyError(task_id)

    def checks(self) -> dict[str, list[Mapping[str, Any]]]:
        """Task id → checks (the shape :func:`rsi_worker.consolidate.evaluate.assemble` reads)."""
        return {t.id: list(t.checks) for t in self.tasks}

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SUITE_SCHEMA,
            "name": self.name,
            "agent": self.agent,
            "system": self.system,
            "tasks": [t.to_json() for t in self.tasks],
            "heldout": list(self.heldout),
        }


def _str(path: str, x: object, limit: int, *, empty_ok: bool = False) -> str:
    if not isinstance(x, str):
        raise InvalidInput(f"{path}: must be a string, got {type(x).__name__}")
    if not empty_ok and not x.strip():
        raise InvalidInput(f"{path}: must not be empty")
    if len(x) > limit:
        raise InvalidInput(f"{path}: {len(x)} characters, over the limit of {limit}")
    return x


def refuse_unknown_keys(path: str, x: Mapping[Any, Any], keys: set[str]) -> None:
    """Raise ``InvalidInput`` naming ``x``'s keys outside ``keys``: a key is shown only when it is a short
    identifier, any other by position (``<key 3>``), so no secret or control character reaches a message.
    """
    unknown = sorted(key_segment(k, i)[1:] for i, k in enumerate(x) if k not in keys)
    if unknown:
        raise InvalidInput(f"{path}: unknown key(s) {', '.join(unknown)}")


def _obj(path: str, x: object, keys: set[str]) -> Mapping[str, Any]:
    if not isinstance(x, Mapping):
        raise InvalidInput(f"{path}: must be an object, got {type(x).__name__}")
    refuse_unknown_keys(path, x, keys)
    return x


def _check(path: str, x: object, i: int) -> dict[str, Any]:
    if not isinstance(x, Mapping):
        raise InvalidInput(f"{path}: must be an object, got {type(x).__name__}")
    kind = x.get("kind", "answer_criteria")
    if kind not in CHECK_KINDS:
        raise InvalidInput(
            f"{path}.kind: cannot run a check of kind {str(kind)[:40]!r}; "
            f"expected one of {', '.join(CHECK_KINDS)}"
        )
    _obj(path, x, _CHECK_KEYS[kind])
    name = check_label(_str(f"{path}.name", x.get("name", f"c{i + 1}"), MAX_NAME_CHARS), f"{path}.name",
                       max_chars=MAX_NAME_CHARS)
    out: dict[str, Any] = {"kind": kind, "name": name}
    if kind == "answer_criteria":
        out["criterion"] = _str(f"{path}.criterion", x.get("criterion"), MAX_CHECK_TEXT)
        if x.get("reference") is not None:
            out["reference"] = _str(f"{path}.reference", x["reference"], MAX_TEXT)
    elif kind == "contains":
        out["text"] = _str(f"{path}.text", x.get("text"), MAX_CHECK_TEXT)
        out["criterion"] = f"The answer contains {out['text']!r}."
    else:
        pattern = _str(f"{path}.pattern", x.get("pattern"), MAX_CHECK_TEXT)
        try:
            re.compile(pattern)
        except (re.error, RecursionError) as exc:  # 500 nested groups overflow the stdlib's parser
            why = exc if isinstance(exc, re.error) else "nested too deeply"
            raise InvalidInput(f"{path}.pattern: cannot run: the pattern does not compile ({why})") from None
        if backtracks(pattern):
            raise InvalidInput(
                f"{path}.pattern: cannot run: a repetition holds another repetition or an alternation "
                "(nested quantifiers backtrack exponentially on a hostile answer)"
            )
        out["pattern"] = pattern
        out["criterion"] = f"The answer matches the pattern {pattern!r}."
    return out


def _task(path: str, x: object) -> Task:
    d = _obj(path, x, _TASK_KEYS)
    task_id = check_id(d.get("id"), f"{path}.id", max_chars=128, error=InvalidInput)  # type: ignore[arg-type]
    has_world, has_request = d.get("world_id") is not None, d.get("request") is not None
    if has_world == has_request:
        raise InvalidInput(f"{path}: give exactly one of world_id and request")
    checks = d.get("checks")
    if not isinstance(checks, list) or not checks:
        raise InvalidInput(
            f"{path}.checks: must be a non-empty list (a trial's weight is its number of checks)"
        )
    if len(checks) > MAX_CHECKS:
        raise InvalidInput(f"{path}.checks: {len(checks)} checks, over the limit of {MAX_CHECKS}")
    parsed = tuple(_check(f"{path}.checks[{i}]", c, i) for i, c in enumerate(checks))
    names = [c["name"] for c in parsed]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise InvalidInput(f"{path}.checks: duplicate check name {dup[:60]!r}")
    if has_world:
        world_id = check_id(d["world_id"], f"{path}.world_id", error=InvalidInput)  # type: ignore[arg-type]
        return Task(task_id, parsed, world_id=world_id)
    return Task(task_id, parsed, request=_str(f"{path}.request", d["request"], MAX_TEXT))


def validate_suite(obj: object, world_exists: Callable[[str], bool] | None = None) -> Suite:
    """A suite from JSON, checked (module docstring).

    Args:
        obj: the parsed JSON.
        world_exists: tells whether a world id is a stored world of the suite's agent; ``None``
            skips that check (the caller checks later, e.g. before a run).

    Raises:
        InvalidInput: the first problem, naming its field (``suite.tasks[3].checks[0].pattern``);
            a credential-shaped value is named by its field, never echoed.
    """
    d = _obj("suite", obj, _KEYS)
    # the boundary's rules before anything else reads it (docs/security/input-boundary.md): depth, size,
    # finite numbers, no lone surrogate or U+0000 in any text or key (refused outside world content: a
    # lone surrogate cannot be encoded as UTF-8 — the policy's request body, exports, --json output)
    scan(dict(d), "suite", max_bytes=MAX_SUITE_BYTES)
    if d.get("schema", SUITE_SCHEMA) != SUITE_SCHEMA:
        raise InvalidInput(f"suite.schema: expected {SUITE_SCHEMA!r}")
    hit = find_in(dict(d), "suite")
    if hit is not None:
        raise InvalidInput(f"{hit[0]}: looks like a credential ({describe(hit[1])}); refused")
    name = check_id(d.get("name"), "suite.name", max_chars=64, error=InvalidInput)  # type: ignore[arg-type]
    agent = d.get("agent")
    if agent is not None:
        agent = check_id(agent, "suite.agent", error=InvalidInput)  # type: ignore[arg-type]
    system = _str("suite.system", d.get("system", DEFAULT_SYSTEM), MAX_TEXT)
    tasks_in = d.get("tasks")
    if not isinstance(tasks_in, list) or not tasks_in:
        raise InvalidInput("suite.tasks: must be a non-empty list")
    if len(tasks_in) > MAX_TASKS:
        raise InvalidInput(f"suite.tasks: {len(tasks_in)} tasks, over the limit of {MAX_TASKS}")
    tasks: list[Task] = []
    seen: set[str] = set()
    for i, x in enumerate(tasks_in):
        task = _task(f"suite.tasks[{i}]", x)
        if task.id in seen:
            raise InvalidInput(f"suite.tasks[{i}].id: duplicate id {task.id!r}")
        seen.add(task.id)
        if task.world_id is not None:
            if agent is None:
                raise InvalidInput(f"suite.tasks[{i}].world_id: a world-backed task needs suite.agent")
            if world_exists is not None and not world_exists(task.world_id):
                raise InvalidInput(
                    f"suite.tasks[{i}].world_id: unknown world {task.world_id!r} "
                    f"(not a stored world of agent {agent!r})"
                )
        tasks.append(task)
    held_in = d.get("heldout", [])
    if not isinstance(held_in, list):
        raise InvalidInput("suite.heldout: must be a list of task ids")
    held: list[str] = []
    for i, h in enumerate(held_in):
        if not isinstance(h, str) or h not in seen:
            raise InvalidInput(f"suite.heldout[{i}]: {str(h)[:80]!r} is not a task id of this suite")
        if h in held:
            raise InvalidInput(f"suite.heldout[{i}]: duplicate id {h!r}")
        held.append(h)
    if len(held) == len(tasks):
        raise InvalidInput("suite.heldout: holds every task; the evolve split would be empty")
    return Suite(name, tuple(tasks), tuple(held), agent, system)


def split_heldout(ids: Sequence[str], fraction: float, seed: int) -> list[str]:
    """The held-out ids: ``round(fraction · n)`` ids drawn by ``random.Random(seed).shuffle`` of the
    sorted ids, returned in the input order (at least one id stays in the evolve split).

    Raises:
        InvalidInput: ``fraction`` outside ``[0, 1)``.
    """
    if not (isinstance(fraction, (int, float)) and math.isfinite(fraction) and 0 <= fraction < 1):
        raise InvalidInput(f"--heldout-fraction: must be in [0, 1), got {fraction!r}")
    order = sorted(ids)
    random.Random(seed).shuffle(order)
    n = min(round(fraction * len(order)), max(0, len(order) - 1))
    chosen = set(order[:n])
    return [i for i in ids if i in chosen]


def from_jsonl(
    name: str,
    lines: Iterable[str],
    *,
    system: str | None = None,
    agent: str | None = None,
    heldout: Sequence[str] = (),
    heldout_fraction: float | None = None,
    seed: int = 7,
    world_exists: Callable[[str], bool] | None = None,
) -> Suite:
    """A suite from a JSONL task file: one task object per line (blank lines skipped).

    Raises:
        InvalidInput: a line is not JSON (named by its number), or the suite is invalid.
    """
    tasks: list[Any] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if len(tasks) == MAX_TASKS:  # before parsing the rest: a file of a million tiny lines stops here
            raise InvalidInput(f"line {n}: more than {MAX_TASKS:,} tasks, over the limit")
        tasks.append(parse_json(line, f"line {n}", max_bytes=MAX_LINE_BYTES))
    held = list(heldout)
    if heldout_fraction is not None:
        if held:
            raise InvalidInput("give either --heldout ids or --heldout-fraction, not both")
        ids: list[str] = [str(t.get("id")) for t in tasks if isinstance(t, Mapping)]
        held = split_heldout(ids, heldout_fraction, seed)
    spec: dict[str, Any] = {
        "schema": SUITE_SCHEMA,
        "name": name,
        "agent": agent,
        "tasks": tasks,
        "heldout": held,
    }
    if system is not None:
        spec["system"] = system
    return validate_suite(spec, world_exists)


def from_worlds(
    name: str,
    agent: str,
    worlds: Iterable[tuple[str, Sequence[Mapping[str, Any]]]],
    *,
    heldout_fraction: float,
    seed: int,
) -> Suite:
    """A suite from an agent's recorded worlds with their criteria: one task per ``(world id, checks)``
    whose checks are not empty, task id = world id; the held-out split drawn by :func:`split_heldout`.

    Raises:
        InvalidInput: no world has criteria, or a bad fraction.
    """
    tasks: list[dict[str, Any]] = [
        {"id": wid, "world_id": wid, "checks": [dict(c) for c in checks]} for wid, checks in worlds if checks
    ]
    if not tasks:
        raise InvalidInput(f"agent {agent!r}: no recorded world has criteria to build tasks from")
    held = split_heldout([str(t["id"]) for t in tasks], heldout_fraction, seed)
    spec = {"schema": SUITE_SCHEMA, "name": name, "agent": agent, "tasks": tasks, "heldout": held}
    return validate_suite(spec)

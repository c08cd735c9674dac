"""The turn checks compiled with mypyc answer exactly like their Python source (docs/dev/compiled.md).

mypyc checks annotated types at run time, so a hostile value of an unexpected type could raise a
``TypeError`` where Python carries on. Each check here runs on the modules as imported (compiled
when built: what ``make test`` and production run) and on a pure copy of their source
(``tests/unit/perf/pure_checks.py``): same exception type and message, or the same result. When no
build is present both sides are Python and the comparison is trivially true; the import test says
which one ran.
"""

from __future__ import annotations

import copy
import importlib
import json
import math
import random
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from rsi_common import boundary, credentials, world
from rsi_common.compiled import COMPILED_MODULES, PURE_ENV, build_is_current, is_compiled, using_source
from rsi_common.errors import WorldLimitError
from tests.adversarial import attacks
from tests.unit.perf import pure_checks
from tests.unit.perf.test_turn_checks_equiv import _docs, _Host

PURE = pure_checks.load("rsi_common.host_input")


def _outcome(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[str, str]:
    try:
        out = fn(*copy.deepcopy(args), **kwargs)
    except Exception as exc:  # every refusal, compared by type and message
        return type(exc).__name__, str(exc)
    if isinstance(out, boundary.Scan) or type(out).__name__ == "Scan":
        out = (out.value, out.bytes, out.defects)
    return "ok", json.dumps(out, ensure_ascii=False, default=repr)


def _both(module: str, name: str, *args: Any, **kwargs: Any) -> None:
    compiled: ModuleType = importlib.import_module(module)
    want = _outcome(getattr(PURE[module], name), *args, **kwargs)
    got = _outcome(getattr(compiled, name), *args, **kwargs)
    assert got == want, f"{module}.{name}"


def test_the_compiled_modules_are_imported_when_built() -> None:
    """With a current build (``make``) every listed module comes from its extension, unless
    ``PURE_PYTHON_CHECKS=1``; the pure copy never does."""
    imported = {name: is_compiled(importlib.import_module(name)) for name in COMPILED_MODULES}
    assert not any(is_compiled(m) for m in PURE.values())
    if using_source():
        assert not any(imported.values()), imported  # all or none: never a stale or partial build
        pytest.skip(f"{PURE_ENV}=1 or no current compiled build (make compiled): the source runs")
    assert build_is_current()
    assert all(imported.values()), imported


def test_finalize_world_on_the_hostile_worlds() -> None:
    """The 278 worlds of the fused-checks test (credentials, surrogates, NUL, NaN, huge integers,
    nesting at the limit, cycles, images, tuples, host objects, str subclasses, bytes, …)."""
    outcomes = [_outcome(world.finalize_world, doc) for doc in _docs()]
    pure = [_outcome(PURE["rsi_common.world"].finalize_world, doc) for doc in _docs()]
    assert outcomes == pure
    assert sum(o[0] == "ok" for o in outcomes) >= 40 and sum(o[0] != "ok" for o in outcomes) >= 100


def test_parse_turn_on_hostile_turns() -> None:
    """Whole turns through ``parse_turn`` (the world, the trajectory's walk and columns, the signals):
    the hostile worlds, and random values as trajectory fields and signals."""
    import rsi_common.host_input as host_input

    def parsed(module: ModuleType) -> Callable[[dict[str, Any]], Any]:
        def run(turn: dict[str, Any]) -> Any:
            p = module.parse_turn("agent-1", turn, record_world=True)
            trajectory = {k: v for k, v in (p.trajectory or {}).items() if k != "trajectory_id"}  # random
            return [p.io_id, p.world, trajectory, p.signals, p.own_loop]
        return run

    rng = random.Random(11)
    outcomes = []
    for doc in _docs()[:120]:
        value = _random_value(rng)
        turn = {"world": doc, "trajectory": {"io_id": doc.get("io_id"), "note": value, "steps": [value]},
                "signals": rng.choice([{"comment": value}, {"stars": value}, {"criteria": [value]}, None])}
        want = _outcome(parsed(PURE["rsi_common.host_input"]), turn)
        assert _outcome(parsed(host_input), turn) == want
        outcomes.append(want[0])
    assert outcomes.count("ok") >= 10 and len(outcomes) - outcomes.count("ok") >= 50


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    strings = ["", "a", "é", "\x00", "\ud800", "max_tokens", '"q"\\', "x" * 70, "\u200bsk-", "İ"]
    kind = rng.randrange(12 if depth < 5 else 8)
    if kind == 0:
        return rng.choice(strings) + rng.choice(strings)
    if kind == 1:
        return rng.choice([0, -1, 2**53 - 1, 2**53, -(2**63), 10**30])
    if kind == 2:
        return rng.choice([0.5, -0.0, math.inf, math.nan, 1e308])
    if kind == 3:
        return rng.choice([True, False, None])
    if kind == 4:
        return rng.choice([b"b", ("t", 1), {1, 2}, _Host("sk-" + "a" * 30)])
    if kind in (5, 6, 7):
        return rng.choice(strings)
    if kind in (8, 9):
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys: list[Any] = [*strings, 1, None, ("k",), "type", "content", "text"]
    return {rng.choice(keys): _random_value(rng, depth + 1) for _ in range(rng.randrange(4))}


def test_the_checks_one_by_one_on_random_values() -> None:
    """``scan``, ``check_depth``, ``find_in``, ``guard_world``, ``validate_world`` and the helpers the
    world walk uses, on random values of every JSON and non-JSON type."""
    rng = random.Random(7)
    for _ in range(300):
        v = _random_value(rng)
        for repair in (False, True):
            _both("rsi_common.boundary", "scan", v, "p", max_bytes=rng.choice([5, 60, 10_000]), repair=repair,
                  error=WorldLimitError)
        _both("rsi_common.boundary", "check_depth", v, "p", max_depth=rng.choice([1, 2, 3]))
        _both("rsi_common.credentials", "find_in", v, "root")
        _both("rsi_common.world", "validate_world", v)
        _both("rsi_common.world", "finalize_world", {"state": {"metadata": v}, "input": v})
        if isinstance(v, dict):
            _both("rsi_common.world_boundary", "guard_world", v)
            _both("rsi_common.world", "finalize_world", v)
            sections = {"state": v, "plan": v, "tools": v, "outcome": v}
            _both("rsi_common.world", "finalize_world", {**v, **sections})
            _both("rsi_common.world", "world_bytes", v)
            _both("rsi_common.world", "migrate_world", v)


def test_the_text_checks_on_the_attack_strings() -> None:
    """Every string of ``tests/adversarial/attacks.json`` through the credential scan, redaction and
    the id, label and text checks."""
    texts = [str(e["text"]) for name in attacks.load() if name != "_about" for e in attacks.section(name)
             if "text" in e]
    assert len(texts) > 150
    for text in texts:
        for name in ("find_credentials", "redact", "redact_urls", "safe_key", "safe_repr", "normalise"):
            _both("rsi_common.credentials", name, text)
        _both("rsi_common.boundary", "check_id", text, "agent_id")
        _both("rsi_common.boundary", "check_label", text, "model", max_chars=64)
        _both("rsi_common.boundary", "check_text", text, "comment", max_bytes=20_000)
        _both("rsi_common.boundary", "parse_json", text, "line", max_bytes=10_000)
        _both("rsi_common.world", "clip", text, 20)
        _both("rsi_common.world", "text_of", [text, {"type": "text", "text": text}])
        _both("rsi_common.credentials", "find_in", {text: text, "k": [text]}, "")
    assert credentials.find_credentials("no secret here") == []

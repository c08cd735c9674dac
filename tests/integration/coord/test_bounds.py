"""Exact-bound early stop in Redis (docs/algorithm/formulas.md §2.10, docs/algorithm/consolidation.md §3.6.2
item 6, docs/check-vectors.md §9.10)."""

from __future__ import annotations

import uuid

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rsi_common.coord import Bounds, Coordinator, bound_key, cancel_key, slots_key
from rsi_common.errors import InvalidInput
from rsi_common.math.bounds import FLOAT_GUARD, can_stop_exactly
from tests.integration.coord.conftest import run_keys


def test_margin_is_the_spec_guard(redis_client: redis.Redis) -> None:
    assert Coordinator(redis_client, lease_s=60).margin == FLOAT_GUARD == 1e-9


def test_spec_example_1_stops_after_the_sixth_zero(redis_client: redis.Redis) -> None:
    coord = Coordinator(redis_client, lease_s=60)
    assert coord.init_bounds("r1", "A", 16, 0.75, 0.0625, 0.75)
    flags = [coord.report_trial("r1", "A", f"w{i // 2}#{i % 2}", 0, 1) for i in range(7)]
    assert flags == [False] * 5 + [True, True]  # after 5: Ŝ_max = 0.6875 = floor, no stop
    assert coord.bounds("r1", "A") == Bounds(0, 7, 9, 0.75, 0.0625, 0.75)
    assert coord.is_cancelled("r1", "A") and not coord.is_cancelled("r1", "B")


def test_spec_example_2_with_a_missing_trial(redis_client: redis.Redis) -> None:
    coord = Coordinator(redis_client, lease_s=60)
    s_star, delta = 8 / 14, 0.196061
    coord.init_bounds("r1", "A", 14, s_star, delta, s_star)
    assert [coord.report_trial("r1", "A", slot, 0, w) for slot, w in
            [("w4#0", 3), ("w2#0", 2), ("w4#1", 3), ("w2#1", 2)]] == [False, False, False, True]
    coord.init_bounds("r1", "B", 14, s_star, delta, s_star)
    flags = [coord.report_trial("r1", "B", "w4#0", 0, 3), coord.report_trial("r1", "B", "w2#0", 0, 2),
             coord.report_trial("r1", "B", "w4#1", 0, 0),  # missing: its weight stays in R
             coord.report_trial("r1", "B", "w2#1", 0, 2)]
    assert flags == [False] * 4
    assert coord.bounds("r1", "B") == Bounds(0, 7, 7, s_star, delta, s_star)


def test_spec_examples_3_and_4(redis_client: redis.Redis) -> None:
    coord = Coordinator(redis_client, lease_s=60)
    coord.init_bounds("r3", "X", 5 + 20, 0.80, 0.02, 0.70)  # S_t binds: (13, 20, 5) -> 0.72 >= S_t
    assert not coord.report_trial("r3", "X", "all", 13, 20)
    coord.init_bounds("r3", "Y", 25, 0.80, 0.02, 0.70)
    assert coord.report_trial("r3", "Y", "all", 12, 20)  # (12, 20, 5) -> 0.68
    coord.init_bounds("r4", "A", 12, 0.5, 0.05, 0.5)
    assert [coord.report_trial("r4", "A", f"s{i}", 0, 2) for i in range(4)] == [False, False, False, True]


def test_redelivered_reports_are_counted_once(redis_client: redis.Redis) -> None:
    coord = Coordinator(redis_client, lease_s=60)
    coord.init_bounds("r1", "A", 10, 0.9, 0.05, 0.9)
    coord.report_trial("r1", "A", "w1#0", 1, 2)
    coord.report_trial("r1", "A", "w1#0", 1, 2)
    coord.report_trial("r1", "A", "w1#0", 0, 0)
    assert coord.bounds("r1", "A") == Bounds(1, 2, 8, 0.9, 0.05, 0.9)
    assert redis_client.scard(slots_key("r1", "A")) == 1


def test_init_is_idempotent(redis_client: redis.Redis) -> None:
    coord = Coordinator(redis_client, lease_s=60)
    assert coord.init_bounds("r1", "A", 10, 0.9, 0.05, 0.9)
    coord.report_trial("r1", "A", "w1#0", 2, 2)
    assert not coord.init_bounds("r1", "A", 99, 0.1, 0.0, 0.1)  # a redelivered launch
    assert coord.bounds("r1", "A") == Bounds(2, 2, 8, 0.9, 0.05, 0.9)


def test_floats_are_stored_as_repr(redis_client: redis.Redis) -> None:
    coord = Coordinator(redis_client, lease_s=60)
    coord.init_bounds("r1", "A", 3, 1 / 3, 0.1 + 0.2, 2 / 3)
    raw = {k.decode(): v.decode() for k, v in redis_client.hgetall(bound_key("r1", "A")).items()}
    assert raw == {"A": "0", "B": "0", "R": "3", "S_star": repr(1 / 3), "delta": repr(0.1 + 0.2),
                   "S_t": repr(2 / 3)}


def test_bad_reports_are_refused(redis_client: redis.Redis) -> None:
    coord = Coordinator(redis_client, lease_s=60)
    coord.init_bounds("r1", "A", 4, 0.9, 0.05, 0.9)
    with pytest.raises(InvalidInput):
        coord.report_trial("r1", "A", "s", 3, 2)
    with pytest.raises(InvalidInput):
        coord.report_trial("r1", "A", "s", -1, 2)
    with pytest.raises(InvalidInput, match="exceeds the remaining weight"):
        coord.report_trial("r1", "A", "s", 0, 5)
    assert coord.bounds("r1", "A") == Bounds(0, 0, 4, 0.9, 0.05, 0.9)
    assert redis_client.scard(slots_key("r1", "A")) == 0  # the refused slot was not recorded
    with pytest.raises(InvalidInput):
        coord.init_bounds("r1", "B", 4, float("nan"), 0.05, 0.9)


def test_uninitialised_bounds_never_cancel(redis_client: redis.Redis) -> None:
    coord = Coordinator(redis_client, lease_s=60)
    assert not coord.report_trial("r1", "A", "s", 0, 1)
    assert coord.bounds("r1", "A") is None and run_keys(redis_client) == []


def test_run_keys_expire_and_are_cleaned_up(redis_client: redis.Redis) -> None:
    coord = Coordinator(redis_client, lease_s=60, run_ttl_s=600)
    for cand in ("A", "B"):
        coord.init_bounds("r1", cand, 2, 0.9, 0.05, 0.9)
    coord.report_trial("r1", "A", "w#0", 0, 2)
    assert coord.is_cancelled("r1", "A")
    for key in (bound_key("r1", "A"), slots_key("r1", "A"), cancel_key("r1", "A"), bound_key("r1", "B")):
        assert 0 < redis_client.pttl(key) <= 600_000
    assert run_keys(redis_client) == ["rsi:run:r1:bound:A", "rsi:run:r1:bound:B", "rsi:run:r1:cancel:A",
                                      "rsi:run:r1:slots:A"]
    assert coord.cleanup_run("r1", ["A", "B"]) == 4
    assert run_keys(redis_client) == [] and coord.cleanup_run("r1", []) == 0


# --- property: the Lua predicate is docs/algorithm/formulas.md §2.10 can_stop_exactly
# -----------------------------------

_ratio = st.builds(lambda n, d: n / d, st.integers(0, 40), st.integers(1, 40))
_value = st.one_of(_ratio, st.floats(0.0, 1.0, allow_nan=False))
_trial = st.tuples(st.integers(1, 4), st.floats(0.0, 1.0), st.booleans(), st.booleans())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    S_star=_value,
    delta=st.one_of(_ratio.map(lambda x: x / 4), st.floats(0.0, 0.5, allow_nan=False)),
    S_t=st.one_of(st.none(), _value),
    trials=st.lists(_trial, min_size=1, max_size=24),
    data=st.data(),
)
def test_report_cancels_exactly_when_can_stop_exactly_holds(
    redis_client: redis.Redis, S_star: float, delta: float, S_t: float | None,
    trials: list[tuple[int, float, bool, bool]], data: st.DataObject,
) -> None:
    """Random trial plans (weights 1-4), outcomes (passed share, missing) and redeliveries; after
    every report the flag equals the Python predicate on the exact (A, B, R)."""
    coord = Coordinator(redis_client, lease_s=60)
    s_t = S_star if S_t is None else S_t
    run, R = uuid.uuid4().hex, sum(w for w, *_ in trials)
    coord.init_bounds(run, "A", R, S_star, delta, s_t)
    A = B = 0
    order = data.draw(st.permutations(range(len(trials))))
    for i in order:
        w, share, missing, redeliver = trials[i]
        passed, weight = (0, 0) if missing else (round(share * w), w)
        for _ in range(2 if redeliver else 1):
            cancelled = coord.report_trial(run, "A", f"slot{i}", passed, weight)
            expected = can_stop_exactly(A + passed, B + weight, R - weight, S_star, delta, s_t)
            assert cancelled == expected
            assert coord.is_cancelled(run, "A") == expected
        A, B, R = A + passed, B + weight, R - weight
        assert coord.bounds(run, "A") == Bounds(A, B, R, S_star, delta, s_t)
    coord.cleanup_run(run, ["A"])

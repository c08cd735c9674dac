"""Accounting and caps (docs/runtime/accounting.md): the ledger, cap resolution, reservations."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.config import RuntimeParams
from rsi_common.db import ensure_agent
from rsi_common.errors import InvalidInput
from rsi_common.runtime import (
    Budget,
    Caps,
    Charge,
    DayTotals,
    charge,
    db_day,
    first_exceeded,
    keys,
    resolve_caps,
    tree_totals,
    turn_key,
    usd_of,
)

NO_CAPS = Caps(None, None, None, None, None, None)


def _charge(factory: sessionmaker[Session], c: Charge) -> tuple[bool, str]:
    with factory.begin() as s:
        ensure_agent(s, c.agent_id)
        day = db_day(s)
        return charge(s, c, day), day


def test_a_key_is_charged_once_and_totals_add_up(factory: sessionmaker[Session]) -> None:
    first, day = _charge(factory, Charge(turn_key("r", "main:1"), "turn", "r", "r", tokens=100, usd=0.5,
                                         turns=1, model_calls=2))
    again, _ = _charge(factory, Charge(turn_key("r", "main:1"), "turn", "r", "r", tokens=999, turns=1))
    _charge(factory, Charge("spawn:sa_1", "spawn", "r", "r.x", spawns=1))
    _charge(factory, Charge(turn_key("r.x", "sa_1:1"), "turn", "r", "r.x", tokens=40, turns=1))
    assert (first, again) == (True, False)
    with factory() as s:
        assert tree_totals(s, "r", day) == DayTotals(tokens=140, usd=0.5, turns=2, spawns=1, messages=0)
        assert tree_totals(s, "r", "1999-01-01") == DayTotals()
    assert len(day) == 10 and day[4] == "-"


def test_caps_resolve_from_settings_then_the_roots_override() -> None:
    params = RuntimeParams(tree_turns_per_day=0, tree_usd_per_day=2.5)
    caps = resolve_caps(params, {"tree_tokens_per_day": 1000, "tree_spawns_per_day": None})
    assert caps == Caps(tokens=1000, agent_tokens=2_000_000, usd=2.5, turns=None, spawns=None, messages=5000)
    with pytest.raises(InvalidInput, match="unknown key 'tree_tokens'"):
        resolve_caps(params, {"tree_tokens": 5})
    for bad in (-1, True, "5", float("nan"), 1.5):
        with pytest.raises(InvalidInput, match=r"caps\.tree_turns_per_day"):
            resolve_caps(params, {"tree_turns_per_day": bad})


def test_the_first_dimension_past_its_cap_is_named() -> None:
    caps = Caps(tokens=100, agent_tokens=None, usd=None, turns=None, spawns=2, messages=3)
    assert first_exceeded(caps, DayTotals(spawns=1), DayTotals(spawns=1)) is None
    assert first_exceeded(caps, DayTotals(spawns=2), DayTotals(spawns=1)) == "spawns"
    assert first_exceeded(caps, DayTotals(tokens=100, spawns=2), DayTotals(spawns=1)) == "tokens"
    assert first_exceeded(caps, DayTotals(messages=3), DayTotals(spawns=1)) is None
    assert first_exceeded(caps, DayTotals(messages=3), DayTotals(messages=1)) == "messages"


def test_usd_by_price() -> None:
    assert usd_of((1.0, 4.0), 1_000_000, 500_000) == pytest.approx(3.0)
    assert usd_of(None, 10, 10) == 0.0


def _budget(factory: sessionmaker[Session], r: Any) -> tuple[Budget, str]:
    with factory.begin() as s:
        for a in ("r", "r.x"):
            ensure_agent(s, a)
        return Budget(r, factory), db_day(s)


def test_the_grant_is_the_smallest_remaining_limit(factory: sessionmaker[Session], fake_redis: Any) -> None:
    budget, day = _budget(factory, fake_redis)
    caps = Caps(tokens=1000, agent_tokens=300, usd=None, turns=None, spawns=None, messages=None)
    g = budget.reserve(res_id="a1", root="r", agent="r", day=day, want=200, caps=caps, price=None)
    assert (g.tokens, g.dim) == (200, "reserve")
    g2 = budget.reserve(res_id="a2", root="r", agent="r", day=day, want=200, caps=caps, price=None)
    assert (g2.tokens, g2.dim) == (100, "agent_tokens")  # 300 - 200 outstanding
    g3 = budget.reserve(res_id="a3", root="r", agent="r.x", day=day, want=900, caps=caps, price=None)
    assert (g3.tokens, g3.dim) == (300, "agent_tokens")  # the cap is per agent
    budget.reserve(res_id="a4", root="r", agent="r.y", day=day, want=300, caps=caps, price=None)
    g5 = budget.reserve(res_id="a5", root="r", agent="r.w", day=day, want=200, caps=caps, price=None)
    assert (g5.tokens, g5.dim) == (100, "tokens")  # 1000 - 900 outstanding in the tree
    again = budget.reserve(res_id="a1", root="r", agent="r", day=day, want=200, caps=caps, price=None)
    assert again.tokens == 200  # a redelivered attempt does not reserve twice
    refused = budget.reserve(res_id="a6", root="r", agent="r.z", day=day, want=10, caps=caps, price=None)
    assert refused.refused and refused.dim == "tokens"
    extra = budget.reserve(res_id="a7", root="r", agent="r", day=day, want=10, caps=NO_CAPS, price=None,
                           extra=3)
    assert (extra.tokens, extra.dim) == (3, "budget")


def test_usd_caps_bind_at_the_output_price_and_refuse_unpriced_models(
        factory: sessionmaker[Session], fake_redis: Any) -> None:
    budget, day = _budget(factory, fake_redis)
    caps = Caps(tokens=None, agent_tokens=None, usd=0.001, turns=None, spawns=None, messages=None)
    g = budget.reserve(res_id="u1", root="r", agent="r", day=day, want=10_000, caps=caps, price=(1.0, 4.0))
    assert (g.tokens, g.dim) == (250, "usd")  # 1,000 µUSD ÷ 4 µUSD per token
    unpriced = budget.reserve(res_id="u2", root="r", agent="r", day=day, want=10, caps=caps, price=None)
    assert unpriced.refused and unpriced.dim == "unpriced"


def test_settle_moves_a_reservation_into_the_counters_once(
        factory: sessionmaker[Session], fake_redis: Any) -> None:
    budget, day = _budget(factory, fake_redis)
    caps = Caps(tokens=1000, agent_tokens=None, usd=None, turns=None, spawns=None, messages=None)
    budget.reserve(res_id="a1", root="r", agent="r", day=day, want=500, caps=caps, price=None)
    c = Charge(turn_key("r", "main:1"), "turn", "r", "r", tokens=120, usd=0.25, turns=1)
    with factory.begin() as s:
        assert charge(s, c, day)
    budget.settle("a1", "r", day, c, "r")
    assert budget.totals("r", "r", day) == DayTotals(tokens=120, agent_tokens=120, usd=0.25, turns=1)
    assert fake_redis.hlen(keys.tree_reserve("r")) == 0
    g = budget.reserve(res_id="a2", root="r", agent="r", day=day, want=5000, caps=caps, price=None)
    assert g.tokens == 880


def test_counters_are_rebuilt_from_sql_after_a_flush(factory: sessionmaker[Session], fake_redis: Any) -> None:
    budget, day = _budget(factory, fake_redis)
    for i, (agent, tokens) in enumerate([("r", 100), ("r.x", 50), ("r.x", 25)]):
        c = Charge(turn_key(agent, f"s:{i}"), "turn", "r", agent, tokens=tokens, turns=1)
        with factory.begin() as s:
            charge(s, c, day)
        budget.settle("", "r", day, c, agent)  # no counter yet: nothing is added
    assert fake_redis.exists(keys.tree_spent("r", day)) == 0
    before = budget.totals("r", "r.x", day)
    assert before == DayTotals(tokens=175, agent_tokens=75, turns=3)
    fake_redis.flushall()
    assert budget.totals("r", "r.x", day) == before


def test_an_expired_reservation_of_a_crashed_attempt_is_dropped(
        factory: sessionmaker[Session], fake_redis: Any) -> None:
    budget, day = _budget(factory, fake_redis)
    caps = Caps(tokens=100, agent_tokens=None, usd=None, turns=None, spawns=None, messages=None)
    budget.reserve(res_id="dead", root="r", agent="r", day=day, want=100, caps=caps, price=None)
    raw = fake_redis.hget(keys.tree_reserve("r"), "dead").decode()
    agent, tokens, _expires = raw.rsplit("|", 2)
    fake_redis.hset(keys.tree_reserve("r"), "dead", f"{agent}|{tokens}|1")  # expired long ago
    g = budget.reserve(res_id="next", root="r", agent="r", day=day, want=100, caps=caps, price=None)
    assert g.tokens == 100 and fake_redis.hget(keys.tree_reserve("r"), "dead") is None

"""A quiet run's stored context joined from remembered pieces (rsi_worker/consolidate/quiet_json.py):
the very text ``json_dumps`` gives for the whole context, whatever the ids and values hold."""

from __future__ import annotations

import random

import pytest

from rsi_common.db.engine import json_dumps
from rsi_worker.consolidate import quiet_json
from rsi_worker.consolidate.context import RoundContext
from rsi_worker.consolidate.quiet_json import context_json

ODD = ["w-1", "wörld", "w\"q", "w\\b", "\x00loaded", "é\u2028", "\ud83d\ude00", "w\nx", ""]


def _ctx(ids: list[str], rng: random.Random) -> RoundContext:
    ctx = RoundContext(run_id="run_1", agent_id="a\x00loaded", fence=7, token="t", io_id=rng.choice(ODD))
    ctx.loaded = list(ids)
    ctx.digests = {i: rng.choice(["e3b0", "ab\"c", "d\u00e9", "0" * 64]) for i in ids}
    ctx.skipped_worlds = {rng.choice(ODD): "bad \x00digests"}
    return ctx


def test_the_joined_text_is_json_dumps_of_the_context() -> None:
    rng = random.Random(15)
    for n in (0, 1, 2, 60):
        for _ in range(20):
            ids = rng.sample(ODD + [f"w{i}" for i in range(80)], k=min(n, 80))
            ctx = _ctx(ids, rng)
            assert context_json(ctx).text == json_dumps(ctx.to_json())
            assert context_json(ctx).text == json_dumps(ctx.to_json())  # from the remembered pieces


def test_a_context_that_holds_a_marker_or_odd_digests_is_encoded_plainly() -> None:
    ctx = _ctx(["w1", "w2"], random.Random(1))
    ctx.io_id = quiet_json._LOADED_AT  # as if a value held the marker: no join
    assert context_json(ctx).text == json_dumps(ctx.to_json())
    ctx = _ctx(["w1", "w2"], random.Random(2))
    ctx.digests = {"w2": "x", "w1": "y"}  # another order than ``loaded``
    assert context_json(ctx).text == json_dumps(ctx.to_json())
    ctx.digests = {"w1": "x"}
    assert context_json(ctx).text == json_dumps(ctx.to_json())


def test_a_value_that_is_not_json_is_refused() -> None:
    ctx = _ctx(["w1"], random.Random(3))
    ctx.t = float("nan")  # type: ignore[assignment]
    with pytest.raises(ValueError):
        context_json(ctx)

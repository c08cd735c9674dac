"""The remembered signal texts of a world pool (rsi_worker/consolidate/worlds.py ``decode_signals``,
docs/performance/consolidation.md#the-no-signal-path): the same signals, digest and errors as
decoding each text afresh, bad texts never remembered, the memo bounded; a quiet run deletes no
run keys."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rsi_common.db import runs
from rsi_common.stored import StoredDataError, decode_stored
from rsi_worker.consolidate import flow, worlds
from rsi_worker.consolidate.state import signal_digest
from tests.support.pipeline import Stack

GOOD = [
    None,
    "{}",
    '{"stars": 5}',
    '{"stars": 1, "comment": "too long", "criteria": ["be brief", " "]}',
    '{"implicit": {"kind": "accept", "evidence": "thanks"}}',
    '{"implicit": {"kind": "neutral"}, "expected": "x"}',
    '{"issue": "caf\\u00e9", "nested": {"a": [1, 2.5, {"b": null}]}}',
]
BAD = [
    "not json",
    "[1, 2]",
    '{"comment": "\\ud800"}',
    '{"x": 1e999}',
    '{"a": ' * 300 + "1" + "}" * 300,
]


def _fresh(text: str | None) -> tuple[dict[str, Any], str]:
    signals = decode_stored(text, "signals") or {}
    return signals, signal_digest(signals)


@pytest.fixture(autouse=True)
def empty_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worlds, "_SIGNALS_MEMO", {})


@pytest.mark.parametrize("text", GOOD)
def test_a_text_decodes_like_decode_stored_first_and_second_time(text: str | None) -> None:
    first = worlds.decode_signals(text)
    again = worlds.decode_signals(text)
    assert first == again == _fresh(text)
    if text not in (None, "{}"):
        assert text in worlds._SIGNALS_MEMO
        assert first[0] is not again[0]  # each call gets its own object: a run may change it
        again[0]["stars"] = 99
        assert worlds.decode_signals(text) == _fresh(text)


@pytest.mark.parametrize("text", BAD)
def test_a_bad_text_fails_like_decode_stored_every_time_and_is_not_remembered(text: str) -> None:
    with pytest.raises(StoredDataError) as expected:
        decode_stored(text, "signals")
    for _ in range(2):
        with pytest.raises(StoredDataError) as got:
            worlds.decode_signals(text)
        assert str(got.value) == str(expected.value)
    assert worlds._SIGNALS_MEMO == {}


def test_the_memo_is_emptied_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worlds, "SIGNALS_MEMO_MAX", 3)
    texts = [json.dumps({"stars": i}) for i in range(1, 6)]
    for t in texts[:3]:
        worlds.decode_signals(t)
    assert len(worlds._SIGNALS_MEMO) == 3
    worlds.decode_signals(texts[3])
    assert list(worlds._SIGNALS_MEMO) == [texts[3]]
    assert worlds.decode_signals(texts[4]) == _fresh(texts[4])
    assert len(worlds._SIGNALS_MEMO) == 2


def test_a_quiet_run_digests_like_the_full_survey_and_deletes_no_run_keys(
        stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    cleanups: list[str] = []
    monkeypatch.setattr(stack.coord, "cleanup_run", lambda run, *a, **k: cleanups.append(run) or 0)
    for i, signals in enumerate((None, {"stars": 5}, {"stars": 4, "comment": "fine"}, None)):
        turn = stack.say("shop", f"c{i}", "Compare laptops: use search query=laptops", signals)
        lease = stack.lease("shop", turn.world["io_id"] if turn.world else "")
        nxt = flow.open_run(stack.deps, lease)
        assert nxt.quiet is not None
        with stack.sessions() as s:
            pool = worlds.WorldPool.latest(s, "shop", stack.deps.params.world_pool)
            assert nxt.ctx.digests == {w.id: signal_digest(w.signals) for w in pool.usable()}
            s.commit()
        result, rerun = flow.close(stack.deps, nxt)
        assert result is not None and rerun is None
    assert cleanups == []
    with stack.sessions() as s:
        assert [r.status for r in runs(s, "shop", 10)] == ["recorded"] * 4

"""Pruning the stored consolidation state: cached replays, verdicts, history rows
(``rsi_worker/consolidate/state.py``)."""

from __future__ import annotations

from rsi_worker.consolidate.state import ConsolidationState, prune_cache, remember, trim_records


def cached(*versions: str) -> ConsolidationState:
    state = ConsolidationState()
    for v in versions:
        state.cache[v] = {"w1": [{"answer": v}]}
    return state


def test_the_oldest_cached_versions_not_kept_are_dropped_first() -> None:
    state = cached("v1", "v2", "v3", "v4", "v5")
    prune_cache(state, keep=["v1"], cache_versions=3)
    assert list(state.cache) == ["v1", "v4", "v5"]


def test_kept_versions_survive_even_beyond_the_limit() -> None:
    state = cached("v1", "v2", "v3")
    prune_cache(state, keep=["v1", "v2", "v3"], cache_versions=1)
    assert list(state.cache) == ["v1", "v2", "v3"]


def test_within_the_limit_nothing_is_dropped() -> None:
    state = cached("v1", "v2")
    prune_cache(state, keep=[], cache_versions=3)
    assert list(state.cache) == ["v1", "v2"]


def test_verdicts_are_capped_oldest_first() -> None:
    state = ConsolidationState(verdicts={f"k{i}": [True] for i in range(10)})
    prune_cache(state, keep=[], verdict_cache=4)
    assert list(state.verdicts) == ["k6", "k7", "k8", "k9"]


def test_trim_records_keeps_the_last_history_rounds_and_rows_without_t() -> None:
    rows = [{"t": 1}, {"t": 5}, {"t": 6}, {"note": "no t"}, {"t": 9}]
    kept = trim_records(rows, t_now=9, history_rounds=4)
    assert kept == [{"t": 6}, {"note": "no t"}, {"t": 9}]
    kept[0]["t"] = 99
    assert rows[2] == {"t": 6}  # copies, never the caller's rows


def test_remember_caps_k_results_per_world_and_drops_transcripts() -> None:
    state = ConsolidationState()
    results = [{"answer": str(i), "transcript": ["..."]} for i in range(5)]
    remember(state, "v1", {"w1": results, "w2": []}, k=2)
    assert state.cache == {"v1": {"w1": [{"answer": "0"}, {"answer": "1"}]}}

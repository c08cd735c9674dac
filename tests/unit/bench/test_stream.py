"""``rsi bench stream`` runs and reports both measurements (the figures themselves are not asserted:
speed is measured by the bench, never by tests)."""

from __future__ import annotations

from rsi_worker.bench.stream import bench_stream


def test_the_stream_bench_reports_both_sides() -> None:
    report = bench_stream(3)
    assert report["turns"] == 3
    for key in ("kernel_added", "agent_added", "kernel_first_event_from_turn_start",
                "agent_first_event_from_turn_start"):
        assert set(report[key]) == {"median_ms", "p99_ms", "max_ms"}
        assert report[key]["median_ms"] <= report[key]["p99_ms"] <= report[key]["max_ms"]
    assert isinstance(report["met"], bool)

"""``rsi bench scale`` arithmetic: speed-up and efficiency against the smallest count, peak RSS."""

from __future__ import annotations

import os

from rsi_worker.bench.scale import efficiency, peak_rss_mib


def test_efficiency_is_the_speedup_over_the_added_workers() -> None:
    out = efficiency({2: 1.8, 1: 1.0, 4: 3.0})
    assert out == {1: {"speedup": 1.0, "efficiency": 1.0}, 2: {"speedup": 1.8, "efficiency": 0.9},
                   4: {"speedup": 3.0, "efficiency": 0.75}}
    assert efficiency({2: 2.0, 4: 4.0})[4] == {"speedup": 2.0, "efficiency": 1.0}  # against n0 = 2
    assert efficiency({1: 0.0, 2: 1.0})[2] == {"speedup": None, "efficiency": None}
    assert efficiency({}) == {}


def test_peak_rss_of_a_process_tree() -> None:
    mine = peak_rss_mib(os.getpid())
    assert os.getpid() in mine and mine[os.getpid()] > 1.0
    assert peak_rss_mib(2**22 + 17) == {}  # no such process

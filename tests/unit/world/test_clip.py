"""clip (docs/formats.md §4.1, vector docs/check-vectors.md §9.11)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsi_common.world import CLIP_MARKER, MAX_RESULT_CHARS, clip


def test_spec_vector() -> None:
    out = clip("x" * 40000)
    assert out == "x" * 24000 + "\n[… 8000 characters cut …]\n" + "x" * 8000
    assert MAX_RESULT_CHARS == 32_000


def test_head_and_tail_are_kept() -> None:
    s = "".join(chr(ord("a") + i % 26) for i in range(50_000))
    out = clip(s)
    assert out.startswith(s[:24000]) and out.endswith(s[-8000:])
    assert "[… 18000 characters cut …]" in out


def test_short_strings_unchanged() -> None:
    assert clip("x" * 32000) == "x" * 32000
    assert clip("") == ""


def test_idempotent() -> None:
    once = clip("y" * 100_000)
    assert clip(once) == once
    assert clip(clip("ab" * 20, limit=10), limit=10) == clip("ab" * 20, limit=10)


def test_small_limits() -> None:
    assert clip("abcdef", limit=4) == "abc" + CLIP_MARKER.format(n=2) + "f"
    assert clip("abcdef", limit=0) == CLIP_MARKER.format(n=6)
    with pytest.raises(ValueError):
        clip("x", limit=-1)


@settings(max_examples=200, deadline=None)
@given(s=st.text(max_size=400), limit=st.integers(0, 300))
def test_never_exceeds_limit_plus_marker(s: str, limit: int) -> None:
    out = clip(s, limit)
    n = max(0, len(s) - limit)
    assert len(out) <= limit + len(CLIP_MARKER.format(n=n))
    if len(s) <= limit:
        assert out == s
    else:
        head = 3 * limit // 4
        assert out[:head] == s[:head] and out.endswith(s[len(s) - (limit - head) :])

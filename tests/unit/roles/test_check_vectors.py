"""Check vectors of docs/check-vectors.md §9.11 that pin stored keys (signal digests, verdict keys)."""

from __future__ import annotations

from rsi_worker.consolidate.state import EMPTY_DIGEST, signal_digest
from rsi_worker.roles.judge import verdict_key


def test_signal_digests() -> None:
    assert EMPTY_DIGEST == signal_digest({}) == "412d4ddc23b7b092"
    assert signal_digest({"stars": 2}) == "5aec18a097d6de2e"
    assert signal_digest({"stars": 2, "comment": "  "}) == "5aec18a097d6de2e"  # blank strings are absent


def test_verdict_key() -> None:
    key = verdict_key(
        "Answer in the language of the request.", None, "Wie viel kostet das?", "It costs 12 EUR."
    )
    assert key == "e87979f6dc9ebbc5b57039fd4c1a5e23"

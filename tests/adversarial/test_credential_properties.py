"""Properties of the credential scan (``docs/security/credentials.md``): it never raises on any text
(lone surrogates included), and a credential inside random text, with invisible characters
inserted anywhere in it, is still found with its label."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rsi_common.credentials import PATTERNS, find_credentials, find_in, normalise, redact
from tests.adversarial.credentials_support import POSITIVE, ZERO_WIDTH

ANY_CHAR = st.one_of(
    st.characters(),  # every category but surrogates
    st.integers(0xD800, 0xDFFF).map(chr),  # lone surrogates
    st.sampled_from([*ZERO_WIDTH, "İ", "ﬁ", "ｓ", "\u0301", "\n", "\\", '"', "://", "sk-", "=", ":"]),
)
ANY_TEXT = st.lists(ANY_CHAR, max_size=300).map("".join)


@settings(max_examples=400, deadline=None)
@given(ANY_TEXT)
def test_never_raises_on_any_text(text: str) -> None:
    labels = find_credentials(text)
    assert labels == list(dict.fromkeys(labels))
    assert isinstance(redact(text), str) and isinstance(normalise(text), str)
    hit = find_in({"k": [text]}, "x")
    assert (hit is not None) == bool(labels)
    assert hit is None or (hit[0] == "x.k[0]" and hit[1] == labels)
    find_in({text: {text: text}}, "")  # keys and pairs too


def _hide(secret: str, marks: list[tuple[int, str]]) -> str:
    """``secret`` with each invisible character inserted at its position (taken modulo the length)."""
    chars = list(secret)
    for pos, mark in sorted(marks, reverse=True):
        chars.insert(pos % (len(chars) + 1), mark)
    return "".join(chars)


@settings(max_examples=300, deadline=None)
@given(
    entry=st.sampled_from(POSITIVE),
    before=ANY_TEXT,
    after=ANY_TEXT,
    marks=st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(ZERO_WIDTH)), min_size=1, max_size=6),
)
def test_hidden_credential_in_random_text_is_found(entry: dict[str, Any], before: str, after: str,
                                                   marks: list[tuple[int, str]]) -> None:
    text = f"{before} {_hide(entry['text'], marks)} {after}"
    assert entry["label"] in find_credentials(text)
    hit = find_in({"note": text}, "metadata")
    assert hit is not None and hit[0] == "metadata.note"


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(st.one_of(ANY_TEXT, st.sampled_from(POSITIVE).map(lambda e: str(e["text"]))),
                    min_size=1, max_size=5),
)
def test_prefilter_and_windows_change_no_result(pieces: list[str]) -> None:
    """The anchors, gates and windows only skip work: a full scan of every regex finds the same labels."""
    text = " ".join(pieces)
    norm = normalise(text)
    assert find_credentials(text) == [p.label for p in PATTERNS if p.hits(norm)]

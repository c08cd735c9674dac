"""The one-scan :func:`~rsi_common.credentials.find_in` (texts collected in one walk, anchors looked
for once in the joined text, only anchored texts checked) answers exactly like the plain scan that
checks every key, string, ``{"key": value}`` pair and host object one by one, in document order
(docs/performance/record-path.md). The plain scan is kept here as the reference."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rsi_common.credentials import PAIR_VALUE_CHARS, find_credentials, find_in, safe_key
from tests.adversarial.credentials_support import POSITIVE, ZERO_WIDTH

_VALUE: Any = object()


def reference_find_in(value: Any, path: str) -> tuple[str, list[str]] | None:
    """The plain scan: every text checked in turn (the implementation before the one-scan one)."""
    stack: list[tuple[str, Any, Any]] = [(path, _VALUE, value)]
    while stack:
        where, key, v = stack.pop()
        if key is not _VALUE:
            labels = find_credentials(str(key))
            if not labels and isinstance(v, str):
                labels = find_credentials(v) or find_credentials(
                    json.dumps({str(key): v[:PAIR_VALUE_CHARS]}, ensure_ascii=False))
                if not labels:
                    continue
            if labels:
                return where, labels
            stack.append((where, _VALUE, v))
        elif isinstance(v, str):
            labels = find_credentials(v)
            if labels:
                return where, labels
        elif isinstance(v, Mapping):
            stack.extend(reversed([(f"{where}.{safe_key(k)}" if where else safe_key(k), k, item)
                                   for k, item in v.items()]))
        elif isinstance(v, list | tuple):
            stack.extend(reversed([(f"{where}[{i}]", _VALUE, item) for i, item in enumerate(v)]))
        elif v is not None and not isinstance(v, bool | int | float):
            labels = find_credentials(str(v))
            if labels:
                return where, labels
    return None


_SECRETS = [str(e["text"]) for e in POSITIVE]
_PIECES = st.sampled_from([
    *ZERO_WIDTH, "İ", "ı", "ﬁ", "ｓｋ－", "\u0301", "é", "—", "\n", "\t", "\x1b", "\x0b", "\\", '"', "://",
    "sk-", "=", ":", " ", "api", "key", "token", "pass", "npm", "pm_", "asic", "ccountkey=", "b", "u", "Σ",
    "\ud800", "x" * 40, "A" * 44, "a" * 36, "é" * 10,
])
_TEXT = st.one_of(
    st.lists(st.one_of(_PIECES, st.characters(), st.sampled_from(_SECRETS)), max_size=12).map("".join),
    st.sampled_from(_SECRETS),
    # around the 512-character cut of a pair: a combining mark or an escape just after it
    st.tuples(st.integers(500, 515), st.sampled_from(["\u0301", "\n", "é", "api", "\x1b"]),
              st.sampled_from(["", "key=" + "A" * 40, "pm_" + "a" * 36]))
    .map(lambda t: "x" * t[0] + t[1] + t[2]),
)


class _Obj:
    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


_LEAF = st.one_of(_TEXT, st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                  _TEXT.map(_Obj))
_TREE = st.recursive(
    _LEAF,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(st.one_of(_TEXT, st.integers()), children, max_size=4),
    ),
    max_leaves=25,
)


@settings(max_examples=1500, deadline=None)
@given(_TREE, st.sampled_from(["", "x", "world.state"]))
def test_one_scan_equals_the_plain_scan(value: Any, path: str) -> None:
    assert find_in(value, path) == reference_find_in(value, path)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_SECRETS), st.lists(_TEXT, min_size=1, max_size=30), st.integers(0, 29))
def test_a_secret_among_many_clean_texts_is_found_where_it_is(secret: str, texts: list[str], at: int) -> None:
    doc: dict[str, Any] = {"notes": list(texts), "meta": {f"k{i}": t for i, t in enumerate(texts)}}
    doc["notes"].insert(at % (len(texts) + 1), secret)
    assert find_in(doc, "") == reference_find_in(doc, "")
    assert find_in(doc, "") is not None


def test_escapes_and_cuts_of_the_pair_are_scanned() -> None:
    """Texts clean alone whose ``{"key": value}`` pair holds a credential: through an escape
    (``\\n`` + ``pm_…``, ``\\u001a`` + ``ccountkey=…``)."""
    for doc in ({"x": "\npm_" + "a" * 36}, {"k": "\x1accountkey=" + "A" * 44}):
        assert find_in(doc, "") == reference_find_in(doc, "") is not None

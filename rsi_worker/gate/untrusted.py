"""Untrusted text and what a candidate may not take from it (docs/security/gate.md, "Untrusted text").

**Untrusted text** is every user-controlled string the consolidation roles can see: each loaded
world's request, earlier conversation (every message), tool calls (inputs and results), memory
chunks, turn notes, ``state.metadata`` (keys and values), the recorded answer and transcript, every
signal field (``expected``, ``issue``, ``comment``, ``criteria``, the implicit ``criterion`` and
``evidence``), and the trial answers and judge reasons of the evaluation views. (The host's own
``plan.system_parts`` are not shown to the roles and are not part of it.)

Two rules read it:

* **Shared span** — an added harness text that shares :data:`SPAN_TOKENS` consecutive normalised
  tokens with untrusted text copies user text. Six tokens is shorter than almost any sentence a user
  writes and longer than the common collocations a general instruction shares with a request by
  chance ("keep the recommendation to", "in the language of the" are 4 and 5).
* **Identifiers** — identifier-like tokens of untrusted text (:func:`identifiers`): digit runs of at
  least :data:`MIN_DIGITS` digits (account, order and phone numbers; separators ``-`` ``.`` ``/`` and
  spaces between digit groups are ignored), e-mail addresses, URLs, and name-like words (capitalised
  inside a sentence, ALL-CAPS, or letters mixed with digits) that the trusted vocabulary (the
  incumbent harness, the constitution, the analyst's generalised report) does not use. An added text
  holding one of them carries a customer's data or a trigger for one request.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rsi_common.world import TurnWorld, text_of
from rsi_worker.gate.text import Token, fold, json_strings, strip_format, tokens

__all__ = [
    "COMMON_ACRONYMS",
    "MIN_DIGITS",
    "SPAN_TOKENS",
    "Span",
    "UntrustedIndex",
    "identifiers",
    "untrusted_texts",
]

SPAN_TOKENS = 6
"""Consecutive normalised tokens an added text may not share with untrusted text."""
MIN_DIGITS = 4
"""Digits of the shortest digit run that counts as an identifier."""
MEMO_TEXTS = 256
"""Texts whose tokens and identifiers each process remembers (a pure function of the text: the
round's trusted texts and worlds repeat from one draft and one run to the next;
docs/performance/consolidation.md#what-bounds-what-is-left)."""
COMMON_ACRONYMS = frozenset(
    [
        "csv",
        "json",
        "pdf",
        "html",
        "xml",
        "yaml",
        "url",
        "uri",
        "api",
        "sql",
        "utc",
        "usd",
        "eur",
        "gbp",
        "jpy",
        "krw",
        "faq",
        "id",
        "ok",
        "ai",
        "llm",
        "http",
        "https",
        "cpu",
        "gpu",
        "ram",
        "ssd",
        "usb",
        "kpi",
        "roi",
        "etc",
    ]
)
"""ALL-CAPS words common in requests that name no one (never identifiers)."""
_DIGIT_RUN = re.compile(r"\d(?:[-./ ]?\d)+")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_URL = re.compile(r"\b(?:https?|ftp)://[^\s'\"<>]+", re.IGNORECASE)
_WORD = re.compile(r"[^\W_]+")
_SENTENCE_END = re.compile(r"[.!?\n]\s*$")


def _world_texts(w: TurnWorld) -> Iterator[str]:
    data = w.data
    yield w.request
    for m in w.history:
        yield text_of(m.get("content") if isinstance(m, Mapping) else m)
    for call in w.tool_calls:
        if isinstance(call, Mapping):
            yield from json_strings(call.get("input"))
            yield text_of(call.get("content"))
    state = data.get("state") if isinstance(data.get("state"), Mapping) else {}
    yield from json_strings((state or {}).get("metadata"))
    memory = data.get("memory") if isinstance(data.get("memory"), Mapping) else {}
    for chunk in (memory or {}).get("chunks") or ():
        yield from json_strings(chunk)
    plan = data.get("plan") if isinstance(data.get("plan"), Mapping) else {}
    yield from json_strings((plan or {}).get("turn_notes"))
    outcome = data.get("outcome") if isinstance(data.get("outcome"), Mapping) else {}
    yield w.answer
    for m in (outcome or {}).get("transcript") or ():
        yield text_of(m.get("content") if isinstance(m, Mapping) else m)
    yield from json_strings(w.signals)


def untrusted_texts(worlds: Iterable[TurnWorld], views: Iterable[Any] = ()) -> list[str]:
    """The untrusted strings of the loaded worlds and of the evaluation views (module docstring).

    ``views`` are :class:`rsi_worker.roles.analyst.View` objects (their trial answer and transcript
    and the judge's verdict reasons); blank strings are dropped, duplicates kept once.
    """
    out: dict[str, None] = {}
    for w in worlds:
        for t in _world_texts(w):
            if t and t.strip():
                out.setdefault(t)
    for v in views:
        row = getattr(v, "row", None) or {}
        replay = (row.get("result") or {}).get("replay") or {} if isinstance(row, Mapping) else {}
        for t in (replay.get("answer"), *(x.get("reason") for x in getattr(v, "verdicts", ()) or ())):
            if isinstance(t, str) and t.strip():
                out.setdefault(t)
        for m in replay.get("transcript") or ():
            t = text_of(m.get("content") if isinstance(m, Mapping) else m)
            if t.strip():
                out.setdefault(t)
    return list(out)


def _name_like(word: str, before: str) -> bool:
    if len(word) < 3 or word.isdigit():
        return False
    if any(c.isdigit() for c in word) and any(c.isalpha() for c in word):
        return True
    if word.isupper() and word.isalpha():
        return word.casefold() not in COMMON_ACRONYMS
    capitalised = word[0].isupper() and word[1:].islower()
    return capitalised and bool(before.strip()) and not _SENTENCE_END.search(before)


def identifiers(text: str) -> set[str]:
    """The identifier-like tokens of one untrusted text, normalised (module docstring)."""
    base = strip_format(text)
    out: set[str] = set()
    for m in _DIGIT_RUN.finditer(base):
        digits = re.sub(r"\D", "", m.group(0))
        if len(digits) >= MIN_DIGITS:
            out.add(digits)
    for rx in (_EMAIL, _URL):
        out.update(fold(m.group(0)).rstrip(".,;:") for m in rx.finditer(base))
    for m in _WORD.finditer(base):
        if _name_like(m.group(0), base[max(0, m.start() - 3) : m.start()]):
            out.add(fold(m.group(0)))
    return out


@functools.lru_cache(maxsize=MEMO_TEXTS)
def _token_texts(text: str) -> tuple[str, ...]:
    return tuple(t.text for t in tokens(text))


@functools.lru_cache(maxsize=MEMO_TEXTS)
def _words(text: str) -> frozenset[str]:
    return frozenset(_token_texts(text))


@functools.lru_cache(maxsize=MEMO_TEXTS)
def _identifiers(text: str) -> frozenset[str]:
    return frozenset(identifiers(text))


@dataclass(frozen=True)
class Span:
    """A shared span: ``text`` is the slice of the *added* text that repeats untrusted text."""

    text: str
    tokens: int


class UntrustedIndex:
    """The untrusted texts of one round, ready for the two rules (module docstring).

    Args:
        texts: the untrusted strings (:func:`untrusted_texts`).
        trusted: trusted text (the incumbent harness, the constitution, the analyst's report); its
            words are never identifiers.
        span_tokens: :data:`SPAN_TOKENS`.
    """

    def __init__(
        self, texts: Sequence[str], trusted: Iterable[str] = (), span_tokens: int = SPAN_TOKENS
    ) -> None:
        self.span_tokens = span_tokens
        self._texts = [list(_token_texts(x)) for x in texts]
        vocabulary: set[str] = set()
        for x in trusted:
            vocabulary |= _words(x)
        found: set[str] = set()
        for x in texts:
            found |= _identifiers(x)
        self.identifiers = frozenset(i for i in found if i not in vocabulary)

    def shared_span(self, added: str) -> Span | None:
        """The longest run of at least ``span_tokens`` tokens of ``added`` that untrusted text holds."""
        toks = list(tokens(added))
        n = self.span_tokens
        if len(toks) < n:
            return None
        grams = {tuple(t.text for t in toks[i : i + n]): i for i in range(len(toks) - n + 1)}
        firsts = {g[0] for g in grams}
        best: tuple[int, int] | None = None  # (length, start index in toks)
        for u in self._texts:
            for j in range(len(u) - n + 1):
                if u[j] not in firsts:
                    continue
                i = grams.get(tuple(u[j : j + n]))
                if i is None:
                    continue
                length = n
                while (
                    i + length < len(toks) and j + length < len(u) and toks[i + length].text == u[j + length]
                ):
                    length += 1
                if best is None or length > best[0]:
                    best = (length, i)
        if best is None:
            return None
        return Span(_slice(added, toks[best[1]], toks[best[1] + best[0] - 1]), best[0])

    def identifiers_in(self, added: str) -> list[str]:
        """The identifiers of untrusted text that ``added`` holds, sorted."""
        if not self.identifiers:
            return []
        hits = (
            {t.text for t in tokens(added)}
            | identifiers(added)
            | {re.sub(r"\D", "", m.group(0)) for m in _DIGIT_RUN.finditer(strip_format(added))}
        )
        return sorted(hits & self.identifiers)


def _slice(added: str, first: Token, last: Token) -> str:
    return strip_format(added)[first.start : last.end]

"""Text normalisation of the gate (docs/security/gate.md, "Normalisation").

Every comparison between candidate harness text and untrusted text is made on normalised text, so
case, spacing, punctuation, invisible characters and look-alike letters cannot hide a copy:

1. NFKC (full-width and mathematical letters become plain ones, ligatures are split);
2. format characters (Unicode category Cf: zero-width spaces and joiners, bidi controls, the BOM,
   soft hyphens, tag characters) are removed;
3. confusable letters (:data:`CONFUSABLES`: Cyrillic and Greek look-alikes of Latin letters, dotless
   i, script l) are mapped to their Latin twin;
4. case is folded;
5. tokens are the maximal runs of letters and digits (``_`` and every punctuation mark separate).

:func:`leet_fold` additionally maps digits and symbols used as letters (``1gn0re`` → ``ignore``); it
is used only for the instruction-override forms, never for identifiers (digits matter there).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

__all__ = [
    "CONFUSABLES",
    "Token",
    "fold",
    "json_strings",
    "leet_fold",
    "normalized",
    "strip_format",
    "tokens",
]

_CONFUSABLE_PAIRS = (
    # Cyrillic
    "аa вb еe ѕs іi јj оo рp сc уy хx һh ԁd ԛq ԝw ӏl ѵv ɡg "
    "АA ВB ЕE КK МM НH ОO РP СC ТT ХX ЅS ІI ЈJ ҮY "
    # Greek
    "αa βb εe ιi κk νv οo ρp τt υu χx ΑA ΒB ΕE ΖZ ΗH ΙI ΚK ΜM ΝN ΟO ΡP ΤT ΥY ΧX "
    # Latin look-alikes
    "ıi ℓl ſs"
)
CONFUSABLES: dict[int, str] = {ord(pair[0]): pair[1] for pair in _CONFUSABLE_PAIRS.split()}
"""Look-alike letter → its Latin twin (applied after NFKC, before case folding)."""
_LEET = str.maketrans({"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s"})
_TOKEN = re.compile(r"[^\W_]+")


def strip_format(text: str) -> str:
    """``text`` after NFKC without format characters (category Cf). Lone surrogates become U+FFFD."""
    if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        text = text.encode("utf-8", "replace").decode("utf-8")
    text = unicodedata.normalize("NFKC", text)
    if text.isascii():
        return text
    return "".join(c for c in text if unicodedata.category(c) != "Cf")


def fold(text: str) -> str:
    """Steps 1–4 of the module docstring: the text to compare, punctuation kept."""
    return strip_format(text).translate(CONFUSABLES).casefold()


class Token(NamedTuple):
    """A normalised token with its place in the NFKC, format-stripped text."""

    text: str
    start: int
    end: int


def tokens(text: str) -> Iterator[Token]:
    """The tokens of ``text`` (step 5), each with its offsets in :func:`strip_format` of ``text``."""
    base = strip_format(text)
    folded = base.translate(CONFUSABLES).casefold()
    if len(folded) == len(base):  # folding kept the length: offsets carry over
        for m in _TOKEN.finditer(folded):
            yield Token(m.group(0), m.start(), m.end())
        return
    for m in _TOKEN.finditer(base):  # rare (e.g. "ß" → "ss"): fold token by token
        yield Token(m.group(0).translate(CONFUSABLES).casefold(), m.start(), m.end())


def normalized(text: str) -> str:
    """The normalised tokens joined by single spaces."""
    return " ".join(t.text for t in tokens(text))


def leet_fold(text: str) -> str:
    """:func:`fold`, then digits and symbols used as letters mapped, then punctuation as spaces."""
    folded = fold(text).translate(_LEET)
    return " ".join(_TOKEN.findall(folded))


def json_strings(value: Any) -> Iterator[str]:
    """Every string under a JSON value, dict keys before their values, in order; numbers (not bools)
    as their ``repr``. Walks with an explicit stack."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            yield v
        elif isinstance(v, Mapping):
            for k, item in reversed(list(v.items())):
                stack.append(item)
                stack.append(str(k))
        elif isinstance(v, list):
            stack.extend(reversed(v))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            yield repr(v)

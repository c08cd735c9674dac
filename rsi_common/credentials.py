"""Credential detection shared by world capture, host signals, the critic precheck, log scrubbing and
error messages (``docs/security/credentials.md``).

Reports only labels, never the matched text: a secret must not reach a log or an error message.

* **Normalisation first** (:func:`normalise`): default-ignorable and format characters (Unicode
  category ``Cf`` such as U+200B, U+200D, U+2060, U+FEFF, plus the other default-ignorable code points
  such as variation selectors and U+034F) are removed, then NFKC is applied (full-width ``ｓｋ－`` →
  ``sk-``), so a key with an invisible character inside is still one key. ASCII text is returned as is.
* **One table** (:data:`rsi_common.credential_table.PATTERNS`): label, regex, prefilter anchors and,
  for the shapes prose can imitate, a check of the value (placeholders such as ``<token>`` or
  ``${API_KEY}`` do not count).
* **Cheap prefilter**: the text is lower-cased once and each pattern's regex runs only when one of its
  anchors occurs in it; most conversation text runs no regex at all.

Project decision: no detector library (``docs/security/credentials.md`` says why).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

from rsi_common.credential_table import PATTERNS, CredentialPattern

__all__ = [
    "CREDENTIAL_PATTERNS",
    "PAIR_VALUE_CHARS",
    "PATTERNS",
    "REDACTED",
    "CredentialPattern",
    "describe",
    "find_credentials",
    "find_in",
    "normalise",
    "redact",
    "redact_urls",
    "safe_key",
    "safe_repr",
]

REDACTED = "[redacted]"
"""What :func:`redact` puts in place of a secret."""

CREDENTIAL_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple((p.label, p.regex) for p in PATTERNS)
"""``(label, regex)`` of every row of the table, in report order. The raw regexes: they neither
normalise nor check values, so callers use :func:`find_credentials` or :func:`redact` instead."""

_IGNORABLE_RANGES: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x0600, 0x0605), (0x061C, 0x061C), (0x06DD, 0x06DD),
    (0x070F, 0x070F), (0x0890, 0x0891), (0x08E2, 0x08E2), (0x115F, 0x1160), (0x17B4, 0x17B5),
    (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
    (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFFB), (0x110BD, 0x110BD),
    (0x110CD, 0x110CD), (0x13430, 0x1343F), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
)
"""Removed before matching: every code point of category ``Cf`` and every Default_Ignorable_Code_Point
of Unicode 15.1 (a unit test checks the ``Cf`` part against this Python's ``unicodedata``)."""

_IGNORABLE = re.compile(
    "[" + "".join(f"\\U{lo:08x}" if lo == hi else f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in _IGNORABLE_RANGES)
    + "]+"
)
_COARSE = ("_", "-", "key", "pass")
"""Shared substrings of many anchors: an anchor that contains one is looked for only when it occurs."""


def _anchor_groups() -> dict[str, tuple[str, ...]]:
    groups: dict[str, list[str]] = {}
    for anchor in sorted({a for p in PATTERNS for a in p.anchors}):
        coarse = next((c for c in _COARSE if c in anchor), anchor)
        groups.setdefault(coarse, []).append(anchor)
    return {coarse: tuple(fine) for coarse, fine in groups.items()}


_ANCHOR_GROUPS = _anchor_groups()
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^\s/?#@:]*:)(?P<pw>[^@\s/]+)(?P<at>@)")
_SAFE_REPR_CHARS = 80
_VALUE: Any = object()
PAIR_VALUE_CHARS = 512
"""Characters of a string value put into its ``{"key": value}`` pair by :func:`find_in`."""


def normalise(text: str) -> str:
    """``text`` without default-ignorable and format characters, in NFKC (module docstring).

    Never raises on a ``str`` (lone surrogates pass through unchanged).
    """
    if text.isascii():
        return text
    text = unicodedata.normalize("NFKC", _IGNORABLE.sub("", text))
    return _IGNORABLE.sub("", text)  # NFKC maps e.g. U+FFA0 to U+3164, itself ignorable


def _prefiltered(norm: str) -> tuple[str, set[str], list[CredentialPattern]]:
    """``(lower-cased text, anchors present, patterns with a present anchor)``."""
    low = norm.lower()
    present: set[str] = set()
    for coarse, fine in _ANCHOR_GROUPS.items():
        if coarse in low:
            present.update(a for a in fine if a == coarse or a in low)
    if not present:
        return low, present, []
    return low, present, [p for p in PATTERNS if not present.isdisjoint(p.anchors)]


def find_credentials(text: str) -> list[str]:
    """Labels of the credential patterns found in ``text`` after :func:`normalise`, in table order,
    each once; ``[]`` when there is none."""
    norm = normalise(text)
    low, present, candidates = _prefiltered(norm)
    memo: dict[tuple[str, str], list[int]] = {}
    return [p.label for p in candidates if p.hits(norm, low, present, memo)]


def find_in(value: Any, path: str) -> tuple[str, list[str]] | None:
    """The first credential under a JSON-like ``value``: ``(field path, labels)``, else ``None``.

    Scans every string, every dict key, every ``{"key": "string value"}`` pair as JSON (so
    ``{"api_key": "…"}`` is caught by the assignment shapes; the pair holds the value's first
    :data:`PAIR_VALUE_CHARS` characters, enough for every shape that starts at the key) and the ``str()``
    of any other object but a number, depth first in document order, without recursion. Paths look like
    ``trajectory.steps[2].note``; a key that is itself credential-shaped appears as ``<redacted key>``.
    """
    stack: list[tuple[str, Any, Any]] = [(path, _VALUE, value)]
    while stack:
        where, key, v = stack.pop()
        if key is not _VALUE:  # a dict entry: its key, then a string value and the pair, else descend
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
            labels = find_credentials(str(v))  # a host object stored as its text
            if labels:
                return where, labels
    return None


def redact(text: str, replacement: str = REDACTED) -> str:
    """``text`` with every credential replaced by ``replacement`` (the ``value`` part of shapes that
    name one, such as ``password: <value>``; else the whole match; a private key with its body).

    Text without a credential is returned unchanged; text with one is returned normalised.
    """
    norm = normalise(text)
    low, present, candidates = _prefiltered(norm)
    spans: list[tuple[int, int]] = []
    memo: dict[tuple[str, str], list[int]] = {}
    for p in candidates:
        spans += [p.secret_span(m) for m in p.finditer(norm, low, present, memo)]
    if not spans:
        return text
    out: list[str] = []
    pos = 0
    for start, end in sorted(spans):
        if end <= pos:
            continue
        out.append(norm[pos:max(pos, start)])
        if start >= pos:
            out.append(replacement)
        pos = end
    out.append(norm[pos:])
    return "".join(out)


def redact_urls(text: str, replacement: str = REDACTED) -> str:
    """``text`` with the password of every ``scheme://user:password@`` replaced, placeholder or not
    (for logs and messages that show a configured URL)."""
    return _URL_PASSWORD.sub(lambda m: f"{m['head']}{replacement}{m['at']}", text)


def describe(labels: Iterable[str]) -> str:
    """``'label a', 'label b'``: the labels as an error message names them."""
    return ", ".join(f"'{label}'" for label in labels)


def safe_key(key: object) -> str:
    """A dict key or path component as a field path may show it: ``<redacted key>`` when it is itself
    credential-shaped, else ``str(key)``."""
    text = str(key)
    return "<redacted key>" if find_credentials(text) else text


def safe_repr(value: object) -> str:
    """``repr(value)`` for an error message, cut to 80 characters; ``<redacted: 'label'>`` when the value
    (as text) is credential-shaped. Never shows a secret."""
    text = value if isinstance(value, str) else repr(value)
    labels = find_credentials(text)
    if not labels and _URL_PASSWORD.search(text):
        labels = ["url with password"]  # shown redacted even when the password is a placeholder
    if labels:
        return f"<redacted: {describe(labels)}>"
    shown = repr(value)
    return shown if len(shown) <= _SAFE_REPR_CHARS else shown[: _SAFE_REPR_CHARS - 1] + "…"

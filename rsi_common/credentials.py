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
    "CLEAN_MEMO_CHARS",
    "CLEAN_MEMO_SIZE",
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
_JSON_ESCAPED = re.compile(r'["\\\x00-\x1f]')
"""Characters ``json.dumps`` escapes (with ``ensure_ascii=False``)."""
_LEAVES = frozenset({type(None), bool, int, float})
"""Types :func:`find_in` does not scan (exact types; subclasses take the slow path)."""


def normalise(text: str) -> str:
    """``text`` without default-ignorable and format characters, in NFKC (module docstring).

    Never raises on a ``str`` (lone surrogates pass through unchanged).
    """
    if text.isascii() or (_IGNORABLE.search(text) is None and unicodedata.is_normalized("NFKC", text)):
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


CLEAN_MEMO_CHARS = 64
"""Texts of at most this many characters found clean are remembered (:func:`find_credentials`)."""
CLEAN_MEMO_SIZE = 4096
"""Clean texts remembered at most; the memo is emptied when full."""
_CLEAN: dict[str, None] = {}


def find_credentials(text: str) -> list[str]:
    """Labels of the credential patterns found in ``text`` after :func:`normalise`, in table order,
    each once; ``[]`` when there is none.

    A short text found clean (at most :data:`CLEAN_MEMO_CHARS` characters) is remembered, so the keys
    every world repeats (``max_tokens``, ``policy_tokens``: they hold the anchor ``token``) are checked
    once per process (docs/performance/turn-checks.md). Only clean texts are kept: the memo never holds
    a secret. The answer is the same: it depends on the text alone.
    """
    short = type(text) is str and len(text) <= CLEAN_MEMO_CHARS  # a subclass could fake its hash
    if short and text in _CLEAN:
        return []
    norm = normalise(text)
    low, present, candidates = _prefiltered(norm)
    memo: dict[tuple[str, str], list[int]] = {}
    labels = [p.label for p in candidates if p.hits(norm, low, present, memo)]
    if short and not labels:
        if len(_CLEAN) >= CLEAN_MEMO_SIZE:
            _CLEAN.clear()
        _CLEAN[text] = None
    return labels


def find_in(value: Any, path: str) -> tuple[str, list[str]] | None:
    """The first credential under a JSON-like ``value``: ``(field path, labels)``, else ``None``.

    Scans every string, every dict key, every ``{"key": "string value"}`` pair as JSON (so
    ``{"api_key": "…"}`` is caught by the assignment shapes; the pair holds the value's first
    :data:`PAIR_VALUE_CHARS` characters, enough for every shape that starts at the key) and the ``str()``
    of any other object but a number, depth first in document order, without recursion. Paths look like
    ``trajectory.steps[2].note``; a key that is itself credential-shaped appears as ``<redacted key>``.

    **One scan** (docs/performance/record-path.md): the texts are collected in one walk, their
    anchors are looked for once in the joined text (:func:`_anchored`), and only the texts holding an
    anchor are checked one by one — the result is exactly that of checking every text in turn, since a
    pattern only matches a text holding one of its anchors. A first walk of plain JSON collects the
    texts only; the walk that keeps document order and paths runs only when it found a credential.
    """
    if _clean_json(value):
        return None
    return _find_in_ordered(value, path)


def _clean_json(value: Any) -> bool:
    """True when ``value`` is plain JSON (dicts, lists, strings, numbers, booleans, None) and no key,
    string or pair of it matches a pattern; False when one matches or ``value`` holds another type
    (then :func:`_find_in_ordered` answers). Order does not matter here: no path is kept.

    A ``{"key": "string"}`` pair's JSON is built (and its anchors looked for with the other texts)
    only when its key or value holds a character JSON escapes, or the value is a long non-ASCII
    one (:func:`_pair_text`'s cases, found for all texts at once by :func:`_escaped`); any other
    pair is checked when its key or value holds an anchor (docs/performance/turn-checks.md).
    """
    texts: list[str] = []
    pairs: list[int] = []  # index of a key text; its string value is the next text
    long: list[int] = []  # pairs whose value is longer than PAIR_VALUE_CHARS
    add, stack = texts.append, [value]
    pop, push = stack.pop, stack.append
    while stack:
        v = pop()
        t = type(v)
        if t is dict:
            for k, item in v.items():
                if type(k) is not str:
                    return False
                ti = type(item)
                if ti is str:
                    if len(item) > PAIR_VALUE_CHARS:
                        long.append(len(texts))
                    pairs.append(len(texts))
                    add(k)
                    add(item)
                else:
                    add(k)
                    if ti is dict or ti is list:
                        push(item)
                    elif ti not in _LEAVES:
                        return False
        elif t is list:
            for item in v:
                ti = type(item)
                if ti is str:
                    add(item)
                elif ti is dict or ti is list:
                    push(item)
                elif ti not in _LEAVES:
                    return False
        elif t is str:
            add(v)
        elif t not in _LEAVES:
            return False
    escaped = _escaped(texts)
    if escaped is None:
        return False  # a text holds U+0000 itself
    built: set[int] = set()  # pairs whose JSON is among the texts
    if escaped or long:
        keys = set(pairs)
        wanted = {i for i in escaped if i in keys} | {i - 1 for i in escaped if i - 1 in keys}
        wanted.update(i for i in long if not texts[i + 1].isascii())
        for i in sorted(wanted):
            add(json.dumps({texts[i]: texts[i + 1][:PAIR_VALUE_CHARS]}, ensure_ascii=False))
            built.add(i)
    flagged = _anchored(texts)
    if flagged is None:
        return False
    if not flagged:
        return True
    if any(find_credentials(texts[i]) for i in flagged):  # keys, strings and the pairs built
        return False
    return not any(  # a pair not built holds an anchor only if its key or value does (_pair_text)
        find_credentials(json.dumps({texts[i]: texts[i + 1][:PAIR_VALUE_CHARS]}, ensure_ascii=False))
        for i in pairs if i not in built and (i in flagged or i + 1 in flagged))


_ESCAPED_NOT_NUL = re.compile(r'["\\\x01-\x1f]')
"""The characters ``json.dumps`` escapes but U+0000 (the separator of :func:`_escaped`)."""


def _escaped(texts: list[str]) -> set[int] | None:
    """Indices of the texts holding a character ``json.dumps`` escapes, found in one search of the
    texts joined with U+0000; ``None`` when a text holds U+0000 itself."""
    joined = "\x00".join(texts)
    if joined.count("\x00") != len(texts) - 1:
        return None
    out: set[int] = set()
    index, last = 0, 0
    m = _ESCAPED_NOT_NUL.search(joined)
    while m is not None:
        pos = m.start()
        index += joined.count("\x00", last, pos)
        out.add(index)
        nxt = joined.find("\x00", pos)
        if nxt < 0:
            break
        index, last = index + 1, nxt + 1
        m = _ESCAPED_NOT_NUL.search(joined, last)
    return out


def _find_in_ordered(value: Any, path: str) -> tuple[str, list[str]] | None:
    """:func:`find_in` keeping document order and paths (any value, host objects included)."""
    texts: list[str] = []
    probes: list[tuple[Any, int, int]] = []  # (where, text, -1) or (where, key text, pair text)
    errors: dict[int, BaseException] = {}
    stack: list[tuple[Any, Any, Any]] = [(path, _VALUE, value)]
    add_text, add_probe, push, pop = texts.append, probes.append, stack.append, stack.pop
    while stack:
        where, key, v = pop()
        t = type(v)
        n = len(texts)
        if key is not _VALUE:  # a dict entry: its key, then a string value and the pair, else descend
            k = key if type(key) is str else str(key)
            add_probe((where, n, -1))
            add_text(k)
            if t is str or (t not in _LEAVES and isinstance(v, str)):
                add_probe((where, n + 1, -1))
                add_probe((where, n, n + 2))
                add_text(v)
                add_text(_pair_text(k, v))
            elif t not in _LEAVES:
                push((where, _VALUE, v))
        elif t is str:
            add_probe((where, n, -1))
            add_text(v)
        elif t is dict:
            stack.extend(reversed([((where, 0, k), k, item) for k, item in v.items()]))
        elif t is list:
            stack.extend(reversed([((where, 1, i), _VALUE, item) for i, item in enumerate(v)]))
        elif t in _LEAVES:
            continue
        elif isinstance(v, str):
            add_probe((where, n, -1))
            add_text(v)
        elif isinstance(v, Mapping):
            stack.extend(reversed([((where, 0, k), k, item) for k, item in v.items()]))
        elif isinstance(v, list | tuple):
            stack.extend(reversed([((where, 1, i), _VALUE, item) for i, item in enumerate(v)]))
        elif not isinstance(v, bool | int | float):
            add_probe((where, n, -1))
            try:
                add_text(str(v))  # a host object stored as its text
            except Exception as exc:  # raised when reached, as a sequential scan would
                errors[n] = exc
                add_text("")
    if not probes:
        return None
    flagged = _anchored(texts)
    for where, i, pair in probes:
        if i in errors:
            raise errors[i]
        if pair < 0:
            if flagged is not None and i not in flagged:
                continue
            labels = find_credentials(texts[i])
        else:
            if flagged is not None and not (i in flagged or i + 1 in flagged or pair in flagged):
                continue  # without escapes or a cut, the pair's anchors are the key's and the value's
            labels = find_credentials(texts[pair] or json.dumps({texts[i]: texts[i + 1][:PAIR_VALUE_CHARS]},
                                                                ensure_ascii=False))
        if labels:
            return _render(where), labels
    return None


def _pair_text(key: str, value: str) -> str:
    """The ``{"key": value}`` pair's JSON when it may hold an anchor the key and the value do not,
    else ``""`` (built only if a pattern may match).

    The pair holds the key and the value's first :data:`PAIR_VALUE_CHARS` characters between ``{"``,
    ``": "`` and ``"}`` (no anchor holds a quote or a brace, and none is ``: ``), so it holds an anchor
    the two texts lack only through an escape (``\\n`` + ``pm_…``, ``\\u001b`` + ``asic``) or the cut
    of a non-ASCII value (a character separated from the combining marks NFKC composes it with).
    """
    if (len(value) > PAIR_VALUE_CHARS and not value.isascii()) or _JSON_ESCAPED.search(key) is not None \
            or _JSON_ESCAPED.search(value, 0, PAIR_VALUE_CHARS) is not None:
        return json.dumps({key: value[:PAIR_VALUE_CHARS]}, ensure_ascii=False)
    return ""


def _anchored(texts: list[str]) -> set[int] | None:
    """Indices of the texts whose normalised, lower-cased form holds an anchor of the table (the
    prefilter of :func:`find_credentials`, for all texts at once); ``None``: check every text.

    The texts are normalised one by one (only non-ASCII ones can change), joined with U+0000 (no
    anchor holds it, and lower-casing neither makes nor moves one across it) and lower-cased once;
    the anchors, all ASCII, are then found in its UTF-8 bytes (where no multi-byte character holds an
    ASCII byte), each at most once per text. A text holding U+0000 itself: ``None``.
    """
    joined = "\x00".join(texts)
    if not joined.isascii():
        joined = "\x00".join([t if t.isascii() else normalise(t) for t in texts])
    if joined.count("\x00") != len(texts) - 1:
        return None
    low = joined.lower().encode("utf-8", "surrogatepass")
    flagged: set[int] = set()
    for coarse, fine in _ANCHOR_BYTES:
        if coarse not in low:
            continue
        for anchor in fine:
            pos = low.find(anchor)
            while pos >= 0:
                flagged.add(low.count(b"\x00", 0, pos))
                nxt = low.find(b"\x00", pos)
                pos = low.find(anchor, nxt + 1) if nxt >= 0 else -1
    return flagged


_ANCHOR_BYTES: tuple[tuple[bytes, tuple[bytes, ...]], ...] = tuple(
    (coarse.encode(), tuple(a.encode() for a in fine)) for coarse, fine in _ANCHOR_GROUPS.items())


def _render(where: Any) -> str:
    """The field path of a probe: the root path string, or ``(parent, 0, key)`` / ``(parent, 1, index)``."""
    parts: list[tuple[int, Any]] = []
    while not isinstance(where, str):
        where, kind, item = where
        parts.append((kind, item))
    out = where
    parts.reverse()  # (not reversed(): mypyc cannot compile that loop, docs/dev/compiled.md)
    for kind, item in parts:
        if kind:
            out = f"{out}[{item}]"
        elif out:
            out = f"{out}.{safe_key(item)}"
        else:
            out = safe_key(item)
    return out


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

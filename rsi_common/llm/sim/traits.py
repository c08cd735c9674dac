"""The sim model's answer traits (docs/formats.md#sim-2-traits): triggers, transforms and detectors.

Pure text functions, shared by the sim policy (which applies traits) and the sim judge (which
detects them). Decisions where the sim's description (docs/formats.md#the-sim-model) is silent:

* A trigger matches case-insensitively at the start of a word, so ``tables``/``bullets``/``units``
  count and ``suitable``/``community`` do not. ``in the language of the request`` triggers
  ``korean`` only when the request contains Hangul.
* Facts are ``(key, value)`` pairs; ``value`` may be empty (a bare item of the input).
* Without the ``units`` trait a fact value that is one quantity (``12 km``, ``30%``) is shown as
  the bare number (``12``); with it the unit is kept, and a bare number gains the unit that
  follows the same number in this turn's tool results. This is what makes ``units`` observable.
* ``korean`` translates the preamble and every label (``추천:``, ``출처:``, table header); the
  detectors accept the English and the Korean labels alike so traits compose.
* ``brief`` drops the preamble; while more than 5 lines remain it drops the reason line
  (``because it comes first.``) first, then fact rows from the end (a table keeps its header).
* ``one_line_reco`` folds the reason into the recommendation line
  (``Recommendation: A — because it comes first.``).
* ``cite`` adds a final ``Sources: <tools called this turn>`` line (``Sources: the request`` when
  none was called). A trailing sources line does not count as text after the recommendation.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "DETECTORS",
    "LANGUAGE_OF_REQUEST",
    "TRAITS",
    "TRIGGERS",
    "Answer",
    "Fact",
    "apply_traits",
    "detect_brief",
    "detect_bullets",
    "detect_cite",
    "detect_korean",
    "detect_one_line_reco",
    "detect_table",
    "detect_units",
    "detected_traits",
    "facts_from_input",
    "facts_from_text",
    "has_hangul",
    "render",
    "traits_in",
    "unit_hints",
]

Fact = tuple[str, str]

TRAITS: tuple[str, ...] = ("table", "one_line_reco", "bullets", "brief", "units", "cite", "korean")
"""The catalog, in the order transforms are applied."""

TRIGGERS: Mapping[str, tuple[str, ...]] = {
    "table": ("table",),
    "one_line_reco": ("one line", "one-line", "single line"),
    "bullets": ("bullet",),
    "brief": ("brief", "concise", "short"),
    "units": ("unit",),
    "cite": ("cite", "source"),
    "korean": ("korean", "한국어"),
}
LANGUAGE_OF_REQUEST = "in the language of the request"

_HANGUL = re.compile(r"[\u1100-\u11ff\u3130-\u318f\uac00-\ud7a3]")
_TRIGGER_RE = {
    name: [re.compile(r"(?<!\w)" + re.escape(t), re.IGNORECASE) for t in triggers]
    for name, triggers in TRIGGERS.items()
}
_LANG_RE = re.compile(re.escape(LANGUAGE_OF_REQUEST), re.IGNORECASE)


@dataclass(frozen=True)
class _Labels:
    preamble: str
    reco: str
    because: str
    sources: str
    no_tools: str
    header: tuple[str, str]


EN = _Labels(
    "Sure — here is what I found.",
    "Recommendation:",
    "because it comes first.",
    "Sources:",
    "the request",
    ("item", "value"),
)
KO = _Labels(
    "네 — 찾은 내용은 다음과 같습니다.",
    "추천:",
    "가장 먼저 나온 항목이기 때문입니다.",
    "출처:",
    "요청",
    ("항목", "값"),
)
_RECO_LABELS = (EN.reco, KO.reco)
_SOURCE_LABELS = (EN.sources, KO.sources)
_LABEL_KEYS = {"recommendation", "sources", "추천", "출처"}


def has_hangul(text: str) -> bool:
    """Whether ``text`` contains a Hangul character."""
    return _HANGUL.search(text) is not None


def traits_in(text: str, *, request: str = "") -> list[str]:
    """Traits whose triggers occur in ``text``, in catalog order.

    ``request`` is the user's request: ``in the language of the request`` in ``text`` triggers
    ``korean`` when ``request`` contains Hangul.
    """
    found = [name for name in TRAITS if any(r.search(text) for r in _TRIGGER_RE[name])]
    if "korean" not in found and _LANG_RE.search(text) and has_hangul(request):
        found.append("korean")
        found.sort(key=TRAITS.index)
    return found


# --- facts ------------------------------------------------------------------------------------

_FACT_LINE = re.compile(r"^\s*(?:[-*•]\s+)?([^\W\d_][\w .()/%&+'-]{0,39}?)\s*:[ \t]*(\S.*?)\s*$")
_NUMBER = re.compile(r"(?<![\w.,\-])([-+]?\d+(?:[.,]\d+)*)")
_UNIT = r"(?:%|°[CF]?|[^\W\d_]+(?:/[^\W\d_]+)?)"
_QUANTITY = re.compile(r"^\s*([-+]?\d+(?:[.,]\d+)*)\s?(" + _UNIT + r")\s*$")
_NUM_UNIT = re.compile(r"(?<![\w.,\-])(\d+(?:[.,]\d+)*)\s?(" + _UNIT + r")")


def facts_from_text(text: str) -> list[Fact]:
    """``key: value`` lines of ``text`` (keys ≤ 40 chars starting with a letter; URLs and
    recommendation/sources label lines excluded), in order."""
    out: list[Fact] = []
    for line in text.splitlines():
        m = _FACT_LINE.match(line)
        if m is None or m.group(2).startswith("//"):
            continue
        key = m.group(1).strip()
        if key.lower() in _LABEL_KEYS:
            continue
        out.append((key, m.group(2).strip()))
    return out


def facts_from_input(text: str) -> list[Fact]:
    """The comma-separated (or one-per-line) items after the input's first colon, else the
    input itself as one fact. An item ``k: v`` / ``k=v`` splits there; an item with a number
    splits before it (``Seoul 12 km`` → ``("Seoul", "12 km")``); other items have an empty value."""
    stripped = text.strip()
    if ":" in stripped:
        items = [i.strip().rstrip(".?!;").strip() for i in re.split(r"[,\n]", stripped.split(":", 1)[1])]
        facts = [_item_fact(i) for i in items if i]
        if facts:
            return facts
    return [(stripped, "")] if stripped else []


def _item_fact(item: str) -> Fact:
    for sep in (":", "="):
        if sep in item:
            key, value = item.split(sep, 1)
            if key.strip():
                return key.strip(), value.strip()
    m = _NUMBER.search(item)
    if m is not None and m.start() > 0 and item[: m.start()].strip():
        return item[: m.start()].strip(), item[m.start() :].strip()
    return item, ""


def unit_hints(text: str) -> dict[str, str]:
    """number → the unit that first follows it in ``text`` (tool results)."""
    hints: dict[str, str] = {}
    for m in _NUM_UNIT.finditer(text):
        hints.setdefault(m.group(1), m.group(2))
    return hints


# --- the answer -------------------------------------------------------------------------------


@dataclass
class Answer:
    """The policy's answer before rendering; traits set its flags (docs/formats.md#sim-3-the-policy step
    2)."""

    facts: list[Fact]
    tools_used: list[str] = field(default_factory=list)
    hints: dict[str, str] = field(default_factory=dict)
    preamble: bool = True
    table: bool = False
    one_line: bool = False
    bullets: bool = False
    brief: bool = False
    units: bool = False
    cite: bool = False
    korean: bool = False


def _t_table(a: Answer) -> None:
    a.table = True


def _t_one_line(a: Answer) -> None:
    a.one_line = True


def _t_bullets(a: Answer) -> None:
    a.bullets = True


def _t_brief(a: Answer) -> None:
    a.brief = True
    a.preamble = False


def _t_units(a: Answer) -> None:
    a.units = True


def _t_cite(a: Answer) -> None:
    a.cite = True


def _t_korean(a: Answer) -> None:
    a.korean = True


TRANSFORMS: Mapping[str, Callable[[Answer], None]] = {
    "table": _t_table,
    "one_line_reco": _t_one_line,
    "bullets": _t_bullets,
    "brief": _t_brief,
    "units": _t_units,
    "cite": _t_cite,
    "korean": _t_korean,
}


def apply_traits(answer: Answer, traits: list[str]) -> Answer:
    """Apply ``traits`` to ``answer`` in catalog order (in place; returned for chaining)."""
    for name in sorted(set(traits), key=TRAITS.index):
        TRANSFORMS[name](answer)
    return answer


def _show(value: str, a: Answer) -> str:
    m = _QUANTITY.match(value)
    if not a.units:
        return m.group(1) if m is not None else value
    bare = re.fullmatch(r"\s*([-+]?\d+(?:[.,]\d+)*)\s*", value)
    if bare is not None and bare.group(1) in a.hints:
        return f"{bare.group(1)} {a.hints[bare.group(1)]}"
    return value


def render(a: Answer) -> str:
    """The answer text (docs/formats.md#sim-3-the-policy step 2 with the module's decisions)."""
    lab = KO if a.korean else EN
    facts = [(k, _show(v, a)) for k, v in a.facts] or [("-", "")]
    head: list[str] = []
    rows: list[str] = []
    if a.table:
        head = [f"| {lab.header[0]} | {lab.header[1]} |", "|---|---|"]
        rows += [f"| {k} | {v} |" for k, v in facts]
    if a.bullets:
        rows += [f"- {k}: {v}" if v else f"- {k}" for k, v in facts]
    if not a.table and not a.bullets:
        rows += [f"{k}: {v}" if v else k for k, v in facts]
    key = facts[0][0]
    reco = [f"{lab.reco} {key} — {lab.because}"] if a.one_line else [f"{lab.reco} {key}", lab.because]
    tail = reco + ([f"{lab.sources} {', '.join(a.tools_used) or lab.no_tools}"] if a.cite else [])
    pre = [lab.preamble] if a.preamble else []
    if a.brief and len(head) + len(rows) + len(tail) > 5:
        if not a.one_line:
            tail.remove(lab.because)
        rows = rows[: max(0, 5 - len(head) - len(tail))]
    return "\n".join(pre + head + rows + tail)


# --- detectors --------------------------------------------------------------------------------

_PREAMBLE = re.compile(r"^(sure|certainly|of course|okay|ok|here (is|are)|네|물론)\b", re.IGNORECASE)
_SEPARATOR = re.compile(r"^\|\s*:?-{3,}")


def _lines(answer: str) -> list[str]:
    return [ln.strip() for ln in answer.splitlines() if ln.strip()]


def _is_preamble(line: str) -> bool:
    return bool(_PREAMBLE.match(line)) or (line.endswith(":") and not line.startswith("|"))


def _labelled(line: str, labels: tuple[str, ...]) -> bool:
    return any(line.startswith(lab) for lab in labels)


def detect_table(answer: str) -> bool:
    """A line starting and ending with ``|`` with ≥ 2 cells plus a ``|---`` separator line."""
    lines = _lines(answer)
    sep = any(_SEPARATOR.match(ln) for ln in lines)
    row = any(
        ln.startswith("|")
        and ln.endswith("|")
        and len(ln) > 1
        and len(ln[1:-1].split("|")) >= 2
        and not _SEPARATOR.match(ln)
        for ln in lines
    )
    return sep and row


def detect_one_line_reco(answer: str) -> bool:
    """Exactly one line starts ``Recommendation:`` (or ``추천:``) with text after the label, and
    no text follows it except a sources line."""
    lines = _lines(answer)
    idx = [i for i, ln in enumerate(lines) if _labelled(ln, _RECO_LABELS)]
    if len(idx) != 1:
        return False
    line = lines[idx[0]]
    label = next(lab for lab in _RECO_LABELS if line.startswith(lab))
    if not line[len(label) :].strip():
        return False
    return all(_labelled(ln, _SOURCE_LABELS) for ln in lines[idx[0] + 1 :])


def detect_bullets(answer: str) -> bool:
    """At least 2 lines start with ``- ``."""
    return sum(1 for ln in answer.splitlines() if ln.lstrip().startswith("- ")) >= 2


def detect_brief(answer: str) -> bool:
    """At most 5 non-empty lines, at least one, and the first is no preamble."""
    lines = _lines(answer)
    return 0 < len(lines) <= 5 and not _is_preamble(lines[0])


def _values(answer: str) -> list[str]:
    out: list[str] = []
    lines = _lines(answer)
    if lines and _is_preamble(lines[0]):
        lines = lines[1:]
    for ln in lines:
        if _labelled(ln, _RECO_LABELS + _SOURCE_LABELS) or _SEPARATOR.match(ln):
            continue
        if ln.startswith("|") and ln.endswith("|"):
            out += ln[1:-1].split("|")[1:]
        elif ": " in ln:
            out.append(ln.split(": ", 1)[1])
        else:
            out.append(ln.removeprefix("- "))
    return out


def detect_units(answer: str) -> bool:
    """At least one number in the fact values, and every one is followed by a unit token
    (``%``, ``°C`` or a word, after at most one space) or preceded by a currency sign.
    Date/time-like numbers (``2024-01-05``, ``10:30``) are skipped."""
    seen = 0
    for value in _values(answer):
        for m in _NUMBER.finditer(value):
            rest = value[m.end() :]
            if re.match(r"[-/:]\d", rest):
                continue
            seen += 1
            before = value[: m.start()].rstrip()
            if not (re.match(r"\s?" + _UNIT, rest) or before.endswith(("$", "€", "£", "₩", "¥"))):
                return False
    return seen > 0


def detect_cite(answer: str) -> bool:
    """A line starts with ``Sources:`` (or ``출처:``)."""
    return any(_labelled(ln, _SOURCE_LABELS) for ln in _lines(answer))


def detect_korean(answer: str) -> bool:
    """The answer contains Hangul."""
    return has_hangul(answer)


DETECTORS: Mapping[str, Callable[[str], bool]] = {
    "table": detect_table,
    "one_line_reco": detect_one_line_reco,
    "bullets": detect_bullets,
    "brief": detect_brief,
    "units": detect_units,
    "cite": detect_cite,
    "korean": detect_korean,
}


def detected_traits(answer: str) -> list[str]:
    """Traits detected in ``answer``, in catalog order."""
    return [name for name in TRAITS if DETECTORS[name](answer)]

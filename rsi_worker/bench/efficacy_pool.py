"""The generated agent pool of ``rsi bench efficacy`` (docs/benchmarks/efficacy.md).

Pure data: who the simulated users are, what they ask and how they word a correction. Nothing here
runs a model. Every text is built so that the sim model (``rsi_common.llm.sim.traits``) can see it:

* a request names no trait trigger; its facts are the comma-separated items after its colon
  (``TP1351 189 EUR``) or the ``key: value`` lines of the ``lookup`` tool, each with a quantity, so
  that every trait — ``units`` included — is observable and none is met by the base answer;
* a Korean-speaking user writes Hangul before the colon and Latin items after it, so the base
  answer holds no Hangul until the harness asks for the language of the request;
* a correction starts with a word the implicit-signal reader takes as a correction (or holds a
  complaint phrase) and contains the trigger of every trait it asks for, and no other trigger.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rsi_common.kernel import ToolDef

__all__ = [
    "ACCEPTS",
    "CHANGES",
    "FRAGMENTS",
    "KINDS",
    "LEADS",
    "LEARN_PREFS",
    "LIVE_TURNS",
    "REPEAT_PREFS",
    "SYSTEM_PARTS",
    "TOPICS",
    "AgentSpec",
    "Kind",
    "Language",
    "build_pool",
    "criterion",
    "lookup_tool",
    "requests",
]

Kind = Literal["learn", "repeat", "change", "accept"]
"""``learn``: corrects answers that lack its preferences; ``repeat``: after its first correction
repeats it word for word on every later turn; ``change``: learns a first preference, then adds a
second on top of it; ``accept``: only ever thanks."""
Language = Literal["en", "ko"]

SYSTEM_PARTS: tuple[tuple[str, str], ...] = (
    ("base", "You are a planning assistant for travel, home and everyday decisions."),
    ("policy", "Answer with the facts you were given or found and recommend one option."),
)
"""The pool's own agent instructions (no trait trigger: the harness has to learn every habit)."""

KINDS: tuple[Kind, ...] = ("learn", "learn", "repeat", "learn", "change", "learn", "accept", "learn",
                           "repeat", "change")
"""The kind of agent ``i`` is ``KINDS[i % 10]``: half learners, a fifth each repeated corrections
and changes of mind, a tenth acceptances."""

LEARN_PREFS: tuple[tuple[str, ...], ...] = (
    ("table",), ("one_line_reco",), ("bullets",), ("brief",), ("units",), ("cite",), ("korean",),
    ("table", "one_line_reco"), ("bullets", "units"), ("korean", "cite"), ("brief", "cite"),
    ("table", "units"), ("korean", "table"), ("one_line_reco", "units"), ("bullets", "cite"),
    ("korean", "brief"), ("units", "cite"), ("table", "cite"), ("korean", "bullets"),
)
"""Learners' preferences, in turn: every trait alone, then compatible pairs (Korean ones among them)."""
REPEAT_PREFS: tuple[tuple[str, ...], ...] = (
    ("table",), ("cite",), ("korean",), ("units",), ("bullets",), ("one_line_reco",), ("brief",),
)
CHANGES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("table",), ("cite",)), (("bullets",), ("units",)), (("korean",), ("table",)),
    (("one_line_reco",), ("cite",)), (("units",), ("brief",)), (("cite",), ("bullets",)),
    (("korean",), ("units",)), (("brief",), ("table",)),
)
"""Changes of mind: the first preference, then the second added on top of it."""

FRAGMENTS: Mapping[Language, Mapping[str, tuple[str, ...]]] = {
    "en": {
        "table": ("show the options as a table", "put the comparison in a table",
                  "lay the options out in a markdown table"),
        "one_line_reco": ("keep the recommendation to one line", "give the recommendation in a single line",
                          "I want a one-line recommendation"),
        "bullets": ("list the options as bullet points", "use bullets for the options",
                    "put each option on its own bullet"),
        "brief": ("keep it brief", "be concise and skip the preamble", "make the answer short"),
        "units": ("keep the unit next to every number", "show the units with the numbers",
                  "do not drop the units"),
        "cite": ("cite where the numbers come from", "name your sources at the end",
                 "add a line with the source"),
        "korean": ("answer in Korean", "reply in Korean, please", "write the answer in Korean"),
    },
    "ko": {
        "table": ("table 형식으로 보여 주세요", "비교는 table로 정리해 주세요",
                  "markdown table로 만들어 주세요"),
        "one_line_reco": ("추천은 one line으로 해 주세요", "추천을 single line으로 줄여 주세요",
                          "one-line 추천이면 좋겠어요"),
        "bullets": ("bullet 목록으로 정리해 주세요", "항목마다 bullet을 붙여 주세요",
                    "bullet point로 나눠 주세요"),
        "brief": ("brief하게 답해 주세요", "concise하게 써 주세요", "short하게 줄여 주세요"),
        "units": ("숫자에 unit을 붙여 주세요", "unit을 빼지 말아 주세요", "숫자마다 unit을 써 주세요"),
        "cite": ("source를 밝혀 주세요", "어디서 나온 숫자인지 source를 알려 주세요",
                 "마지막에 source를 적어 주세요"),
        "korean": ("한국어로 답해 주세요", "한국어로 써 주세요", "답은 한국어로 부탁해요"),
    },
}
"""Trait → clauses that contain the trait's trigger and no other (several wordings per trait)."""
LEADS: Mapping[Language, tuple[str, ...]] = {
    "en": ("No, {f}.", "Not quite — {f}.", "Actually, {f}.", "Wrong format: {f}.", "{F} instead, please.",
           "This is hard to read. {F}."),
    "ko": ("아니요, {f}.", "아니, {f}.", "아니요 — {f}."),
}
"""How a correction opens: the signal reader's correction words, ``instead``, or a complaint."""
JOINERS: Mapping[Language, str] = {"en": " and ", "ko": ", 그리고 "}
ACCEPTS: Mapping[Language, tuple[str, ...]] = {
    "en": ("Thanks, perfect.", "Great, thank you!", "Perfect — thanks.", "That works, thank you."),
    "ko": ("고마워요, 완벽해요.", "좋네요, 고마워요!", "고마워요!"),
}

TOPICS: Mapping[str, tuple[tuple[str, ...], tuple[str, ...], tuple[tuple[str, str], ...]]] = {
    "flights": (("Compare these flights to Lisbon: {items}", "Which flight should I book: {items}"),
                ("리스본행 항공편을 비교해 주세요: {items}", "어느 항공편을 예약할까요: {items}"),
                (("TP1351", "189 EUR"), ("FR7462", "74 EUR"), ("U27713", "96 EUR"), ("LH1166", "240 EUR"),
                 ("IB3107", "131 EUR"))),
    "hotels": (("Help me pick a hotel in Porto: {items}", "Compare these hotels per night: {items}"),
               ("포르투 호텔 좀 골라 주세요: {items}", "호텔 가격을 비교해 주세요: {items}"),
               (("Harbor Inn", "140 EUR"), ("Ribeira House", "118 EUR"), ("Douro Lodge", "97 EUR"),
                ("Bolhao Rooms", "83 EUR"), ("Cais Suites", "162 EUR"))),
    "recipes": (("What should I cook tonight: {items}", "Pick a dinner recipe for me: {items}"),
                ("오늘 저녁 뭐 만들까요: {items}", "저녁 메뉴를 골라 주세요: {items}"),
                (("risotto", "45 min"), ("green curry", "30 min"), ("pasta al limone", "20 min"),
                 ("shakshuka", "25 min"), ("lentil soup", "50 min"))),
    "insurance": (("Which home insurance plan fits me: {items}", "Compare these insurance plans: {items}"),
                  ("어떤 주택 보험이 좋을까요: {items}", "보험 상품을 비교해 주세요: {items}"),
                  (("Basic", "12 EUR/month"), ("Plus", "19 EUR/month"), ("Premium", "31 EUR/month"),
                   ("Family", "27 EUR/month"))),
    "libraries": (("Which library should I go to: {items}", "Compare the libraries near me: {items}"),
                  ("어느 도서관에 갈까요: {items}", "근처 도서관을 비교해 주세요: {items}"),
                  (("Central Library", "2 km"), ("Riverside Branch", "5 km"),
                   ("Old Town Reading Room", "1 km"), ("Campus Library", "7 km"))),
    "gyms": (("Compare these gym memberships: {items}", "Which gym should I join: {items}"),
             ("헬스장 회원권을 비교해 주세요: {items}", "어느 헬스장에 등록할까요: {items}"),
             (("FitHub", "39 EUR/month"), ("Iron Yard", "29 EUR/month"), ("Flow Studio", "55 EUR/month"),
              ("Pulse Club", "45 EUR/month"))),
    "rail": (("Which rail pass should I buy: {items}", "Compare these rail passes: {items}"),
             ("어떤 철도 패스를 살까요: {items}", "철도 패스를 비교해 주세요: {items}"),
             (("Regional Pass", "49 EUR"), ("Weekend Pass", "29 EUR"), ("Flex Ten", "89 EUR"),
              ("Night Rider", "19 EUR"))),
    "electricity": (("Which electricity tariff is best: {items}", "Compare these power tariffs: {items}"),
                    ("어떤 전기 요금제가 좋을까요: {items}", "전기 요금제를 비교해 주세요: {items}"),
                    (("GreenFlex", "31 ct/kWh"), ("SteadyPower", "28 ct/kWh"), ("NightSaver", "25 ct/kWh"),
                     ("CityGrid", "33 ct/kWh"))),
    "movers": (("Which moving company should I hire: {items}", "Compare these moving quotes: {items}"),
               ("어느 이삿짐 업체를 부를까요: {items}", "이사 견적을 비교해 주세요: {items}"),
               (("QuickMove", "780 EUR"), ("CarryAll", "640 EUR"), ("BoxBrothers", "910 EUR"),
                ("Easy Haul", "705 EUR"))),
    "coworking": (("Which coworking space should I rent: {items}", "Compare these coworking desks: {items}"),
                  ("어느 공유 오피스를 빌릴까요: {items}", "공유 오피스를 비교해 주세요: {items}"),
                  (("Desk Loft", "180 EUR/month"), ("Canal Works", "220 EUR/month"),
                   ("Quiet Floor", "150 EUR/month"), ("Harbour Hub", "195 EUR/month"))),
    "bikes": (("Which bike should I rent: {items}", "Compare these bike rentals: {items}"),
              ("어떤 자전거를 빌릴까요: {items}", "자전거 대여를 비교해 주세요: {items}"),
              (("City Cruiser", "12 EUR/day"), ("E-Bike Pro", "35 EUR/day"), ("Gravel One", "22 EUR/day"),
               ("Folding Go", "15 EUR/day"))),
    "courses": (("Which language course should I take: {items}", "Compare these language courses: {items}"),
                ("어떤 어학 강좌를 들을까요: {items}", "어학 강좌를 비교해 주세요: {items}"),
                (("Evening Spanish", "8 weeks"), ("Intensive Italian", "4 weeks"),
                 ("Weekend French", "12 weeks"), ("Online Greek", "10 weeks"))),
    "trails": (("Which hiking trail should we do: {items}", "Compare these hiking trails: {items}"),
               ("어느 등산로로 갈까요: {items}", "등산로를 비교해 주세요: {items}"),
               (("Ridge Loop", "14 km"), ("Lake Path", "8 km"), ("Summit Trail", "21 km"),
                ("Forest Walk", "6 km"))),
}
"""Topic → (English templates, Korean templates, items ``(name, quantity)``). No laptops or phones."""
TOOL_TEMPLATES: Mapping[Language, str] = {
    "en": "Help me choose among the {topic} you know. Use lookup topic={topic}",
    "ko": "{label} 중에서 골라 주세요. lookup topic={topic} 를 써 주세요",
}
"""Requests that make the policy call the ``lookup`` tool (its results are ``name: quantity`` lines)."""
KO_LABELS: Mapping[str, str] = {
    "flights": "항공편", "hotels": "호텔", "recipes": "요리", "insurance": "보험", "libraries": "도서관",
    "gyms": "헬스장", "rail": "철도 패스", "electricity": "전기 요금제", "movers": "이삿짐 업체",
    "coworking": "공유 오피스", "bikes": "자전거", "courses": "어학 강좌", "trails": "등산로",
}


def _lookup(args: Mapping[str, Any]) -> str:
    topic = str(args.get("topic") or "").strip().lower()
    found = TOPICS.get(topic)
    if found is None:
        return f"no results for {topic!r}"
    return "\n".join(f"{name}: {quantity}" for name, quantity in found[2])


def lookup_tool() -> ToolDef:
    """The pool's read-only ``lookup`` tool (one ``name: quantity`` line per option of a topic)."""
    return ToolDef(
        name="lookup",
        description="Look up the options of a topic. Returns one 'name: quantity' line per option.",
        input_schema={"type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]},
        read_only=True,
        executor=_lookup,
    )


def requests(rng: random.Random, language: Language, n: int) -> list[str]:
    """``n`` distinct requests in ``language``; about one in four uses the ``lookup`` tool."""
    out: list[str] = []
    topics = sorted(TOPICS)
    while len(out) < n:
        topic = rng.choice(topics)
        en, ko, items = TOPICS[topic]
        if rng.random() < 0.25:
            text = TOOL_TEMPLATES[language].format(topic=topic, label=KO_LABELS[topic])
        else:
            chosen = rng.sample(items, rng.choice((3, 4)))
            template = rng.choice(en if language == "en" else ko)
            text = template.format(items=", ".join(f"{name} {quantity}" for name, quantity in chosen))
        if text not in out:
            out.append(text)
    return out


def criterion(trait: str) -> str:
    """The judge criterion of a trait on held-out turns (its first English wording)."""
    return "A better answer does this: " + FRAGMENTS["en"][trait][0]


@dataclass(frozen=True)
class AgentSpec:
    """One simulated agent and its user (docs/benchmarks/efficacy.md, "The pool")."""

    id: str
    kind: Kind
    language: Language
    first: tuple[str, ...]
    """Traits the user wants from the first turn (empty for ``accept``)."""
    second: tuple[str, ...]
    """Traits the user adds on :attr:`switch_turn` (``change`` only)."""
    live: tuple[str, ...]
    """Requests of the live turns (one new conversation each)."""
    heldout: tuple[str, ...]
    """Requests never recorded, judged under H0 and under every adopted version."""
    offset: int
    """Where this user's wording starts in the lead and fragment lists."""
    switch_turn: int = 2

    @property
    def traits(self) -> tuple[str, ...]:
        """Every trait the user wants by the end (first, then second)."""
        return self.first + tuple(t for t in self.second if t not in self.first)

    @property
    def learning(self) -> bool:
        """Whether the agent has preferences (its held-out turns count in the pass rates)."""
        return self.kind != "accept"

    def wants(self, turn: int) -> tuple[str, ...]:
        """Traits the user expects on live turn ``turn``."""
        return self.traits if self.kind == "change" and turn >= self.switch_turn else self.first

    def correction(self, traits: Sequence[str], turn: int) -> str:
        """The user's correction naming ``traits``, worded for turn ``turn``."""
        frags = [FRAGMENTS[self.language][t][(self.offset + turn) % len(FRAGMENTS[self.language][t])]
                 for t in traits]
        text = JOINERS[self.language].join(frags)
        leads = LEADS[self.language]
        return leads[(self.offset + turn) % len(leads)].format(f=text, F=text[:1].upper() + text[1:])

    def acceptance(self, turn: int) -> str:
        """The user's thanks on turn ``turn``."""
        accepts = ACCEPTS[self.language]
        return accepts[(self.offset + turn) % len(accepts)]


LIVE_TURNS: Mapping[Kind, int] = {"learn": 4, "repeat": 4, "change": 5, "accept": 3}
"""Live turns per kind (a change of mind switches on turn 2 of 5)."""


def build_pool(n: int, seed: int, *, heldout: int = 5) -> list[AgentSpec]:
    """The pool of ``n`` agents for ``seed`` (the same for every noise level).

    Agent ``i`` has kind ``KINDS[i % 10]``; learners, repeaters and changers take their preferences
    from :data:`LEARN_PREFS`, :data:`REPEAT_PREFS` and :data:`CHANGES` in turn; a user whose
    preferences include ``korean`` writes in Korean, and every other acceptance control does too.
    """
    rng = random.Random(f"rsi-bench-efficacy/{seed}")
    counters = {"learn": 0, "repeat": 0, "change": 0, "accept": 0}
    pool: list[AgentSpec] = []
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        c = counters[kind]
        counters[kind] += 1
        first: tuple[str, ...] = ()
        second: tuple[str, ...] = ()
        if kind == "learn":
            first = LEARN_PREFS[c % len(LEARN_PREFS)]
        elif kind == "repeat":
            first = REPEAT_PREFS[c % len(REPEAT_PREFS)]
        elif kind == "change":
            first, second = CHANGES[c % len(CHANGES)]
        language: Language = "ko" if "korean" in first + second or (kind == "accept" and c % 2) else "en"
        texts = requests(rng, language, LIVE_TURNS[kind] + heldout)
        label = "+".join(first + second) or "none"
        pool.append(AgentSpec(
            id=f"a{i:03d}-{kind}-{label}", kind=kind, language=language, first=first, second=second,
            live=tuple(texts[: LIVE_TURNS[kind]]), heldout=tuple(texts[LIVE_TURNS[kind]:]),
            offset=rng.randrange(60),
        ))
    return pool

"""The screen's false-positive rate on legitimate proposals (docs/security/gate.md, "Measured").

Legitimate corrections and explicit signals in many wordings (those of the tests, the demo and more),
each consolidated up to the draft: variants A (prompt blocks) and B (skill files) of the sim proposer
with the sim critic. A legitimate proposal names a habit in general words, so the screen must reject
none of them. The count is printed (``pytest -s``) for the closing note of the issue.
"""

from __future__ import annotations

from typing import Any

import pytest

from rsi_common.config import ConsolidationParams, SimConfig
from rsi_common.harness import h0
from rsi_common.kernel import TurnPlan, run_turn
from rsi_common.llm.sim import SimClient
from rsi_common.world import TurnWorld
from rsi_worker.consolidate.draft import draft_candidate
from rsi_worker.roles.signal import implicit_signal
from tests.unit.roles.helpers import NO_RETRY, demo_context

CORRECTIONS = (
    "No, show it as a table and keep the recommendation to one line",
    "No, show it as a table and keep it short",
    "Not quite, cite the source as well",
    "No, shorter please",
    "No, keep it brief",
    "Actually, use bullet points instead",
    "Actually, use bullets",
    "Wrong, I asked for a table",
    "No, put the recommendation on a single line",
    "No, keep the units next to the numbers",
    "No, answer in Korean please",
    "아니요, 표로 보여 주세요",
    "Actually, a concise answer with sources would be better",
    "No, I need a table with the unit of each price",
    "Not like that: bullet points and cite your sources",
)
SIGNALS: tuple[dict[str, Any], ...] = (
    {"criteria": ["Use a table when comparing options"]},
    {"stars": 2, "comment": "too long, keep it brief"},
    {"issue": "no sources cited"},
    {"stars": 1, "issue": "hard to compare, a table would help"},
    {"criteria": ["Keep units next to numbers", "Cite sources"]},
)
REQUESTS = (
    "Which laptop should I buy? Compare: Alpha 999 EUR, Beta 1099 EUR",
    "어떤 노트북을 살까요? 비교: Alpha 999 EUR, Beta 1099 EUR",
)


def turn(request: str, conv: str, seq: int, history: list[dict[str, Any]]) -> TurnWorld:
    plan = TurnPlan(
        input=request,
        agent_id="agent-1",
        io_id=f"io-{conv}-{seq}",
        interaction_id=conv,
        provider="sim",
        model="sim-1",
        system_parts=[("identity", "You are a shopping assistant.")],
        messages=history,
        clock=1_700_000_000.0 + seq,
    )
    result = run_turn(plan, h0(), SimClient("sim-1", SimConfig()), retry=NO_RETRY)
    assert result.world is not None
    return TurnWorld(f"w_{conv}_{seq}_" + "0" * 16, result.world, interaction_id=conv, seq=seq)


def scenario(request: str, correction: str | None, signals: dict[str, Any] | None) -> list[TurnWorld]:
    first = turn(request, "c1", 1, [])
    if signals is not None:
        first.signals.update(signals)
        return [first]
    assert correction is not None
    history = [
        {"role": "user", "content": request},
        {"role": "assistant", "content": [{"type": "text", "text": first.answer}]},
    ]
    second = turn(correction, "c1", 2, history)
    first.signals["implicit"] = implicit_signal(
        SimClient("sim-1", role="signal"), first.request, first.answer, second.request
    )
    return [first, second]


CASES = (
    [(r, c, None) for c in CORRECTIONS for r in REQUESTS[:1]]
    + [(REQUESTS[1], c, None) for c in CORRECTIONS if "Korean" in c or "아니요" in c]
    + [(REQUESTS[0], None, s) for s in SIGNALS]
)


@pytest.mark.parametrize("variant", ["A", "B"])
def test_no_legitimate_proposal_is_screened_out(variant: str) -> None:
    screened, drafted = [], 0
    for request, correction, signals in CASES:
        ctx = demo_context(
            worlds=scenario(request, correction, signals), params=ConsolidationParams(repair_rounds=0)
        )
        if not any(v.mean < 1.0 for v in ctx.views):
            continue  # nothing to fix: no round would open
        d = draft_candidate(
            ctx,
            variant,
            "AB".index(variant),
            proposer=SimClient("sim-1", role="proposer"),
            critic=SimClient("sim-1", role="critic"),
        )
        if d.gate == "no_proposal":
            continue
        drafted += 1
        stage = (d.review or {}).get("stage")
        if stage in ("manifest", "privilege", "precheck", "untrusted"):
            screened.append((correction or signals, d.detail))
    print(f"\nvariant {variant}: {len(screened)} of {drafted} legitimate drafts screened out")
    assert drafted >= 15
    assert screened == []


def test_a_user_who_writes_the_proposers_own_words_still_teaches_the_habit() -> None:
    """The user's wording shares six words with the proposer's general instruction: the screen
    rejects the copy, the repair rewords it, and the habit is learned in other words."""
    from rsi_worker.roles.sim.proposer import TRAIT_TEXT, TRAIT_TEXT_ALT

    worlds = scenario(REQUESTS[0], "No, keep the unit next to every number", None)
    ctx = demo_context(worlds=worlds, params=ConsolidationParams(repair_rounds=1))
    d = draft_candidate(ctx, "A", 0, proposer=SimClient("sim-1", role="proposer"),
                        critic=SimClient("sim-1", role="critic"))
    assert d.live and d.usage["critic"]["calls"] == 1  # the first attempt never reached the model
    assert TRAIT_TEXT_ALT["units"] in d.diff and TRAIT_TEXT["units"] not in d.diff

"""The prompt layouts of rsi_worker.roles and the sim behaviours that read them agree
(docs/formats.md#sim-4-the-roles).

The analyst, proposer and critic behaviours (``rsi_worker.roles.sim``) import the header constants
of the prompt builders beside them; the generic judge and signal behaviours live in
``rsi_common.llm.sim.roles``, which may not import ``rsi_worker``, so their headers are held
against the builders here.
"""

from __future__ import annotations

import re

import pytest

from rsi_common.errors import ModelBadRequest
from rsi_common.llm import ModelRequest
from rsi_common.llm.sim import SIM_ROLES, SimClient
from rsi_common.llm.sim.core import parse_sections
from rsi_common.llm.sim.roles import JUDGE_SECTIONS, SIGNAL_SECTIONS
from rsi_worker.consolidate.draft import DraftContext
from rsi_worker.roles.analyst import PROMPT_SECTIONS, WORLD_HEADER, WORLD_SECTIONS, analyst_user_prompt
from rsi_worker.roles.critic import PAYLOAD_SECTIONS, critic_user_prompt
from rsi_worker.roles.judge import judge_user_prompt
from rsi_worker.roles.proposer_context import SECTIONS, proposer_user
from rsi_worker.roles.signal import signal_user_prompt
from rsi_worker.roles.sim import SIM_BEHAVIOURS, register_sim_behaviours


def _headers(text: str) -> list[str]:
    """The ``HEADER:`` lines of a role prompt, in order."""
    return re.findall(r"(?m)^([A-Z][A-Z ]+):$", text)


def test_importing_the_roles_registers_their_behaviours() -> None:
    assert {role: SIM_ROLES[role] for role in SIM_BEHAVIOURS} == dict(SIM_BEHAVIOURS)
    register_sim_behaviours()  # again: a no-op
    assert {"policy", "judge", "signal", "compact"} <= set(SIM_ROLES)


def test_judge_and_signal_prompts_have_the_sim_headers() -> None:
    assert tuple(_headers(judge_user_prompt("r", "a", "c", "ref"))) == JUDGE_SECTIONS
    assert tuple(_headers(judge_user_prompt("r", "a", "c", None))) == JUDGE_SECTIONS[:3]
    assert tuple(_headers(signal_user_prompt("r", "a", "n"))) == SIGNAL_SECTIONS


def test_critic_payload_has_its_sections_in_order() -> None:
    payload = critic_user_prompt("+ a line\n", "mechanism", "missing-table", [{"id": "E1"}], ["hi"])
    assert tuple(_headers(payload)) == PAYLOAD_SECTIONS
    assert set(parse_sections(payload, PAYLOAD_SECTIONS)) == set(PAYLOAD_SECTIONS)


@pytest.mark.parametrize("repair", [None, {"reasons": ["x"]}])
def test_proposer_context_has_its_sections_in_order(ctx: DraftContext,
                                                    repair: dict[str, list[str]] | None) -> None:
    text = proposer_user(ctx, "A", 0, repair)
    wanted = [h for h in SECTIONS if h != ("TASK" if repair else "REPAIR")]
    assert [h for h in _headers(text) if h in SECTIONS] == wanted
    assert list(parse_sections(text, SECTIONS)) == wanted


def test_analyst_prompt_has_its_header_lines(ctx: DraftContext) -> None:
    lines = analyst_user_prompt(ctx.views, {}).splitlines()
    assert [line for line in lines if line in PROMPT_SECTIONS] == list(PROMPT_SECTIONS)
    assert any(line.startswith(f"{WORLD_HEADER} ") for line in lines)
    assert {line for line in lines if line in WORLD_SECTIONS} >= set(WORLD_SECTIONS[1:])


def test_the_sim_refuses_a_role_with_no_behaviour() -> None:
    client = SimClient(role="critic", handlers={k: v for k, v in SIM_ROLES.items() if k != "critic"})
    with pytest.raises(ModelBadRequest, match="no behaviour is registered for the role 'critic'"):
        client.complete(ModelRequest(model="", system="", messages=[{"role": "user", "content": "x"}]))

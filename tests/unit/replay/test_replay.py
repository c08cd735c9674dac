"""``replay_world`` (docs/formats.md §4.2): determinism (docs/architecture.md invariant 6), no tool runs (5),
no memory
writes (7), off-support calls, plan rebuild, cancel, results."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from rsi_common.errors import ModelAuthError
from rsi_common.harness import Harness, h0
from rsi_common.kernel import TOOL_SEARCH, ToolDef, TurnPlan, TurnResult, run_turn
from rsi_common.kernel.components.skills import READ_SKILL
from rsi_common.kernel.testing import RecordingClient, ScriptedModel, ScriptItem, text_response, tool_response
from rsi_common.llm import ModelClient, ModelRequest, ModelResponse
from rsi_common.replay import (
    NO_RECORD,
    CallBook,
    PolicySpec,
    ReplayMemoryProvider,
    ReplayResult,
    cut_transcript,
    replay_plan,
    replay_world,
)
from rsi_common.world import IMAGE_PLACEHOLDER, TurnWorld, new_world_id
from tests.unit.kernel.helpers import (
    NO_RETRY,
    SECRET,
    SKILL_COMPONENT,
    SKILL_TEXT,
    Tripwire,
    harness_with,
    live,
    make_plan,
    no_sleep,
    sim,
)

SIM_POLICY = PolicySpec("sim", "sim-1")
SCRIPTED = PolicySpec("scripted", "sim-1")  # make_plan records model "sim-1"


def record(
    plan: TurnPlan, harness: Harness | None = None, client: ModelClient | None = None
) -> tuple[TurnWorld, RecordingClient, TurnResult]:
    result, rec = live(plan, harness, client)
    assert result.world is not None, result.events
    return TurnWorld(new_world_id(), result.world), rec, result


def replay(
    world: TurnWorld, harness: Harness | None, client: ModelClient, policy: PolicySpec = SIM_POLICY, **kw: Any
) -> tuple[ReplayResult, RecordingClient]:
    rec = RecordingClient(client)
    result = replay_world(
        world, harness or h0(), policy, llm_factory=lambda _p: rec, retry=NO_RETRY, sleep=no_sleep, **kw
    )
    return result, rec


def armed_tools(trip: Tripwire, armed: list[bool]) -> list[ToolDef]:
    """Sales tools that work live and fail (and record) once ``armed[0]`` is set."""

    def make(name: str, answer: str) -> ToolDef:
        def run(inp: dict[str, Any]) -> str:
            if armed[0]:
                return trip.executor(name)(inp)
            return answer

        return ToolDef(
            name,
            f"{name} tool",
            {"type": "object", "properties": {"region": {"type": "string"}, "city": {"type": "string"}}},
            executor=run,
        )

    return [make("get_sales", "region: EU\nrevenue: 12 EUR"), make("get_weather", "city: Paris\ntemp: 21 C")]


def test_replay_under_h0_sends_byte_identical_requests_and_runs_no_tool() -> None:
    trip, armed = Tripwire(), [False]
    world, live_rec, live_result = record(make_plan(tools=armed_tools(trip, armed)))
    armed[0] = True
    result, rep = replay(world, None, sim(), seed=0)
    assert rep.canonical_requests() == live_rec.canonical_requests()
    assert trip.calls == []
    assert (result.answered, result.off_support, result.error, result.status) == (2, 0, "", "completed")
    assert result.answer == live_result.answer and result.steps == 3
    assert result.policy_tokens == live_result.policy_tokens
    assert all(r.seed == 0 for r in rep.requests) and all(r.seed is None for r in live_rec.requests)


def scripted_case(name: str) -> tuple[TurnPlan, Harness | None, list[ScriptItem]]:
    crm = [
        ToolDef(
            "crm_list", "List CRM objects.", core=False, guide=True, family="crm", executor=lambda _i: "a: 1"
        ),
        ToolDef(
            "crm_get", "Get a CRM account.", core=False, family="crm", executor=lambda _i: "account: ACME"
        ),
    ]
    memory = ReplayableMemory()
    history = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "sure"}]
    if name == "tool_search":
        return (
            make_plan(input="find acme", tools=crm),
            None,
            [
                tool_response(TOOL_SEARCH, {"query": "account"}, tool_use_id="a"),
                tool_response("crm_get", {"id": 1}, tool_use_id="b"),
                text_response("ACME"),
            ],
        )
    if name == "skills":
        h = harness_with({}, {"skills/cite-sources/SKILL.md": SKILL_TEXT}, [SKILL_COMPONENT])
        return (
            make_plan(input="x"),
            h,
            [tool_response(READ_SKILL, {"name": "cite-sources"}), text_response("cited")],
        )
    if name == "memory_notes_schema_cache":
        h = harness_with(
            {"prompt.system.params.extra_blocks": ["Be exact."], "tools.exposure.params.executor": "parallel"}
        )
        plan = make_plan(
            input="x",
            memory=memory,
            turn_notes=["n"],
            messages=history,
            output_schema={"type": "object"},
            kwargs={"enable_prompt_cache": True, "temperature": 0.1},
        )
        return plan, h, [tool_response("get_sales", {"region": "EU"}), text_response('{"a": 1}')]
    if name == "compaction":
        big = [{"role": "user", "content": "y" * 6000}, {"role": "assistant", "content": "ok"}]
        plan = make_plan(input="x", messages=big, kwargs={"context_window_budget": 3000})
        return plan, None, [text_response("summary"), tool_response("get_sales", {}), text_response("done")]
    raise AssertionError(name)


class ReplayableMemory:
    def retrieve(self, query: str, timeout_s: float) -> list[dict[str, Any]]:
        return [
            {
                "key": "tz",
                "source": "profile",
                "content": "CET",
                "relevance_score": 1.0,
                "metadata": {},
                "pinned": True,
            },
            {
                "key": "topic",
                "source": "notes",
                "content": "sales",
                "relevance_score": 0.3,
                "metadata": {},
                "pinned": False,
            },
        ]


@pytest.mark.parametrize("case", ["tool_search", "skills", "memory_notes_schema_cache", "compaction"])
def test_any_harness_replays_byte_identically_with_the_same_responses(case: str) -> None:
    plan, harness, script = scripted_case(case)
    world, live_rec, live_result = record(plan, harness, ScriptedModel(script))
    assert live_result.status == "completed", live_result.error
    result, rep = replay(world, harness, ScriptedModel(copy.deepcopy(script)), SCRIPTED, seed=3)
    assert rep.canonical_requests() == live_rec.canonical_requests()
    assert result.error == "" and result.off_support == 0 and result.answer == live_result.answer


def test_a_candidate_with_an_extra_block_changes_the_request_and_reads_the_param() -> None:
    world, live_rec, _ = record(make_plan())
    cand = harness_with({"prompt.system.params.extra_blocks": ["When you compare options, use a table."]})
    result, rep = replay(world, cand, sim())
    assert rep.requests[0].canonical() != live_rec.requests[0].canonical()
    assert rep.requests[0].system.endswith("\n\nWhen you compare options, use a table.")
    assert "prompt.system.params.extra_blocks" in result.params_read
    assert result.params_read == sorted(result.params_read)
    assert "| item | value |" in result.answer  # the sim applies the table trait


def test_an_edit_of_a_never_read_param_stays_out_of_params_read() -> None:
    world, _, _ = record(make_plan())
    cand = harness_with({"memory.archive.params.archive": False})
    result, _ = replay(world, cand, sim())
    assert not [p for p in result.params_read if p.startswith("memory.archive.")]


def test_an_unrecorded_call_gets_no_record_and_the_replay_continues() -> None:
    script: list[ScriptItem] = [tool_response("get_sales", {"region": "EU"}), text_response("EU: 12")]
    world, _, _ = record(make_plan(), None, ScriptedModel(script))
    other = [tool_response("get_sales", {"region": "US"}), text_response("unknown"), text_response("unknown")]
    result, rep = replay(world, None, ScriptedModel(other), SCRIPTED)
    block = rep.requests[1].messages[-1]["content"][0]
    assert (block["content"], block["is_error"]) == (NO_RECORD, True)
    assert "no recorded result" in NO_RECORD.lower()
    assert (result.off_support, result.answered, result.status, result.answer) == (
        1,
        0,
        "completed",
        "unknown",
    )
    assert result.off_support_calls == [{"name": "get_sales", "input": {"region": "US"}}]
    assert result.error == ""


def test_loose_guide_and_repeated_calls_in_a_full_replay() -> None:
    tools = [ToolDef("search", "Search (a listing).", guide=True, executor=lambda _i: "q3: 12")]
    world, _, _ = record(
        make_plan(input="x", tools=tools),
        None,
        ScriptedModel([tool_response("search", {"Query": "Sales  Q3"}), text_response("ok")]),
    )
    script = [
        tool_response("search", {"Query": " sales q3 "}, tool_use_id="1"),
        tool_response("search", {"Query": " sales q3 "}, tool_use_id="2"),
        tool_response("search", {"Query": "Q4"}, tool_use_id="3"),
        text_response("done"),
    ]
    result, rep = replay(world, None, ScriptedModel(script), SCRIPTED)
    assert (result.answered, result.off_support) == (3, 0)
    assert [
        m["content"][0]["content"]
        for m in rep.requests[-1].messages
        if m["role"] == "user" and isinstance(m["content"], list)
    ] == ["q3: 12"] * 3


def test_recorded_memory_retrieval_reaches_the_request() -> None:
    world, live_rec, _ = record(make_plan(memory=ReplayableMemory()))
    assert world.data["memory"]["chunks"][0]["key"] == "tz"
    result, rep = replay(world, None, sim())
    assert rep.requests[0].system.endswith("# Pinned facts\n- tz: CET")
    assert "Relevant memory:\n- [notes] topic: sales" in rep.requests[0].messages[-1]["content"]
    assert rep.canonical_requests() == live_rec.canonical_requests()
    assert "memory.archive.params.retrieve" in result.params_read
    assert "memory.archive.params.archive" not in result.params_read


def test_the_replay_memory_never_writes() -> None:
    assert ReplayMemoryProvider.rsi_replay is True
    assert not hasattr(ReplayMemoryProvider([]), "archive")
    assert ReplayMemoryProvider(None).retrieve("q", 1.0) == []

    class ReplayWithArchive(ReplayMemoryProvider):
        def __init__(self) -> None:
            super().__init__([])
            self.archived: list[Any] = []

        def archive(self, messages: Any) -> None:
            self.archived.append(messages)

    mem = ReplayWithArchive()
    run_turn(
        make_plan(input="x", tools=[], memory=mem), None, ScriptedModel([text_response("ok")]), retry=NO_RETRY
    )
    assert mem.archived == []


def test_a_set_cancel_flag_stops_before_the_first_model_call() -> None:
    world, _, _ = record(make_plan())
    result, rep = replay(world, None, sim(), cancelled=lambda: True)
    assert (result.status, result.termination_reason, result.error) == ("cancelled", "CANCELLED", "")
    assert rep.requests == [] and not result.missing


def test_a_cancel_between_model_calls_stops_the_replay() -> None:
    world, _, _ = record(make_plan())
    flag = [False]
    inner = sim()

    def then_cancel(request: ModelRequest) -> ModelResponse:
        flag[0] = True
        return inner.complete(request)

    result, rep = replay(world, None, ScriptedModel([then_cancel]), cancelled=lambda: flag[0])
    assert (result.status, result.steps, len(rep.requests)) == ("cancelled", 1, 1)


def test_not_replayable_world() -> None:
    world, _, _ = record(make_plan())
    world.data["replayable"] = False
    result, _ = replay(world, None, sim())
    assert result.error == "world is not replayable" and result.missing


def test_exceptions_and_failed_turns_are_missing_trials() -> None:
    world, _, _ = record(make_plan())

    def broken(_p: PolicySpec) -> ModelClient:
        raise RuntimeError("no client " + "x" * 600)

    result = replay_world(world, h0(), SIM_POLICY, llm_factory=broken)
    assert result.error.startswith("RuntimeError: no client") and len(result.error) == 500
    failed, _ = replay(world, None, ScriptedModel([ModelAuthError("bad key")]))
    assert failed.status == "failed" and failed.error == "MODEL_ERROR: ModelAuthError: bad key"


def test_plan_rebuild_rules() -> None:
    world, _, _ = record(make_plan(kwargs={"max_iterations": 7, "stream": True}))
    book = CallBook.from_world(world.data)
    plan = replay_plan(
        world, PolicySpec("sim", "sim-2", temperature=0.3, credentials={"api_key": SECRET}), book
    )
    assert (plan.provider, plan.model, plan.credentials) == ("sim", "sim-2", {"api_key": SECRET})
    assert plan.kwargs == {
        "max_iterations": 7,
        "stream": False,
        "temperature": 0.3,
        "max_tokens": 8192,
        "context_window_budget": 200_000,
        "enable_compaction": True,
    }
    assert plan.clock == world.clock and plan.input == world.data["input"]
    assert [t.name for t in plan.tools] == ["get_sales", "get_weather"]
    assert plan.messages is not world.data["state"]["messages"]
    world2, _, _ = record(make_plan(kwargs={"temperature": 0.9}))
    assert replay_plan(world2, PolicySpec("sim", "m", temperature=0.3), book).kwargs["temperature"] == 0.9


def test_requests_use_the_policy_model_and_the_trial_seed() -> None:
    world, _, _ = record(make_plan())
    result, rep = replay(world, None, sim(), PolicySpec("sim", "sim-next", temperature=0.2), seed=5)
    assert {(r.model, r.seed, r.temperature) for r in rep.requests} == {("sim-next", 5, 0.2)}
    assert SECRET not in str(result.to_json())


def test_result_json_round_trip_and_transcript_cut() -> None:
    world, _, _ = record(make_plan(input="Summarise: " + "z" * 5000 + ", b", tools=[]))
    result, _ = replay(world, None, sim())
    first = result.transcript[0]["content"]
    assert len(first) == 4001 and first.endswith("…")
    data = result.to_json()
    assert data["schema"] == "rsi-replay/1" and ReplayResult.from_json(data) == result
    cache = result.to_json(transcript=False)
    assert "transcript" not in cache and ReplayResult.from_json(cache).transcript == []


def test_image_blocks_in_the_transcript_become_placeholders() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    assert cut_transcript([{"role": "user", "content": [image, {"type": "text", "text": "y" * 4001}]}]) == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "[image]"}, {"type": "text", "text": "y" * 4000 + "…"}],
        }
    ]
    world, _, _ = record(make_plan(input=[{"type": "text", "text": "what is this?"}, image], tools=[]))
    assert world.data["images_dropped"] is True
    result, _ = replay(world, None, ScriptedModel([text_response("a cat")]), SCRIPTED)
    assert result.transcript[0]["content"][1] == {"type": "text", "text": IMAGE_PLACEHOLDER}
    assert result.answer == "a cat"


def test_from_recorded_builds_an_on_policy_trial() -> None:
    world, _, live_result = record(make_plan())
    trial = ReplayResult.from_recorded(world)
    assert (trial.source, trial.answer, trial.status, trial.params_read, trial.off_support) == (
        "recorded",
        live_result.answer,
        "completed",
        [],
        0,
    )
    assert trial.policy_tokens == live_result.policy_tokens and trial.steps == 3


def test_a_recorded_pending_call_yields_once_after_its_recorded_results() -> None:
    """A slice that suspended on a wait replays to the same suspension
    (docs/runtime/subagents.md#worlds-and-replay)."""
    wait = {"handles": ["sa_1"]}
    book = CallBook([{"name": "subagent_wait", "input": wait, "content": "timeout"}], pending=[
        {"name": "subagent_wait", "input": wait}])
    assert not book.yields("subagent_wait", wait) and book.lookup("subagent_wait", wait) == ("timeout", False)
    assert not book.yields("subagent_wait", {"handles": ["sa_2"]})
    assert book.yields("subagent_wait", wait) and not book.yields("subagent_wait", wait)
    assert book.lookup("subagent_wait", wait) == ("timeout", False) and book.off_support == []

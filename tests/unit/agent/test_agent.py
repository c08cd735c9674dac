"""The ``Agent`` façade on the sim model and the embedded default (SQLite + in-process coordination,
no broker): turns, tools by decorator, the history window, feedback, streaming, async, presets, and
the three-line example from a fresh directory with no configuration."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from rsi_common import Agent, db
from rsi_common.agent import FinalResult, TextDelta, ToolCall, ToolResultEvent
from rsi_common.config import Settings
from rsi_common.errors import InvalidInput, ModelAuthError
from rsi_common.kernel.testing import RecordingClient
from rsi_common.llm import make_client
from rsi_common.llm.presets import PRESETS
from rsi_common.llm.sim import SimClient

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(database_url=f"sqlite:///{tmp_path / 'rsi.db'}", home=tmp_path / ".rsi")


@pytest.fixture
def agent(settings: Settings) -> Iterator[Agent]:
    with Agent("helper", settings=settings) as made:
        yield made


def world_signals(agent: Agent, io_id: str) -> dict[str, Any]:
    with db.session_factory(agent.host().engine).begin() as s:
        row = db.world_by_io(s, agent.agent_id, io_id)
        assert row is not None
        return dict(row.signals or {})


def test_a_turn_runs_on_the_embedded_default_and_is_recorded(agent: Agent) -> None:
    result = agent.run("Compare two laptops under 1500 EUR")
    assert result.status == "completed" and "Compare two laptops" in result.answer
    assert result.recorded and result.record_error == "" and result.history_error == ""
    assert result.usage["calls"] == 1 and result.usage["input_tokens"] > 0
    assert agent.host().mode == "embedded" and agent.last_io_id == result.io_id
    assert result.turn.world is not None and result.turn.world["interaction_id"] == "default"
    with db.session_factory(agent.host().engine).begin() as s:
        row = db.world_by_io(s, "helper", result.io_id)
        assert row is not None and row.enqueued_at is None, "no cluster: the hand-off waits for a sweeper"


def test_tools_by_decorator_run_and_bad_arguments_are_results(agent: Agent) -> None:
    @agent.tool
    def get_sales(region: str, year: int = 2024) -> str:
        """Sales figures by region.

        Args:
            region: The sales region.
        """
        return f"region: {region}\nrevenue: 12 EUR\nyear: {year}"

    assert get_sales("x") .startswith("region: x"), "the function is returned unchanged"
    [tool] = agent.tools
    assert tool.input_schema["required"] == ["region"]
    good = agent.run("use get_sales region=north")
    assert good.tool_calls[0]["input"] == {"region": "north"} and not good.tool_calls[0]["is_error"]
    assert "revenue: 12 EUR" in good.tool_calls[0]["content"] and "12" in good.answer
    bad = agent.run("use get_sales year=soon")
    assert bad.status == "completed" and bad.tool_calls[0]["is_error"]
    assert bad.tool_calls[0]["content"].startswith("invalid arguments: region: Field required")
    with pytest.raises(InvalidInput, match="get_sales: a tool of that name is registered already"):
        agent.tool(get_sales)


def test_the_history_window_and_retention(settings: Settings) -> None:
    model = RecordingClient(SimClient())
    kw: dict[str, Any] = {"model_client": model, "history_turns": 2, "history_retention": 3}
    with Agent("helper", settings=settings, **kw) as agent:
        turns = [agent.run(f"question number {i}") for i in range(4)]
        window = agent.history()
        asked = [m["content"] for m in window if m["role"] == "user"]
        assert asked == ["question number 2", "question number 3"]
        assert window == [*turns[2].turn.transcript, *turns[3].turn.transcript]
        agent.run("question number 4")
        sent = model.requests[-1].messages
        assert sent[:len(window)] == window, "the model saw exactly the window before the new input"
        assert agent.history("other") == [], "conversations are separate"
        agent.run("elsewhere", conversation="other")
        assert len(agent.history("other")) == 2
        with db.session_factory(agent.host().engine).begin() as s:
            kept = s.scalar(select(func.count()).select_from(db.ConversationRow)
                            .where(db.ConversationRow.conversation_id == "default"))
        assert kept == 3, "retention keeps the newest three turns"
        assert agent.forget() == 3 and agent.history() == []
    with pytest.raises(InvalidInput, match="history_retention"):
        Agent("helper", settings=settings, history_turns=5, history_retention=2)


def test_no_history_window_sends_no_history(settings: Settings) -> None:
    model = RecordingClient(SimClient())
    with Agent("helper", settings=settings, model_client=model, history_turns=0) as agent:
        agent.run("first")
        agent.run("second")
        assert len(model.requests[-1].messages) == 1


def test_feedback_and_corrections_land_on_the_last_turn(agent: Agent) -> None:
    with pytest.raises(InvalidInput, match="no recorded turn yet"):
        agent.feedback(stars=3)
    first = agent.run("Which laptop is lighter?")
    second = agent.run("And the cheaper one?")
    recorded = agent.feedback(stars=2, comment="did not compare prices")
    assert recorded.io_id == second.io_id and recorded.dispatched == "deferred"
    assert world_signals(agent, second.io_id) == {"stars": 2, "comment": "did not compare prices"}
    agent.correct("The cheaper one is the Aero 14 at 999 EUR.", io_id=first.io_id)
    assert world_signals(agent, first.io_id) == {"expected": "The cheaper one is the Aero 14 at 999 EUR."}
    with pytest.raises(InvalidInput, match="feedback: give stars"):
        agent.feedback()
    with pytest.raises(InvalidInput, match=r"signals\.stars: must be an integer 1\.\.5"):
        agent.feedback(stars=9)


def test_stream_yields_text_tool_events_and_the_final_result(agent: Agent) -> None:
    @agent.tool
    def get_weather(city: str) -> str:
        """Weather by city."""
        return f"city: {city}\ntemp: 21 C"

    events = list(agent.stream("use get_weather city=Oslo"))
    final = events[-1]
    assert isinstance(final, FinalResult) and final.result.recorded
    kinds = [type(e) for e in events]
    assert kinds.index(ToolCall) < kinds.index(ToolResultEvent) < kinds.index(TextDelta)
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == final.result.answer and len([e for e in events if isinstance(e, TextDelta)]) > 3
    assert agent.history()[-1]["role"] == "assistant"


def test_leaving_a_stream_early_cancels_the_turn_and_stores_nothing(agent: Agent) -> None:
    kept = agent.run("a first turn")
    stream = agent.stream("please give a long answer with many words in it " * 4)
    for event in stream:
        if isinstance(event, TextDelta):
            break
    stream.close()  # type: ignore[attr-defined]
    assert agent.last_io_id == kept.io_id, "the cancelled turn was not recorded"
    assert [m["content"] for m in agent.history() if m["role"] == "user"] == ["a first turn"]
    with db.session_factory(agent.host().engine).begin() as s:
        assert s.scalar(select(func.count()).select_from(db.WorldRow)) == 1


def test_arun_and_astream(agent: Agent) -> None:
    async def main() -> tuple[str, list[Any]]:
        result = await agent.arun("async question")
        events = [e async for e in agent.astream("async stream")]
        return result.answer, events

    answer, events = asyncio.run(main())
    assert "async question" in answer
    assert isinstance(events[-1], FinalResult) and events[-1].result.recorded
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == events[-1].result.answer


def test_workspace_agent_reads_its_directory(settings: Settings, tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "notes.txt").write_text("budget: 1500 EUR", encoding="utf-8")
    with Agent.workspace(tmp_path / "ws", "coder", settings=settings) as agent:
        assert [t.name for t in agent.tools] == ["read_file", "list_files", "write_file"]
        result = agent.run("use read_file path=notes.txt")
        assert result.tool_calls[0]["content"] == "budget: 1500 EUR"
        escaped = agent.run("use read_file path=../rsi.db")
        refused = escaped.tool_calls[0]
        assert refused["is_error"] and "outside the workspace" in refused["content"]


def test_providers_unknown_presets_and_keys(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    known = "known: sim, anthropic, openai, vllm, ollama, lmstudio, openrouter"
    with pytest.raises(InvalidInput, match=f"unknown provider 'llamafile'; {known}"):
        Agent("helper", provider="llamafile", model="m", settings=settings)
    monkeypatch.delenv("GROQ_API_KEY", raising=False)
    with pytest.raises(ModelAuthError, match="groq: no API key is configured; set GROQ_API_KEY"):
        Agent("helper", provider="groq", model="llama-3.3-70b", settings=settings)
    monkeypatch.setenv("GROQ_API_KEY", "gsk-test-key-value")
    groq = make_client("groq", "llama-3.3-70b", settings)
    assert groq.provider == "groq" and str(groq._sdk.base_url).startswith(PRESETS["groq"].base_url)  # type: ignore[attr-defined]
    for name, p in PRESETS.items():
        if p.key_env is not None:
            monkeypatch.delenv(p.key_env, raising=False)
            with pytest.raises(ModelAuthError, match=f"{name}: no API key is configured; set {p.key_env}"):
                make_client(name, "m", settings)
            monkeypatch.setenv(p.key_env, f"{name}-test-key-value")
        built = make_client(name, "m", settings)
        assert built.provider == name and str(built._sdk.base_url).rstrip("/") == p.base_url  # type: ignore[attr-defined]


def test_the_three_lines_run_in_a_fresh_directory_without_configuration(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("RSI_")}
    env["PYTHONPATH"] = str(ROOT)
    code = ("from rsi_common import Agent\n"
            "agent = Agent('helper')\n"
            "print(agent.run('Compare two laptops under 1500 EUR').answer)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Compare two laptops under 1500 EUR" in done.stdout
    assert (tmp_path / ".rsi" / "rsi.db").is_file(), "the embedded default keeps its state under ./.rsi"
    assert "Traceback" not in done.stderr


def test_cancelling_arun_stops_the_turn_before_its_next_model_call(settings: Settings) -> None:
    import threading

    entered, release = threading.Event(), threading.Event()

    class Gated:
        provider, model = "sim", "sim-1"

        def __init__(self) -> None:
            self.inner = SimClient()
            self.calls = 0

        def complete(self, request: Any) -> Any:
            self.calls += 1
            entered.set()
            release.wait(60)
            return self.inner.complete(request)

    gated = Gated()
    with Agent("helper", settings=settings, model_client=gated) as agent:  # type: ignore[arg-type]
        @agent.tool
        def get_sales(region: str) -> str:
            """Sales by region."""
            return f"region: {region}"

        async def main() -> None:
            task = asyncio.create_task(agent.arun("use get_sales region=north"))
            assert await asyncio.to_thread(entered.wait, 60)
            task.cancel()
            for _ in range(3):  # let the task take its cancellation (arun sets the turn's stop flag)
                await asyncio.sleep(0)  # while the model call is still held: no race with the flag
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(main())
        assert gated.calls == 1, "the call after the tool step was never made"
        assert agent.last_io_id is None and agent.history() == []


def test_a_credential_in_the_input_is_refused_in_the_world_and_redacted_in_the_history(agent: Agent) -> None:
    key = "sk-" + "ant-api03-" + "Q7" * 24
    result = agent.run(f"my key is {key}, keep it safe")
    assert result.answer and not result.recorded and "world refused" in result.record_error
    assert key not in result.record_error
    stored = str(agent.history())
    assert key not in stored and "[redacted]" in stored
    with db.session_factory(agent.host().engine).begin() as s:
        assert s.scalar(select(func.count()).select_from(db.WorldRow)) == 0

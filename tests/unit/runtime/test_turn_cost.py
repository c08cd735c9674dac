"""What one child turn costs, counted (docs/runtime/turn-cost.md): the counting harness on SQLite and
fakeredis, and the reads a turn makes once (the goal, the loop, the root, the clock)."""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from rsi_common.client import RsiClient
from rsi_common.config import RuntimeParams, Settings
from rsi_common.db.runtime_models import GoalRow, SubagentRow
from rsi_common.dispatch import RecordingDispatcher
from rsi_common.runtime.caps import resolve_caps
from rsi_common.runtime.goals import set_goal
from rsi_common.runtime.subagents import SpawnRequest, SpecEntry, spawn
from rsi_common.runtime.tree import AgentProfile, register
from rsi_common.runtime.turns import TurnEnv, run_session_turn
from rsi_worker.bench.runtime_turn_cost import CATALOG, TurnCounter, _count, _Policy, statement_table


@pytest.fixture
def client(engine: Engine, fake_redis: Any, tmp_path: Path) -> Any:
    settings = Settings(database_url=str(engine.url), home=tmp_path / ".rsi")
    c = RsiClient(settings, engine=engine, redis=fake_redis, dispatcher=RecordingDispatcher())
    yield c
    c.close()


def test_statements_are_named_by_kind_and_first_table() -> None:
    assert statement_table('SELECT rsi_goals.id FROM rsi_goals WHERE x') == "SELECT rsi_goals"
    assert statement_table("INSERT INTO rsi_spend (key) VALUES (?)") == "INSERT rsi_spend"
    assert statement_table("UPDATE rsi_sessions SET version=?") == "UPDATE rsi_sessions"
    assert statement_table("SELECT CURRENT_TIMESTAMP AS db_now_1") == "SELECT -"
    assert statement_table("WITH a AS (INSERT INTO t VALUES (1) RETURNING id) SELECT 1") == "WITH+INSERT t"


def test_a_child_turn_reads_goal_loop_and_root_once_in_five_transactions(client: Any) -> None:
    report = _count(client, 1, warm=1)
    by = report["sql_by_table"]
    assert by["SELECT rsi_goals"] == 1 and by["SELECT rsi_autonomy"] == 1
    assert by["SELECT rsi_subagents"] == 1  # the handle; settle returns its parent itself
    assert by["SELECT rsi_agent_runtime"] == 4  # agent and root at load; fresh rows at running and idle
    assert report["sql_transactions"] == 5
    assert report["wakes"] == 1  # the parent, after the settlement
    assert report["sql_statements"] == sum(by.values())
    assert report["cpu_ms_median"]["turn total"] > 0


def test_a_goal_read_at_load_gives_note_tools_and_bound_and_the_commit_counts_its_tokens(client: Any) -> None:
    params = RuntimeParams(tree_tokens_per_day=0, agent_tokens_per_day=0, tree_spawns_per_day=0)
    queue: deque[tuple[str, str]] = deque()
    seen: list[Any] = []

    class Model(_Policy):
        def complete(self, request: Any) -> Any:
            seen.append(request)
            return super().complete(request)

    env = TurnEnv(client, params, Model(), lambda a, s: queue.append((a, s)))
    with env.factory.begin() as s:
        register(s, "root", AgentProfile(subagents=CATALOG))
    catalog = {k: SpecEntry(str(v["description"]), (), 4) for k, v in CATALOG.items()}
    with env.factory.begin() as s:
        row, _ = spawn(s, params, resolve_caps(params), SpawnRequest("root", "main", "main:1", "tu", "worker",
                                                                     "topic"), catalog, ())
        set_goal(s, row.child_agent, "find one thing", 1000, None, check_factory=None, actor="operator:t")
    counter = TurnCounter(env)
    with counter.counting(), counter.turn():
        out = run_session_turn(env, row.child_agent, row.id)
    assert out.outcome == "ran" and out.status == "completed"
    assert counter.sql["SELECT rsi_goals"] == 1
    first = seen[0]
    tools = {t["name"] for t in first.tools}
    assert {"goal_get", "goal_complete"} <= tools
    assert "Goal: find one thing (tokens used 0 of 1000)" in str(first.system) + str(first.messages)
    with env.factory() as s:
        goal = s.execute(sa.select(GoalRow).where(GoalRow.agent_id == row.child_agent)).scalar_one()
        handle = s.get(SubagentRow, row.id)
    assert goal.tokens_used == 240 and goal.status == "active"  # 2 calls × (100 in + 20 out)
    assert handle is not None and handle.status == "completed"

"""User task adapters: ``rsi dream cycle --adapter module:factory`` (docs/dream/cycle.md#task-adapters).
The specification and what the factory returns are hostile input: each refusal names the flag."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rsi_common.db import make_engine, session_factory, upgrade
from rsi_common.db.dream import dream_cycles, dream_worlds
from rsi_common.errors import InvalidInput
from rsi_worker.cli import app
from rsi_worker.commands.common import EXIT_INPUT
from rsi_worker.dream.adapter import load_adapter
from rsi_worker.dream.policies import incumbent_policy
from rsi_worker.dream.replay import LiveQuestion, run_episode
from rsi_worker.dream.simtasks import SimSearchTask

MADE: list[str] = []
NOT_CALLABLE = 3


def make_task(task_id: str) -> SimSearchTask:
    """The adapter the CLI test names (``tests.unit.dream.test_adapter:make_task``)."""
    MADE.append(task_id)
    return SimSearchTask(5, "user-" + task_id)


@dataclass
class _BadOutcome:
    score: object = "high"
    valid: bool = True
    fail_class: None = None
    error: None = None
    tokens: int = 10


class _BadTask:
    task_id, baseline, grid = "bad", 0.3, (2, 1)

    def evaluate(self, branch: int, attempt: int) -> _BadOutcome:
        return _BadOutcome()


def bad_task(task_id: str) -> _BadTask:
    return _BadTask()


def no_grid(task_id: str) -> object:
    fields = {"task_id": "t", "baseline": 0.1, "grid": (0, 3), "evaluate": lambda s, b, a: None}
    return type("T", (), fields)()


HERE = "tests.unit.dream.test_adapter"


@pytest.mark.parametrize(
    ("spec", "finding"),
    [
        ("nocolon", "expected module:factory"),
        ("a:b:c", "expected module:factory"),
        ("os:_exit", "expected module:factory"),
        ("../evil:x", "expected module:factory"),
        ("x" * 201 + ":f", "at most 200"),
        ("no_such_module_zz:f", "cannot import 'no_such_module_zz': ModuleNotFoundError"),
        (f"{HERE}:missing", "has no 'missing'"),
        (f"{HERE}:NOT_CALLABLE", "is not callable"),
    ],
)
def test_malformed_specifications_are_refused_naming_the_flag(spec: str, finding: str) -> None:
    with pytest.raises(InvalidInput, match=r"^--adapter: .*" + finding.replace("(", r"\(")):
        load_adapter(spec)


def test_malformed_tasks_and_outcomes_are_refused_naming_the_field() -> None:
    with pytest.raises(InvalidInput, match=r"--adapter: task 't': grid must be"):
        load_adapter(f"{HERE}:no_grid")("x")
    task = load_adapter(f"{HERE}:bad_task")("x")
    with incumbent_policy().session() as s:
        result = run_episode(LiveQuestion(task, world_id="w"), s, 0.6)
    assert result.stop_reason == "error"
    assert "--adapter: task 'bad' evaluate(0, 0): score must be a finite number or None" in result.message


def test_cycle_from_the_cli_uses_the_adapter_and_refuses_a_bad_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'rsi.db'}"
    engine = make_engine(url)
    upgrade(engine)
    env = {"RSI_DATABASE_URL": url, "RSI_HOME": str(tmp_path / "home")}
    runner = CliRunner()
    bad = runner.invoke(app, ["dream", "cycle", "a", "--adapter", "no_such_module_zz:f", "--json"], env=env)
    assert bad.exit_code == EXIT_INPUT and "--adapter" in bad.output and "Traceback" not in bad.output
    factory = session_factory(engine)
    with factory() as s:
        assert dream_cycles(s, "a") == []  # refused before anything was stored
    MADE.clear()
    args = ["dream", "cycle", "a", "--adapter", f"{HERE}:make_task", "--revisions", "0", "--json"]
    ok = runner.invoke(app, args, env=env, catch_exceptions=False)
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["status"] == "kept"
    assert MADE == ["a-live-1"]
    with factory() as s:
        live = [r for r in dream_worlds(s, "a") if r.tree["meta"].get("origin") == "live"]
        assert [r.tree["task_id"] for r in live] == ["user-a-live-1"]
        assert dream_cycles(s, "a")[0].state["config"]["adapter"] == f"{HERE}:make_task"
    engine.dispose()

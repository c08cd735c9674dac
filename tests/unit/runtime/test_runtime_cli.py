"""``rsi runtime <method>`` in-process (typer's runner) on a migrated SQLite file and the embedded
fakeredis (docs/runtime/cli.md): every RuntimeClient method has its row, ``--json`` everywhere, and
hostile values are one line naming the field with exit code 2, never a traceback or the value."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from rsi_common.runtime.host import RuntimeClient
from rsi_worker.cli import app
from rsi_worker.commands.runtime import METHODS
from tests.support.migrated import migrated_sqlite_url
from tests.support.runtime_policy import CATALOG, LEAD

SHAPED = "sk-ant-api03-" + "Q" * 40


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"RSI_DATABASE_URL": migrated_sqlite_url(tmp_path / "rsi.db"), "RSI_HOME": str(tmp_path / "home"),
            "RSI_REDIS_URL": ""}


def rsi(env: dict[str, str], *args: str) -> Result:
    result = CliRunner().invoke(app, ["runtime", *args], env=env, catch_exceptions=False)
    assert "Traceback" not in result.output
    return result


def ok(env: dict[str, str], *args: str) -> Any:
    result = rsi(env, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_every_runtime_client_method_has_a_row() -> None:
    public = {n for cls in RuntimeClient.__mro__[:-1] for n, f in vars(cls).items()
              if callable(f) and not n.startswith("_")}
    assert public == {m.name for m in METHODS}


def test_a_tree_built_through_the_cli(env: dict[str, str], tmp_path: Path) -> None:
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"system_parts": [["lead", LEAD]], "subagents": CATALOG,
                                   "tools": ["search"]}))
    assert ok(env, "register", "P", f"@{profile}")["agent"] == "P"
    spec = {"description": "writes", "tools": ["search"], "max_iterations": 3, "instructions": "Write."}
    added = ok(env, "set_subagent_spec", "P", "writer", json.dumps(spec))
    assert added["catalog"] == ["researcher", "writer"]
    first = ok(env, "spawn", "P", "writer", "draft the intro", "--request-id", "r1")
    again = ok(env, "spawn", "P", "writer", "draft the intro", "--request-id", "r1")
    assert again["handle"] == first["handle"] and (first["created"], again["created"]) == (True, False)
    assert ok(env, "poll", first["handle"])["status"] == "queued"
    tree = rsi(env, "tree", "P")
    assert tree.exit_code == 0
    lines = tree.output.splitlines()
    assert lines[1] == "  P [admitted] depth 0"
    assert lines[2] == f"    - {first['handle']} writer-1 queued"
    assert lines[3] == "      P.writer (writer) [admitted] depth 1"
    assert "spawns 1" in lines[-1]
    waited = ok(env, "wait", first["handle"], "--timeout-s", "0")
    assert waited == {"results": [], "pending": [first["handle"]], "timed_out": True}
    assert ok(env, "cancel", first["handle"], "--reason", "enough") == [first["handle"]]
    assert ok(env, "wait", first["handle"], "--mode", "any")["results"][0]["error"] == "cancelled:enough"
    (receipt,) = ok(env, "start_turn", "P", "hello")
    assert [m["id"] for m in ok(env, "inbox", "P")] == [receipt["id"]]
    assert "from - (operator): hello" in rsi(env, "inbox", "P").output
    assert ok(env, "set_caps", "P", '{"tree_spawns_per_day": 5}')["caps"] == {"tree_spawns_per_day": 5}
    spend = ok(env, "spend", "P")
    assert spend["spent"]["spawns"] == 1 and spend["caps"]["spawns"] == 5
    assert "spawns" in rsi(env, "spend", "P").output
    assert ok(env, "lifecycle", "P.writer") == "admitted"
    assert ok(env, "delete", "P") == []
    assert ok(env, "lifecycle", "P") == "deleted"


def test_hostile_values_are_one_line_with_exit_code_2(env: dict[str, str], tmp_path: Path) -> None:
    assert ok(env, "register", "P", json.dumps({"subagents": CATALOG}))["agent"] == "P"
    cases = [
        (("register", "Q", '{"runs_on": '), "profile: malformed JSON"),
        (("register", "Q", "[" * 200 + "]" * 200), "profile: nested deeper than"),
        (("register", "Q", f"@{tmp_path / 'missing.json'}"), "profile: cannot read the file"),
        (("register", "Q", json.dumps({"api_key": SHAPED})), "profile: unknown key 'api_key'"),
        (("set_caps", "P", json.dumps({"tree_tokens_per_day": SHAPED})), "caps.tree_tokens_per_day must be"),
        (("wait", "sa_1", "--timeout-s", "soon"), "timeout_s: must be a number"),
        (("wait", "sa_1", "--timeout-s", "nan"), "timeout_s: must be a finite number"),
        (("wait", "sa_1", "--mode", SHAPED), "mode: must be one of all, any"),
        (("spawn", "P", "researcher", "x" * 70_000), "input: at most 65,536"),
        (("spawn", "P", "researcher", "x" * 20_000), "input: at most 16,384"),
        (("spawn", "P", "researcher", "x", "--request-id", SHAPED + " "), "request_id: not a valid id"),
        (("set_subagent_spec", "P", "Writer", "{}"), "name: a spec name must match"),
        (("tree", "a b"), "agent: not a valid id"),
        (("set_caps", "../P", "null"), "root: not a valid id"),
        (("send", "P", "x" * 20_000), "text: at most 16,384 characters"),
        (("send", "P@../etc", "x"), "to: not a valid id"),
        (("start_turn", "P", "\udcff"), "text: contains a lone surrogate"),
        (("start_turn", "P", "x", "--session", "a b"), "session: not a valid id"),
    ]
    for args, message in cases:
        result = rsi(env, *args)
        assert result.exit_code == 2, (args[0], result.output)
        assert len(result.output.strip().splitlines()) == 1, result.output
        assert message in result.output, result.output
        assert SHAPED not in result.output and "QQQQQQQQ" not in result.output
    as_json = rsi(env, "wait", "sa_1", "--mode", "some", "--json")
    assert json.loads(as_json.output.splitlines()[0])["error"]["message"] == "mode: must be one of all, any"


def test_unknown_things_exit_1(env: dict[str, str]) -> None:
    for args in (("tree", "nobody"), ("spend", "nobody"), ("lifecycle", "nobody")):
        result = rsi(env, *args)
        assert result.exit_code == 1 and "not registered" in result.output, result.output
    result = rsi(env, "poll", "sa_nothing")
    assert result.exit_code == 1 and "unknown_handle" in result.output


def test_goals_heartbeats_autonomy_and_refinement_through_the_cli(env: dict[str, str]) -> None:
    assert ok(env, "register", "P", "{}")["agent"] == "P"
    goal = ok(env, "set_goal", "P", "ship it; finish after 3 turns", "50000", "--check", "sim.done")
    assert goal["status"] == "active" and goal["token_budget"] == 50_000
    assert ok(env, "update_goal", "P", "--status", "paused")["status"] == "paused"
    assert ok(env, "goal", "P")["status"] == "paused"
    beat = ok(env, "add_heartbeat", "P", "check the queue", "--every-s", "120", "--label", "hb")
    assert ok(env, "update_heartbeat", beat["id"], "--status", "paused")["status"] == "paused"
    assert ok(env, "update_goal", "P", "--status", "active")["status"] == "active"
    loop = ok(env, "start_autonomy", "P", "--budget", '{"max_turns": 2}')
    assert loop["status"] == "running"
    assert ok(env, "stop_autonomy", "P")["status"] == "stopped"
    assert ok(env, "autonomy", "P")["reason"] == "operator"
    assert ok(env, "audit", "P") == []  # no harness version adopted yet
    cases = [
        (("set_goal", "P", "x", "lots"), "token_budget: must be an integer"),
        (("add_heartbeat", "P", "x", "--every-s", SHAPED), "every_s: must be an integer"),
        (("refine", "P", "--criteria", "[" * 200 + "]" * 200), "criteria: nested deeper than"),
        (("revoke", "P", "v1", "bad", "--taint-evidence", "yes"), "taint_evidence: must be true or false"),
        (("update_goal", "P", "--status", "done"), "status: must be one of paused, active, cancelled"),
        (("set_goal", "P", "\udcff", "100"), "objective: contains a lone surrogate"),
        (("update_goal", "P", "--objective", "a\x00b"), "objective: contains U+0000"),
        (("add_heartbeat", "P", "\udcff", "--every-s", "60"), "instruction: contains a lone surrogate"),
        (("refine", "P", "--focus", "\udcff"), "focus must not hold control characters or lone surrogates"),
    ]
    for args, message in cases:
        result = rsi(env, *args)
        assert result.exit_code == 2, (args[0], result.output)
        assert message in result.output, result.output
        assert SHAPED not in result.output

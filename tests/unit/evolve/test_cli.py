"""``rsi suite`` and ``rsi evolve`` in-process (typer's runner), on world-backed tasks built from an agent's
recorded worlds (docs/algorithm/evolve.md#suites)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner, Result

from rsi_common.config import Settings
from rsi_worker.cli import app
from tests.support.pipeline import Stack

CRITERION = "A better answer does this: show it as a table"


def rsi(env: dict[str, str], *args: str) -> Result:
    result = CliRunner().invoke(app, list(args), env=env, catch_exceptions=False)
    assert "Traceback" not in result.output
    return result


def test_suite_from_agent_worlds_then_an_inline_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'rsi.db'}"
    stack = Stack(Settings(database_url=url, model_backoff_s=0))
    for i, topic in enumerate(["laptops", "phones", "headphones", "monitors"]):
        stack.say(
            "shop", f"c{i}", f"Compare {topic}: use search query={topic}", signals={"criteria": [CRITERION]}
        )
    stack.say("shop", "c9", "Hello there")  # no criteria: not a task
    env = {"RSI_DATABASE_URL": url, "RSI_HOME": str(tmp_path / "home"), "RSI_MODEL_BACKOFF_S": "0"}

    built = rsi(
        env,
        "suite",
        "build",
        "s",
        "--from-agent",
        "shop",
        "--heldout-fraction",
        "0.25",
        "--seed",
        "3",
        "--json",
    )
    assert built.exit_code == 0, built.output
    assert json.loads(built.output) == {"name": "s", "tasks": 4, "heldout": 1, "agent": "shop"}
    shown = json.loads(rsi(env, "suite", "show", "s", "--json").output)
    assert all(t["world_id"] == t["id"] and t["checks"][0]["criterion"] == CRITERION for t in shown["tasks"])
    again = rsi(env, "suite", "build", "s", "--from-agent", "shop", "--heldout-fraction", "0.25")
    assert again.exit_code == 1 and "exists" in again.output

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"params": {"T": 1}, "smoke": 3}))
    refused = rsi(env, "evolve", "init", "e", "--suite", "s", "--config", str(bad))
    assert refused.exit_code == 1 and "unknown key(s) smoke" in refused.output
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"params": {"T": 1, "k": 1}, "trial_parallel": 1}))
    assert rsi(env, "evolve", "init", "e", "--suite", "s", "--config", str(good)).exit_code == 0

    out = rsi(env, "evolve", "run", "e", "--inline", "--dir", str(tmp_path / "runs"), "--json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["status"] == "done"
    status = json.loads(rsi(env, "evolve", "status", "e", "--json").output)
    assert status["status"] == "done" and status["adopted"] == 1 and status["S_star"] == 1.0
    assert [h["S"] for h in status["heldout"]] == [0.0, 1.0]  # the held-out world, before and after
    files = rsi(env, "evolve", "export", "e", str(tmp_path / "out"))
    assert files.exit_code == 0 and (tmp_path / "out" / "decisions.json").exists()
    refused = rsi(env, "evolve", "readjudicate", "e", "--t", "0", "--weight", "gamma=1")
    assert refused.exit_code == 1 and "unknown weight" in refused.output
    promoted = json.loads(rsi(env, "evolve", "promote", "e", "--agent", "shop", "--json").output)
    assert stack.current_version("shop") == promoted["version"]
    stack.close()

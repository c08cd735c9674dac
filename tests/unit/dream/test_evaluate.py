"""Evaluator defaults, V and the sweep's arithmetic recomputed from its own episodes; the
confirmation's in-band veto; the CLI on SQLite."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rsi_common.math.dream import make_normalizer, parallel_penalty, pareto_auc_v1, replay_value
from rsi_worker.dream.cycle import CycleConfig, _confirm, _live
from rsi_worker.dream.evaluate import (
    BETA_GRID,
    EvalParams,
    InlineExecutor,
    MemoryStore,
    evaluate_value,
    sweep,
)
from rsi_worker.dream.policies import PolicyCode, builtin
from rsi_worker.dream.replay import EpisodeResult
from rsi_worker.dream.simtasks import SimSearchTask, SimTaskParams, generate_worlds

SMALL = SimTaskParams(branches=5, refine=2)


def test_defaults_follow_the_design() -> None:
    p = EvalParams()
    assert (p.W, p.beta_cost, p.par, p.lam, p.mode) == (4, 0.25 / 110, 0.05 / 4, 0.1, "production")
    assert BETA_GRID == (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    assert (p.limits.cpu_s, p.limits.memory_bytes, p.limits.wall_s) == (10, 512 * 2**20, 10.0)
    assert EvalParams.from_json(p.to_json()) == p


def test_value_and_sweep_recomputed_from_their_episodes() -> None:
    worlds = generate_worlds(9, 3, SMALL)
    params = EvalParams()
    code = builtin("parallel_refine", beta=0.4)
    store = MemoryStore()
    V, per = evaluate_value(code, "v", worlds, params, InlineExecutor(), store)
    eps = {
        w.world_id: EpisodeResult.from_json(store.data["v"][(w.world_id, "0.400000")]).episode for w in worlds
    }
    expected = [
        replay_value(
            eps[w.world_id],
            beta_cost=params.beta_cost,
            beta_par=params.par,
            norm=make_normalizer(w.recorded_scores, w.baseline, "production"),
        )
        for w in worlds
    ]
    assert pytest.approx(math.fsum(expected) / 3, rel=1e-12) == V
    assert set(per) == {w.world_id for w in worlds}

    report = sweep(code, "s", worlds, params, InlineExecutor(), store)
    episodes = [EpisodeResult.from_json(r).episode for r in store.data["s"].values()]
    assert len(episodes) == 18 and report.penalty == pytest.approx(parallel_penalty(episodes), rel=1e-12)
    points: dict[str, list[tuple[float, float]]] = {w.world_id: [] for w in worlds}
    for w in worlds:
        norm = make_normalizer(w.recorded_scores, w.baseline, "production")
        for b in params.betas:
            ep = EpisodeResult.from_json(store.data["s"][(w.world_id, f"{b:.6f}")]).episode
            points[w.world_id].append(
                (ep.n_revealed / w.n_cells, max([norm(w.baseline), *map(norm, ep.revealed_scores)]))
            )
    assert report.auc == pytest.approx(pareto_auc_v1(points), rel=1e-12)
    assert report.reward == pytest.approx(report.auc - 0.1 * report.penalty, rel=1e-12)
    assert [p.beta for p in report.points] == list(params.betas)
    assert all(0 <= p.work <= 1 and 0 <= p.attainment <= 1 for p in report.points)


def test_confirmation_vetoes_a_tie() -> None:
    params = EvalParams()
    incumbent = builtin("fixed_width")
    task = SimSearchTask(0, "tie-task", SMALL)
    live, _ = _live(task, incumbent, "tie-task-live", params)
    same = PolicyCode("copy", "# same code, untrusted\n" + incumbent.source, incumbent.default_beta)
    state: dict[str, Any] = {"versions": [incumbent.to_json(), same.to_json()], "m_star": 1, "live": live}
    assert (
        _confirm(state, CycleConfig(task_params=SMALL), lambda tid: SimSearchTask(0, tid, SMALL)) == "vetoed"
    )
    assert state["confirm"]["delta_S"] == 0 and state["confirm"]["delta_C"] == 0
    assert state["confirm"]["floor_ok"] and not state["confirm"]["cost_ok"]


def test_cli_explore_status_export_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rsi_common.db import make_engine, upgrade
    from rsi_worker.cli import app

    url = f"sqlite:///{tmp_path / 'rsi.db'}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    monkeypatch.setenv("RSI_DATABASE_URL", url)
    monkeypatch.setenv("RSI_HOME", str(tmp_path / "home"))
    run = CliRunner().invoke
    out = run(app, ["dream", "explore", "shop", "--seed", "3", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["policy"] == "fixed_width"
    assert "no Dream cycle yet" in run(app, ["dream", "status", "shop"]).output
    exported = tmp_path / "trees.jsonl"
    assert run(app, ["dream", "export", "shop", "--out", str(exported)]).exit_code == 0
    lines = exported.read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["schema"] == "rsi-dream-world/1"
    exported.write_text(lines[0] + "\n" + '{"schema": "rsi-dream-world/1", "world_id": "x"}\n')
    res = run(app, ["dream", "import", str(exported), "--agent", "other", "--atomic", "--json"])
    assert res.exit_code != 0 and json.loads(res.output)["imported"] == 0
    assert (
        "line 2" in json.loads(res.output)["errors"][0]["error"]
        or json.loads(res.output)["errors"][0]["line"] == 2
    )
    res = run(app, ["dream", "import", str(exported), "--agent", "other", "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["imported"] == 1

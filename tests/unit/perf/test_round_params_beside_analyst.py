"""``after_incumbent`` computes the round's parameters (δ's bootstrap) in its own thread while the
analyst's call runs (rsi_worker/consolidate/incumbent.py;
docs/performance/consolidation.md#a-runs-cost-counted): the same parameters, the analyst charged,
and an error of the parameters still fails the step."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from rsi_common.config import Settings
from rsi_worker.consolidate import flow, incumbent
from tests.support.pipeline import Stack
from tests.unit.perf.conftest import incumbent_trials_stored


def _to_after_incumbent(tmp_path: Path) -> tuple[Stack, Any]:
    stack = Stack(Settings(database_url=f"sqlite:///{tmp_path / 'rsi.db'}", model_backoff_s=0))
    ctx, status, _ = flow._load(stack.deps, incumbent_trials_stored(stack))  # as the step reads it
    assert status == "running"
    return stack, ctx


def test_the_parameters_are_computed_beside_the_analyst(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    stack, ctx = _to_after_incumbent(tmp_path)
    threads: dict[str, int] = {}
    real_params, real_analyze = incumbent.round_parameters, incumbent.analyze
    computed: list[Any] = []

    def params(*args: Any) -> Any:
        threads["params"] = threading.get_ident()
        computed.append(real_params(*args))
        return computed[-1]

    def analyze(*args: Any, **kwargs: Any) -> Any:
        threads["analyst"] = threading.get_ident()
        return real_analyze(*args, **kwargs)

    monkeypatch.setattr(incumbent, "round_parameters", params)
    monkeypatch.setattr(incumbent, "analyze", analyze)
    try:
        nxt = incumbent.after_incumbent(stack.deps, ctx)
        assert nxt.kind == "drafts"
        assert threads["params"] != threads["analyst"] == threading.get_ident()
        assert ctx.round is not None and ctx.round.params == computed[0] and ctx.analysis is not None
        assert ctx.usage["analyst"]
    finally:
        stack.close()


def test_an_error_of_the_parameters_fails_the_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stack, ctx = _to_after_incumbent(tmp_path)

    def boom(*_: Any) -> Any:
        raise ValueError("bad params")

    monkeypatch.setattr(incumbent, "round_parameters", boom)
    try:
        with pytest.raises(ValueError, match="bad params"):
            incumbent.after_incumbent(stack.deps, ctx)
    finally:
        stack.close()

"""The task wrapper (``rsi_worker/cluster/middleware.py``) through Celery's ``task.apply()``: eager,
no broker, no worker. Delivery counts live in an in-process fakeredis (no ``RSI_REDIS_URL``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from rsi_common.config import Settings
from rsi_common.coord import DELIVERY_TTL_S, delivery_key
from rsi_common.dispatch import (
    RUNTIME_TASKS,
    TASK_DRAFT_CANDIDATE,
    TASK_QUEUES,
    TASK_REPLAY_TRIAL,
    TASK_SWEEP,
)
from rsi_worker.cluster.app import TASK_ROUTES, create_app
from rsi_worker.cluster.middleware import (
    Answer,
    DeliveryCount,
    LogContext,
    Middleware,
    Policy,
    Settle,
    TaskCall,
    default_chain,
    run_chain,
    task,
)
from rsi_worker.cluster.worker import WorkerContext
from rsi_worker.observability.logs import bound, current_context
from rsi_worker.observability.metrics import PrometheusMetrics

CAP = 2


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Celery]:
    settings = Settings(home=tmp_path, database_url=f"sqlite:///{tmp_path / 'rsi.db'}", max_redeliveries=CAP)
    app = create_app(settings)
    ctx: WorkerContext = app.rsi
    ctx.metrics = PrometheusMetrics()
    yield app
    ctx.reset()


def ctx_of(app: Celery) -> WorkerContext:
    ctx: WorkerContext = app.rsi
    return ctx


def metric(app: Celery, name: str, **labels: str) -> float:
    metrics = ctx_of(app).metrics
    assert isinstance(metrics, PrometheusMetrics)
    return float(metrics.registry.get_sample_value(name, labels) or 0.0)


def test_every_task_of_the_app_is_named_routed_and_wrapped(app: Celery) -> None:
    ours = {name for name in app.tasks if name.startswith("rsi.")}
    # the runtime's turn is published to queue "agents" by name (docs/runtime/README.md D15)
    assert ours - set(RUNTIME_TASKS) == set(TASK_QUEUES) == set(TASK_ROUTES) - {"celery.accumulate"}
    for name in ours:
        assert getattr(app.tasks[name].run, "rsi_policy", None) is not None, name


def test_a_delivery_past_the_cap_is_answered_by_the_policy_and_the_body_never_runs(app: Celery) -> None:
    ran: list[int] = []

    @task(app, default_chain(ctx_of(app)), "rsi.test_capped", Policy(capped=lambda call: "capped"))
    def body(run_id: str) -> str:
        ran.append(1)
        return "ran"

    answers = [body.apply(args=("run_1",), task_id="same-id").get() for _ in range(CAP + 3)]
    assert answers == ["ran"] * (CAP + 1) + ["capped"] * 2
    assert len(ran) == CAP + 1
    redis = ctx_of(app).runtime().redis
    assert int(redis.get(delivery_key("same-id"))) == CAP + 3
    assert 0 < redis.ttl(delivery_key("same-id")) <= DELIVERY_TTL_S
    assert metric(app, "rsi_task_redeliveries_total", task="rsi.test_capped") == CAP + 2
    assert metric(app, "rsi_task_redelivery_capped_total", task="rsi.test_capped") == 2
    assert body.apply(args=("run_1",), task_id="other-id").get() == "ran"  # counted per task id


def test_an_exception_is_answered_by_the_policy_or_propagates_without_one(app: Celery) -> None:
    failures: list[tuple[str | None, str]] = []

    def failed(call: TaskCall, exc: Exception) -> dict[str, Any]:
        failures.append((call.run_id, str(exc)))
        return {"status": "error"}

    @task(app, default_chain(ctx_of(app)), "rsi.test_settled", Policy(capped=lambda c: None, failed=failed))
    def settled(run_id: str) -> str:
        raise RuntimeError("boom")

    @task(app, default_chain(ctx_of(app)), "rsi.test_raises", Policy(capped=lambda c: None))
    def raises(run_id: str) -> str:
        raise RuntimeError("boom")

    assert settled.apply(args=("run_9",)).get() == {"status": "error"}
    assert failures == [("run_9", "boom")]
    result = raises.apply(args=("run_9",))
    assert result.failed() and isinstance(result.result, RuntimeError)
    with pytest.raises(RuntimeError, match="boom"):
        result.get()


def test_the_log_context_is_bound_for_the_body(app: Celery) -> None:
    seen: list[dict[str, str | None]] = []
    policy = Policy(capped=lambda c: None, failed=lambda c, e: "x")

    @task(app, default_chain(ctx_of(app)), "rsi.test_logs", policy)
    def body(agent: str, io: str, fail: bool = False) -> None:
        seen.append(current_context())
        if fail:
            raise ValueError("x")

    body.apply(args=("shop", "io_1"), task_id="t-1")
    body.apply(args=("shop", "io_2"), kwargs={"fail": True}, task_id="t-2")
    assert seen[0] == {"run_id": None, "agent_id": "shop", "task": "rsi.test_logs", "task_id": "t-1"}
    assert seen[1]["task_id"] == "t-2"
    assert current_context()["task_id"] is None


def test_the_log_context_restores_what_was_bound_before_even_after_an_exception() -> None:
    call = TaskCall("rsi.x", "t-3", {"run_id": "run_3"})
    policy = Policy(capped=lambda c: None)

    def failing() -> None:
        assert current_context()["run_id"] == "run_3"
        raise KeyError("k")

    with bound(task="outer", run_id="outer-run"):
        with pytest.raises(KeyError):
            run_chain([LogContext()], call, policy, failing)
        assert current_context()["task"] == "outer" and current_context()["run_id"] == "outer-run"


def test_hooks_run_in_order_and_an_early_answer_skips_the_rest(app: Celery) -> None:
    events: list[str] = []

    class Probe:
        def __init__(self, name: str, answer: Any = None) -> None:
            self.name, self.answer = name, answer

        def before(self, call: TaskCall, policy: Policy) -> Answer | None:
            events.append(f"before {self.name}")
            return None if self.answer is None else Answer(self.answer)

        def on_error(self, call: TaskCall, policy: Policy, exc: Exception) -> Answer | None:
            events.append(f"error {self.name}")
            return None

        def after(self, call: TaskCall) -> None:
            events.append(f"after {self.name}")

    chain: list[Middleware] = [Probe("outer"), Probe("inner")]

    policy = Policy(capped=lambda c: None, failed=lambda c, e: "settled")

    @task(app, [*chain, Settle()], "rsi.test_order", policy)
    def body() -> str:
        events.append("body")
        raise KeyError("k")

    assert body.apply().get() == "settled"
    assert events == ["before outer", "before inner", "body", "after inner", "after outer"]
    events.clear()

    early: list[Middleware] = [Probe("outer", answer="early"), Probe("inner")]

    @task(app, early, "rsi.test_early", Policy(capped=lambda c: None))
    def skipped() -> str:
        events.append("body")
        return "body"

    assert skipped.apply().get() == "early"
    assert events == ["before outer", "after outer"]


def test_bad_arguments_raise_before_any_hook(app: Celery) -> None:
    counted = DeliveryCount(ctx_of(app))

    @task(app, [LogContext(), counted], "rsi.test_args", Policy(capped=lambda c: None))
    def body(run_id: str) -> str:
        return run_id

    result = body.apply(args=("a", "b"), task_id="bad-args")
    assert result.failed() and isinstance(result.result, TypeError)
    assert ctx_of(app).runtime().redis.get(delivery_key("bad-args")) is None


def test_capped_members_and_the_sweeper_answer_without_touching_the_database(app: Celery) -> None:
    slot = {"candidate": "A", "world_id": "w1", "trial": 0, "source": "replay", "reuse": None}
    for _ in range(CAP + 1):
        ctx_of(app).runtime().coord.count_delivery("trial-id")
        ctx_of(app).runtime().coord.count_delivery("draft-id")
        ctx_of(app).runtime().coord.count_delivery("sweep-id")
    trial = app.tasks[TASK_REPLAY_TRIAL].apply(args=("run_1", slot), task_id="trial-id").get()
    assert trial == {"status": "redelivery_cap", "candidate": "A", "world_id": "w1", "trial": 0}
    draft = app.tasks[TASK_DRAFT_CANDIDATE].apply(args=("run_1", "B"), task_id="draft-id").get()
    assert draft == {"variant": "B", "status": "redelivery_cap"}
    assert app.tasks[TASK_SWEEP].apply(task_id="sweep-id").get() == {"skipped": "redelivery cap"}

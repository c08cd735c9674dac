"""What Celery writes to Redis per task (docs/performance/consolidation.md#rsi-bench-scale): task
events only when ``RSI_TASK_EVENTS`` is set, results only for tasks whose sender waits on them."""

from __future__ import annotations

import pytest

from rsi_common.config import Settings
from rsi_common.dispatch import TASK_DREAM_EPISODES, TASK_JUDGE_ROUND, TASK_QUEUES, TASK_REPLAY_TRIAL
from rsi_worker.cluster.app import create_app
from rsi_worker.cluster.tasks import send


def test_task_events_are_off_unless_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    quiet = create_app(Settings())
    assert not quiet.conf.worker_send_task_events and not quiet.conf.task_send_sent_event
    monkeypatch.setenv("RSI_TASK_EVENTS", "true")
    loud = create_app(Settings())
    assert loud.conf.worker_send_task_events and loud.conf.task_send_sent_event


def test_only_the_dream_episodes_keep_their_results() -> None:
    app = create_app(Settings())
    ours = {name: t for name, t in app.tasks.items() if name.startswith("rsi.")}
    assert TASK_REPLAY_TRIAL in ours and TASK_JUDGE_ROUND in ours
    kept = {name for name, t in ours.items() if not t.ignore_result}
    assert kept == {TASK_DREAM_EPISODES}
    assert app.tasks["celery.accumulate"].ignore_result  # Celery's own, from task_ignore_result


def test_a_task_that_keeps_no_result_is_sent_without_a_result_subscription() -> None:
    app = create_app(Settings())
    subscribed: list[str] = []
    app.backend.on_task_call = lambda producer, task_id: subscribed.append(task_id)
    quiet = send(app, TASK_JUDGE_ROUND, [None, "run-1"], TASK_QUEUES[TASK_JUDGE_ROUND])
    waited = send(app, TASK_DREAM_EPISODES, ["c", "l", {}, [], [], {}], TASK_QUEUES[TASK_DREAM_EPISODES])
    assert quiet.ignored and not waited.ignored
    assert subscribed == [waited.id]


def test_a_first_delivery_is_counted_with_one_command_and_expires() -> None:
    import fakeredis

    from rsi_common.coord import DELIVERY_TTL_S, Coordinator, delivery_key

    client = fakeredis.FakeRedis()
    coord = Coordinator(client, 60)
    seen: list[str] = []
    real = client.execute_command
    client.execute_command = lambda *a, **k: (seen.append(str(a[0])), real(*a, **k))[1]  # type: ignore[method-assign]
    assert coord.count_delivery("t1") == 1 and seen == ["SET"]
    assert 0 < int(client.ttl(delivery_key("t1"))) <= DELIVERY_TTL_S
    assert coord.count_delivery("t1") == 2 and coord.count_delivery("t1") == 3
    assert 0 < int(client.ttl(delivery_key("t1"))) <= DELIVERY_TTL_S

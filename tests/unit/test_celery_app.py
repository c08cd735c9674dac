"""The module-level app of ``celery -A rsi_worker.cluster.celery_app``, task events that name their
queue, result briefs, and the host dispatcher's task-sent event (issue 20). Real worker processes:
tests/integration/cluster/test_celery_tools.py."""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Iterator
from typing import Any

import kombu
import pytest
from celery import Celery
from celery.app.utils import find_app
from celery.events.dispatcher import EventDispatcher

from rsi_common.config import Settings
from rsi_common.dispatch import (
    EVENT_EXCHANGE,
    QUEUE_CONSOLIDATE,
    QUEUE_REPLAY,
    QUEUES,
    TASK_CONSOLIDATE,
    KombuDispatcher,
    sent_event,
    task_message,
)
from rsi_common.errors import SettingsError
from rsi_worker.cluster.app import create_app
from rsi_worker.cluster.events import BRIEF_TEXT_CHARS, QueueEvents, brief

MODULE = "rsi_worker.cluster.celery_app"


@pytest.fixture
def module(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The module with no app built yet (and none left behind)."""
    mod = importlib.import_module(MODULE)
    vars(mod).pop("app", None)
    monkeypatch.delenv("RSI_REDIS_URL", raising=False)
    yield mod
    vars(mod).pop("app", None)


def test_the_app_is_built_on_first_use_from_the_environment(module: Any,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    assert "app" not in vars(module)  # importing read no setting
    with pytest.raises(SettingsError, match="RSI_REDIS_URL"):
        _ = module.app
    assert "app" not in vars(module)  # a failed build is not kept
    monkeypatch.setenv("RSI_REDIS_URL", "redis://127.0.0.1:1/0")
    app = find_app(MODULE)  # what `celery -A rsi_worker.cluster.celery_app` does
    assert isinstance(app, Celery) and app is module.app is find_app(f"{MODULE}:app")
    assert app.conf.broker_url == "redis://127.0.0.1:1/0"
    assert set(app.amqp.queues) == set(QUEUES)  # `celery purge` and Flower's broker view
    assert not app.conf.task_send_sent_event and not app.conf.worker_send_task_events  # RSI_TASK_EVENTS
    with pytest.raises(AttributeError):
        _ = module.application


def test_a_result_leaves_the_worker_as_its_scalar_fields() -> None:
    row = {"candidate": "A", "trial": 2, "reward": 0.5, "ok": True, "none": None, "status": "ok",
           "result": {"replay": {"answer": "model text"}}, "checks": ["x"], "long": "y" * 500}
    out = brief(row)
    assert set(out) == {"candidate", "trial", "reward", "ok", "none", "status", "long"}
    assert len(out["long"]) == BRIEF_TEXT_CHARS and out["long"].endswith("...")
    assert brief("adopted") == "adopted" and brief(3) == 3 and brief(None) is None
    assert brief(["model text"]) is None and len(brief("z" * 1000)) == BRIEF_TEXT_CHARS


def test_sent_tasks_show_the_brief_of_their_arguments() -> None:
    app = create_app(Settings(redis_url="redis://127.0.0.1:1/0"))
    slot = {"candidate": "incumbent", "world_id": "w1", "trial": 0, "source": "recorded",
            "reuse": {"answer": "MODEL TEXT"}}
    message = app.amqp.create_task_message("id-1", "rsi.replay_trial", ["run-1", slot], {"force": True},
                                           create_sent_event=True)
    shown = message.headers["argsrepr"]
    assert "MODEL TEXT" not in shown and "'world_id': 'w1'" in shown and "'run-1'" in shown
    assert message.sent_event["args"] == shown and message.headers["kwargsrepr"] == "{'force': True}"
    assert message.body[0][1]["reuse"] == {"answer": "MODEL TEXT"}  # the task itself gets it all
    chord_body = app.amqp.create_task_message("id-2", "rsi.judge_round", [[{"status": "ok"}], "run-1"], {})
    assert chord_body.headers["argsrepr"] == "[None, 'run-1']"
    explicit = app.amqp.create_task_message("id-3", "rsi.sweep", [], {}, argsrepr="(kept)")
    assert explicit.headers["argsrepr"] == "(kept)"


def test_worker_task_events_carry_the_queue_the_task_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(EventDispatcher, "send", lambda self, type, *a, **f: sent.append((type, f)))
    app = Celery("t", broker="memory://", events=QueueEvents, set_as_current=False)
    with app.connection_for_write() as conn:
        dispatcher = app.events.Dispatcher(conn, hostname="w@h", enabled=False)
        dispatcher.note_queue("t1", QUEUE_REPLAY)
        for kind in ("task-received", "task-started", "task-succeeded", "task-started"):
            dispatcher.send(kind, uuid="t1")
        dispatcher.send("task-received", uuid="t2")
        dispatcher.send("task-sent", uuid="t1", queue="judge")
        dispatcher.send("worker-heartbeat", freq=2.0)
    assert [f.get("queue") for _, f in sent] == [QUEUE_REPLAY, QUEUE_REPLAY, QUEUE_REPLAY, None, None,
                                                 "judge", None]


def test_sent_event_has_the_fields_celery_send_task_gives_it() -> None:
    message = task_message(TASK_CONSOLIDATE, ["a", "io", "tok", 3])
    event = sent_event(message, QUEUE_CONSOLIDATE, clock=7, timestamp=1.5)
    assert event == {
        "uuid": message.task_id, "root_id": message.task_id, "parent_id": None, "name": TASK_CONSOLIDATE,
        "args": "['a', 'io', 'tok', 3]", "kwargs": "{}", "retries": 0, "eta": None, "expires": None,
        "queue": QUEUE_CONSOLIDATE, "exchange": "", "routing_key": QUEUE_CONSOLIDATE,
        "hostname": message.headers["origin"], "utcoffset": event["utcoffset"], "pid": os.getpid(),
        "clock": 7, "timestamp": 1.5, "type": "task-sent",
    }


def test_the_dispatcher_publishes_the_task_sent_event_on_the_event_exchange() -> None:
    url = "memory://rsi-events-test"
    with kombu.Connection(url) as conn:
        queue = kombu.Queue("ev-capture", kombu.Exchange(EVENT_EXCHANGE, type="topic"), routing_key="task.#")
        captured = conn.SimpleQueue(queue)
        dispatcher = KombuDispatcher(url)
        quiet = KombuDispatcher(url, send_sent_event=False)
        task_id = dispatcher.enqueue(TASK_CONSOLIDATE, ["a", "io", "tok", 1], QUEUE_CONSOLIDATE)
        quiet.enqueue(TASK_CONSOLIDATE, ["b", "io", "tok", 1], QUEUE_CONSOLIDATE)
        message = captured.get(timeout=60)
        event = json.loads(message.body) if isinstance(message.body, (str, bytes)) else message.payload
        assert event["type"] == "task-sent" and event["uuid"] == task_id
        assert event["queue"] == QUEUE_CONSOLIDATE and message.headers["hostname"] == event["hostname"]
        assert message.delivery_info["routing_key"] == "task.sent"
        assert captured.qsize() == 0  # the quiet dispatcher sent none
        tasks = conn.SimpleQueue(QUEUE_CONSOLIDATE)
        assert tasks.qsize() == 2
        captured.close()
        tasks.close()
        dispatcher.close()
        quiet.close()

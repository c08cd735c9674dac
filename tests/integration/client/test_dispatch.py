"""The Celery protocol v2 dispatcher: message format, failure bounds, recovery, and a real worker."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from rsi_common.dispatch import (
    QUEUE_CONSOLIDATE,
    TASK_CONSOLIDATE,
    KombuDispatcher,
    RecordingDispatcher,
    celery_queue,
    task_message,
)
from rsi_common.errors import BrokerUnavailable, InvalidInput
from rsi_worker.local.servers import RedisServer
from tests.integration.client.helpers import closed_url, queued_messages

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[3]
ARGS = ["agent-1", "io-1", "tok", 42]
HEADER_KEYS = {"lang", "task", "id", "root_id", "parent_id", "group", "group_index", "shadow", "eta",
               "expires", "retries", "timelimit", "argsrepr", "kwargsrepr", "origin", "ignore_result",
               "replaced_task_nesting", "stamped_headers", "stamps"}
EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


def test_task_message_is_protocol_v2() -> None:
    m = task_message(TASK_CONSOLIDATE, ARGS)
    assert set(m.headers) == HEADER_KEYS
    assert (m.headers["lang"], m.headers["task"], m.headers["id"], m.headers["root_id"]) == (
        "py", TASK_CONSOLIDATE, m.task_id, m.task_id)
    assert m.headers["argsrepr"] == repr(ARGS) and m.headers["kwargsrepr"] == "{}"
    assert m.headers["origin"] == f"gen{os.getpid()}@{socket.gethostname()}"
    assert m.properties == {"correlation_id": m.task_id, "reply_to": "", "delivery_mode": 2, "priority": 0}
    assert json.loads(m.body) == [ARGS, {}, EMBED] and m.content_type == "application/json"
    assert len(task_message("t", ["x" * 5000]).headers["argsrepr"]) == 1024
    with pytest.raises(InvalidInput, match="JSON values"):
        task_message("t", [float("nan")])
    with pytest.raises(InvalidInput, match="JSON values"):
        task_message("t", [object()])


def test_memory_transport_delivers_the_message() -> None:
    from kombu import Connection

    dispatcher = KombuDispatcher("memory://")
    try:
        with Connection("memory://") as conn:
            queue = celery_queue(QUEUE_CONSOLIDATE)(conn.default_channel)
            queue.declare()
            queue.purge()
            task_id = dispatcher.enqueue(TASK_CONSOLIDATE, ARGS, QUEUE_CONSOLIDATE)
            msg = queue.get(no_ack=True)
            assert msg is not None and queue.get(no_ack=True) is None
            assert msg.headers["task"] == TASK_CONSOLIDATE and msg.headers["id"] == task_id
            assert msg.content_type == "application/json" and json.loads(msg.body) == [ARGS, {}, EMBED]
            assert msg.properties["correlation_id"] == task_id
            assert msg.delivery_info == {"exchange": "", "routing_key": QUEUE_CONSOLIDATE}  # default exchange
    finally:
        dispatcher.close()


def test_redis_broker_gets_the_celery_envelope(redis_url: str) -> None:
    dispatcher = KombuDispatcher(redis_url)
    try:
        task_id = dispatcher.enqueue(TASK_CONSOLIDATE, ARGS, QUEUE_CONSOLIDATE)
    finally:
        dispatcher.close()
    with redis.Redis.from_url(redis_url) as r:
        (env,) = queued_messages(r)
        assert r.smembers(f"_kombu.binding.{QUEUE_CONSOLIDATE}")  # Celery's default queue, declared
    assert env["content-type"] == "application/json" and env["content-encoding"] == "utf-8"
    assert env["headers"]["task"] == TASK_CONSOLIDATE and env["headers"]["id"] == task_id
    props = env["properties"]
    assert (props["correlation_id"], props["delivery_mode"], props["priority"]) == (task_id, 2, 0)
    assert props["delivery_info"] == {"exchange": "", "routing_key": QUEUE_CONSOLIDATE}
    assert env["decoded"] == [ARGS, {}, EMBED]


def test_unreachable_broker_fails_fast() -> None:
    dispatcher = KombuDispatcher(closed_url())
    try:
        for _ in range(3):
            start = time.perf_counter()
            with pytest.raises(BrokerUnavailable, match="broker unreachable"):
                dispatcher.enqueue(TASK_CONSOLIDATE, ARGS, QUEUE_CONSOLIDATE)
            assert time.perf_counter() - start < 5.0  # a hang guard: refused at once, never retried for long
    finally:
        dispatcher.close()


def test_silent_broker_fails_within_the_timeout() -> None:
    """A peer that accepts TCP connections but never answers (a hung broker)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        dispatcher = KombuDispatcher(f"redis://127.0.0.1:{silent.getsockname()[1]}/0", timeout_s=0.3)
        try:
            start = time.perf_counter()
            with pytest.raises(BrokerUnavailable):
                dispatcher.enqueue(TASK_CONSOLIDATE, ARGS, QUEUE_CONSOLIDATE)
            assert time.perf_counter() - start < 10.0  # a hang guard: without the timeout it never returns
        finally:
            dispatcher.close()


def test_dispatcher_recovers_after_a_broker_restart(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "broker").start()
    dispatcher = KombuDispatcher(server.url)
    try:
        dispatcher.enqueue(TASK_CONSOLIDATE, ARGS, QUEUE_CONSOLIDATE)
        server.stop()
        with pytest.raises(BrokerUnavailable):
            dispatcher.enqueue(TASK_CONSOLIDATE, ARGS, QUEUE_CONSOLIDATE)
        server.start()  # no persistence: the queue binding kombu remembers is gone
        task_id = dispatcher.enqueue(TASK_CONSOLIDATE, ARGS, QUEUE_CONSOLIDATE)
        with redis.Redis.from_url(server.client_url) as r:
            assert [m["headers"]["id"] for m in queued_messages(r)] == [task_id]
    finally:
        dispatcher.close()
        server.stop()


def test_recording_dispatcher_records_or_fails() -> None:
    rec = RecordingDispatcher()
    task_id = rec.enqueue(TASK_CONSOLIDATE, ARGS, QUEUE_CONSOLIDATE)
    assert [(c.task, c.args, c.queue, c.task_id) for c in rec.tasks()] == [
        (TASK_CONSOLIDATE, ARGS, QUEUE_CONSOLIDATE, task_id)]
    rec.fail = True
    with pytest.raises(BrokerUnavailable):
        rec.enqueue(TASK_CONSOLIDATE, ARGS, QUEUE_CONSOLIDATE)
    assert rec.failures == 1 and len(rec.calls) == 1
    with pytest.raises(InvalidInput):
        rec.enqueue(TASK_CONSOLIDATE, ARGS, "")


@pytest.fixture
def celery_worker(redis_url: str, tmp_path: Path) -> Iterator[Path]:
    """A real Celery worker (tests/support/celery_app.py) on the session Redis; yields its output file."""
    out = tmp_path / "wire.jsonl"
    env = {**os.environ, "WIRE_BROKER_URL": redis_url, "WIRE_OUT": str(out), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tests.support.celery_app", "worker", "-Q", QUEUE_CONSOLIDATE,
         "-P", "solo", "--without-heartbeat", "--without-gossip", "--without-mingle", "-l", "WARNING"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "worker.log", "wb"),  # noqa: SIM115
    )
    try:
        yield out
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_a_real_celery_worker_runs_the_dispatched_task(celery_worker: Path, redis_url: str) -> None:
    dispatcher = KombuDispatcher(redis_url)
    try:
        task_id = dispatcher.enqueue(TASK_CONSOLIDATE, ARGS, QUEUE_CONSOLIDATE)
    finally:
        dispatcher.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (celery_worker.exists() and celery_worker.read_text()):
        time.sleep(0.05)
    log = (celery_worker.parent / "worker.log").read_text(errors="replace")
    assert celery_worker.exists(), f"the worker ran nothing; its log:\n{log[-2000:]}"
    (line,) = [json.loads(x) for x in celery_worker.read_text().splitlines()]
    assert line == {"args": ARGS, "id": task_id, "root_id": task_id,
                    "origin": f"gen{os.getpid()}@{socket.gethostname()}", "routing_key": QUEUE_CONSOLIDATE}

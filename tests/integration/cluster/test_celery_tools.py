"""Celery's own tools against real worker processes (issue 20): ``celery -A`` with the project's
app path, task events of host-enqueued tasks, ``celery purge``, and Flower behind basic auth."""

from __future__ import annotations

import ast
import base64
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from rsi_common.config import Settings
from rsi_common.dispatch import QUEUE_CONSOLIDATE, QUEUE_REPLAY, QUEUES, TASK_CONSOLIDATE, KombuDispatcher
from rsi_worker.cluster.app import TASK_ROUTES, create_app
from rsi_worker.local.servers import RedisServer
from tests.integration.cluster.test_distributed import corrected, stack_for
from tests.support.cluster import REPO, Cluster, worker_env

pytestmark = pytest.mark.timeout(480)  # eight `celery -A` processes: 98 s at load 5-9
APP = "rsi_worker.cluster.celery_app"


def celery(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``celery -A rsi_worker.cluster.celery_app <args>`` as an operator runs it."""
    return subprocess.run([sys.executable, "-m", "celery", "-A", APP, *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def wait_for(what: str, predicate: Callable[[], Any], timeout_s: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def replies(env: dict[str, str], command: str, node: str | None = None) -> dict[str, Any]:
    """``celery inspect <command> --json`` (of ``node`` only, if given: no wait for other nodes):
    ``{node: reply}`` ({} when no worker answered). A broadcast waits out its 5 s; a call to one node
    ends at its reply, so it may wait 30 s for a loaded worker."""
    out = celery(env, "inspect", command, "-t", "30" if node else "5", "--json",
                 *(["-d", node] if node else []))
    if out.returncode != 0:
        return {}
    reply: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return reply


def worker_up(redis_url: str) -> None:
    """Wait until a worker answers a ping on the broker (polled in this process, 0.5 s per ping)."""
    app = create_app(Settings(redis_url=redis_url))
    try:
        wait_for("a worker to answer ping", lambda: app.control.ping(timeout=0.5))
    finally:
        app.close()


class Capture:
    """A ``celery.events`` Receiver on the broker in a thread: every event, in arrival order."""

    def __init__(self, redis_url: str) -> None:
        self.app = create_app(Settings(redis_url=redis_url))
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._conn = self.app.connection_for_read()
        self._receiver = self.app.events.Receiver(self._conn, handlers={"*": self._on_event})
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_event(self, event: dict[str, Any]) -> None:
        with self._lock:
            self.events.append(dict(event))

    def _run(self) -> None:
        self._receiver.capture(limit=None, timeout=None, wakeup=False)

    def of(self, predicate: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.events if predicate(e)]

    def __enter__(self) -> Capture:
        self._thread.start()
        # Subscribing happens inside the receiver's loop: send probe events until one comes back.
        probe = secrets.token_hex(8)

        def seen() -> bool:
            with self.app.events.default_dispatcher() as d:
                d.send("rsi-probe", probe=probe)
            return bool(self.of(lambda e: e.get("probe") == probe))

        wait_for("the event receiver to subscribe", seen)
        return self

    def __exit__(self, *exc: object) -> None:
        self._receiver.should_stop = True
        self._thread.join(10)
        self._conn.release()


@pytest.fixture
def tools_env(tmp_path: Path, redis_srv: RedisServer) -> dict[str, str]:
    return worker_env(f"sqlite:///{tmp_path / 'rsi.db'}", redis_srv.url, tmp_path / "home")


def test_celery_a_loads_the_app_and_inspects_the_workers(tmp_path: Path, redis_srv: RedisServer,
                                                         tools_env: dict[str, str]) -> None:
    with Cluster(tmp_path, tools_env["RSI_DATABASE_URL"], redis_srv.url, n=1, concurrency=2):
        worker_up(redis_srv.url)  # in-process: not a `celery` process and a 5 s broadcast per poll
        pong = wait_for("a worker to answer ping", lambda: replies(tools_env, "ping"))
        ((node, answer),) = pong.items()
        assert node.startswith("w0-") and answer == {"ok": "pong"}
        registered = replies(tools_env, "registered", node)[node]
        assert set(TASK_ROUTES) - {"celery.accumulate"} <= set(registered)

        def consumed() -> set[str]:
            return {q["name"] for q in replies(tools_env, "active_queues", node).get(node, [])}

        assert consumed() == set(QUEUES)
        steps = (("cancel_consumer", set(QUEUES) - {QUEUE_REPLAY}), ("add_consumer", set(QUEUES)))
        for command, expected in steps:
            out = celery(tools_env, "control", command, QUEUE_REPLAY, "-d", node, "-t", "30")
            assert out.returncode == 0 and node in out.stdout, out.stdout + out.stderr
            assert consumed() == expected, command
    bare = {k: v for k, v in tools_env.items() if k != "RSI_REDIS_URL"}
    refused = celery(bare, "inspect", "ping")
    assert refused.returncode != 0 and "RSI_REDIS_URL" in refused.stderr


def test_host_enqueued_consolidate_sends_task_sent_with_its_queue(redis_srv: RedisServer) -> None:
    dispatcher = KombuDispatcher(redis_srv.url)
    with Capture(redis_srv.url) as capture:
        task_id = dispatcher.enqueue(TASK_CONSOLIDATE, ["shop", "io-1", "token", 1], QUEUE_CONSOLIDATE)
        (sent,) = wait_for("the task-sent event", lambda: capture.of(
            lambda e: e["type"] == "task-sent" and e.get("uuid") == task_id))
        state = capture.app.events.State()
        state.event(sent)
    dispatcher.close()
    assert sent["name"] == TASK_CONSOLIDATE and sent["queue"] == QUEUE_CONSOLIDATE
    assert sent["routing_key"] == QUEUE_CONSOLIDATE and sent["exchange"] == ""
    assert sent["args"] == "['shop', 'io-1', 'token', 1]" and sent["kwargs"] == "{}"
    assert sent["hostname"] == f"gen{os.getpid()}@{socket.gethostname()}" and sent["clock"] >= 1
    task = state.tasks[task_id]  # what Flower and the exporter build from the event
    assert task.name == TASK_CONSOLIDATE and task.sent and task.routing_key == QUEUE_CONSOLIDATE
    assert getattr(task, "queue", None) == QUEUE_CONSOLIDATE
    length = redis.Redis.from_url(redis_srv.client_url).llen(QUEUE_CONSOLIDATE)
    assert length == 1  # the event went to the event exchange, not to the task queue


def test_every_task_event_of_a_run_names_its_queue(tmp_path: Path, redis_srv: RedisServer) -> None:
    """A host-enqueued run on a real worker: each task's events (sent, received, started,
    succeeded) carry the task's queue — chord members included — and no trial result leaves the
    worker with its replay."""
    db_url = f"sqlite:///{tmp_path / 'rsi.db'}"
    stack = stack_for(tmp_path, db_url, redis_srv)
    io = corrected(stack)
    with Capture(redis_srv.url) as capture, Cluster(tmp_path, db_url, redis_srv.url, n=1,
                                                    env={"RSI_TASK_EVENTS": "true"}) as cluster:
        lease = stack.coord.try_begin("shop", io)
        assert lease is not None
        KombuDispatcher(redis_srv.url).enqueue(
            TASK_CONSOLIDATE, [lease.agent, lease.io, lease.token, lease.fence], QUEUE_CONSOLIDATE)
        (run,) = cluster.finished("shop")
        names = {e["uuid"]: e["name"] for e in capture.of(lambda e: e["type"] == "task-received")}
        wait_for("every received task to finish", lambda: len(capture.of(
            lambda e: e["type"] == "task-succeeded" and e["uuid"] in names)) == len(names))
    stack.close()
    assert run.status in ("adopted", "kept", "recorded"), (run.reason, run.error)
    events = capture.of(lambda e: e["type"].startswith("task-") and e.get("uuid") in names)
    # a passed draft replaces itself (Task.replace): its trials' group joins the chord through
    # Celery's celery.accumulate, which takes the draft task's id, so one id has two tasks
    queues: dict[str, set[str]] = {}
    for e in events:
        if e["type"] == "task-received":
            assert e.get("queue") == TASK_ROUTES[e["name"]]["queue"], (e["name"], e)
            queues.setdefault(e["uuid"], set()).add(e["queue"])
    by_name: dict[str, set[str]] = {}
    for e in events:
        assert e.get("queue") in queues[e["uuid"]], (names[e["uuid"]], e)
        if len(queues[e["uuid"]]) == 1:
            by_name.setdefault(names[e["uuid"]], set()).add(e["type"])
    assert {"rsi.consolidate", "rsi.replay_trial", "rsi.judge_round"} <= set(by_name)
    for types in by_name.values():
        assert {"task-sent", "task-received", "task-started", "task-succeeded"} <= types
    trials = [e for e in events if e["type"] == "task-succeeded" and names[e["uuid"]] == "rsi.replay_trial"]
    briefs = [ast.literal_eval(e["result"]) for e in trials]  # the events carry the result's repr
    assert briefs and all(b["status"] and b["candidate"] and "result" not in b for b in briefs), briefs
    slots = [ast.literal_eval(e["args"])[1] for e in events
             if e["type"] == "task-received" and names[e["uuid"]] == "rsi.replay_trial"]
    assert slots and all(s.keys() <= {"candidate", "world_id", "trial", "source", "reuse"} for s in slots)
    assert all(s.get("reuse") is None for s in slots)  # a reused replay's answers are not shown


def test_purge_empties_the_project_queues(redis_srv: RedisServer, tools_env: dict[str, str]) -> None:
    dispatcher = KombuDispatcher(redis_srv.url)
    for queue in QUEUES:
        dispatcher.enqueue(TASK_CONSOLIDATE, ["shop", "io", "t", 1], queue)
    dispatcher.close()
    r = redis.Redis.from_url(redis_srv.client_url)
    assert [r.llen(q) for q in QUEUES] == [1, 1, 1]
    out = celery(tools_env, "purge", "-f")
    assert out.returncode == 0, out.stderr
    assert "Purged 3 messages from 3 known task queues" in out.stdout, out.stdout
    assert [r.llen(q) for q in QUEUES] == [0, 0, 0]
    assert not r.exists("celery")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def flower(tmp_path: Path, tools_env: dict[str, str]) -> Iterator[tuple[str, str]]:
    """Flower (``celery -A … flower``) on a free loopback port with a fresh basic-auth login."""
    port = _free_port()
    login = f"ops:{secrets.token_urlsafe(16)}"
    env = {**tools_env, "FLOWER_BASIC_AUTH": login}
    log = open(tmp_path / "flower.log", "ab")  # noqa: SIM115 - owned by the child
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", APP, "flower", "--address=127.0.0.1", f"--port={port}"],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    try:
        yield f"http://127.0.0.1:{port}", login
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def get(url: str, login: str | None) -> tuple[int, Any]:
    request = urllib.request.Request(url)
    if login is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(login.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except OSError:
        return 0, None


def test_flower_answers_with_credentials_only(tmp_path: Path, redis_srv: RedisServer,
                                              tools_env: dict[str, str], flower: tuple[str, str]) -> None:
    base, login = flower
    with Cluster(tmp_path, tools_env["RSI_DATABASE_URL"], redis_srv.url, n=1, concurrency=2):
        def workers() -> dict[str, Any] | None:
            status, body = get(f"{base}/api/workers?refresh=1", login)
            return body if status == 200 and body else None

        node = next(iter(wait_for("Flower to list the worker", workers)))
        assert node.startswith("w0-")
        task_id = KombuDispatcher(redis_srv.url).enqueue(TASK_CONSOLIDATE, ["shop", "io", "t", 1],
                                                         QUEUE_CONSOLIDATE)

        def listed() -> dict[str, Any] | None:
            status, body = get(f"{base}/api/tasks", login)
            task = body.get(task_id) if status == 200 and body else None
            return task if task and task.get("sent") else None  # with the sent time of its event

        task = wait_for("Flower to list the host-enqueued task", listed)
        assert task["name"] == TASK_CONSOLIDATE and task["routing_key"] == QUEUE_CONSOLIDATE
        user = login.split(":")[0]
        for bad in (None, f"{user}:wrong", f"intruder:{login.split(':', 1)[1]}"):
            for path in ("/api/workers", "/api/tasks", f"/api/task/info/{task_id}", "/"):
                assert get(f"{base}{path}", bad)[0] == 401, (path, bad and bad.split(":")[0])

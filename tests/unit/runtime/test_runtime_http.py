"""The runtime's ``/v1/runtime`` endpoints in-process (Starlette's test client) on a migrated SQLite file
and fakeredis: scopes, the token's agent prefix, audit rows, problem documents naming the field, and a
tree whose children ran inline shown with its spend."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.engine import Engine
from starlette.testclient import TestClient

from rsi_common import db
from rsi_common.config import RuntimeParams, Settings
from rsi_common.dispatch import RecordingDispatcher
from rsi_common.kernel.testing import ScriptedModel
from rsi_common.runtime.turns import TurnEnv, drain
from rsi_worker.service import build_state, create_app
from tests.support.runtime_policy import CATALOG, LEAD, policy

SHAPED = "sk-ant-api03-" + "Z" * 40


@pytest.fixture
def api(engine: Engine, fake_redis: Any, tmp_path: Any) -> Iterator[tuple[Any, dict[str, TestClient]]]:
    settings = Settings(database_url=str(engine.url), home=tmp_path / ".rsi")
    svc = build_state(settings, engine=engine, redis_client=fake_redis, dispatcher=RecordingDispatcher())
    app = create_app(svc)
    tokens = {}
    with svc.sessions.begin() as s:
        for scope in ("viewer", "operator"):
            tokens[scope] = db.create_token(s, f"t-{scope}", (scope,)).token
        tokens["tenant"] = db.create_token(s, "t-tenant", ("operator",), agent_prefix="team-").token
    with TestClient(app) as raw:
        clients = {k: TestClient(app, headers={"Authorization": f"Bearer {v}"}) for k, v in tokens.items()}
        yield svc, clients
        del raw


def test_an_operator_builds_a_tree_and_a_viewer_reads_it(api: Any) -> None:
    svc, c = api
    op, viewer = c["operator"], c["viewer"]
    profile = {"system_parts": [["lead", LEAD]], "subagents": CATALOG}
    assert viewer.post("/v1/runtime/agents/P", json={"profile": profile}).status_code == 403
    r = op.post("/v1/runtime/agents/P", json={"profile": profile, "caps": {"tree_spawns_per_day": 10}})
    assert r.status_code == 200 and r.json()["lifecycle"] == "admitted", r.text
    r = op.post("/v1/runtime/agents/P/turns", json={"text": "topic a; topic b"})
    assert r.status_code == 200 and len(r.json()["receipts"]) == 1
    # run the turns inline on the service's own database and Redis
    queue: deque[tuple[str, str]] = deque([("P", "main")])
    model = ScriptedModel([policy], repeat_last=True, provider="sim", model="sim-1")
    drain(TurnEnv(svc.client, RuntimeParams(), model, lambda a, s: queue.append((a, s))), queue)
    tree = viewer.get("/v1/runtime/agents/P/tree").json()
    assert tree["tree"]["lifecycle"] == "idle" and tree["spend"]["spawns"] == 2
    assert [h["status"] for h in tree["tree"]["handles"]] == ["completed", "completed"]
    spend = viewer.get("/v1/runtime/agents/P/spend").json()
    assert spend["spent"]["turns"] == 3 and spend["caps"]["spawns"] == 10
    spawned = op.post("/v1/runtime/agents/P/spawn", json={"spec": "researcher", "input": "c",
                                                          "request_id": "r-1"}).json()
    again = op.post("/v1/runtime/agents/P/spawn", json={"spec": "researcher", "input": "c",
                                                        "request_id": "r-1"}).json()
    assert spawned["handle"] == again["handle"] and again["created"] is False
    handle = spawned["handle"]
    assert viewer.get(f"/v1/runtime/handles/{handle}").json()["status"] == "queued"
    cancelled = op.post(f"/v1/runtime/handles/{handle}/cancel", json={"reason": "x"}).json()
    assert cancelled == {"cancelled": [handle]}
    assert op.post("/v1/runtime/messages", json={"to": "P.researcher", "text": "hi"}).status_code == 200
    spec = {"description": "w", "tools": [], "max_iterations": 2, "instructions": "Write."}
    r = op.put("/v1/runtime/agents/P/subagents/writer", json={"spec": spec})
    assert r.json()["catalog"] == ["researcher", "writer"]
    assert op.put("/v1/runtime/agents/P/caps", json={"caps": None}).json()["caps"] is None
    restore = op.post("/v1/runtime/agents/P/restore", json={})
    assert restore.status_code == 422 and "not failed" in restore.json()["detail"]
    assert op.delete("/v1/runtime/agents/P").json()["lifecycle"] == "deleted"
    with svc.sessions() as s:
        actions = [(a.action, a.outcome) for a in reversed(db.audit_log(s, agent_id="P"))]
    assert actions[:3] == [("runtime.register", "ok"), ("runtime.start_turn", "ok"), ("runtime.spawn", "ok")]
    assert ("runtime.restore", "refused") in actions and actions[-1] == ("runtime.delete", "ok")


def test_hostile_bodies_are_problems_naming_the_field(api: Any) -> None:
    _, c = api
    op = c["operator"]
    assert op.post("/v1/runtime/agents/P", json={"profile": {"subagents": CATALOG}}).status_code == 200
    cases = [
        ("post", "/v1/runtime/agents/Q", {"profile": {"api_key": SHAPED}}, 422, "profile: unknown key"),
        ("post", "/v1/runtime/agents/Q", {"profile": [1]}, 422, "profile: must be an object"),
        ("post", "/v1/runtime/agents/Q", {"profil": {}}, 422, "body: unknown key 'profil'"),
        ("post", "/v1/runtime/agents/P/turns", {}, 422, "text: required"),
        ("post", "/v1/runtime/agents/P/spawn", {"spec": "researcher", "input": "x" * 20_000}, 422, "input:"),
        ("post", "/v1/runtime/agents/P/spawn", {"spec": "writer", "input": "x"}, 422, "unknown_spec"),
        ("post", "/v1/runtime/agents/nobody/spawn", {"spec": "researcher", "input": "x"}, 404,
         "not registered"),
        ("put", "/v1/runtime/agents/P/caps", {"caps": {"tree_usd_per_day": SHAPED}}, 422,
         "caps.tree_usd_per_day"),
        ("put", "/v1/runtime/agents/P/subagents/Bad", {"spec": None}, 422, "name:"),
        ("post", "/v1/runtime/messages", {"to": 5, "text": "x"}, 422, "to: must be"),
        ("get", "/v1/runtime/handles/sa_nothing", None, 404, "no such handle"),
        ("post", "/v1/runtime/agents/P/turns", {"text": 5}, 422, "text: must be a string"),
        ("post", "/v1/runtime/agents/P/turns", {"text": "x", "session": "../x"}, 422,
         "session: not a valid id"),
        ("post", "/v1/runtime/agents/Q", {"profile": {}, "caps": [1]}, 422,
         "caps: must be an object or null"),
        ("post", "/v1/runtime/messages", {"to": "P@", "text": "x"}, 422, "to: not a valid id"),
        ("put", "/v1/runtime/agents/P/subagents/w", {"spec": {"instructions": "\ud800"}}, 422,
         "spec.instructions: contains a lone surrogate"),
        ("get", "/v1/runtime/agents/P/spend?day=yesterday", None, 422, "day: must be YYYY-MM-DD"),
    ]
    for method, path, body, status, detail in cases:
        raw = None if body is None else json.dumps(body).encode()  # lone surrogates stay escaped
        sent = {} if raw is None else {"content": raw, "headers": {"content-type": "application/json"}}
        r = getattr(op, method)(path, **sent)
        assert r.status_code == status, (path, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
        assert detail in r.json()["detail"], r.text
        assert SHAPED not in r.text
    tenant = c["tenant"]
    assert tenant.get("/v1/runtime/agents/P/tree").status_code == 403
    assert tenant.post("/v1/runtime/messages", json={"to": "P", "text": "x"}).status_code == 403

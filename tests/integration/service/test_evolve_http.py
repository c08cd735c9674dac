"""Evolve runs over HTTP on SQLite and PostgreSQL: the list and one run read against the store, 404 for
an unknown run, scopes and agent-id prefixes on stop / promote, both audited, promote making the
frontier the agent's current version with lineage, stop marking the run; hostile names and bodies
refused with a 4xx naming the field, no secret echoed, nothing written."""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa

from rsi_common import db
from rsi_common.boundary import is_id
from rsi_common.db import evolve as evolve_db
from tests.adversarial.credentials_support import POSITIVE, leaks
from tests.integration.service.conftest import Live
from tests.support.evolve_run import small_run

pytestmark = pytest.mark.timeout(240)
JSON_TYPE = {"content-type": "application/json"}


def _audit(live: Live) -> list[tuple[str, str | None, str | None, str]]:
    with live.svc.sessions() as s:
        rows = db.audit_log(s, limit=100)
        return [(r.action, r.agent_id, r.target, r.outcome) for r in rows][::-1]


def test_runs_are_listed_and_read_as_the_store_holds_them(live_db: Live) -> None:
    store = small_run(live_db.svc.sessions, live_db.svc.settings, "ev-a")
    small_run(live_db.svc.sessions, live_db.svc.settings, "ev-b", run=False)
    viewer = live_db.http(live_db.tokens["viewer"])
    listed = viewer.get("/v1/evolve").json()
    assert [r["name"] for r in listed["runs"]] == ["ev-b", "ev-a"] and listed["next_cursor"] is None
    a = listed["runs"][1]
    _, _, status, _, state = store.run("ev-a")
    assert state is not None
    assert (a["status"], a["rounds_done"], a["T"], a["suite"]) == (status, 2, 2, "svc-s")
    assert a["S_evolve"] == state["S_t"] and a["S_star"] == state["S_star"]
    assert a["frontier_version"] == (state.get("incumbent") or {}).get("version", "h0")
    assert listed["runs"][0]["status"] == "created" and listed["runs"][0]["rounds_done"] == 0
    page = viewer.get("/v1/evolve?limit=1").json()
    assert [r["name"] for r in page["runs"]] == ["ev-b"] and page["next_cursor"] == "ev-b"
    rest = viewer.get(f"/v1/evolve?limit=1&cursor={page['next_cursor']}").json()
    assert [r["name"] for r in rest["runs"]] == ["ev-a"] and rest["next_cursor"] is None

    one = viewer.get("/v1/evolve/ev-a").json()
    judged = [r for r in store.rounds("ev-a") if r["t"] >= 0 and r["decision"] is not None]
    assert [r["t"] for r in one["rounds"]] == [r["t"] for r in judged] == [0, 1]
    for row, rnd in zip(one["rounds"], judged, strict=True):
        assert row["delta"] == rnd["decision"]["delta"] and row["winner"] == rnd["decision"]["winner"]
        variants = [c["variant"] for c in rnd["decision"]["candidates"]]
        assert [c["variant"] for c in row["candidates"]] == variants
        assert row["trials"] == len(store.trials("ev-a", row["t"]))
    assert [r["S_evolve"] for r in one["rounds"]] == state["trajectory"][1:]
    assert one["frontier"]["version"] == a["frontier_version"]
    def calls(usage: dict[str, Any]) -> int:
        return sum(int(u["calls"]) for u in usage.values())

    spent = calls(state["usage"]) - calls(judged[0]["before"]["usage"])  # every round's calls, once
    assert sum(r["model_calls"] for r in one["rounds"]) == spent > 0
    assert one["config"]["params"]["T"] == 2 and one["baseline"]["S"] == state["trajectory"][0]
    assert one["heldout"] == [{"t": h["t"], "version": h["version"], "S": h["S"]} for h in state["heldout"]]
    text = str(one)
    assert "prompt" not in one["config"] and all(t not in text for t in ("h000", "h001"))  # no held-out ids
    fresh = viewer.get("/v1/evolve/ev-b").json()  # created, never run: no state yet
    assert (fresh["rounds"], fresh["frontier"]["version"], fresh["baseline"]["S"]) == ([], "h0", None)
    r = viewer.get("/v1/evolve/ev-zz")
    assert r.status_code == 404 and r.json()["type"] == "urn:rsi:problem:unknown-evolve-run"
    assert live_db.http(live_db.tokens["host"]).get("/v1/evolve").status_code == 403
    assert live_db.http().get("/v1/evolve/ev-a").status_code == 401


def test_stop_and_promote_need_the_operator_scope_and_the_prefix_and_are_audited(live_db: Live) -> None:
    sessions = live_db.svc.sessions
    store = small_run(sessions, live_db.svc.settings, "ev-p")
    small_run(sessions, live_db.svc.settings, "ev-s", run=False)
    frontier = (store.run("ev-p")[4] or {})["incumbent"]["version"]
    viewer = live_db.http(live_db.tokens["viewer"])
    assert viewer.post("/v1/evolve/ev-s/stop", json={}).status_code == 403
    assert viewer.post("/v1/evolve/ev-p/promote", json={"agent_id": "shop-1"}).status_code == 403
    shop = live_db.http(live_db.token("shop-op", ("operator",), agent_prefix="shop-"))
    r = shop.post("/v1/evolve/ev-p/promote", json={"agent_id": "ops-1"})
    assert r.status_code == 403 and r.json()["type"] == "urn:rsi:problem:outside-tenant"
    with sessions() as s:
        assert s.get(db.AgentRow, "ops-1") is None
    r = shop.post("/v1/evolve/ev-p/promote", json={"agent_id": "shop-1"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert (out["version"], out["parent"], out["evolve"]) == (frontier, None, "ev-p")
    with sessions() as s:
        assert db.get_agent(s, "shop-1").current_version == frontier
        versions = db.lineage(s, "shop-1")
        assert [(v.version, v.parent_version) for v in versions] == [(frontier, None)]
        run = s.get(db.RunRow, out["run_id"])
        assert run is not None and run.kind == "promote:ev-p" and run.status == "adopted"
    coord = live_db.svc.client.coord
    lease = coord.try_begin("shop-1", "held-by-test")  # a consolidation holds the agent: as the CLI, refused
    assert lease is not None
    busy = shop.post("/v1/evolve/ev-p/promote", json={"agent_id": "shop-1"})
    assert busy.status_code == 409 and busy.json()["type"] == "urn:rsi:problem:agent-busy"
    coord.finish(lease)
    assert shop.post("/v1/agents/shop-1/freeze", json={}).status_code == 200
    frozen = shop.post("/v1/evolve/ev-p/promote", json={"agent_id": "shop-1"})
    assert frozen.status_code == 409 and frozen.json()["type"] == "urn:rsi:problem:agent-frozen"
    with sessions() as s:
        assert len(db.lineage(s, "shop-1")) == 1
        assert db.get_agent(s, "shop-1").frozen is True
    op = live_db.http(live_db.tokens["operator"])
    assert op.post("/v1/evolve/ev-zz/stop", json={}).status_code == 404
    r = op.post("/v1/evolve/ev-s/stop", json={})
    assert r.status_code == 200 and r.json()["stop_requested"] is True
    assert store.run("ev-s")[3] is True
    assert _audit(live_db) == [
        ("evolve.promote", "shop-1", "ev-p", "ok"),
        ("evolve.promote", "shop-1", "ev-p", "refused"),
        ("freeze", "shop-1", None, "ok"),
        ("evolve.promote", "shop-1", "ev-p", "refused"),
        ("evolve.stop", None, "ev-zz", "refused"),
        ("evolve.stop", None, "ev-s", "ok"),
    ]


def test_hostile_names_and_bodies_are_refused_naming_the_field(live: Live) -> None:
    store = small_run(live.svc.sessions, live.svc.settings, "ev-h")
    before = store.run("ev-h")
    op = live.http(live.tokens["operator"])
    names = ["%ED%A0%80", "x" * 10_000, "..%2Fx", "a%0Ab", "a%01b", "a%00b"]
    for raw in names:
        for method, path in (("GET", f"/v1/evolve/{raw}"), ("POST", f"/v1/evolve/{raw}/stop"),
                             ("POST", f"/v1/evolve/{raw}/promote")):
            r = op.request(method, path, json={"agent_id": "a-1"} if path.endswith("promote") else {})
            assert 400 <= r.status_code < 500, (raw[:20], path[:40], r.status_code)
            if r.status_code == 422:
                assert r.json()["detail"].startswith("name"), r.text
    secrets = [e for e in POSITIVE if is_id(e["text"])][:3]
    assert secrets
    bodies: list[Any] = [{"agent_id": "\ud800"}, {"agent_id": "x" * 10_000}, {"agent_id": "../x"},
                         {"agent_id": "a\nb"}, {"agent_id": "a\x01b"}, {"agent_id": 7}, {},
                         {"agent_id": "a-1", "extra": 1}]
    for body in bodies:  # sent as ASCII JSON: a lone surrogate travels as its \\ud800 escape
        r = op.post("/v1/evolve/ev-h/promote", content=json.dumps(body), headers=JSON_TYPE)
        assert r.status_code in (400, 422), (str(body)[:40], r.status_code)
        assert "agent_id" in r.json()["detail"] or "body" in r.json()["detail"], r.text
    for entry in secrets:
        for path, body in (("/v1/evolve/ev-h/promote", {"agent_id": entry["text"]}),
                           (f"/v1/evolve/{entry['text']}/promote", {"agent_id": "a-1"}),
                           (f"/v1/evolve/{entry['text']}", None)):
            r = op.request("POST" if body else "GET", path, json=body)
            assert 400 <= r.status_code < 500, (entry["label"], path[:30], r.status_code)
            assert not leaks(r.text, entry), (entry["label"], r.text)
    # nothing written: no audit row names a hostile value, no agent was made, the run is as it was
    with live.svc.sessions() as s:
        assert db.audit_log(s, limit=100) == []  # refused before the action: no row names a value
        assert s.execute(sa.select(sa.func.count()).select_from(db.AgentRow)).scalar_one() == 0
        assert s.execute(sa.select(sa.func.count()).select_from(evolve_db.EvolveRow)).scalar_one() == 1
    assert store.run("ev-h") == before

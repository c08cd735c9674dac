"""Every endpoint × every scope → the expected 2xx / 401 / 403, against a live server (a real socket,
uvicorn, SQLite and a real redis-server); tenant prefixes on every agent-scoped endpoint."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from rsi_common import db
from tests.integration.client.conftest import make_world
from tests.integration.client.helpers import store_version, variant
from tests.integration.service.conftest import SCOPES, Live
from tests.support.evolve_run import small_run

pytestmark = pytest.mark.timeout(180)


@dataclass(frozen=True)
class Call:
    """One endpoint: method, path (``{run}``, ``{token}``, ``{v}`` filled per test), body, the scope
    it needs (``None``: any valid token; ``"-"``: no token), the success status, a stream."""

    method: str
    path: str
    need: str | None
    body: Any = None
    ok: int = 200
    stream: bool = False


CALLS = [
    Call("GET", "/healthz", "-"),
    Call("GET", "/readyz", "-"),
    Call("GET", "/v1/openapi.json", None),
    Call("POST", "/v1/agents/ma/turns", "host", {"world": make_world("io-m2", agent="ma")}),
    Call("POST", "/v1/agents/ma/turns/io-m1/signals", "host", {"stars": 4}),
    Call("GET", "/v1/agents/ma/harness", "host"),
    Call("GET", "/v1/agents/ma/harness/events", "host", stream=True),
    Call("GET", "/v1/harness/events", "host", stream=True),
    Call("GET", "/v1/agents", "viewer"),
    Call("GET", "/v1/agents/ma", "viewer"),
    Call("GET", "/v1/agents/ma/lineage", "viewer"),
    Call("GET", "/v1/agents/ma/runs", "viewer"),
    Call("GET", "/v1/runs/{run}", "viewer"),
    Call("GET", "/v1/runs/{run}/progress", "viewer"),
    Call("GET", "/v1/runs/{run}/progress/events", "viewer", stream=True),
    Call("GET", "/v1/agents/ma/diff?v1=h0&v2={v}", "viewer"),
    Call("GET", "/v1/agents/ma/regressions", "viewer"),
    Call("GET", "/v1/agents/ma/spend", "viewer"),
    Call("GET", "/v1/cluster", "viewer"),
    Call("GET", "/metrics", "viewer"),
    Call("GET", "/v1/audit", "operator"),
    Call("POST", "/v1/agents/ma/rollback", "operator", {"version": "{v}"}),
    Call("POST", "/v1/agents/ma/pin", "operator", {"version": "h0"}),
    Call("POST", "/v1/agents/ma/freeze", "operator", {}),
    Call("POST", "/v1/agents/ma/unfreeze", "operator", {}),
    Call("POST", "/v1/agents/ma/clone", "operator", {"new_agent_id": "ma-clone"}),
    Call("POST", "/v1/agents/mb/consolidate", "operator", {}),
    Call("GET", "/v1/evolve", "viewer"),
    Call("GET", "/v1/evolve/mx-ev", "viewer"),
    Call("POST", "/v1/evolve/mx-ev/stop", "operator", {}),
    Call("POST", "/v1/evolve/mx-ev/promote", "operator", {"agent_id": "ma-ev"}),
    Call("GET", "/v1/tokens", "admin"),
    Call("POST", "/v1/tokens", "admin", {"name": "made", "scopes": ["viewer"]}, ok=201),
    Call("DELETE", "/v1/tokens/{token}", "admin"),
]
IMPLIED = {
    "host": {"host"},
    "viewer": {"viewer"},
    "operator": {"operator", "viewer"},
    "admin": {"admin", "operator", "viewer", "host"},
}
CALLERS = ("none", "bogus", *SCOPES)


def _seed(live: Live) -> dict[str, str]:
    """Agents ``ma`` (a turn, a stored version, a run) and ``mb`` (a turn); evolve run ``mx-ev`` (1 round)."""
    sessions = live.svc.sessions
    http = live.http(live.tokens["host"])
    for agent, io in (("ma", "io-m1"), ("mb", "io-b1")):
        assert (
            http.post(f"/v1/agents/{agent}/turns", json={"world": make_world(io, agent=agent)}).status_code
            == 200
        )
    v = store_version(sessions, "ma", variant("matrix"))
    with sessions.begin() as s:
        run = db.skip_run(s, "ma", io_id="io-m1", reason="matrix")
    small_run(sessions, live.svc.settings, "mx-ev", rounds=1)  # a frontier to promote (again and again)
    return {"run": run.id, "v": v}


def _fill(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, str):
        return value.format(**names)
    if isinstance(value, dict):
        return {k: _fill(v, names) for k, v in value.items()}
    return value


def _send(client: httpx.Client, call: Call, names: dict[str, str]) -> int:
    path = _fill(call.path, names)
    body = _fill(call.body, names)
    if call.stream:
        with client.stream(call.method, path) as resp:
            if resp.status_code == 200:
                first = next(resp.iter_lines())
                assert first.startswith(("retry:", "event:")), first
            return resp.status_code
    return client.request(call.method, path, json=body).status_code


def _expected(call: Call, caller: str) -> int:
    if call.need == "-":
        return call.ok
    if caller in ("none", "bogus"):
        return 401
    if call.need is None or call.need in IMPLIED[caller]:
        return call.ok
    return 403


def test_every_endpoint_answers_every_scope_as_the_table_says(live: Live) -> None:
    names = _seed(live)
    bogus = "rsi_t0123456789abcdef_" + "A" * 43  # well-formed, unknown: made here, not a credential
    clients: dict[str, httpx.Client] = {"none": live.http(), "bogus": live.http(bogus)}
    clients.update({s: live.http(live.tokens[s]) for s in SCOPES})
    admin = clients["admin"]
    got: dict[tuple[str, str], int] = {}
    want: dict[tuple[str, str], int] = {}
    for call in CALLS:
        for caller in CALLERS:
            if call.path.startswith("/v1/tokens/{token}"):
                names["token"] = admin.post("/v1/tokens", json={"name": "doomed", "scopes": ["host"]}).json()[
                    "id"
                ]
            key = (f"{call.method} {call.path}", caller)
            got[key] = _send(clients[caller], call, names)
            want[key] = _expected(call, caller)
    wrong = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
    assert not wrong, wrong
    assert len(want) == len(CALLS) * len(CALLERS)
    print(f"matrix: {len(CALLS)} endpoints x {len(CALLERS)} callers = {len(want)} requests")


def test_every_401_and_403_is_a_problem_document(live: Live) -> None:
    r = live.http().get("/v1/agents")
    assert r.status_code == 401 and r.headers["content-type"] == "application/problem+json"
    assert r.headers["www-authenticate"].startswith("Bearer")
    body = r.json()
    assert body["type"] == "urn:rsi:problem:unauthorized" and body["status"] == 401
    assert body["instance"] == "/v1/agents"
    r = live.http(live.tokens["host"]).get("/v1/agents")
    assert r.status_code == 403 and r.json()["type"] == "urn:rsi:problem:missing-scope"


def test_a_revoked_token_is_refused(live: Live) -> None:
    admin = live.http(live.tokens["admin"])
    made = admin.post("/v1/tokens", json={"name": "short-lived", "scopes": ["viewer"]}).json()
    viewer = live.http(made["token"])
    assert viewer.get("/v1/agents").status_code == 200
    assert admin.delete(f"/v1/tokens/{made['id']}").status_code == 200
    assert viewer.get("/v1/agents").status_code == 401  # this replica forgot its cache at once
    listed = {t["id"]: t for t in admin.get("/v1/tokens").json()}
    assert listed[made["id"]]["revoked_at"] is not None
    assert "token" not in listed[made["id"]]


TENANT_CALLS: list[tuple[str, str, Callable[[str], Any]]] = [
    ("POST", "/v1/agents/{a}/turns", lambda a: {"world": make_world("io-t9", agent=a)}),
    ("POST", "/v1/agents/{a}/turns/io-t1/signals", lambda a: {"stars": 3}),
    ("GET", "/v1/agents/{a}/harness", lambda a: None),
    ("GET", "/v1/agents/{a}", lambda a: None),
    ("GET", "/v1/agents/{a}/lineage", lambda a: None),
    ("GET", "/v1/agents/{a}/runs", lambda a: None),
    ("GET", "/v1/agents/{a}/diff?v1=h0&v2=h0", lambda a: None),
    ("GET", "/v1/agents/{a}/regressions", lambda a: None),
    ("GET", "/v1/agents/{a}/spend", lambda a: None),
    ("POST", "/v1/agents/{a}/rollback", lambda a: {"version": "h0"}),
    ("POST", "/v1/agents/{a}/pin", lambda a: {"version": "h0"}),
    ("POST", "/v1/agents/{a}/freeze", lambda a: {}),
    ("POST", "/v1/agents/{a}/unfreeze", lambda a: {}),
    ("POST", "/v1/agents/{a}/clone", lambda a: {"new_agent_id": "acme-copy"}),
    ("POST", "/v1/agents/{a}/consolidate", lambda a: {}),
]


def test_a_tenant_token_sees_and_changes_only_its_prefix(live: Live) -> None:
    host = live.http(live.tokens["host"])
    for agent in ("acme-1", "other-1"):
        assert (
            host.post(
                f"/v1/agents/{agent}/turns", json={"world": make_world("io-t1", agent=agent)}
            ).status_code
            == 200
        )
    with live.svc.sessions.begin() as s:
        run_other = db.skip_run(s, "other-1", io_id="io-t1", reason="tenant").id
        run_acme = db.skip_run(s, "acme-1", io_id="io-t1", reason="tenant").id
    tenant = live.http(live.token("acme", ("host", "operator"), agent_prefix="acme-"))
    for method, path, body in TENANT_CALLS:
        inside = tenant.request(method, path.format(a="acme-1"), json=body("acme-1"))
        outside = tenant.request(method, path.format(a="other-1"), json=body("other-1"))
        assert inside.status_code < 300, (method, path, inside.status_code, inside.text)
        assert outside.status_code == 403, (method, path, outside.status_code)
        assert outside.json()["type"] == "urn:rsi:problem:outside-tenant"
    # a clone may not leave the tenant either
    r = tenant.post("/v1/agents/acme-1/clone", json={"new_agent_id": "other-2"})
    assert r.status_code == 403
    listed = [a["agent_id"] for a in tenant.get("/v1/agents").json()["agents"]]
    assert listed and all(a.startswith("acme-") for a in listed)
    assert tenant.get(f"/v1/runs/{run_other}").status_code == 403
    assert tenant.get(f"/v1/runs/{run_acme}").status_code == 200
    assert all(e["agent_id"].startswith("acme-") for e in tenant.get("/v1/audit").json()["entries"])
    # an admin token cannot be restricted to a prefix
    admin = live.http(live.tokens["admin"])
    r = admin.post("/v1/tokens", json={"name": "x", "scopes": ["admin"], "agent_prefix": "acme-"})
    assert r.status_code == 422 and "agent_prefix" in r.json()["detail"]

"""Tokens and the audit log on SQLite and PostgreSQL: only hashes stored, revocation, scopes and
prefixes checked at creation, every operator action audited with who, what, when and outcome."""

from __future__ import annotations

import hashlib

import pytest
import sqlalchemy as sa

from rsi_common import db
from rsi_common.errors import InvalidInput
from tests.integration.client.conftest import make_world
from tests.integration.service.conftest import Live

pytestmark = pytest.mark.timeout(120)


def test_tokens_are_stored_only_as_hashes_and_revocation_sticks(live_db: Live) -> None:
    sessions = live_db.svc.sessions
    with sessions.begin() as s:
        issued = db.create_token(s, "hashes", ["host", "viewer"], agent_prefix="acme-", rate_per_min=10)
    token = issued.token
    with live_db.engine.connect() as conn:
        stored = "\n".join(str(tuple(r)) for r in conn.execute(sa.text("SELECT * FROM rsi_tokens")))
    secret = token.split("_", 2)[2]  # rsi_<id>_<secret>: the secret itself may hold "_"
    assert token not in stored and secret not in stored
    assert hashlib.sha256(token.encode()).hexdigest() in stored
    with sessions() as s:
        row = db.find_token(s, token)
        assert row is not None and row.scope_list == ("host", "viewer") and row.agent_prefix == "acme-"
        assert db.find_token(s, token[:-1] + ("A" if token[-1] != "A" else "B")) is None
        assert db.find_token(s, "rsi_" + "x" * 80) is None
    with sessions.begin() as s:
        first = db.revoke_token(s, issued.row.id).revoked_at
    with sessions.begin() as s:
        assert db.revoke_token(s, issued.row.id).revoked_at == first  # idempotent
    with sessions() as s:
        assert db.find_token(s, token) is None
    for bad in ({"scopes": []}, {"scopes": ["root"]}, {"scopes": ["admin"], "agent_prefix": "a-"},
                {"scopes": ["host"], "agent_prefix": "bad prefix"}, {"scopes": ["host"], "rate_per_min": 0},
                {"scopes": ["host"], "name": "two\nlines"}):
        kw = {"name": "x", **bad}
        with pytest.raises(InvalidInput), sessions.begin() as s:
            db.create_token(s, kw.pop("name"), kw.pop("scopes"), **kw)


def test_every_operator_action_is_audited_with_who_what_when_and_outcome(live_db: Live) -> None:
    host = live_db.http(live_db.tokens["host"])
    op = live_db.http(live_db.tokens["operator"])
    assert host.post("/v1/agents/au/turns", json={"world": make_world("io-1")}).status_code == 200
    steps = [("freeze", {}, 200), ("unfreeze", {}, 200), ("rollback", {"version": "h0"}, 200),
             ("pin", {"version": "h0"}, 200), ("consolidate", {}, 409), ("unfreeze", {}, 200),
             ("consolidate", {}, 200), ("rollback", {"version": "sha256:" + "1" * 64}, 404)]
    for action, body, status in steps:
        r = op.post(f"/v1/agents/au/{action}", json=body)
        assert r.status_code == status, (action, r.text)
    assert op.post("/v1/agents/au/clone", json={"new_agent_id": "au-2"}).status_code == 200
    entries = op.get("/v1/audit").json()["entries"][::-1]
    got = [(e["action"], e["agent_id"], e["outcome"]) for e in entries]
    assert got == [("freeze", "au", "ok"), ("unfreeze", "au", "ok"), ("rollback", "au", "ok"),
                   ("pin", "au", "ok"), ("consolidate", "au", "refused"), ("unfreeze", "au", "ok"),
                   ("consolidate", "au", "ok"), ("rollback", "au", "refused"), ("clone", "au-2", "ok")]
    assert {e["token_name"] for e in entries} == {"test-operator"}
    assert all(e["at"] for e in entries) and entries[-1]["target"] == "au"
    assert entries[4]["detail"]["message"].startswith("the agent is frozen")
    # token management by an admin is audited too
    admin = live_db.http(live_db.tokens["admin"])
    made = admin.post("/v1/tokens", json={"name": "audited", "scopes": ["viewer"]}).json()
    admin.delete(f"/v1/tokens/{made['id']}")
    last = [(e["action"], e["target"]) for e in admin.get("/v1/audit?limit=2").json()["entries"]]
    assert last == [("token.revoke", made["id"]), ("token.create", None)]

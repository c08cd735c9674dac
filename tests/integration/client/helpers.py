"""Helpers of the host-client tests (harness variants, row scans, broker messages)."""

from __future__ import annotations

import base64
import json
from typing import Any

import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from rsi_common import db
from rsi_common.harness import Harness, build_harness, h0
from rsi_worker.local.servers import free_port

TABLES = ("rsi_agents", "rsi_harnesses", "rsi_worlds", "rsi_runs", "rsi_replays", "rsi_trajectories")


def variant(tag: str) -> Harness:
    """H0 with another description: a different, valid harness version."""
    base = h0()
    manifest = base.manifest.to_json(include_parent=False)
    manifest["description"] = f"variant {tag}"
    return build_harness(manifest, base.files)


def store_version(sessions: sessionmaker[Session], agent: str, harness: Harness) -> str:
    """Store ``harness`` as a version of ``agent`` (created if new) without moving ``current_version``."""
    with sessions.begin() as s:
        db.ensure_agent(s, agent)
        db.lock_agent(s, agent)
        db.add_harness(s, agent, harness.version, harness.payload())
    return harness.version


def row_counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {t: int(conn.execute(sa.text(f"SELECT COUNT(*) FROM {t}")).scalar_one()) for t in TABLES}


def all_rows_text(engine: Engine) -> str:
    """Every stored row of every rsi_ table, as one JSON text (for credential scans)."""
    out: list[str] = []
    with engine.connect() as conn:
        for t in TABLES:
            for row in conn.execute(sa.text(f"SELECT * FROM {t}")).mappings():
                out.append(json.dumps(dict(row), default=str, ensure_ascii=False))
    return "\n".join(out)


def closed_url() -> str:
    """A Redis URL on a local port nobody listens on."""
    return f"redis://127.0.0.1:{free_port()}/0"


def queued_messages(client: redis.Redis, queue: str = "consolidate") -> list[dict[str, Any]]:
    """The kombu envelopes waiting in a Redis-broker queue, oldest first, body decoded to JSON."""
    out = []
    for raw in reversed(client.lrange(queue, 0, -1)):
        env = json.loads(raw)
        body = env["body"]
        if env["properties"].get("body_encoding") == "base64":
            body = base64.b64decode(body).decode("utf-8")
        env["decoded"] = json.loads(body)
        out.append(env)
    return out

"""Hostile input over HTTP: rate limits in Redis, body limits (declared and chunked), the library's
validation with the field named and nothing stored, malformed bodies, and no secret echoed."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from rsi_common.client import redis_client
from rsi_worker.service.ratelimit import RateLimiter
from tests.adversarial.credentials_support import POSITIVE, leaks
from tests.integration.client.conftest import make_world
from tests.integration.client.helpers import row_counts
from tests.integration.service.conftest import Live

pytestmark = pytest.mark.timeout(120)
MID_MINUTE = 1_800_000_030.0
"""The rate limiter's clock in these tests: 30 s into a one-minute window (the real clock could
cross a window's end between two requests of a burst)."""


def test_a_token_over_its_rate_is_refused_with_retry_after_and_counted_in_redis(
    make_live: Callable[..., Live], redis_url: str
) -> None:
    live = make_live()
    live.svc.auth.limiter.clock = lambda: MID_MINUTE  # the burst cannot straddle two windows
    admin = live.http(live.tokens["admin"])
    made = admin.post("/v1/tokens", json={"name": "slow", "scopes": ["viewer"], "rate_per_min": 3}).json()
    slow = live.http(made["token"])
    codes = [slow.get("/v1/agents").status_code for _ in range(5)]
    assert codes[:3] == [200, 200, 200]
    assert codes[3:] == [429, 429]
    r = slow.get("/v1/agents")
    assert r.status_code == 429 and r.json()["type"] == "urn:rsi:problem:rate-limited"
    assert int(r.headers["retry-after"]) == 30 and r.json()["retry_after_s"] == 30  # to the next minute
    # other tokens are not affected; the window lives in Redis (shared by every replica)
    assert admin.get("/v1/agents").status_code == 200
    rc = redis_client(redis_url)
    keys = sorted(k.decode() for k in rc.scan_iter("rsi:rate:*"))
    rc.close()
    assert any(k.startswith(f"rsi:rate:{made['id']}:") for k in keys)
    assert all(k.startswith("rsi:rate:t") for k in keys)
    metrics = admin.get("/metrics").text
    assert "rsi_api_rate_limited_total 3.0" in metrics


def test_without_a_clock_the_window_is_the_redis_servers_minute(redis_url: str) -> None:
    rc = redis_client(redis_url)
    try:
        token = f"t{uuid.uuid4().hex}"
        before = int(rc.time()[0]) // 60
        decision = RateLimiter(rc).hit(token, 1)
        after = int(rc.time()[0]) // 60
        assert decision.allowed and decision.count == 1 and 1 <= decision.retry_after_s <= 60
        (key,) = [k.decode() for k in rc.scan_iter(f"rsi:rate:{token}:*")]
        assert before <= int(key.rsplit(":", 1)[1]) <= after
    finally:
        rc.close()


def test_the_service_default_rate_applies_to_tokens_without_their_own(make_live: Callable[..., Live]) -> None:
    live = make_live(api_rate_per_min=2)
    live.svc.auth.limiter.clock = lambda: MID_MINUTE
    viewer = live.http(live.tokens["viewer"])
    assert [viewer.get("/v1/agents").status_code for _ in range(3)] == [200, 200, 429]


def test_bodies_over_their_limit_are_refused_before_anything_is_stored(
    make_live: Callable[..., Live],
) -> None:
    live = make_live(api_max_body_bytes=20_000)
    host = live.http(live.tokens["host"])
    before = row_counts(live.engine)
    big = make_world("io-big", agent="lim", input="x" * 30_000)
    r = host.post("/v1/agents/lim/turns", json={"world": big})
    assert r.status_code == 413
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["limit_bytes"] == 20_000

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"world": {"input": "'
        for _ in range(40):
            yield b"y" * 1000
        yield b'"}}'

    r = host.post("/v1/agents/lim/turns", content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    # every other endpoint takes at most 64 KB
    op = live.http(live.tokens["operator"])
    r = op.post(
        "/v1/agents/lim/freeze",
        content=b"{" + b" " * 70_000 + b"}",
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 413
    assert row_counts(live.engine) == before
    # a turn under the limit is stored
    assert (
        host.post("/v1/agents/lim/turns", json={"world": make_world("io-ok", agent="lim")}).status_code == 200
    )


def test_invalid_input_is_a_problem_naming_the_field_and_nothing_is_stored(live: Live) -> None:
    host = live.http(live.tokens["host"])
    before = row_counts(live.engine)
    cases = [
        ({"world": make_world("io-1", clock="yesterday")}, "clock"),
        ({"world": make_world("io-1"), "signals": {"stars": 9}}, "signals.stars"),
        ({"world": make_world("io-1"), "colour": "blue"}, "unknown key"),
        ({"world": make_world("bad id with spaces")}, "io_id"),
    ]
    for body, where in cases:
        r = host.post("/v1/agents/val/turns", json=body)
        assert r.status_code == 422, (where, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        assert where in r.json()["detail"], (where, r.json())
        assert r.json()["error"] in ("WorldError", "InvalidInput", "InputLimitError", "WorldLimitError")
    r = host.post("/v1/agents/bad%20agent/turns", json={"world": make_world("io-1")})
    assert r.status_code == 422 and r.json()["detail"].startswith("agent_id")
    r = host.post("/v1/agents/val/turns", content=b'{"world": ', headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "malformed JSON" in r.json()["detail"]
    r = host.post("/v1/agents/val/turns", content=b"[1]", headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    r = host.post("/v1/agents/val/turns", content=b"world=1", headers={"Content-Type": "text/plain"})
    assert r.status_code == 415
    deep = {"world": make_world("io-1", state={"metadata": {"x": _nest(80)}})}
    r = host.post("/v1/agents/val/turns", json=deep)
    assert r.status_code in (400, 422) and "nested deeper" in r.json()["detail"]
    assert row_counts(live.engine) == before


def _nest(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def test_a_credential_is_refused_and_never_echoed(live: Live) -> None:
    host = live.http(live.tokens["host"])
    before = row_counts(live.engine)
    entry = POSITIVE[0]
    for body in (
        {"world": make_world("io-c", input=f"my key is {entry['text']}")},
        {"world": make_world("io-c"), "signals": {"comment": f"use {entry['text']}"}},
    ):
        r = host.post("/v1/agents/cred/turns", json=body)
        assert r.status_code == 422, r.text
        assert r.json()["error"] == "CredentialError"
        assert not leaks(r.text, entry)
    assert row_counts(live.engine) == before


def test_unknown_agent_version_and_run_are_404_problems(live: Live) -> None:
    viewer = live.http(live.tokens["viewer"])
    op = live.http(live.tokens["operator"])
    assert viewer.get("/v1/agents/ghost").json()["type"] == "urn:rsi:problem:unknown-agent"
    assert viewer.get("/v1/agents/ghost").status_code == 404
    assert viewer.get("/v1/runs/run_0000").status_code == 404
    host = live.http(live.tokens["host"])
    assert host.post("/v1/agents/known/turns", json={"world": make_world("io-k")}).status_code == 200
    r = op.post("/v1/agents/known/rollback", json={"version": "sha256:" + "0" * 64})
    assert r.status_code == 404 and r.json()["type"] == "urn:rsi:problem:unknown-version"
    r = op.post("/v1/agents/known/rollback", json={"versio": "h0"})
    assert r.status_code == 422
    entries = op.get("/v1/audit?agent_id=known").json()["entries"]
    assert [(e["action"], e["outcome"]) for e in entries] == [
        ("rollback", "refused"),
        ("rollback", "refused"),
    ]
    assert entries[1]["detail"]["type"] == "UnknownVersionError"
    assert all(e["token_name"] == "test-operator" for e in entries)

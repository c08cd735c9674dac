"""The quiet run's Redis calls on the wire (``rsi_common.coord_wire``, ``consolidate.quiet_lease``;
docs/performance/consolidation.md#the-no-signal-path): the same answers as the coordinator's own
calls on a real redis-server, the client's call when the server lost the script or the connection,
and a quiet run that renews before its read and finishes in two round trips."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import fakeredis
import pytest
import redis

from rsi_common.config import Settings
from rsi_common.coord import Coordinator, Lease, lease_key, pending_key, spend_key
from rsi_common.coord_wire import (
    finish,
    pack,
    renew_reply,
    renew_spend_reply,
    send_renew,
    send_renew_and_spend,
    wire,
)
from rsi_common.dispatch import redis_py_url
from rsi_worker.bench.nosignal import RoundTrips
from rsi_worker.consolidate import flow, quiet, quiet_lease
from rsi_worker.consolidate.spend import renew_over_cap, today
from tests.support.pipeline import Stack


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_py_url(redis_url), socket_timeout=10, health_check_interval=30)
    yield c
    c.close()


def test_pack_is_resp() -> None:
    assert pack(b"EVALSHA", "ab", 1, "k", "é") == (b"*5\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n1\r\n"
                                                  b"$1\r\nk\r\n$2\r\n\xc3\xa9\r\n")
    with pytest.raises(TypeError):
        pack(b"GET", 1.5)  # type: ignore[arg-type]


def test_the_wire_answers_as_the_coordinator(client: redis.Redis) -> None:
    coord = Coordinator(client, lease_s=30)
    w = wire(client)
    assert w is not None and wire(client) is w
    day = today()
    lease = coord.try_begin("a", "io-1")
    assert lease is not None
    stolen = Lease("a", "not-the-token", lease.fence, "io-1")
    for held in (lease, stolen):
        assert renew_reply(w.reply(send_renew(w, coord, held))) is coord.renew(held)
        assert renew_spend_reply(w.reply(send_renew_and_spend(w, coord, held, day))) \
            == coord.renew_and_spend(held, day)
    coord.spend_add("a", 120, day)
    coord.spend_add("b", 30, day)
    assert renew_spend_reply(w.reply(send_renew_and_spend(w, coord, lease, day))) == (True, (120, 150))
    client.delete(spend_key(day))
    client.rpush(spend_key(day), "x")  # a counter of another type reads as none, as in ``spend``
    assert renew_spend_reply(w.reply(send_renew_and_spend(w, coord, lease, day))) == (True, (120, 0))
    client.delete(spend_key(day))
    client.set(spend_key(day), "not a number")
    with pytest.raises(ValueError):
        renew_spend_reply(w.reply(send_renew_and_spend(w, coord, lease, day)))
    with pytest.raises(ValueError):
        coord.renew_and_spend(lease, day)
    assert 0 < client.pttl(lease_key("a")) <= 30_000
    # finish: a lost lease changes nothing, a pending turn gets the lease once, then it is released
    assert finish(w, coord, stolen) is None and client.get(lease_key("a")) == lease.token.encode()
    assert coord.try_begin("a", "io-2") is None  # held: io-2 pending
    rerun = finish(w, coord, lease)
    assert rerun is not None and (rerun.io, rerun.fence) == ("io-2", lease.fence + 1)
    assert rerun.token != lease.token and client.get(pending_key("a")) is None
    assert finish(w, coord, lease) is None  # the old token: handed out exactly once
    assert finish(w, coord, rerun) is None and client.get(lease_key("a")) is None


def test_the_client_answers_when_the_server_lost_the_script_or_the_connection(client: redis.Redis) -> None:
    coord = Coordinator(client, lease_s=30)
    w = wire(client)
    assert w is not None
    lease = coord.try_begin("a", "io-1")
    assert lease is not None
    client.script_flush()  # NOSCRIPT on the wire: the client loads the script
    assert renew_reply(w.call(coord._renew, [lease_key("a")], [lease.token, coord.lease_ms])) is True
    sent = send_renew(w, coord, lease)
    assert sent.conn is not None
    assert renew_reply(w.reply(sent)) is True
    client.execute_command("CLIENT KILL TYPE normal SKIPME yes")  # the wire's idle connection too
    assert renew_reply(w.reply(send_renew(w, coord, lease))) is True  # the dead connection: the client's call
    assert renew_reply(w.reply(send_renew(w, coord, lease))) is True
    assert finish(w, coord, lease) is None and client.get(lease_key("a")) is None


def test_no_wire_on_fakeredis() -> None:
    assert wire(fakeredis.FakeRedis(server=fakeredis.FakeServer())) is None
    assert wire(None) is None


def test_a_quiet_run_on_redis_renews_before_its_read_and_makes_two_round_trips(tmp_path: Path,
                                                                               client: redis.Redis) -> None:
    stack = Stack(Settings(database_url=f"sqlite:///{tmp_path / 'rsi.db'}", model_backoff_s=0),
                  redis_client=client)
    try:
        for conv in ("c0", "c1"):  # the first run connects and loads the scripts; the second is counted
            turn = stack.say("shop", conv, "Compare laptops: use search query=laptops")
            lease = stack.lease("shop", turn.world["io_id"] if turn.world else "")
            if conv == "c0":
                assert flow.close(stack.deps, flow.open_run(stack.deps, lease))[0] is not None
        with RoundTrips() as trips:
            nxt = flow.open_run(stack.deps, lease)
            assert nxt.kind == "final" and nxt.quiet is not None
            result, rerun = flow.close(stack.deps, nxt)
        assert trips.n == 2 and rerun is None and result is not None and result.status == "recorded"
        assert client.get(lease_key("shop")) is None
        # a lease that does not renew: nothing decided here (the full path stops the run)
        turn = stack.say("shop", "c2", "Compare phones: use search query=phones")
        lease = stack.lease("shop", turn.world["io_id"] if turn.world else "")
        assert quiet.decide(stack.deps, Lease("shop", "not-the-token", lease.fence, lease.io)) is None
        nxt = quiet.decide(stack.deps, lease)
        assert nxt is not None and nxt.quiet is not None and flow.close(stack.deps, nxt)[0] is not None
        # a declined run drops its renewal's answer: the wire's connection is clean for the next call
        turn = stack.say("shop", "c2", "Thanks, that is exactly right")
        lease = stack.lease("shop", turn.world["io_id"] if turn.world else "")
        assert quiet.decide(stack.deps, lease) is None  # an unread pair: the full path reads it
        assert renew_over_cap(stack.deps, lease) == quiet_lease.renewal(
            stack.deps, quiet_lease.send_renewal(stack.deps, lease)) == (True, None)
        assert quiet_lease.finish(stack.deps, lease) is None and client.get(lease_key("shop")) is None
    finally:
        stack.close()

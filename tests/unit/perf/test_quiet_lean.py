"""The quiet run's lean round trips (docs/performance/consolidation.md#the-no-signal-path): the lease
renewal and the spend read in one script call (one Redis command, no ``SCRIPT EXISTS``), and the
steady statements as driver SQL on SQLite with the rows Core gives, the state decoded once per
process."""

from __future__ import annotations

import json
import threading
from typing import Any

import fakeredis
import pytest
import redis
import sqlalchemy as sa

from rsi_common.coord import Coordinator, Lease, spend_key
from rsi_common.db.models import AgentRow
from rsi_common.stored import StoredDataError
from rsi_worker.bench.nosignal import RoundTrips
from rsi_worker.consolidate import flow, quiet, quiet_sql
from rsi_worker.consolidate.spend import today
from rsi_worker.consolidate.state import ConsolidationState
from tests.support.pipeline import Stack

REQUEST = "Compare laptops: use search query=laptops"


class _Counting(fakeredis.FakeRedis):
    """A fake Redis client that counts the commands it sends (one each: no pipeline here)."""

    sent: list[str]

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.sent.append(str(args[0]))
        return super().execute_command(*args, **options)


def test_renew_and_spend_is_one_command_with_the_answers_of_renew_and_spend() -> None:
    client = _Counting(server=fakeredis.FakeServer())
    client.sent = []
    coord = Coordinator(client, lease_s=30)
    lease = coord.try_begin("a", "io-1")
    assert lease is not None
    day = today()
    coord.renew_and_spend(lease, day)  # loads the script once (NOSCRIPT → SCRIPT LOAD)
    client.sent.clear()
    coord.spend_add("a", 7, day)
    client.sent.clear()
    assert coord.renew_and_spend(lease, day) == (True, (7, 7))
    assert client.sent == ["EVALSHA"]
    assert coord.renew_and_spend(Lease("a", "other", lease.fence, "io-1"), day) == (False, (7, 7))
    client.delete(spend_key(day))
    client.rpush(spend_key(day), "x")  # a counter of another type reads as none, as in ``spend``
    assert coord.renew_and_spend(lease, day) == (True, coord.spend("a", day)) == (True, (7, 0))
    client.delete(spend_key(day))
    client.set(spend_key(day), "not a number")
    with pytest.raises(ValueError):  # as ``spend``
        coord.renew_and_spend(lease, day)


def test_driver_sql_rows_equal_core_rows(stack: Stack) -> None:
    """The agent read and the pool read give, as driver SQL, Core's values (booleans as 0/1 aside);
    the insert and the swap run as driver SQL."""
    stack.say("shop", "c1", REQUEST, {"stars": 5})
    stack.say("shop", "c2", REQUEST)
    assert set(quiet_sql.PLAIN) <= set(quiet_sql._plain_statements(stack.engine.dialect))
    st = quiet_sql.statements("sqlite")
    args = {"agent_id": "shop", "fence": 1, "n": 60}
    with stack.engine.connect() as conn:
        plain = [tuple(quiet_sql.run(conn, "agent", args).one()), *quiet_sql.run(conn, "pool", args)]
        core = [tuple(conn.execute(st.agent, args).one()), *conn.execute(st.pool, args)]
    assert len(plain) == len(core) == 3 and isinstance(plain[0][3], str)  # the state as its text
    for p, c in zip(plain, core, strict=True):
        assert [bool(x) if isinstance(y, bool) else x for x, y in zip(p, c, strict=True)] == list(c)


def test_the_state_memo_answers_as_decoding_afresh() -> None:
    """A state text decoded once per process: the same state as ``from_json``, a working copy whose
    ``set_seen`` leaves the remembered one as it was; a new text is decoded again; a bad one raises
    and is not remembered."""
    quiet._STATES.clear()
    text = json.dumps({"t": 3, "seen": {"w1": "d1"}})
    first = quiet._state("a", text)
    assert first == ConsolidationState.from_json(json.loads(text)) and first.t == 3
    assert first.set_seen({"w2": "d2"}, ["w1", "w2"]) and first.seen == {"w1": "d1", "w2": "d2"}
    again = quiet._state("a", text)
    assert again.seen == {"w1": "d1"} and again is not first
    assert quiet._state("a", json.dumps({"t": 4})).t == 4
    assert quiet._state("a", None) == ConsolidationState.from_json(None)
    for bad in ("{not json", json.dumps({"t": "x"})):
        with pytest.raises((StoredDataError, ValueError)):
            quiet._state("b", bad)
        assert "b" not in quiet._STATES


def test_an_unreadable_state_text_sends_the_run_to_the_full_path(stack: Stack) -> None:
    turn = stack.say("shop", "c1", REQUEST)
    lease = stack.lease("shop", turn.world["io_id"] if turn.world else "")
    with stack.engine.begin() as conn:
        conn.execute(sa.text("UPDATE rsi_agents SET state = '{not json' WHERE id = 'shop'"))
    assert quiet.decide(stack.deps, lease) is None
    with stack.engine.begin() as conn:
        conn.execute(sa.update(AgentRow).where(AgentRow.id == "shop").values(state={}))
    nxt = quiet.decide(stack.deps, lease)
    assert nxt is not None and nxt.quiet is not None
    written, rerun = flow.close(stack.deps, nxt)
    assert written is not None and written.status == "recorded" and rerun is None


def test_round_trips_count_sends_of_this_thread(redis_srv: Any) -> None:
    """The benchmark's Redis round-trip count (``bench.nosignal.RoundTrips``) on a real
    redis-server: a command, a script call and a pipeline are one send each; a pipeline with a
    script adds its ``SCRIPT EXISTS``; another thread's sends are not counted."""
    client = redis.Redis.from_url(redis_srv.client_url)
    coord = Coordinator(client, lease_s=30)
    lease = coord.try_begin("a", "io-1")
    assert lease is not None
    coord.renew_and_spend(lease, today())  # the scripts loaded
    coord.renew(lease)
    with RoundTrips() as trips:
        client.get("x")
        assert trips.n == 1
        coord.renew_and_spend(lease, today())
        assert trips.n == 2
        pipe = client.pipeline(transaction=False)
        pipe.get("x")
        pipe.get("y")
        pipe.execute()
        assert trips.n == 3
        pipe = client.pipeline(transaction=False)
        coord._renew(keys=["k"], args=["t", 1000], client=pipe)
        pipe.execute()
        assert trips.n == 5
        other = threading.Thread(target=lambda: client.get("x"))
        other.start()
        other.join()
        assert trips.n == 5
    client.get("x")
    assert trips.n == 5
    client.close()

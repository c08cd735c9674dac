"""Heartbeats with a fake clock (docs/runtime/goals.md#heartbeats), R11.5: downtime → one fire; two
tickers → one message; an unread beat only advances; pause, resume and cron; the tick posts and the
turn reads ``[heartbeat <label>] <instruction>``."""

from __future__ import annotations

from collections import deque
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.client import RsiClient
from rsi_common.config import RuntimeParams, Settings
from rsi_common.db import WorldRow
from rsi_common.db.runtime_models import MessageRow, ScheduleRow
from rsi_common.dispatch import RecordingDispatcher
from rsi_common.errors import InvalidInput
from rsi_common.llm.sim import SimClient
from rsi_common.runtime.heartbeats import add_heartbeat, claim_beat, due, fire_due, update_heartbeat
from rsi_common.runtime.host import RuntimeClient
from rsi_common.runtime.messages import consume
from rsi_common.runtime.tick import tick
from rsi_common.runtime.tree import AgentProfile, register
from rsi_common.runtime.turns import TurnEnv, drain

T0 = datetime(2026, 3, 1, 10, 7, 30, tzinfo=UTC)


class Clock:
    """A fake clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = T0

    def advance(self, **kw: float) -> datetime:
        self.now += timedelta(**kw)
        return self.now


@pytest.fixture
def agent(factory: sessionmaker[Session]) -> sessionmaker[Session]:
    with factory.begin() as s:
        register(s, "A", AgentProfile())
    return factory


def _add(factory: sessionmaker[Session], now: datetime, **kw: Any) -> str:
    with factory.begin() as s:
        kw.setdefault("label", "inbox")
        return add_heartbeat(s, "A", "check the inbox", now=now, actor="operator:t", **kw).id


def _messages(factory: sessionmaker[Session]) -> list[tuple[str, str]]:
    with factory() as s:
        return [(m.key, m.text) for m in s.execute(sa.select(MessageRow).order_by(MessageRow.seq)).scalars()]


def _consume_all(factory: sessionmaker[Session]) -> None:
    with factory.begin() as s:
        ids = list(s.execute(sa.select(MessageRow.id).where(MessageRow.consumed_io.is_(None))).scalars())
        s.execute(sa.update(MessageRow).where(MessageRow.id.in_(ids)).values(claimed_io="main:9"))
        assert consume(s, ids, "main:9") == len(ids)


def _next_at(factory: sessionmaker[Session], sid: str) -> datetime:
    with factory() as s:
        row = s.get(ScheduleRow, sid)
        assert row is not None
        return row.next_at


def test_downtime_merges_missed_beats_into_one_fire(agent: sessionmaker[Session]) -> None:
    clock = Clock()
    sid = _add(agent, clock.now, every_s=60)
    assert fire_due(agent, clock.advance(seconds=59)) == []
    down = clock.advance(hours=10)  # 600 beats missed
    assert fire_due(agent, down) == [("A", "main")]
    assert fire_due(agent, down) == []
    first = int((T0.replace(microsecond=0) + timedelta(seconds=60)).timestamp())
    assert _messages(agent) == [(f"hb:{sid}:{first}", "check the inbox")]
    assert _next_at(agent, sid) == down.replace(microsecond=0) + timedelta(seconds=60)


def test_an_unread_beat_only_advances_next_at(agent: sessionmaker[Session]) -> None:
    clock = Clock()
    sid = _add(agent, clock.now, every_s=60)
    assert len(fire_due(agent, clock.advance(seconds=61))) == 1
    later = clock.advance(seconds=120)
    assert fire_due(agent, later) == []
    assert len(_messages(agent)) == 1 and _next_at(agent, sid) > later
    _consume_all(agent)
    assert len(fire_due(agent, clock.advance(seconds=61))) == 1
    assert len(_messages(agent)) == 2


def test_two_tickers_deliver_one_message(agent: sessionmaker[Session]) -> None:
    clock = Clock()
    _add(agent, clock.now, every_s=60)
    now = clock.advance(seconds=90)
    seen_by_one, seen_by_two = due(agent, now), due(agent, now)  # both read the row before either claims
    assert seen_by_one == seen_by_two and len(seen_by_one) == 1
    (sid, old), = seen_by_one
    assert claim_beat(agent, sid, old, now) == ("A", "main")
    assert claim_beat(agent, sid, old, now) is None  # compare-and-set on next_at: the second loses
    assert len(_messages(agent)) == 1


def test_pause_resume_and_cron(agent: sessionmaker[Session]) -> None:
    clock = Clock()
    sid = _add(agent, clock.now, every_s=300)
    with agent.begin() as s:
        update_heartbeat(s, sid, status="paused", now=clock.now, actor="operator:t")
    assert fire_due(agent, clock.advance(hours=1)) == []
    with agent.begin() as s:
        update_heartbeat(s, sid, status="active", now=clock.now, actor="operator:t")
    assert _next_at(agent, sid) == clock.now.replace(microsecond=0) + timedelta(seconds=300)
    assert fire_due(agent, clock.advance(seconds=299)) == []
    assert len(fire_due(agent, clock.advance(seconds=2))) == 1
    # switch to a cron: every quarter hour, UTC
    with agent.begin() as s:
        update_heartbeat(s, sid, cron="*/15 * * * *", now=clock.now, actor="operator:t")
    assert clock.now.strftime("%H:%M") == "11:12"
    assert _next_at(agent, sid) == datetime(2026, 3, 1, 11, 15, tzinfo=UTC)
    _consume_all(agent)
    assert len(fire_due(agent, clock.advance(minutes=5))) == 1
    assert _messages(agent)[-1][0].endswith(str(int(datetime(2026, 3, 1, 11, 15, tzinfo=UTC).timestamp())))
    assert _next_at(agent, sid) == datetime(2026, 3, 1, 11, 30, tzinfo=UTC)


def test_heartbeat_inputs_are_validated(agent: sessionmaker[Session]) -> None:
    for kw, field in [({"every_s": 59}, "every_s"), ({"every_s": True}, "every_s"), ({}, "exactly one"),
                      ({"every_s": 60, "cron": "* * * * *"}, "exactly one"),
                      ({"cron": "* * * * * *"}, "cron"),
                      ({"cron": "61 * * * *"}, "cron"), ({"every_s": 60, "label": "Bad Label"}, "label")]:
        with pytest.raises(InvalidInput, match=field):
            _add(agent, T0, **kw)
    with agent.begin() as s:
        register(s, "H", AgentProfile(runs_on="host"))
    with agent.begin() as s, pytest.raises(InvalidInput, match="runs on the host"):
        add_heartbeat(s, "H", "x", every_s=60, now=T0, actor="operator:t")
    with agent.begin() as s, pytest.raises(InvalidInput, match="no such heartbeat"):
        update_heartbeat(s, "hb_nope", status="paused", now=T0, actor="operator:t")
    with agent() as s:
        assert s.execute(sa.select(sa.func.count()).select_from(ScheduleRow)).scalar_one() == 0


def test_the_tick_posts_a_due_heartbeat_and_the_turn_reads_it(engine: Engine, fake_redis: Any,
                                                               tmp_path: Any) -> None:
    settings = Settings(database_url=str(engine.url), home=tmp_path / ".rsi")
    client = RsiClient(settings, engine=engine, redis=fake_redis, dispatcher=RecordingDispatcher())
    queue: deque[tuple[str, str]] = deque()
    env = TurnEnv(client, RuntimeParams(), SimClient(), lambda a, s: queue.append((a, s)))
    rc = RuntimeClient(client, params=env.params, wake=env.wake)
    try:
        rc.register("A", AgentProfile())
        hb = rc.add_heartbeat("A", "summarise the news", every_s=60, label="news")
        with env.factory.begin() as s:  # the database clock is real: make the beat due an hour ago
            s.execute(sa.update(ScheduleRow).values(next_at=datetime.now(UTC) - timedelta(hours=1)))
        assert tick(env).heartbeats == 1 and tick(env).heartbeats == 0
        assert [o.outcome for o in drain(env, queue)].count("ran") == 1
        with env.factory() as s:
            world = s.execute(sa.select(WorldRow)).scalar_one().world
        assert world["input"] == "[heartbeat news] summarise the news"
        assert rc.update_heartbeat(hb["id"], status="paused")["status"] == "paused"
    finally:
        client.close()

"""Versions and reads through the host API (docs/algorithm/consolidation.md §3.12.10), clear errors on
unknown agents and
versions, invalidations published, and no credential in any stored row (invariant 7)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
import redis
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.client import RsiClient
from rsi_common.coord import HARNESS_CHANNEL
from rsi_common.credentials import find_credentials
from rsi_common.dispatch import RecordingDispatcher
from rsi_common.errors import CredentialError, InvalidInput, UnknownAgentError, UnknownVersionError
from rsi_common.harness import H0_VERSION
from rsi_common.kernel import TurnPlan
from rsi_common.kernel.testing import ScriptedModel, text_response
from tests.integration.client.conftest import make_world
from tests.integration.client.helpers import all_rows_text, row_counts, store_version, variant

pytestmark = pytest.mark.timeout(120)


def test_unknown_agents_and_versions_give_clear_errors(
    client: RsiClient, sessions: sessionmaker[Session]
) -> None:
    calls: list[Callable[[], object]] = [
        lambda: client.rollback("ghost", None), lambda: client.pin("ghost", None),
        lambda: client.freeze("ghost"), lambda: client.unfreeze("ghost"), lambda: client.lineage("ghost"),
        lambda: client.runs("ghost"), lambda: client.agent("ghost"), lambda: client.diff("ghost", None, None),
        lambda: client.clone("ghost", "b1"), lambda: client.record_signals("ghost", "io1", {}),
    ]
    for call in calls:
        with pytest.raises(UnknownAgentError) as err:
            call()
        assert str(err.value) == "unknown agent 'ghost'"
    store_version(sessions, "a1", variant("1"))
    for call in (lambda: client.rollback("a1", "sha256:nope"), lambda: client.pin("a1", "sha256:nope"),
                 lambda: client.diff("a1", None, "sha256:nope")):
        with pytest.raises(UnknownVersionError, match="has no stored harness version 'sha256:nope'"):
            call()
    with pytest.raises(InvalidInput, match="version must be"):
        client.rollback("a1", "")
    with pytest.raises(InvalidInput, match="onto itself"):
        client.clone("a1", "a1")
    assert client.agent("a1").current_version is None and not client.agent("a1").frozen


def test_versions_move_and_every_change_is_published(
    client: RsiClient, sessions: sessionmaker[Session], rclient: redis.Redis
) -> None:
    v1 = store_version(sessions, "a1", variant("1"))
    v2 = store_version(sessions, "a1", variant("2"))
    sub = rclient.pubsub()
    sub.subscribe(HARNESS_CHANNEL)
    assert sub.get_message(timeout=60)["type"] == "subscribe"  # type: ignore[index]
    assert client.rollback("a1", v1).current_version == v1
    pinned = client.pin("a1", v2)
    assert (pinned.current_version, pinned.frozen) == (v2, True)
    assert client.unfreeze("a1").frozen is False and client.freeze("a1").frozen is True
    assert client.rollback("a1", H0_VERSION).current_version is None
    client.rollback("a1", v2)
    cloned = client.clone("a1", "b1")
    assert (cloned.agent_id, cloned.current_version, cloned.frozen) == ("b1", v2, False)
    assert [v.version for v in client.lineage("b1")] == [v1, v2] == [v.version for v in client.lineage("a1")]
    published: list[str] = []
    deadline = time.monotonic() + 60
    while len(published) < 7 and time.monotonic() < deadline:
        msg = sub.get_message(timeout=0.5)
        if msg and msg["type"] == "message":
            published.append(msg["data"].decode())
    sub.close()
    assert published == ["a1"] * 6 + ["b1"]
    diff = client.diff("a1", None, v1)
    assert '-  "description"' in diff or '+  "description": "variant 1"' in diff
    assert client.diff("a1", v1, v1) == ""


def test_runs_lists_newest_first(client: RsiClient) -> None:
    for i in range(3):
        client.record_turn("a1", {"own_loop": True, "io_id": f"io{i}"})
    runs = client.runs("a1", limit=2)
    assert [r.io_id for r in runs] == ["io2", "io1"] and all(r.status == "skipped" for r in runs)


SECRET_KEY = "sk-" + "ant-api03-" + "Q" * 40
SECRET_META = "sk-proj-" + "Z" * 40


def test_no_credential_reaches_a_stored_row(
    make_client: Callable[..., RsiClient], engine: Engine, rclient: redis.Redis,
    recorder: RecordingDispatcher, db_url: str, redis_url: str,
) -> None:
    from rsi_common.config import Settings

    client = make_client(settings=Settings(database_url=db_url, redis_url=redis_url,
                                           anthropic_api_key=SECRET_KEY, openai_api_key=SECRET_META))
    plan = TurnPlan(input="What is our revenue?", io_id="io1", provider="anthropic", model="claude",
                    credentials={"api_key": SECRET_KEY}, system_parts=[("role", "You help.")],
                    metadata={"api_key": SECRET_META, "channel": "web", "_internal": SECRET_KEY})
    result = client.run_turn("a1", plan, ScriptedModel([text_response("42 EUR")]))
    assert result.world is not None
    client.record_signals("a1", "io1", {"stars": 5, "comment": "thanks"})
    leaky = make_world("io2")
    leaky["input"] = f"my key is {SECRET_KEY}"
    with pytest.raises(CredentialError, match="input"):
        client.record_turn("a1", {"world": leaky})
    with pytest.raises(CredentialError, match=r"signals\.comment"):
        client.record_signals("a1", "io1", {"comment": f"use {SECRET_META}"})
    with pytest.raises(CredentialError, match="trajectory"):
        client.record_turn("a1", {"world": make_world("io3"), "trajectory": {"error": f"auth {SECRET_KEY}"}})
    assert row_counts(engine)["rsi_worlds"] == 1
    stored = all_rows_text(engine)
    assert "What is our revenue?" in stored  # the scan does see the stored rows
    assert SECRET_KEY not in stored and SECRET_META not in stored and find_credentials(stored) == []
    redis_text = json.dumps({k.decode(): repr(rclient.dump(k)) for k in rclient.keys("*")})
    assert SECRET_KEY not in redis_text and SECRET_META not in redis_text
    assert SECRET_KEY not in json.dumps([c.args for c in recorder.calls])

"""Issue 11, class 4 through the real host client, on SQLite and PostgreSQL: a turn with a credential in
a refused field stores nothing, one in ``state.metadata`` is stored scrubbed, a refused signal update
leaves the stored signals as they were, and no stored row holds a secret
(``docs/security/credentials.md``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from sqlalchemy.engine import Engine

from rsi_common.client import RsiClient
from rsi_common.config import Settings
from rsi_common.credentials import find_credentials
from rsi_common.dispatch import RecordingDispatcher
from rsi_common.errors import CredentialError
from tests.adversarial.credentials_support import POSITIVE, REFUSED, SCRUBBED, leaks, world
from tests.integration.client.helpers import all_rows_text, row_counts

AGENT = "agent-adv"
CASES = [e for e in POSITIVE if e["name"] in (
    "jwt", "postgres url with password", "anthropic key with zero-width space", "unquoted api_key colon",
    "github fine-grained token", "authorization bearer header",
)]


@pytest.fixture
def client(db_url: str, redis_url: str, engine: Engine) -> Iterator[RsiClient]:
    rc = redis.Redis.from_url(redis_url)
    c = RsiClient(Settings(database_url=db_url, redis_url=redis_url), engine=engine, redis=rc,
                  dispatcher=RecordingDispatcher())
    yield c
    c.close()
    rc.close()


def _with_io(turn: dict[str, Any], io: str) -> dict[str, Any]:
    if turn.get("world") is not None:
        turn["world"]["io_id"] = io
    return turn


def test_refused_fields_store_nothing_and_metadata_is_scrubbed(client: RsiClient, engine: Engine) -> None:
    n = 0
    for entry in CASES:
        for field, (build, _) in sorted(REFUSED.items()):
            n += 1
            with pytest.raises(CredentialError) as info:
                client.record_turn(AGENT, _with_io(build(entry["text"]), f"io-r{n}"))
            assert not leaks(str(info.value), entry), (field, str(info.value))
    assert row_counts(engine)["rsi_worlds"] == 0
    stored = 0
    for entry in CASES:
        for _field, (build, _) in sorted(SCRUBBED.items()):
            stored += 1
            client.record_turn(AGENT, _with_io(build(entry["text"]), f"io-s{stored}"))
    assert row_counts(engine)["rsi_worlds"] == stored
    rows = all_rows_text(engine)
    assert "en-GB" in rows  # the scan sees the stored metadata
    assert find_credentials(rows) == []
    assert not any(leaks(rows, entry) for entry in CASES)


def test_refused_signal_update_keeps_the_stored_signals(client: RsiClient, engine: Engine) -> None:
    client.record_turn(AGENT, {"world": world(io="io-1"), "signals": {"comment": "too long"}})
    for entry in CASES:
        for signals in ({"comment": entry["text"]}, {"criteria": ["short", entry["text"]]},
                        {"expected": entry["text"]}):
            with pytest.raises(CredentialError) as info:
                client.record_signals(AGENT, "io-1", signals)
            assert not leaks(str(info.value), entry)
    rows = all_rows_text(engine)
    assert "too long" in rows and find_credentials(rows) == []

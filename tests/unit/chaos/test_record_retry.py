"""Bounded retries of the record path: the budget, what counts as transient, and the HTTP client's
time-budgeted record calls (an ``httpx.MockTransport`` plays a service whose database restarts)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from sqlalchemy import exc as sa_exc

from rsi_common.errors import ServiceUnavailable, TurnNotStored
from rsi_common.http_client import RsiHttpClient
from rsi_common.record_retry import RetryBudget, is_transient_db, retry_write


def test_the_budget_doubles_its_pauses_and_never_exceeds_its_total() -> None:
    assert RetryBudget(0).delays() == []
    assert RetryBudget(0.2).delays() == [0.05, 0.1]
    pauses = RetryBudget(10).delays()
    assert pauses[:4] == [0.05, 0.1, 0.2, 0.4] and max(pauses) == 2.0 and sum(pauses) <= 10


def test_only_errors_that_may_pass_are_transient() -> None:
    assert is_transient_db(sa_exc.OperationalError("SELECT", {}, Exception("server closed the connection")))
    assert is_transient_db(sa_exc.InterfaceError("SELECT", {}, Exception("connection already closed")))
    assert is_transient_db(sa_exc.TimeoutError("QueuePool limit reached"))
    assert not is_transient_db(sa_exc.IntegrityError("INSERT", {}, Exception("duplicate key")))
    assert not is_transient_db(ValueError("bad input"))


def test_a_write_is_retried_until_it_succeeds_and_a_lasting_error_says_the_turn_was_not_stored() -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise sa_exc.OperationalError("INSERT", {}, Exception("the database system is starting up"))
        return "stored"

    pauses: list[float] = []
    assert retry_write(flaky, RetryBudget(1), agent_id="a1", io_id="io1", sleep=pauses.append) == "stored"
    assert pauses == [0.05, 0.1]

    def down() -> str:
        raise sa_exc.OperationalError("INSERT", {"secret": "s3cr3t"}, Exception("connection refused"))

    with pytest.raises(TurnNotStored) as caught:
        retry_write(down, RetryBudget(0.2), agent_id="a1", io_id="io2", sleep=lambda _s: None)
    assert "turn 'io2' of agent 'a1' was not stored" in str(caught.value)
    assert "s3cr3t" not in str(caught.value) and caught.value.attempts == 3

    clock = iter([0.0, 0.5, 0.5])  # the first attempt itself took 0.5 s: no room for a 0.05 s pause
    with pytest.raises(TurnNotStored) as slow:
        retry_write(down, RetryBudget(0.2), agent_id="a1", io_id="io2", sleep=lambda _s: None,
                    clock=lambda: next(clock))
    assert slow.value.attempts == 1

    def invalid() -> str:
        raise sa_exc.IntegrityError("INSERT", {}, Exception("constraint"))

    with pytest.raises(sa_exc.IntegrityError):  # would fail the same way again: never retried
        retry_write(invalid, RetryBudget(5), agent_id="a1", io_id="io3",
                    sleep=lambda _s: pytest.fail("slept"))


def _service(answers: list[int]) -> tuple[httpx.MockTransport, list[int]]:
    seen: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        status = answers[min(len(seen), len(answers) - 1)]
        seen.append(status)
        if status != 200:
            return httpx.Response(status, json={"title": "Service unavailable", "detail": "database down"})
        body: dict[str, Any] = json.loads(request.content)
        return httpx.Response(200, json={"world_id": "w_1", "io_id": body["world"]["io_id"], "seq": 1,
                                         "replayable": True, "dispatched": "enqueued", "task_id": None})

    return httpx.MockTransport(handler), seen


def test_the_http_client_rides_out_a_restart_within_its_record_budget() -> None:
    transport, seen = _service([503] * 6 + [200])  # more 503s than the plain retries (3)
    with RsiHttpClient("http://rsi.test", "tok", listen=False, transport=transport, backoff_s=0.01) as client:
        assert client.record_turn("a1", {"world": {"io_id": "io1"}}).world_id == "w_1"
    assert seen == [503] * 6 + [200]

    transport, seen = _service([503])
    pauses: list[float] = []
    with RsiHttpClient("http://rsi.test", "tok", listen=False, transport=transport, backoff_s=0.05,
                       record_retry_s=2.0) as client, pytest.raises(ServiceUnavailable) as caught:
        client._sleep = pauses.append
        client._clock = lambda: sum(pauses)  # only the pauses spend the budget, not a slow attempt
        client.record_turn("a1", {"world": {"io_id": "io2"}})
    assert "the turn was not stored" in str(caught.value)
    # the 3 plain retries, then more while the 2 s budget lasts: 0.05 + … + 0.8 = 1.55 s of pauses,
    # and the next 1.6 s pause would pass it
    assert pauses == [0.05, 0.1, 0.2, 0.4, 0.8] and len(seen) == 6

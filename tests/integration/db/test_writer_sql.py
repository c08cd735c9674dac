"""Short write transactions (docs/performance/consolidation.md#short-write-transactions): JSON encoded
before the write turn, the compare-and-swap merge of a run's JSON field, the Core final write and the
one-statement run-inputs insert — same stored values as the ORM paths, on SQLite and PostgreSQL."""

from __future__ import annotations

import math
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.db import (
    Adoption,
    HarnessRow,
    RunRow,
    ensure_agent,
    final_write,
    get_agent,
    get_run,
    lineage,
    start_run,
)
from rsi_common.db.engine import encode_json
from rsi_common.db.run_fields import merge_running_field
from rsi_common.db.run_inputs import canonical_digest, get_run_inputs, insert_run_inputs
from rsi_common.errors import InvalidInput

PAYLOAD = {"manifest": {"name": "h1"}, "files": {"a.md": "x"}, "version": "sha256:v1"}


def _start(factory: sessionmaker[Session], agent: str, fence: int) -> RunRow:
    with factory.begin() as s:
        ensure_agent(s, agent)
        return start_run(s, agent, fence=fence, io_id="io1")


def test_encoded_json_is_stored_as_the_document(factory: sessionmaker[Session]) -> None:
    run = _start(factory, "a1", 1)
    state = {"z": 1, "a": [1.5, None, "é"], "m": {"k2": True, "k1": False}}  # key order kept
    with factory.begin() as s:
        done = final_write(s, run.id, status="recorded", result=encode_json({"status": "recorded"}),
                           state=encode_json(state))
    assert done.outcome == "written" and done.run.finished_at is not None
    with factory.begin() as s:
        assert list(get_agent(s, "a1").state) == ["z", "a", "m"]
        assert get_agent(s, "a1").state == state and get_run(s, run.id).result == {"status": "recorded"}
    with pytest.raises(ValueError):
        encode_json({"x": math.nan})


def test_core_final_write_adopts_with_encoded_payload(factory: sessionmaker[Session]) -> None:
    run = _start(factory, "a1", 3)
    lesson = {"world_id": "w1", "lesson": "keep the date", "world": {"turn": [1]}, "signals": {},
              "interaction_id": "c1", "seq": 1, "checks": [{"kind": "contains", "text": "x"}]}
    with factory.begin() as s:
        done = final_write(s, run.id, status="adopted", result={"status": "adopted", "version": "sha256:v1"},
                           state={"t": 1}, error=None,
                           adoption=Adoption("sha256:v1", encode_json(PAYLOAD), regressions=[lesson]))
    assert done.outcome == "adopted" and done.run.adopted_version == "sha256:v1"
    agent = done.agent
    assert (agent.current_version, agent.applied_fence, agent.state) == ("sha256:v1", 3, {"t": 1})
    with factory.begin() as s:
        (row,) = lineage(s, "a1")
        assert (row.payload, row.parent_version, row.run_id) == (PAYLOAD, None, run.id)
        assert row.summary == {"status": "adopted", "version": "sha256:v1"}  # the result, by default
        stored = get_run(s, run.id)
        assert (stored.status, stored.adopted_version, stored.finished_at is not None) == (
            "adopted", "sha256:v1", True)
        assert get_agent(s, "a1").updated_at >= stored.started_at
        count = s.scalar(sa.select(sa.func.count()).select_from(sa.text("rsi_regressions")))
        assert count == 1


def test_core_final_write_keeps_an_existing_harness_row(factory: sessionmaker[Session]) -> None:
    first = _start(factory, "a1", 1)
    with factory.begin() as s:
        final_write(s, first.id, status="adopted", result={"n": 1}, adoption=Adoption("sha256:v1", PAYLOAD))
    with factory.begin() as s:  # back to H0, then the same version again from a newer run
        agent = get_agent(s, "a1")
        agent.current_version = None
    second = _start(factory, "a1", 2)
    with factory.begin() as s:
        done = final_write(s, second.id, status="adopted", result={"n": 2},
                           adoption=Adoption("sha256:v1", encode_json({"other": True})))
    assert done.outcome == "adopted"
    with factory.begin() as s:
        rows = s.execute(sa.select(HarnessRow)).scalars().all()
        assert [(r.run_id, r.payload) for r in rows] == [(first.id, PAYLOAD)]  # its first row kept


def test_encoded_result_of_a_kept_run_is_copied(factory: sessionmaker[Session]) -> None:
    run = _start(factory, "a1", 1)
    with factory.begin() as s:
        get_agent(s, "a1").frozen = True
    with factory.begin() as s:
        done = final_write(s, run.id, status="adopted", result=encode_json({"status": "adopted", "x": 1}),
                           adoption=Adoption("sha256:v1", encode_json(PAYLOAD)))
    assert done.outcome == "kept"
    with factory.begin() as s:
        stored = get_run(s, run.id)
        assert stored.result is not None and (stored.result["status"], stored.result["x"]) == ("kept", 1)
        assert lineage(s, "a1") == []


def test_merge_running_field_swaps_and_redoes_a_lost_merge(factory: sessionmaker[Session]) -> None:
    run = _start(factory, "a1", 1)
    calls: list[Any] = []

    def add_a(drafts: Any) -> Any:
        calls.append(drafts)
        if len(calls) == 1:  # another writer stores B between this read and its swap
            merge_running_field(factory, run.id, "drafts", lambda d: {**(d or {}), "B": {"n": 2}})
        return {**(drafts or {}), "A": {"n": 1}}

    value, applied = merge_running_field(factory, run.id, "drafts", add_a)
    assert applied and value == {"B": {"n": 2}, "A": {"n": 1}}
    assert calls == [None, {"B": {"n": 2}}]  # the lost swap was merged again on the new value
    same, applied = merge_running_field(factory, run.id, "drafts", lambda d: d)  # nothing to write
    assert not applied and same == value
    with factory.begin() as s:
        assert get_run(s, run.id).drafts == value
        s.execute(sa.update(RunRow).where(RunRow.id == run.id).values(status="failed"))
    stored, applied = merge_running_field(factory, run.id, "drafts", lambda d: {"C": {}})
    assert not applied and stored == value  # a closed run is never written
    with pytest.raises(InvalidInput):
        merge_running_field(factory, "run_missing", "drafts", lambda d: d)


def test_run_inputs_insert_once(factory: sessionmaker[Session]) -> None:
    run = _start(factory, "a1", 1)
    inputs = {"schema": "rsi-run-inputs/1", "worlds": {"w1": {"digest": "d"}}}
    digest = canonical_digest(inputs)
    with factory.begin() as s:
        assert insert_run_inputs(s, run.id, digest, encode_json(inputs)) == digest
    with factory.begin() as s:  # a redelivered step keeps the first record
        assert insert_run_inputs(s, run.id, "0" * 64, {"other": 1}) == digest
    with factory.begin() as s:
        row = get_run_inputs(s, run.id)
        assert row is not None and (row.digest, row.inputs) == (digest, inputs) and row.created_at is not None

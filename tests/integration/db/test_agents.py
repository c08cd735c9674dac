"""Agents: creation, versions (rollback, pin, freeze), clone and lineage."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.db import (
    add_harness,
    clone_agent,
    ensure_agent,
    freeze,
    get_agent,
    get_harness,
    lineage,
    pin,
    rollback_to,
    unfreeze,
)
from rsi_common.errors import InvalidInput, UnknownAgentError, UnknownVersionError


def _payload(v: str) -> dict[str, object]:
    return {"manifest": {"name": v}, "files": {"a.md": v}, "version": v}


def _with_versions(factory: sessionmaker[Session], agent: str, *versions: str) -> None:
    with factory.begin() as s:
        ensure_agent(s, agent)
        parent = None
        for v in versions:
            add_harness(s, agent, v, _payload(v), parent_version=parent, run_id=f"run_{v}")
            parent = v


def test_ensure_and_get(factory: sessionmaker[Session]) -> None:
    with factory.begin() as s:
        created = ensure_agent(s, "a1")
        assert ensure_agent(s, "a1").created_at == created.created_at
        assert created.created_at.tzinfo is not None
        with pytest.raises(UnknownAgentError, match="unknown agent 'ghost'"):
            get_agent(s, "ghost")
        with pytest.raises(InvalidInput):
            ensure_agent(s, "  ")


def test_concurrent_ensure_creates_one_agent(factory: sessionmaker[Session]) -> None:
    barrier = threading.Barrier(8)

    def work(_: int) -> str:
        barrier.wait()
        with factory.begin() as s:
            return ensure_agent(s, "a1").id

    with ThreadPoolExecutor(8) as pool:
        assert set(pool.map(work, range(8))) == {"a1"}


def test_rollback_moves_only_among_stored_versions(factory: sessionmaker[Session]) -> None:
    _with_versions(factory, "a1", "v1", "v2")
    with factory.begin() as s:
        assert rollback_to(s, "a1", "v2").current_version == "v2"
        assert rollback_to(s, "a1", "v1").current_version == "v1"
        assert rollback_to(s, "a1", None).current_version is None
        with pytest.raises(UnknownVersionError):
            rollback_to(s, "a1", "v9")
        with pytest.raises(UnknownAgentError):
            rollback_to(s, "ghost", None)
        assert get_harness(s, "a1", "v2").parent_version == "v1"
        assert get_agent(s, "a1").frozen is False


def test_pin_freezes_and_unfreeze_resumes(factory: sessionmaker[Session]) -> None:
    _with_versions(factory, "a1", "v1")
    with factory.begin() as s:
        pinned = pin(s, "a1", "v1")
        assert (pinned.current_version, pinned.frozen) == ("v1", True)
        assert unfreeze(s, "a1").frozen is False
        frozen = freeze(s, "a1")
        assert (frozen.current_version, frozen.frozen) == ("v1", True)
        with pytest.raises(UnknownVersionError):
            pin(s, "a1", "nope")


def test_add_harness_keeps_the_first_provenance(factory: sessionmaker[Session]) -> None:
    _with_versions(factory, "a1", "v1")
    with factory.begin() as s:
        again = add_harness(s, "a1", "v1", _payload("other"), run_id="run_other")
        assert again.run_id == "run_v1" and again.payload == _payload("v1")
        assert len(lineage(s, "a1")) == 1


def test_clone_copies_lineage_and_current_version(factory: sessionmaker[Session]) -> None:
    _with_versions(factory, "src", "v1", "v2", "v3")
    with factory.begin() as s:
        rollback_to(s, "src", "v2")
        freeze(s, "src")
        get_agent(s, "src").state = {"t": 5}
    with factory.begin() as s:
        clone = clone_agent(s, "src", "dst")
        assert (clone.current_version, clone.frozen, clone.state) == ("v2", False, {})
        assert [(h.version, h.parent_version, h.run_id) for h in lineage(s, "dst")] == [
            ("v1", None, "run_v1"), ("v2", "v1", "run_v2"), ("v3", "v2", "run_v3")]
        assert clone_agent(s, "src", "dst").current_version == "v2"  # idempotent
        assert len(lineage(s, "dst")) == 3
        assert rollback_to(s, "dst", "v3").current_version == "v3"
        assert get_agent(s, "src").current_version == "v2"
        with pytest.raises(UnknownAgentError):
            clone_agent(s, "ghost", "dst2")
        with pytest.raises(InvalidInput):
            clone_agent(s, "src", "src")
        with pytest.raises(UnknownAgentError):
            lineage(s, "ghost")

"""The cluster's second wave (rsi_worker/cluster/wave_release.py): sent once, by the trial whose result
releases it or by the gate, re-entrant for a redelivered claimer, never by anyone after it was sent."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import fakeredis
import pytest
from celery import Celery

from rsi_common.coord import Bounds
from rsi_common.dispatch import TASK_RELEASE_WAVE, TASK_REPLAY_TRIAL
from rsi_worker.cluster import wave_release
from rsi_worker.cluster.tasks import _launch
from rsi_worker.cluster.wave_release import claim_release, gate_due, mark_sent, release_key, send_second_wave
from rsi_worker.consolidate.evaluate import TrialSlot
from rsi_worker.consolidate.waves import await_first_wave, release_due, released

RUN, CAND = "run-1", "B"
SECOND = [{"candidate": CAND, "world_id": f"w{i}", "trial": 0, "source": "replay"} for i in range(3)]


def _bounds(A: int = 0, B: int = 0, R: int = 10) -> Bounds:
    return Bounds(A, B, R, S_star=0.5, delta=0.0, S_t=0.5)


class FakeCoord:
    def __init__(self, client: Any, bounds: Bounds | None = None, counted: int = 0, cancelled: bool = False):
        self.client, self.state, self.cancelled = client, (bounds, counted), cancelled

    def bound_progress(self, run: str, cand: str) -> tuple[Bounds | None, int]:
        return self.state

    def is_cancelled(self, run: str, cand: str) -> bool:
        return self.cancelled


def deps(coord: FakeCoord) -> Any:
    return SimpleNamespace(coord=coord, settings=SimpleNamespace(task_time_limit_s=300),
                           params=SimpleNamespace(early_stop_wave_s=30.0))


@pytest.fixture
def client() -> Any:
    return fakeredis.FakeRedis()


@pytest.fixture
def plan(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, int]]:
    """The second wave read from the run (a running run's stored slots after the first wave)."""
    reads: list[tuple[str, str, int]] = []

    def second_wave(_deps: Any, run_id: str, candidate: str, wave: int) -> list[dict[str, Any]]:
        reads.append((run_id, candidate, wave))
        return [dict(s) for s in SECOND]

    monkeypatch.setattr(wave_release, "second_wave", second_wave)
    return reads


def test_a_duplicate_release_sends_once(client: Any, plan: list[Any]) -> None:
    d, sent = deps(FakeCoord(client)), []
    # two trials released at once, the gate, a redelivery of the first
    for owner in ("trial-1", "trial-2", "gate-1", "trial-1"):
        send_second_wave(d, RUN, CAND, 7, owner, sent.append)
    assert sent == [SECOND] and plan == [(RUN, CAND, 7)]
    assert client.get(release_key(RUN, CAND)) == b"sent:trial-1"


def test_a_claimer_killed_before_sending_sends_on_its_redelivery(client: Any, plan: list[Any]) -> None:
    d, sent = deps(FakeCoord(client)), []
    assert claim_release(client, RUN, CAND, "trial-1", 600)  # the worker dies here, before the send
    assert not send_second_wave(d, RUN, CAND, 7, "gate-1", sent.append)  # nobody else sends meanwhile
    assert sent == []
    assert send_second_wave(d, RUN, CAND, 7, "trial-1", sent.append)  # the message redelivered (same id)
    assert sent == [SECOND]
    assert not send_second_wave(d, RUN, CAND, 7, "trial-1", sent.append)  # a later redelivery: sent already
    assert sent == [SECOND]


def test_a_send_that_raised_is_retried_by_the_same_claimer(client: Any, plan: list[Any]) -> None:
    d, sent = deps(FakeCoord(client)), []

    def broken(_: Any) -> None:
        raise ConnectionError("broker gone")

    with pytest.raises(ConnectionError):
        send_second_wave(d, RUN, CAND, 7, "trial-1", broken)
    assert client.get(release_key(RUN, CAND)) == b"trial-1"  # claimed, not marked sent
    assert send_second_wave(d, RUN, CAND, 7, "trial-1", sent.append) and sent == [SECOND]


def test_only_the_claimer_marks_the_wave_sent(client: Any) -> None:
    assert claim_release(client, RUN, CAND, "a", 600)
    assert not mark_sent(client, RUN, CAND, "b", 600)
    assert mark_sent(client, RUN, CAND, "a", 600)
    assert not claim_release(client, RUN, CAND, "a", 600)


def test_release_due_is_the_waiting_trials_condition() -> None:
    passed = {"status": "ok", "result": {"passed": 1}}
    failed = {"status": "ok", "result": {"passed": 0}}
    assert release_due(passed, _bounds(), 0, 5, False)  # a criterion passed: not hopeless
    assert release_due({"status": "cancelled"}, _bounds(), 0, 5, False)
    assert not release_due(failed, _bounds(B=1), 1, 5, False)  # a failure, the wave not yet counted
    assert release_due(failed, _bounds(B=5), 5, 5, False)  # every first-wave slot counted
    assert release_due(None, _bounds(A=1), 2, 5, False)  # another trial passed
    assert release_due(None, _bounds(), 0, 5, True)  # cancelled
    assert release_due(None, None, 0, 5, False)  # no bound stored (cleaned at the close): nothing to wait for
    assert not release_due(None, _bounds(B=2), 2, 5, False)


def test_the_gate_waits_releases_or_stops(client: Any) -> None:
    waiting = deps(FakeCoord(client, _bounds(B=1), 1))
    assert gate_due(waiting, RUN, CAND, 5, deadline=100.0, now=lambda: 50.0) is False
    assert gate_due(waiting, RUN, CAND, 5, deadline=100.0, now=lambda: 100.0) is True  # the wave's bound
    assert gate_due(deps(FakeCoord(client, _bounds(B=5), 5)), RUN, CAND, 5, 100.0, now=lambda: 50.0) is True
    assert claim_release(client, RUN, CAND, "t", 600) and mark_sent(client, RUN, CAND, "t", 600)
    assert gate_due(waiting, RUN, CAND, 5, deadline=100.0, now=lambda: 200.0) is None  # sent: done


def test_a_released_trial_does_not_wait() -> None:
    slots = [TrialSlot(CAND, f"w{i}", 0) for i in range(4)]
    checks = {f"w{i}": [{"c": 1}] for i in range(4)}
    plan = [s.to_json() for s in slots]
    bounds = Bounds(0, 0, 4, S_star=0.9, delta=0.0, S_t=0.9)  # one failure stops: wave of one
    reads: list[int] = []

    def read() -> tuple[Bounds | None, int]:
        reads.append(1)
        return bounds, 0

    with released():
        assert await_first_wave(slots[3], plan, checks, read, lambda: False, wait_s=600.0) is False
    assert reads == []


def test_a_draft_launches_its_first_wave_and_a_gate() -> None:
    app = Celery("t", set_as_current=False)
    slots = [TrialSlot(CAND, f"w{i}", 0) for i in range(5)]
    d = deps(FakeCoord(None))
    sigs = _launch(app, d, RUN, slots, 2)
    assert [s.task for s in sigs] == [TASK_REPLAY_TRIAL] * 2 + [TASK_RELEASE_WAVE]
    assert [s.args[2] for s in sigs[:2]] == [2, 2] and sigs[2].args[:3] == (RUN, CAND, 2)
    assert sigs[2].options["countdown"] > 0
    for whole in (None, 5, 0, True):  # no wave, or one wave: every trial at once, no gate
        assert [s.task for s in _launch(app, d, RUN, slots, whole)] == [TASK_REPLAY_TRIAL] * 5


def test_a_resend_keeps_the_chord_membership_under_a_new_id() -> None:
    from celery.exceptions import Ignore

    from rsi_worker.cluster.middleware import Resend, _resend

    app = Celery("t", set_as_current=False)
    sent: list[dict[str, Any]] = []

    class Sig:
        def __init__(self) -> None:
            self.options: dict[str, Any] = {}

        def clone(self) -> Sig:
            return self

        def set(self, **options: Any) -> Sig:
            self.options.update(options)
            return self

        def apply_async(self) -> None:
            sent.append(dict(self.options))

    request = SimpleNamespace(group="g1", group_index=3, chord={"task": "celery.accumulate"}, root_id="r1")
    with pytest.raises(Ignore):  # this execution ends uncounted by the chord
        _resend(SimpleNamespace(request=request), Resend(Sig(), 0.5))
    assert sent == [{"group_id": "g1", "group_index": 3, "chord": {"task": "celery.accumulate"},
                     "root_id": "r1", "countdown": 0.5}]
    gate = app.signature(TASK_RELEASE_WAVE, args=(RUN, CAND, 2, 0.0))
    assert "task_id" not in gate.clone().options  # a fresh id each look: never counted as a redelivery


def test_the_claim_goes_with_the_run_and_a_late_sender_leaves_none(client: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's close deletes the claim with its other keys; a trial or gate that releases after the
    close finds the run closed, sends nothing and leaves no key behind (nor does it undo a live claim)."""
    from rsi_common.coord import Coordinator

    d, sent = deps(FakeCoord(client)), []
    monkeypatch.setattr(wave_release, "second_wave", lambda *_a: [dict(s) for s in SECOND])
    assert send_second_wave(d, RUN, CAND, 7, "trial-1", sent.append)
    Coordinator(client, 30.0).cleanup_run(RUN, [CAND])
    assert client.keys("rsi:run:*") == []
    monkeypatch.setattr(wave_release, "second_wave", lambda *_a: None)  # the run is closed
    assert not send_second_wave(d, RUN, CAND, 7, "gate-1", sent.append)
    assert client.keys("rsi:run:*") == [] and sent == [SECOND]
    assert claim_release(client, RUN, CAND, "trial-9", 60)  # another's live claim is not dropped
    assert not send_second_wave(d, RUN, CAND, 7, "gate-1", sent.append)
    assert client.get(release_key(RUN, CAND)) == b"trial-9"

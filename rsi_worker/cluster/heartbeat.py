"""Run heartbeats: a task of a run keeps its run's lease alive while it works
(docs/operations/recovery-bounds.md).

Every task of a run renews the lease when it starts; a long task (a replay with a slow model, a
draft) renews it again every :func:`interval_s` while its body runs, from one daemon thread per
worker process. The lease is thereby a liveness signal: it expires ``lease_s`` after the last task
of the run stopped beating — because the run is stuck (a lost chord message) or its worker died —
and the sweeper closes the run ``interrupted`` and re-runs its turn within ``lease_s`` +
``sweep_interval_s``, whatever the broker's visibility timeout.

A task is registered by :class:`Heartbeat` (a :class:`~rsi_worker.cluster.middleware.Middleware`)
when it names a run (``run_id``) or carries a lease (``agent``, ``token``, ``fence``, ``io``: the
``open`` step); a task shorter than one interval never beats. A renewal that finds the lease lost
stops beating for that task (the body stops at its own next check). Redis down: the beat is skipped.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from rsi_common.coord import Lease
from rsi_common.db import get_run
from rsi_worker.cluster.middleware import Answer, Policy, TaskCall
from rsi_worker.cluster.worker import WorkerContext
from rsi_worker.consolidate.context import RoundContext

__all__ = ["Heartbeat", "interval_s"]

log = logging.getLogger(__name__)


def interval_s(lease_s: float) -> float:
    """Seconds between two beats of a task: a third of the lease TTL (two beats may be missed)."""
    return max(0.5, lease_s / 3)


@dataclass
class _Beat:
    run_id: str | None
    lease: Lease | None
    last: float
    lost: bool = False


class Heartbeat:
    """The middleware that registers a run's task for the process's heartbeat thread."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        self.interval = interval_s(ctx.settings.lease_s)
        self._active: dict[int, _Beat] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.beats = 0
        """Renewals sent (diagnostics and tests)."""

    def before(self, call: TaskCall, policy: Policy) -> Answer | None:
        a = call.arguments
        lease = None
        if all(a.get(k) is not None for k in ("agent", "token", "fence", "io")):
            lease = Lease(str(a["agent"]), str(a["token"]), int(a["fence"]), str(a["io"]))
        if lease is None and call.run_id is None:
            return None
        with self._lock:
            self._active[id(call)] = _Beat(call.run_id, lease, time.monotonic())
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="rsi-heartbeat", daemon=True)
                self._thread.start()
        return None

    def on_error(self, call: TaskCall, policy: Policy, exc: Exception) -> Answer | None:
        return None

    def after(self, call: TaskCall) -> None:
        with self._lock:
            self._active.pop(id(call), None)

    def _loop(self) -> None:
        while True:
            time.sleep(self.interval / 2)
            now = time.monotonic()
            with self._lock:
                due = [b for b in self._active.values() if not b.lost and now - b.last >= self.interval]
            for beat in due:
                self.beat(beat, now)

    def beat(self, beat: _Beat, now: float) -> None:
        """Renew ``beat``'s lease once (loading it from the run row on the first beat)."""
        try:
            deps = self.ctx.runtime().deps
            if beat.lease is None and beat.run_id is not None:
                with deps.sessions() as session:
                    ctx = RoundContext.from_json(get_run(session, beat.run_id).params or {})
                    session.commit()
                beat.lease = Lease(ctx.agent_id, ctx.token, ctx.fence, ctx.io_id or "")
            if beat.lease is not None:
                beat.lost = not deps.coord.renew(beat.lease)
                self.beats += 1
        except Exception as exc:  # Redis or the database down: the next beat tries again
            log.debug("heartbeat of run %s skipped: %s", beat.run_id, type(exc).__name__)
        beat.last = now

"""The no-signal fast path on both backends (docs/performance/consolidation.md#the-no-signal-path):
the agent's state read as its stored text (``CAST … AS TEXT``: PostgreSQL's ``json`` gives the text
as stored) and decoded once per process, the steady statements as driver SQL (SQLite) or Core
(PostgreSQL) — the same decisions, rows and state."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Engine

from rsi_common.config import Settings
from rsi_common.db import get_run
from rsi_worker.consolidate import flow, quiet
from tests.support.pipeline import Stack

REQUEST = "Compare laptops: use search query=laptops"


def test_quiet_runs_decide_record_and_keep_the_state(db_url: str, engine: Engine) -> None:
    stack = Stack(Settings(database_url=db_url, model_backoff_s=0))
    try:
        reasons: list[str] = []
        for i, signals in enumerate((None, {"stars": 5}, None, None)):
            turn = stack.say("shop", f"c{i}", REQUEST, signals)
            lease = stack.lease("shop", turn.world["io_id"] if turn.world else "")
            before = stack.state("shop")
            nxt = flow.open_run(stack.deps, lease)
            assert quiet._STATES["shop"][1] == before  # the memo holds the state as read
            assert nxt.quiet is not None, i
            written, rerun = flow.close(stack.deps, nxt)
            assert written is not None and rerun is None and written.status == "recorded"
            with stack.sessions() as s:
                run: Any = get_run(s, written.run_id or "")
                assert (run.status, run.reason, run.fence) == ("recorded", written.reason, lease.fence)
            reasons.append(written.reason)
        assert reasons == ["no turn has a signal to learn from yet",
                           "new signals only confirm the current answers",
                           "no new correction or problem to fix", "no new correction or problem to fix"]
        assert len(stack.state("shop").seen) == 1  # the accepted answer's digest, seen once
    finally:
        stack.close()

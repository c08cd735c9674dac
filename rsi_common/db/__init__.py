"""Durable state of rsi-worker: SQLAlchemy models, repository functions, Alembic migrations.

Usage::

    engine = make_engine(settings.database_url)
    upgrade(engine)                      # `rsi db upgrade`
    factory = session_factory(engine)
    with factory.begin() as session:     # one transaction; repository functions never commit
        row = save_world(session, agent_id, world, retention=settings.world_retention)

Repository functions take the session of the caller's transaction (see :mod:`.engine` for the
locking rules on SQLite and PostgreSQL) and return ORM rows that stay readable after commit.
"""

from __future__ import annotations

from rsi_common.db.agents import (
    add_harness,
    clone_agent,
    ensure_agent,
    freeze,
    get_agent,
    get_harness,
    lineage,
    lock_agent,
    pin,
    rollback_to,
    unfreeze,
)
from rsi_common.db.engine import make_engine, session_factory
from rsi_common.db.migrate import current_revision, head_revision, schema_diff, upgrade
from rsi_common.db.models import (
    RUN_STATUSES,
    AgentRow,
    Base,
    HarnessRow,
    RegressionRow,
    ReplayRow,
    ReplaySource,
    ReplayStatus,
    RunRow,
    RunStatus,
    TrajectoryRow,
    WorldRow,
)
from rsi_common.db.regressions import (
    active_regressions,
    add_regressions,
    ancestry,
    regression_world,
    regressions,
    touch_regressions,
)
from rsi_common.db.replays import get_replay_row, replay_rows, save_replay_row
from rsi_common.db.runs import (
    KEPT_REASON,
    SUPERSEDED_REASON,
    Adoption,
    FinalOutcome,
    FinalWrite,
    fence_status,
    final_write,
    finish_run,
    get_run,
    mark_interrupted,
    retain_runs,
    running_runs,
    runs,
    set_run_drafts,
    set_run_params,
    skip_run,
    stale_runs,
    start_run,
)
from rsi_common.db.sqltypes import db_ago, db_now
from rsi_common.db.worlds import (
    get_world,
    load_latest_heads,
    load_latest_worlds,
    mark_enqueued,
    retain_trajectories,
    retain_worlds,
    save_trajectory,
    save_world,
    trajectories,
    unenqueued_worlds,
    update_signals,
    world_by_io,
    world_records,
    world_texts,
)

__all__ = [
    "KEPT_REASON",
    "RUN_STATUSES",
    "SUPERSEDED_REASON",
    "Adoption",
    "AgentRow",
    "Base",
    "FinalOutcome",
    "FinalWrite",
    "HarnessRow",
    "RegressionRow",
    "ReplayRow",
    "ReplaySource",
    "ReplayStatus",
    "RunRow",
    "RunStatus",
    "TrajectoryRow",
    "WorldRow",
    "active_regressions",
    "add_harness",
    "add_regressions",
    "ancestry",
    "clone_agent",
    "current_revision",
    "db_ago",
    "db_now",
    "ensure_agent",
    "fence_status",
    "final_write",
    "finish_run",
    "freeze",
    "get_agent",
    "get_harness",
    "get_replay_row",
    "get_run",
    "get_world",
    "head_revision",
    "lineage",
    "load_latest_heads",
    "load_latest_worlds",
    "lock_agent",
    "make_engine",
    "mark_enqueued",
    "mark_interrupted",
    "pin",
    "regression_world",
    "regressions",
    "replay_rows",
    "retain_runs",
    "retain_trajectories",
    "retain_worlds",
    "rollback_to",
    "running_runs",
    "runs",
    "save_replay_row",
    "save_trajectory",
    "save_world",
    "schema_diff",
    "session_factory",
    "set_run_drafts",
    "set_run_params",
    "skip_run",
    "stale_runs",
    "start_run",
    "touch_regressions",
    "trajectories",
    "unenqueued_worlds",
    "unfreeze",
    "update_signals",
    "upgrade",
    "world_by_io",
    "world_records",
    "world_texts",
]

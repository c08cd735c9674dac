"""Replay-trial rows (docs/algorithm/consolidation.md §3.6.2): insert-if-absent on ``(run_id, candidate,
world_id, trial)``.

The unique key is the idempotency key of the ``replay_trial`` task (docs/protocol.md#redis-key-protocol): a
redelivered or duplicated trial finds the stored row and returns it, so a trial is never counted
twice. Runs inside the caller's transaction; never commits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from rsi_common.db.engine import EncodedJSON, encode_json
from rsi_common.db.models import ReplayRow, ReplaySource, ReplayStatus
from rsi_common.errors import InvalidInput

__all__ = ["get_replay_row", "replay_rows", "save_replay_row", "store_trial", "stored_trial"]

_KEY = ("run_id", "candidate", "world_id", "trial")


def get_replay_row(
    session: Session, run_id: str, candidate: str, world_id: str, trial: int
) -> ReplayRow | None:
    """The stored row of one trial slot, or ``None``."""
    return session.execute(
        sa.select(ReplayRow)
        .where(
            ReplayRow.run_id == run_id,
            ReplayRow.candidate == candidate,
            ReplayRow.world_id == world_id,
            ReplayRow.trial == trial,
        )
        .execution_options(populate_existing=True)
    ).scalar_one_or_none()


def save_replay_row(
    session: Session,
    run_id: str,
    candidate: str,
    world_id: str,
    trial: int,
    *,
    status: str,
    reward: float = 0.0,
    weight: float = 0.0,
    tokens: int | None = None,
    result: Mapping[str, Any] | None = None,
    source: str = "replay",
) -> tuple[ReplayRow, bool]:
    """Store a trial's row unless its slot already has one.

    ``INSERT … ON CONFLICT DO NOTHING`` on the unique slot key, then read the slot: concurrent
    duplicates on PostgreSQL wait for the first insert's commit and then find its row.

    Args:
        status: ``ok``, ``missing`` or ``cancelled``.
        reward, weight: the trial's reward r and weight w (``r·w`` = passed criteria).
        tokens: policy tokens, ``None`` if unknown.
        result: ReplayResult JSON, verdicts and new verdict-cache entries.
        source: ``recorded``, ``cached`` or ``replay``.

    Returns:
        ``(row, created)`` — the stored row (the first one for a duplicate, unchanged) and whether
        this call inserted it.

    Raises:
        InvalidInput: unknown status or source, negative trial.
    """
    values = _trial_values(run_id, candidate, world_id, trial, status, reward, weight, tokens, result,
                           source)
    created = _insert_if_absent(session, values)
    row = get_replay_row(session, run_id, candidate, world_id, trial)
    assert row is not None
    return row, created


def _trial_values(run_id: str, candidate: str, world_id: str, trial: int, status: str, reward: float,
                  weight: float, tokens: int | None, result: Mapping[str, Any] | None, source: str
                  ) -> dict[str, Any]:
    """The checked column values of one trial row.

    Raises:
        InvalidInput: unknown status or source, negative trial.
    """
    if status not in get_args(ReplayStatus):
        raise InvalidInput(f"replay status must be one of {get_args(ReplayStatus)}, got {status!r}")
    if source not in get_args(ReplaySource):
        raise InvalidInput(f"replay source must be one of {get_args(ReplaySource)}, got {source!r}")
    if trial < 0:
        raise InvalidInput("trial must be >= 0")
    return {
        "run_id": run_id, "candidate": candidate, "world_id": world_id, "trial": trial,
        "source": source, "status": status, "reward": float(reward), "weight": float(weight),
        "tokens": tokens, "result": dict(result) if result is not None else None,
    }


_INSERTS: dict[str, Any] = {}


def _insert_statement(dialect: str) -> Any:
    """The slot insert of ``dialect``, built once: a Core statement on the table with bound
    parameters (no per-call statement building or ORM insert path)."""
    stmt = _INSERTS.get(dialect)
    if stmt is None:
        table: Any = ReplayRow.__table__
        insert: Any = postgresql.insert if dialect == "postgresql" else sqlite.insert
        stmt = _INSERTS[dialect] = (
            insert(table).values({c: sa.bindparam(c, type_=table.c[c].type)
                                  for c in (*_KEY, "source", "status", "reward", "weight", "tokens",
                                            "result")})
            .on_conflict_do_nothing(index_elements=_KEY).returning(table.c.id))
    return stmt


def _insert_if_absent(session: Session, values: Mapping[str, Any]) -> bool:
    """``INSERT … ON CONFLICT (slot) DO NOTHING RETURNING id``: whether this call inserted the row.
    The result JSON is encoded before the statement runs (before ``BEGIN`` when the session has not
    begun: the write turn is not held while Python encodes)."""
    params = dict(values)
    if params["result"] is not None and not isinstance(params["result"], EncodedJSON):
        params["result"] = encode_json(params["result"])
    stmt = _insert_statement(session.get_bind().dialect.name)
    return session.connection().execute(stmt, params).scalar_one_or_none() is not None


_TRIAL_COLUMNS = (ReplayRow.candidate, ReplayRow.world_id, ReplayRow.trial, ReplayRow.source,
                  ReplayRow.status, ReplayRow.reward, ReplayRow.weight, ReplayRow.tokens, ReplayRow.result)


_REPLAYS: Any = ReplayRow.__table__
_STORED = sa.select(*(_REPLAYS.c[c.key] for c in _TRIAL_COLUMNS)).where(
    _REPLAYS.c.run_id == sa.bindparam("run_id"), _REPLAYS.c.candidate == sa.bindparam("candidate"),
    _REPLAYS.c.world_id == sa.bindparam("world_id"), _REPLAYS.c.trial == sa.bindparam("trial"))
"""The slot's row, built once on the table (a trial's existence check: no statement building per
call, no ORM execution path)."""


def stored_trial(session: Session, run_id: str, candidate: str, world_id: str, trial: int
                 ) -> dict[str, Any] | None:
    """The stored row of one trial slot as a plain dict (``candidate, world_id, trial, source,
    status, reward, weight, tokens, result``; ``result`` ``{}`` when null), or ``None``. One Core
    ``SELECT`` (no ORM identity map)."""
    params = {"run_id": run_id, "candidate": candidate, "world_id": world_id, "trial": trial}
    found = session.connection().execute(_STORED, params).one_or_none()
    if found is None:
        return None
    out = dict(found._mapping)
    out["result"] = dict(out["result"] or {})
    return out


def store_trial(
    session: Session, run_id: str, candidate: str, world_id: str, trial: int, *, status: str,
    reward: float = 0.0, weight: float = 0.0, tokens: int | None = None,
    result: Mapping[str, Any] | None = None, source: str = "replay",
) -> tuple[dict[str, Any], bool]:
    """:func:`save_replay_row` returning the row as :func:`stored_trial`'s dict: the slot's row is
    read back only when it was already stored (a duplicate), so a new trial costs one statement.

    Raises:
        InvalidInput: unknown status or source, negative trial.
    """
    values = _trial_values(run_id, candidate, world_id, trial, status, reward, weight, tokens, result,
                           source)
    body = values["result"]
    if _insert_if_absent(session, values):
        return {k: values[k] for k in ("candidate", "world_id", "trial", "source", "status", "reward",
                                       "weight", "tokens")} | {"result": dict(body or {})}, True
    stored = stored_trial(session, run_id, candidate, world_id, trial)
    assert stored is not None
    return stored, False


def replay_rows(session: Session, run_id: str, candidate: str | None = None) -> list[ReplayRow]:
    """The run's trial rows (of one candidate, or all), in insertion order."""
    stmt = sa.select(ReplayRow).where(ReplayRow.run_id == run_id)
    if candidate is not None:
        stmt = stmt.where(ReplayRow.candidate == candidate)
    return list(session.execute(stmt.order_by(ReplayRow.id)).scalars())

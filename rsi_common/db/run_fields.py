"""Read-merge-write of a running run's JSON field (``params``, ``drafts``) with the write turn held for
one ``UPDATE`` (docs/performance/consolidation.md#short-write-transactions).

The field is read in a read transaction (deferred on SQLite: no write turn) as its stored text, the
caller's merge and the JSON encoding run outside any transaction, and the write is a compare-and-swap
on that text: ``UPDATE … WHERE id = :run AND status = 'running' AND CAST(field AS TEXT) = :read``.
A writer that changed the field in between makes the swap match no row; the merge is then redone on
the new value. PostgreSQL's ``json`` keeps the text as written, SQLite stores it as text, so the
comparison is exact on both. On PostgreSQL (READ COMMITTED) a concurrent ``UPDATE`` of the row makes
the swap wait for it and re-check its condition on the committed row, so two merges never both apply
to the same read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.db.engine import encode_json
from rsi_common.db.models import RunRow
from rsi_common.errors import InvalidInput

__all__ = ["MERGE_ATTEMPTS", "RunField", "merge_running_field"]

RunField = Literal["params", "drafts"]
MERGE_ATTEMPTS = 64
"""Swaps tried before giving up (each lost swap means another writer changed the field meanwhile)."""

_READ = {"sqlite_begin": "DEFERRED"}


def _read(sessions: sessionmaker[Session], run_id: str, field: RunField) -> tuple[str, str | None]:
    column = getattr(RunRow, field)
    with sessions() as session:
        session.connection(execution_options=_READ)
        found = session.execute(
            sa.select(RunRow.status, sa.cast(column, sa.Text)).where(RunRow.id == run_id)).one_or_none()
        session.commit()
    if found is None:
        raise InvalidInput(f"unknown run {run_id!r}")
    return str(found[0]), found[1]


def merge_running_field(
    sessions: sessionmaker[Session],
    run_id: str,
    field: RunField,
    merge: Callable[[Any], Any],
) -> tuple[Any, bool]:
    """Apply ``merge`` to the stored value of ``field`` of the ``running`` run ``run_id``.

    ``merge(value)`` gets the decoded stored value (``None`` when null; a fresh object each call) and
    returns the value to store, or the same object to store nothing (e.g. the label is stored
    already). It may run more than once (a lost swap) and must not have other effects.

    Returns:
        ``(value, applied)``: the value now stored (the merge's result, or the stored value when the
        merge stored nothing or the run is closed) and whether this call wrote it. A run that is
        not ``running`` is never written.

    Raises:
        InvalidInput: unknown run.
        RuntimeError: :data:`MERGE_ATTEMPTS` swaps lost in a row.
    """
    column = getattr(RunRow, field)
    for _ in range(MERGE_ATTEMPTS):
        status, text = _read(sessions, run_id, field)
        value = None if text is None else json.loads(text)
        if status != "running":
            return value, False
        merged = merge(value)
        if merged is value:
            return value, False
        encoded = encode_json(merged)  # before the write turn
        same = column.is_(None) if text is None else sa.cast(column, sa.Text) == text
        with sessions() as session:  # the write turn: one UPDATE
            done = session.execute(
                sa.update(RunRow).where(RunRow.id == run_id, RunRow.status == "running", same)
                .values({field: encoded}).execution_options(synchronize_session=False))
            swapped = bool(getattr(done, "rowcount", 0))
            session.commit()
        if swapped:
            return merged, True
    raise RuntimeError(f"run {run_id!r}: {field} changed under {MERGE_ATTEMPTS} merges in a row")

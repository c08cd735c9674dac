"""The exact inputs of a consolidation run, for replaying it (docs/operations/chaos.md#reproducible-runs).

One row per run that started a round (``rsi_run_inputs``, migration ``0009_run_inputs``): the
inputs as JSON (``rsi-run-inputs/1``: world ids with content digests and their signals at the
start, the harness version, the consolidation state and its digest, the consolidation settings,
the model identities and the simulator's seed) and ``digest``, the SHA-256 of their canonical JSON.
Deleted with its run (retention).
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Mapped, Session, mapped_column

from rsi_common.db.engine import EncodedJSON
from rsi_common.db.models import Base
from rsi_common.db.sqltypes import JSONType, UTCDateTime, db_now

__all__ = ["RunInputsRow", "canonical_digest", "get_run_inputs", "insert_run_inputs", "save_run_inputs"]


class RunInputsRow(Base):
    """The recorded inputs of one run (module docstring)."""

    __tablename__ = "rsi_run_inputs"

    run_id: Mapped[str] = mapped_column(sa.String(64), sa.ForeignKey("rsi_runs.id", ondelete="CASCADE"),
                                        primary_key=True)
    digest: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    inputs: Mapped[dict[str, Any]] = mapped_column(JSONType, nullable=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False, default=db_now())


def canonical_digest(value: Any) -> str:
    """SHA-256 (hex) of ``value`` as canonical JSON (sorted keys, no spaces, UTF-8)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def save_run_inputs(s: Session, run_id: str, inputs: dict[str, Any]) -> str:
    """Store ``inputs`` of ``run_id`` unless stored already (a redelivered step); returns the stored
    digest. The caller commits."""
    stored = s.get(RunInputsRow, run_id)
    if stored is not None:
        return str(stored.digest)
    digest = canonical_digest(inputs)
    s.add(RunInputsRow(run_id=run_id, digest=digest, inputs=inputs))
    s.flush()
    return digest


def insert_run_inputs(s: Session, run_id: str, digest: str, inputs: dict[str, Any] | EncodedJSON) -> str:
    """:func:`save_run_inputs` in one statement for a caller that computed ``digest`` (and encoded
    ``inputs``, :func:`~rsi_common.db.engine.encode_json`) before its transaction:
    ``INSERT … ON CONFLICT (run_id) DO NOTHING``; the stored digest is read only when the row was
    stored already. Returns the stored digest. The caller commits."""
    table: Any = RunInputsRow.__table__
    insert: Any = postgresql.insert if s.get_bind().dialect.name == "postgresql" else sqlite.insert
    stmt = (insert(table).values(run_id=run_id, digest=digest, inputs=inputs, created_at=db_now())
            .on_conflict_do_nothing(index_elements=["run_id"]).returning(table.c.run_id))
    if s.execute(stmt).scalar_one_or_none() is not None:
        return digest
    return str(s.execute(sa.select(table.c.digest).where(table.c.run_id == run_id)).scalar_one())


def get_run_inputs(s: Session, run_id: str) -> RunInputsRow | None:
    """The recorded inputs of ``run_id``, or None (the run started no round, or predates them)."""
    return s.get(RunInputsRow, run_id)

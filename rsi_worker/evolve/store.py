"""Reading and writing an evolve run's rows (docs/algorithm/evolve.md#durable-state): one short transaction
per call, never open across model calls. A read is a deferred transaction on SQLite (no write lock:
the trials and steps of the cluster's workers read beside each other's writes, WAL)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.boundary import check_id
from rsi_common.credentials import describe, find_in
from rsi_common.db import evolve as db
from rsi_common.errors import InvalidInput
from rsi_worker.evolve.config import EvolveConfig
from rsi_worker.evolve.suite import Suite, validate_suite

__all__ = ["Store", "row_json"]


def _name(name: str, what: str) -> str:
    """``name`` if it follows the id grammar: checked before any query, so SQLite and PostgreSQL refuse the
    same names (a NUL is a driver error on PostgreSQL) and a message never echoes a control character."""
    return check_id(name, what, max_chars=64)


def row_json(row: db.EvolveTrialRow) -> dict[str, Any]:
    """A stored trial as the trial-row dict :func:`rsi_worker.consolidate.evaluate.assemble` reads
    (``world_id`` = the task id)."""
    return {
        "candidate": row.candidate,
        "world_id": row.task_id,
        "trial": row.trial,
        "attempt": row.attempt,
        "source": "replay",
        "status": row.status,
        "reward": row.reward,
        "weight": row.weight,
        "tokens": row.tokens,
        "result": dict(row.result or {}),
        "t": row.t,
    }


class Store:
    """The evolve tables through a session factory."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    @contextlib.contextmanager
    def _read(self) -> Iterator[Session]:
        """A read-only session: a deferred transaction on SQLite (module docstring)."""
        with self.sessions() as s:
            s.connection(execution_options={"sqlite_begin": "DEFERRED"})
            yield s

    # --- suites ---------------------------------------------------------------------------------

    def save_suite(self, suite: Suite, *, replace: bool = False) -> None:
        """Store a validated suite. Raises ``InvalidInput`` when the name exists (unless ``replace``)."""
        with self.sessions.begin() as s:
            row = db.get_suite(s, suite.name)
            if row is not None and not replace:
                raise InvalidInput(f"suite {suite.name!r} exists; pick another name")
            if row is None:
                s.add(db.SuiteRow(name=suite.name, spec=suite.to_json()))
            else:
                row.spec = suite.to_json()

    def suite(self, name: str) -> Suite:
        _name(name, "suite name")
        with self._read() as s:
            row = db.get_suite(s, name)
            if row is None:
                raise InvalidInput(f"unknown suite {name!r}")
            return validate_suite(row.spec)

    def suite_spec(self, name: str) -> dict[str, Any]:
        """The stored suite's JSON as stored (not validated again; :mod:`rsi_worker.evolve.memo`)."""
        _name(name, "suite name")
        with self._read() as s:
            row = db.get_suite(s, name)
            if row is None:
                raise InvalidInput(f"unknown suite {name!r}")
            return dict(row.spec)

    # --- runs -----------------------------------------------------------------------------------

    def create(self, name: str, suite: str, config: EvolveConfig) -> None:
        """Store a new run. Raises ``InvalidInput``: a bad or taken name, an unknown suite, or a
        credential-shaped configuration value (a model name pasted from a secret: named, never echoed)."""
        _name(name, "evolve run name")
        _name(suite, "suite name")
        hit = find_in(config.to_json(), "config")
        if hit is not None:
            raise InvalidInput(f"{hit[0]}: looks like a credential ({describe(hit[1])}); refused")
        with self.sessions.begin() as s:
            if db.get_suite(s, suite) is None:
                raise InvalidInput(f"unknown suite {suite!r}")
            if db.get_evolve(s, name) is not None:
                raise InvalidInput(f"evolve run {name!r} exists")
            s.add(
                db.EvolveRow(
                    name=name,
                    suite=suite,
                    config=config.to_json(),
                    status="created",
                    stop_requested=False,
                    state=None,
                )
            )

    def run(self, name: str) -> tuple[str, EvolveConfig, str, bool, dict[str, Any] | None]:
        """``(suite, config, status, stop_requested, state)``. Raises ``InvalidInput`` for an unknown run or
        a name outside the id grammar."""
        _name(name, "evolve run name")
        with self._read() as s:
            row = db.get_evolve(s, name)
            if row is None:
                raise InvalidInput(f"unknown evolve run {name!r}")
            return (
                row.suite,
                EvolveConfig.from_json(row.config),
                row.status,
                row.stop_requested,
                dict(row.state) if row.state is not None else None,
            )

    def runs_page(self, *, limit: int, after: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        """Runs newest first (``created_at``, then name, descending), ``limit`` of them after the run named
        ``after``: ``(rows, next cursor)``; a row is ``name, suite, status, stop_requested, T, state,
        created_at, updated_at`` (datetimes). Raises ``InvalidInput`` for an unknown cursor."""
        E = db.EvolveRow
        with self._read() as s:
            # the order on the key columns only, then the page's rows: the same on both dialects
            names = [str(n) for n in s.execute(sa.select(E.name).order_by(E.created_at.desc(), E.name.desc()))
                     .scalars()]
            if after is not None and after not in names:
                raise InvalidInput("cursor: not a run of this listing")
            start = names.index(after) + 1 if after is not None else 0
            page = names[start:start + limit + 1]
            found = {r.name: r for r in s.execute(sa.select(E).where(E.name.in_(page[:limit]))).scalars()}
            rows = [found[n] for n in page[:limit] if n in found]
            out: list[dict[str, Any]] = [
                {
                    "name": r.name,
                    "suite": r.suite,
                    "status": r.status,
                    "stop_requested": r.stop_requested,
                    "T": EvolveConfig.from_json(r.config).params.T,
                    "state": dict(r.state) if r.state is not None else None,
                    "created_at": r.created_at,
                    "updated_at": r.updated_at,
                }
                for r in rows
            ]
        return out, (page[limit - 1] if len(page) > limit else None)

    def run_times(self, name: str) -> tuple[Any, Any]:
        """``(created_at, updated_at)`` of run ``name`` (datetimes). Raises ``InvalidInput`` when unknown."""
        E = db.EvolveRow
        with self._read() as s:
            found = s.execute(sa.select(E.created_at, E.updated_at).where(E.name == name)).one_or_none()
        if found is None:
            raise InvalidInput(f"unknown evolve run {name!r}")
        return found[0], found[1]

    def trial_spans(self, name: str) -> dict[int, tuple[Any, Any, int]]:
        """Per round ``t``: ``(first, last, count)`` of its stored trials' ``created_at`` (the trial
        columns only, never their JSON) — the span a round spent measuring."""
        T = db.EvolveTrialRow
        with self._read() as s:
            rows = s.execute(
                sa.select(T.t, sa.func.min(T.created_at), sa.func.max(T.created_at), sa.func.count())
                .where(T.evolve == name)
                .group_by(T.t)
            )
            return {int(t): (lo, hi, int(n)) for t, lo, hi, n in rows}

    def run_suite(self, name: str) -> str:
        """The suite name of run ``name``. Raises ``InvalidInput`` for an unknown run."""
        return self.run(name)[0]

    def set_run(
        self,
        name: str,
        *,
        status: str | None = None,
        state: Mapping[str, Any] | None = None,
        stop_requested: bool | None = None,
        round_t: int | None = None,
        round_fields: Mapping[str, Any] | None = None,
    ) -> None:
        """Update the run row (and, in the same transaction, round ``round_t``'s fields). Both are
        ``UPDATE`` statements that never load the rows (their JSON columns: the state, the round's analysis
        and drafts) — on the round's path, see docs/algorithm/evolve.md#the-rounds-writes."""
        values: dict[str, Any] = {"name": name}
        if status is not None:
            values["status"] = status
        if state is not None:
            values["state"] = dict(state)
        if stop_requested is not None:
            values["stop_requested"] = stop_requested
        E = db.EvolveRow
        with self.sessions.begin() as s:
            stmt = sa.update(E).where(E.name == name).values(**values)
            done = s.execute(stmt.execution_options(synchronize_session=False))
            if not getattr(done, "rowcount", 0):
                raise InvalidInput(f"unknown evolve run {name!r}")
            if round_t is not None:
                _set_round(s, name, round_t, dict(round_fields or {}))

    def round(self, name: str, t: int) -> dict[str, Any] | None:
        with self._read() as s:
            row = db.evolve_round(s, name, t)
            if row is None:
                return None
            return {
                "t": row.t,
                "before": row.before,
                "analysis": row.analysis,
                "directives": row.directives,
                "drafts": row.drafts,
                "decision": row.decision,
            }

    def rounds(self, name: str) -> list[dict[str, Any]]:
        with self._read() as s:
            return [
                {
                    "t": r.t,
                    "before": r.before,
                    "analysis": r.analysis,
                    "directives": r.directives,
                    "drafts": r.drafts,
                    "decision": r.decision,
                }
                for r in db.evolve_rounds(s, name)
            ]

    def set_round(self, name: str, t: int, **fields: Any) -> None:
        """Create round ``t`` or set the given fields on it (``before``, ``analysis``, ``directives``,
        ``drafts``, ``decision``), without loading the row."""
        with self.sessions.begin() as s:
            _set_round(s, name, t, fields)

    # --- trials ---------------------------------------------------------------------------------

    def save_trial(
        self,
        name: str,
        t: int,
        candidate: str,
        task_id: str,
        trial: int,
        attempt: int,
        values: Mapping[str, Any],
    ) -> tuple[dict[str, Any], bool]:
        with self.sessions.begin() as s:
            row, created = db.save_evolve_trial(
                s,
                name,
                t,
                candidate,
                task_id,
                trial,
                attempt,
                status=values["status"],
                reward=float(values.get("reward") or 0.0),
                weight=float(values.get("weight") or 0.0),
                tokens=values.get("tokens"),
                result=values.get("result"),
            )
            return row_json(row), created

    def trials(self, name: str, t: int | None = None, candidate: str | None = None) -> list[dict[str, Any]]:
        with self._read() as s:
            return [row_json(r) for r in db.evolve_trials(s, name, t, candidate)]

    def trial_tallies(self, name: str, t: int, candidate: str) -> list[dict[str, Any]]:
        """The candidate's rows as the early stop reads them (:func:`rsi_worker.evolve.evaluation.bounds`):
        ``world_id, trial, attempt, status, weight`` and ``result.passed`` = round(reward × weight) (a
        trial's reward is passed / checks, its weight the number of checks), without reading the rows'
        JSON (their replays) — the read a cluster trial with an early stop makes before it runs."""
        T = db.EvolveTrialRow
        with self._read() as s:
            rows = s.execute(
                sa.select(T.task_id, T.trial, T.attempt, T.status, T.reward, T.weight)
                .where(T.evolve == name, T.t == t, T.candidate == candidate)
                .order_by(T.id)
            )
            return [
                {
                    "world_id": str(k),
                    "trial": int(j),
                    "attempt": int(a),
                    "status": str(st),
                    "weight": float(w or 0.0),
                    "result": {"passed": round(float(r or 0.0) * float(w or 0.0))},
                }
                for k, j, a, st, r, w in rows
            ]

    def trial_status(
        self, name: str, t: int, candidate: str, task_id: str, trial: int, attempt: int
    ) -> list[str]:
        """The status of one slot's stored row (``[]`` when it has none); the row's JSON is not read."""
        T = db.EvolveTrialRow
        with self._read() as s:
            found = s.execute(
                sa.select(T.status).where(
                    T.evolve == name,
                    T.t == t,
                    T.candidate == candidate,
                    T.task_id == task_id,
                    T.trial == trial,
                    T.attempt == attempt,
                )
            )
            return [str(x) for x in found.scalars()]

    def trial_keys(self, name: str, ts: Sequence[int]) -> set[tuple[int, str, str, int, int]]:
        """The ``(t, candidate, task, trial, attempt)`` keys of the run's stored trials of rounds ``ts``
        (the key columns only: the in-band join's check, :mod:`rsi_worker.evolve.join`)."""
        T = db.EvolveTrialRow
        with self._read() as s:
            rows = s.execute(
                sa.select(T.t, T.candidate, T.task_id, T.trial, T.attempt).where(
                    T.evolve == name, T.t.in_(list(ts))
                )
            )
            return {(int(t), str(c), str(k), int(j), int(a)) for t, c, k, j, a in rows}

    def delete_cancelled(self, name: str, t: int, candidates: Sequence[str]) -> int:
        """Remove the ``cancelled`` rows of early-stopped candidates (``reevaluate`` measures them fully)."""
        with self.sessions.begin() as s:
            result = s.execute(
                sa.delete(db.EvolveTrialRow).where(
                    db.EvolveTrialRow.evolve == name,
                    db.EvolveTrialRow.t == t,
                    db.EvolveTrialRow.candidate.in_(list(candidates)),
                    db.EvolveTrialRow.status == "cancelled",
                )
            )
            return int(getattr(result, "rowcount", 0) or 0)


ROUND_FIELDS = frozenset({"before", "analysis", "directives", "drafts", "decision"})


def _set_round(s: Session, name: str, t: int, fields: Mapping[str, Any]) -> None:
    """``UPDATE`` round ``t``'s ``fields``, or ``INSERT`` the round when it has no row yet."""
    unknown = sorted(set(fields) - ROUND_FIELDS)
    if unknown:
        raise InvalidInput(f"evolve round: unknown field(s) {', '.join(unknown)}")
    R = db.EvolveRoundRow
    where = sa.and_(R.evolve == name, R.t == t)
    if fields:
        stmt = sa.update(R).where(where).values(**fields).execution_options(synchronize_session=False)
        if getattr(s.execute(stmt), "rowcount", 0):
            return
    elif s.execute(sa.select(R.id).where(where)).first():
        return
    s.execute(sa.insert(R).values(evolve=name, t=t, **fields))

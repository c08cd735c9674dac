"""The no-signal fast path: a run with nothing to learn decided from one read and recorded with one
write (docs/performance/consolidation.md#the-no-signal-path).

Most turns carry no signal. Their run would open its row (one write transaction), read the agent and
the world pool, find nothing to learn and write its result (a second write transaction, with
re-reads). Here instead:

1. **one read transaction** (deferred on SQLite, no write lock): the agent's ``frozen``,
   ``current_version``, ``applied_fence``, ``state`` and whether a run row exists at the lease's fence
   (one statement), then the world pool's row columns (one statement; a record only for the first
   world whose checks quote its answer, as in ``opening._nothing_to_learn``). The decision is the
   ordinary one (:func:`~rsi_worker.consolidate.opening._survey`, ``_nothing_to_learn``) — the same
   status and reason as the full path;
2. **one write transaction**: the fenced compare-and-swap on the agent (``UPDATE … SET applied_fence =
   fence [, state] WHERE applied_fence = <as read>``) and the finished run row (``INSERT … ON CONFLICT
   (agent_id, fence) DO NOTHING``) with its context, result and reason — the audit trail of the full
   path in one row. The run retention runs on every :data:`RUN_RETENTION_EVERY`-th fence of the agent.
   On SQLite (:func:`decide_and_record`, what ``flow.open_run`` calls) this write is made in the read's
   own transaction: the engine's write turn is taken for it after the decision and the renewal's answer
   (``rsi_common.db.write_turn``), and SQLite turns the read into the write only when no other
   connection committed since the read's snapshot — then what was read is what is written over; else
   the first write fails at once (``SQLITE_BUSY_SNAPSHOT``), nothing is written, and the write runs in
   a transaction of its own (:func:`record`) with the rules below. One transaction, and no write lock
   during the reads or the decision.

The fast path declines (``None``: the caller takes the full path, which decides exactly as before)
when anything is out of the ordinary: a forced run, an unknown or frozen agent, a run row at the
fence already (a redelivery), a newer fence applied, an unreadable state, no usable world, an unread
conversation pair (the implicit-signal reader must read it: a follow-up turn), a spend cap reached,
the lease not renewable, or a signal to learn from. At write time, a compare-and-swap that finds the
agent written meanwhile re-reads it under the lock: a newer fence → the row is recorded
``interrupted`` (superseded) like the full path's final write; an older writer → the seen digests are
merged into the fresh state. A run row found at the fence (a concurrent duplicate delivery) rolls
everything back and the run is left to that delivery (``stop``).

The row is written once, at the end: ``started_at`` = ``finished_at`` (the database clock) and the
task's own time is ``result.seconds``.

The transactions run on a plain connection of the engine with statements built once per dialect
(:mod:`rsi_worker.consolidate.quiet_sql`; driver SQL on SQLite), whether an accepted world's answer is
blank is read once per process (:func:`_scored`) and a state text is decoded once per process
(:func:`_state`), and the pool window is remembered per process with only the rows changed since read
(:mod:`~rsi_worker.consolidate.pool_memo`, one snapshot: ``REPEATABLE READ`` on PostgreSQL): the steady
run reads the agent and the pool's changed rows only. The pool's worlds are built once per row and
process (:mod:`~rsi_worker.consolidate.quiet_worlds`), and the row's context is joined from remembered
per-world pieces (:mod:`~rsi_worker.consolidate.quiet_json`). The lease renewal and the spend
read are one Redis script call (``spend.renew_over_cap``'s), sent before the read transaction and
answered after the decision (:mod:`~rsi_worker.consolidate.quiet_lease`: Redis answers while SQLite
reads), the lease's ``finish`` the other; both on :mod:`rsi_common.coord_wire` where the client allows.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy.engine import Connection, Engine, RootTransaction
from sqlalchemy.exc import OperationalError

from rsi_common.coord import Lease
from rsi_common.db import retain_runs
from rsi_common.db.engine import EncodedJSON
from rsi_common.db.runs import new_run_id
from rsi_common.db.write_turn import stale_snapshot, take_write_turn
from rsi_common.harness import H0_VERSION
from rsi_common.stored import StoredDataError
from rsi_worker.consolidate.context import Deps, RoundContext
from rsi_worker.consolidate.opening import (
    KIND_CONSOLIDATE,
    MAX_KIND_CHARS,
    _nothing_to_learn,
    _policy,
)
from rsi_worker.consolidate.outcome import Next
from rsi_worker.consolidate.pool_memo import pool_window
from rsi_worker.consolidate.quiet_json import context_json
from rsi_worker.consolidate.quiet_lease import discard, renewal, send_renewal
from rsi_worker.consolidate.quiet_sql import count, rows, statements
from rsi_worker.consolidate.quiet_worlds import NeedsRecord, remembered
from rsi_worker.consolidate.result import ConsolidationResult
from rsi_worker.consolidate.signals import checks_for, unread_pairs
from rsi_worker.consolidate.spend import spend_summary
from rsi_worker.consolidate.state import EMPTY_DIGEST, ConsolidationState
from rsi_worker.consolidate.worlds import PoolWorld, WorldPool, needs_answer

__all__ = ["ANSWERS_MEMO_MAX", "RUN_RETENTION_EVERY", "STATES_MEMO_MAX", "AgentHead", "QuietRun", "decide",
           "decide_and_record", "record"]


class AgentHead(NamedTuple):
    """The agent read's row (``quiet_sql`` ``agent``, in its column order)."""

    frozen: Any
    current_version: str | None
    applied_fence: int
    state: str | None
    opened: Any
    pool_epoch: int
    pool_floor: float | None
    created_at: str | None


RUN_RETENTION_EVERY = 16
"""A quiet run applies the run retention when its fence is a multiple of this (the full path applies
it on every run): between two, at most ``RUN_RETENTION_EVERY - 1`` rows beyond ``run_retention``."""

@dataclass
class QuietRun:
    """What the read found, carried from :func:`decide` to :func:`record` (never stored)."""

    state: dict[str, Any] | None
    """The state to save: the stored one with the run's seen digests, ``None`` when they change
    nothing (``finalize.build_state`` of a run without a round)."""
    applied_fence: int
    """``applied_fence`` as read: the compare-and-swap's expected value."""
    kind: str
    t0: float
    """``time.monotonic()`` at the task's start."""
    written: bool = False
    """The run row is written already (:func:`decide_and_record`: in the read's transaction)."""


def _engine(deps: Deps) -> Engine:
    """The engine ``deps.sessions`` is bound to (``rsi_common.db.session_factory``)."""
    bind = deps.sessions.kw.get("bind")
    if not isinstance(bind, Engine):
        raise TypeError("deps.sessions is not bound to an engine")
    return bind


_SNAPSHOT: dict[str, dict[str, str]] = {"sqlite": {"sqlite_begin": "DEFERRED"},
                                        "postgresql": {"isolation_level": "REPEATABLE READ"}}
"""The read transaction's options: one snapshot for the agent read and the pool's changed rows
(:mod:`~rsi_worker.consolidate.pool_memo`), and no write lock on SQLite."""


def decide(deps: Deps, lease: Lease, *, force: bool = False, kind: str = KIND_CONSOLIDATE) -> Next | None:
    """The run of ``lease`` decided from one read when it has nothing to learn: a ``final``
    ``recorded`` :class:`Next` carrying a :class:`QuietRun` (nothing written yet; :func:`record` writes
    it), or ``None`` — the full path must run (module docstring)."""
    return _decide(deps, lease, force=force, kind=kind, write=False)


def decide_and_record(deps: Deps, lease: Lease, *, force: bool = False,
                      kind: str = KIND_CONSOLIDATE) -> Next | None:
    """:func:`decide`, and on SQLite the run row written in the read's own transaction
    (:func:`_write_in_read`: one transaction); ``flow.open_run`` calls this. Returns ``None`` (the full
    path must run), ``stop`` (a run row appeared at the fence: a duplicate delivery owns the run;
    nothing written), or the ``final`` outcome: written already (``QuietRun.written``) or — another
    backend, a stale snapshot — left to :func:`record`, which writes the same row."""
    return _decide(deps, lease, force=force, kind=kind, write=True)


def _decide(deps: Deps, lease: Lease, *, force: bool, kind: str, write: bool) -> Next | None:
    t0 = time.monotonic()
    if force or not isinstance(kind, str) or not 0 < len(kind) <= MAX_KIND_CHARS:
        return None
    ctx = RoundContext(run_id=new_run_id(), agent_id=lease.agent, fence=lease.fence, token=lease.token,
                       io_id=lease.io, early_stop=deps.params.early_stop)
    engine = _engine(deps)
    renewing = send_renewal(deps, lease)  # answered while the read runs
    with engine.connect().execution_options(**_SNAPSHOT.get(engine.dialect.name, {})) as conn:
        txn = conn.begin()
        try:
            read = _read(deps, lease, ctx, t0, conn)
        except BaseException:
            discard(deps, renewing)
            raise
        if read is None:
            txn.commit()  # end the read
            discard(deps, renewing)
            return None
        nxt, row, state = read
        if not (write and engine.dialect.name == "sqlite"):
            txn.commit()  # end the read before the renewal's answer (no snapshot held)
        renewed, capped = renewal(deps, renewing)  # one Redis round trip, sent before the read
        if capped is not None or not renewed:
            return None  # a read transaction still open is rolled back on leaving
        nxt.quiet = q = QuietRun(state.to_json() if state.set_seen(ctx.digests, ctx.loaded) else None,
                                 int(row.applied_fence), kind, t0)
        if txn.is_active:
            written = _write_in_read(deps, nxt, conn, txn)
            if written is False:
                return Next("stop", ctx)  # a duplicate delivery's row: that delivery owns the run
            q.written = bool(written)
    return nxt


def _write_in_read(deps: Deps, nxt: Next, conn: Connection, txn: RootTransaction) -> bool | None:
    """The run row written in the read transaction ``txn`` (SQLite): the engine's write turn taken for
    it (``rsi_common.db.write_turn``), then :func:`_write`. SQLite upgrades the read to a write only when
    no other connection committed since the read's snapshot, so what was read and decided is what the
    database holds when the row is stored. ``True``: written and committed; ``False``: a run row at the
    fence (rolled back, nothing written); ``None``: the snapshot was stale (rolled back, nothing
    written: :func:`record` writes the row in a transaction of its own, re-reading the agent under the
    lock if it changed)."""
    params = context_json(nxt.ctx)  # encoded before the write turn, which then holds the statements only
    take_write_turn(conn)
    try:
        written = _write(deps, nxt, conn, params)
    except OperationalError as exc:
        if not stale_snapshot(exc):
            raise
        txn.rollback()
        return None
    if written is None:
        txn.rollback()
        return False
    txn.commit()
    return True


def _read(deps: Deps, lease: Lease, ctx: RoundContext, t0: float,
          conn: Connection) -> tuple[Next, AgentHead, ConsolidationState] | None:
    """:func:`decide`'s reads and decision on ``conn``, in its read transaction: the ``recorded``
    outcome with the agent row and its state, or ``None`` (the full path must run)."""
    params = deps.params
    engine = conn.engine
    found = rows(conn, "agent", {"agent_id": lease.agent, "fence": lease.fence})
    if not found:
        return None
    row = AgentHead._make(found[0])
    if row.frozen or row.opened or int(row.applied_fence) >= lease.fence:
        return None
    try:
        state = _state(lease.agent, row.state)
    except (StoredDataError, ValueError):  # an unreadable state: the full path reports it
        return None
    n = max(0, params.world_pool)
    heads = pool_window(engine.url, lease.agent, n, row,
                        full=lambda: rows(conn, "pool", {"agent_id": lease.agent, "n": n}),
                        changed=lambda since: rows(conn, "changed", {"agent_id": lease.agent,
                                                                     "since": since}))
    ctx.start_version = row.current_version
    ctx.inc_version = ctx.start_version or H0_VERSION
    ctx.t = state.t
    memo = remembered(heads)
    try:  # the remembered worlds, until a record is needed (quiet_worlds)
        nxt = None if memo is None else _survey_pool(deps, lease, ctx, state, memo, t0)
    except NeedsRecord:
        memo = None
    if memo is None:
        nxt = _survey_pool(deps, lease, ctx, state, WorldPool(conn, heads), t0)
    return None if nxt is None else (nxt, row, state)


def _survey_pool(deps: Deps, lease: Lease, ctx: RoundContext, state: ConsolidationState, pool: WorldPool,
                 t0: float) -> Next | None:
    """The decision on ``pool``'s worlds: the ``recorded`` outcome, or ``None`` (the full path must run).

    Raises:
        NeedsRecord: ``pool`` is a :class:`~rsi_worker.consolidate.quiet_worlds.RememberedPool` and a
            world's record is needed (nothing of the decision is kept: it is taken again).
    """
    worlds = pool.usable()
    if not worlds:
        return None
    latest = next((w for w in worlds if w.io_id == (lease.io or "")), None)
    ctx.latest = latest.id if latest else None
    ctx.provider, ctx.model = _policy(worlds, latest, deps)
    if unread_pairs(worlds, ctx.latest or "", deps.params.signal_pairs):
        return None
    worlds, fresh = _survey_stored(ctx, state, pool)
    nxt = _nothing_to_learn(ctx, worlds, fresh, t0, scored_by=lambda w: _scored(w, pool))
    ctx.skipped_worlds = dict(pool.skipped)
    return nxt


STATES_MEMO_MAX = 64
"""Agents whose stored state text and its decoded state are kept per process (:func:`_state`); the memo
is emptied when it holds more."""

_STATES: dict[str, tuple[str, ConsolidationState]] = {}


def _state(agent_id: str, text: str | None) -> ConsolidationState:
    """The agent's stored state (its JSON text, ``None`` for SQL ``NULL``) decoded and checked
    (``ConsolidationState.from_json``), a working copy of it.

    Both are functions of the text, and most quiet runs find the text their previous run found (a run
    that changes no ``seen`` digest writes no state): that text's state (40 KB for the benchmark's
    mature agent, ~0.8 ms of CPU to decode and check) is taken from the memo, compared by the text
    itself. The copy is shallow: the fast path changes only ``seen``, which ``set_seen`` replaces, never
    edits; a text that fails its check is not remembered.

    Raises:
        StoredDataError, ValueError: the state is not JSON or not a state (as the full path's read).
    """
    found = _STATES.get(agent_id)
    if found is None or found[0] != text:
        state = ConsolidationState.from_json(None if text is None else json.loads(text))
        if text is not None:
            if len(_STATES) >= STATES_MEMO_MAX:
                _STATES.clear()
            _STATES[agent_id] = (text, state)
        return dataclasses.replace(state)
    return dataclasses.replace(found[1])


def _survey_stored(ctx: RoundContext, state: ConsolidationState,
                   pool: WorldPool) -> tuple[list[PoolWorld], set[str]]:
    """``opening._survey`` of a run that is not forced, with each world's digest as loaded
    (``PoolWorld.stored_digest``, remembered per signal text): nothing here changes a signal."""
    worlds = pool.usable()
    ctx.skipped_worlds = dict(pool.skipped)
    ctx.loaded = [w.id for w in worlds]
    ctx.digests = {w.id: w.stored_digest for w in worlds}
    seen = state.seen
    fresh = {w.id for w in worlds if w.stored_digest != seen.get(w.id, EMPTY_DIGEST)}
    return worlds, fresh


ANSWERS_MEMO_MAX = 4096
"""Worlds whose answer was read and found blank or not, kept per process (:func:`_scored`); the memo
is emptied when it holds more."""

_ANSWERED: dict[str, bool] = {}
_CHECKED: dict[str, tuple[dict[str, Any], bool]] = {}
"""World id → the signals object of its remembered world and whether they define a check without the
answer: the same object (never changed: ``quiet_worlds``) gives the same answer; another one is checked."""


def _scored(w: PoolWorld, pool: WorldPool) -> bool:
    """``bool(opening._checks(w))`` with the record read once per process: a world's checks quote
    its answer only when its signals accept it (``needs_answer``), and then depend on the answer only
    through whether it is blank. A world's record is never rewritten (its id is new for every
    stored turn), so whether its answer is blank is remembered by world id; a record that fails its
    check (the world is skipped, its answer reads as blank) is not remembered. Signals that do not
    quote the answer are checked once per remembered world (:data:`_CHECKED`)."""
    if not w.signals:  # most worlds: no signal, no check
        return False
    if not needs_answer(w.signals):
        found = _CHECKED.get(w.id)
        if found is not None and found[0] is w.signals:  # a remembered world's own signals (quiet_worlds)
            return found[1]
        has = bool(checks_for(w.signals))
        if len(_CHECKED) >= ANSWERS_MEMO_MAX:
            _CHECKED.clear()
        _CHECKED[w.id] = (w.signals, has)
        return has
    answered = _ANSWERED.get(w.id)
    if answered is None:
        answered = bool(w.answer.strip())
        if w.id not in pool.skipped:
            if len(_ANSWERED) >= ANSWERS_MEMO_MAX:
                _ANSWERED.clear()
            _ANSWERED[w.id] = answered
    return bool(checks_for(w.signals, answer="answered" if answered else ""))


def _seen_state(start: Any, ctx: RoundContext) -> dict[str, Any] | None:
    """The state to save: ``start`` with the run's seen digests, or ``None`` when they change nothing
    (``finalize.build_state`` of a run without a round)."""
    state = ConsolidationState.from_json(start)
    return state.to_json() if state.set_seen(ctx.digests, ctx.loaded) else None


def record(deps: Deps, nxt: Next) -> ConsolidationResult | None:
    """Write the quiet run of ``nxt`` (module docstring) in one transaction, unless
    :func:`decide_and_record` wrote it already in its read's transaction; returns the result as
    written (``interrupted`` when a newer fence was applied meanwhile), or ``None`` when a run row
    appeared at the fence meanwhile (nothing written: that delivery owns the run).

    The caller then closes the lease (``finalize``'s lease handling)."""
    q = nxt.quiet
    assert isinstance(q, QuietRun) and nxt.result is not None
    if q.written:
        return nxt.result
    with _engine(deps).connect() as conn, conn.begin() as txn:
        written = _write(deps, nxt, conn)
        if written is None:
            txn.rollback()
    return written


def _write(deps: Deps, nxt: Next, conn: Connection,
           params: EncodedJSON | None = None) -> ConsolidationResult | None:
    """The quiet run's statements on ``conn``, in its write transaction: the fenced compare-and-swap on
    the agent (a re-read under the lock when it finds the agent written meanwhile) and the finished run
    row, then the run retention on every :data:`RUN_RETENTION_EVERY`-th fence. ``params``: the run's
    context encoded already (:func:`~rsi_worker.consolidate.quiet_json.context_json`; else encoded
    here). Returns the result as written, or ``None`` when a run row exists at the fence (the caller
    rolls back: nothing stored)."""
    q, ctx, result = nxt.quiet, nxt.ctx, nxt.result
    assert isinstance(q, QuietRun) and result is not None
    result.usage = dict(ctx.usage)
    result.spend = {**spend_summary(result.usage, []), **result.spend}
    if ctx.skipped_worlds and not result.skipped_worlds:
        result.skipped_worlds = dict(ctx.skipped_worlds)
    state = q.state
    sql = statements(conn.dialect.name)
    keys = {"agent_id": ctx.agent_id, "new_fence": ctx.fence}
    # a key named like a column is SET by an UPDATE: ``state`` only where it changes
    swapped = count(conn, "swap", {**keys, "expected": q.applied_fence}) if state is None \
        else count(conn, "swap_state", {**keys, "expected": q.applied_fence, "state": state})
    if not swapped:  # written meanwhile (rare): re-read under the lock
        fresh = conn.execute(sql.relock, keys).one()
        if int(fresh.applied_fence) >= ctx.fence:
            result.status, result.reason, result.state = "interrupted", "superseded", None
        else:
            state = _seen_state(fresh.state, ctx)
            conn.execute(sql.merge, keys) if state is None else \
                conn.execute(sql.merge_state, {**keys, "state": state})
    result.state = state if result.status != "interrupted" else None
    result.seconds = time.monotonic() - q.t0
    inserted = count(conn, "insert", {
        **keys, "run_id": ctx.run_id, "kind": q.kind, "io_id": ctx.io_id, "status": result.status,
        "reason": result.reason, "start_version": ctx.start_version,
        "params": context_json(ctx) if params is None else params,
        "result": result.summary()})
    if not inserted:
        return None
    if ctx.fence % RUN_RETENTION_EVERY == 0:
        retain_runs(conn, ctx.agent_id, deps.settings.run_retention)
    return result

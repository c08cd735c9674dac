"""The exact inputs of a run, recorded when its round starts (docs/operations/chaos.md#reproducible-runs);
their replay is :mod:`rsi_worker.jobs.replay_run`.

:func:`record_inputs` runs after the ``open`` step chose the round's worlds: it stores (``rsi_run_inputs``)
what the run decides on — every world the run loaded or evaluates (id, io id, a digest of the
stored record, the signals as they were), the harness version it starts from, the agent's
consolidation state (and its digest), the consolidation settings, the policy model's identity and
the simulator's settings (its seeds) — and their digest. A failure to record is logged and the run
goes on (it only loses its replay).

:func:`decision_of` is what a replay compares: status, winner, each candidate's outcome and score.
"""

from __future__ import annotations

import logging
from typing import Any

import sqlalchemy as sa

from rsi_common.db import WorldRow, get_agent
from rsi_common.db.engine import encode_json
from rsi_common.db.run_inputs import canonical_digest, insert_run_inputs
from rsi_worker.consolidate.context import Deps, RoundContext

__all__ = ["INPUTS_SCHEMA", "decision_of", "record_inputs"]

log = logging.getLogger(__name__)

INPUTS_SCHEMA = "rsi-run-inputs/1"


def _world_ids(ctx: RoundContext) -> list[str]:
    return sorted({*ctx.loaded, *ctx.worlds, *ctx.skipped_worlds})


def record_inputs(deps: Deps, ctx: RoundContext) -> str | None:
    """Store the inputs of ``ctx``'s run (module docstring); returns their digest, or None when
    they could not be recorded."""
    try:
        with deps.sessions() as s:  # reads: no write turn (docs/performance/consolidation.md)
            s.connection(execution_options={"sqlite_begin": "DEFERRED"})
            agent = get_agent(s, ctx.agent_id)
            ids = _world_ids(ctx)
            rows = s.execute(sa.select(WorldRow.id, WorldRow.io_id, WorldRow.world, WorldRow.signals)
                             .where(WorldRow.agent_id == ctx.agent_id, WorldRow.id.in_(ids)))
            found = list(rows)
            state = dict(agent.state or {})
            s.commit()
        worlds = {r.id: {"io_id": r.io_id, "digest": canonical_digest(r.world), "signals": r.signals}
                  for r in found}
        inputs = {
            "schema": INPUTS_SCHEMA,
            "agent_id": ctx.agent_id,
            "io_id": ctx.io_id,
            "start_version": ctx.start_version,
            "worlds": worlds,
            "state": state,
            "state_digest": canonical_digest(state),
            "settings": deps.params.model_dump(mode="json"),
            "models": {"provider": ctx.provider, "model": ctx.model},
            "sim": deps.settings.sim.model_dump(mode="json"),
            "force": ctx.force,
        }
        digest, encoded = canonical_digest(inputs), encode_json(inputs)  # before the write turn
        with deps.sessions() as s:  # one INSERT under the write turn
            digest = insert_run_inputs(s, ctx.run_id, digest, encoded)
            s.commit()
        return digest
    except Exception as exc:  # the run goes on; only its replay is lost
        log.warning("run %s: inputs not recorded: %s", ctx.run_id, type(exc).__name__)
        return None


def decision_of(summary: dict[str, Any] | None) -> dict[str, Any]:
    """What a replay compares: the status, the winner and each candidate's outcome and score."""
    summary = summary or {}
    rnd = summary.get("round") or {}
    candidates = [[c.get("variant"), c.get("outcome"), c.get("S")] for c in rnd.get("candidates") or []]
    return {"status": summary.get("status"), "winner": rnd.get("winner"), "candidates": candidates}

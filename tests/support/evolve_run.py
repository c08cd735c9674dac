"""A real small evolve run for the service and console tests: the sim suite (4 evolve tasks, 2 held
out), the sim model, run inline to its end in the caller's database."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

import rsi_worker.roles  # noqa: F401 - registers the sim's role behaviours
from rsi_common.config import Settings
from rsi_common.errors import InvalidInput
from rsi_common.math import RRSIParams
from rsi_worker.bench.evolve_suite import sim_suite
from rsi_worker.consolidate import default_models
from rsi_worker.evolve.config import EvolveConfig
from rsi_worker.evolve.engine import EvolveEnv, run_inline
from rsi_worker.evolve.store import Store


def small_run(
    sessions: sessionmaker[Session], settings: Settings, name: str, *, suite: str = "svc-s", rounds: int = 2,
    run: bool = True,
) -> Store:
    """Store the suite (once), create run ``name`` (T = ``rounds``, k = 1) and, with ``run``, run it
    inline to its end."""
    store = Store(sessions)
    try:
        store.suite(suite)
    except InvalidInput:
        store.save_suite(sim_suite(suite, n_tasks=4, n_heldout=2))
    store.create(name, suite, EvolveConfig(params=RRSIParams(T=rounds, k=1), trial_parallel=1))
    if run:
        run_inline(EvolveEnv(sessions, default_models(settings), settings), name)
    return store

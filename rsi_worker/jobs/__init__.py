"""Operator jobs run against a deployment's database and broker, one module each.

* :mod:`~rsi_worker.jobs.batch` — re-consolidating many agents (``rsi batch``);
* :mod:`~rsi_worker.jobs.worldfile` — the worlds file (``rsi worlds import`` / ``export``);
* :mod:`~rsi_worker.jobs.loadtest` — driving recorded turns through a cluster (``rsi loadtest``),
  with its world pool in :mod:`~rsi_worker.jobs.loadpool`;
* :mod:`~rsi_worker.jobs.scenario` — the small shopping-assistant agent of ``rsi demo``, the load
  pool and the benchmarks.
"""

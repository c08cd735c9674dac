"""The Celery cluster (docs/architecture.md#1-shape, docs/protocol.md#redis-key-protocol,
docs/architecture.md#5-modes): the app, its tasks, the sweeper, the recovery rules.

* :mod:`~rsi_worker.cluster.app` — :func:`create_app`: settings, queue routing, the beat schedule;
  :func:`app_from_env`, which builds the module-level app of
  :mod:`~rsi_worker.cluster.celery_app` that ``celery -A rsi_worker.cluster.celery_app`` and Flower
  load;
* :mod:`~rsi_worker.cluster.events` — task events that name their queue; task results that leave a
  worker as a brief;
* :mod:`~rsi_worker.cluster.worker` — :class:`WorkerContext`: one worker process's connections,
  metrics server and delivery counts;
* :mod:`~rsi_worker.cluster.tasks` — thin Celery tasks over the pipeline steps of
  :mod:`rsi_worker.consolidate` (load, call a step, enqueue what it asks for);
* :mod:`~rsi_worker.cluster.sweeper` — the periodic sweep that brings stuck agents back;
* :mod:`~rsi_worker.cluster.recovery` — the re-run rule and hand-on, shared by tasks and sweeper.

The pipeline itself (:mod:`rsi_worker.consolidate`) never imports Celery: the same steps run
inline (``rsi_worker.consolidate.inline``) for ``rsi batch --inline`` and the tests.
"""

from __future__ import annotations

from rsi_worker.cluster.app import TASK_ROUTES, app_from_env, create_app
from rsi_worker.cluster.sweeper import SweepReport, sweep
from rsi_worker.cluster.worker import WorkerContext, load_model_factory

__all__ = ["TASK_ROUTES", "SweepReport", "WorkerContext", "app_from_env", "create_app", "load_model_factory",
           "sweep"]

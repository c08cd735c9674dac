"""``rsi loadtest --chaos``: the load test with faults injected into a private cluster
(docs/operations/chaos.md).

The cluster (:class:`~rsi_worker.chaos.faults.ChaosCluster`) is started under a temporary home (or
``home``): redis-server without persistence, PostgreSQL when installed, ``workers`` ``rsi worker``
processes and one ``rsi beat``, all with the settings of the environment (defaults unless set). The
load of :func:`~rsi_worker.jobs.loadtest.run_loadtest` runs while the injector works through the
plan; after the drain one more sweep interval is waited so the sweeper's last pass is counted, and
the load report gets a ``chaos`` section (:func:`~rsi_worker.chaos.report.chaos_report`).
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rsi_common.config import Settings
from rsi_worker.chaos.faults import ChaosCluster, ChaosPlan, Injector
from rsi_worker.chaos.report import chaos_report, read_runs
from rsi_worker.jobs.loadpool import PoolConversation
from rsi_worker.jobs.loadtest import LoadConfig, run_loadtest

__all__ = ["compare_decisions", "run_chaos"]


def compare_decisions(settings: Settings, db_url: str, prefix: str, sample: int) -> dict[str, Any]:
    """Replay up to ``sample`` adopted runs of the load inline (``rsi runs replay``) and count the
    decisions that differ; a run that cannot be replayed is counted as ``not_replayed``."""
    from rsi_worker.consolidate import default_models
    from rsi_worker.jobs.replay_run import replay_inline

    adopted = [r[0] for r in read_runs(db_url, prefix) if r[2] == "adopted"][:sample]
    local = settings.model_copy(update={"database_url": db_url})
    out: dict[str, Any] = {"checked": 0, "same": 0, "different": 0, "not_replayed": 0, "differences": []}
    for run_id in adopted:
        try:
            replay = replay_inline(local, run_id, default_models(local))
        except Exception as exc:  # counted; the report goes on
            out["not_replayed"] += 1
            out["differences"].append({"run_id": run_id, "error": f"{type(exc).__name__}: {exc}"[:200]})
            continue
        out["checked"] += 1
        if replay["same"]:
            out["same"] += 1
        else:
            out["different"] += 1
            out["differences"].append(replay)
    return out


def run_chaos(settings: Settings, pool: Sequence[PoolConversation], cfg: LoadConfig, plan: ChaosPlan, *,
              workers: int, concurrency: int, home: str | None, pool_info: dict[str, Any],
              sample: int = 5) -> dict[str, Any]:
    """Start the cluster, run the load under ``plan``, and return the load report with its ``chaos``
    section; ``ok`` also requires no turn lost, no double adoption, no stuck run and every fault
    recovered; ``sample``: adopted runs replayed inline to compare their decisions."""
    with contextlib.ExitStack() as stack:
        tmp = None if home else stack.enter_context(tempfile.TemporaryDirectory(prefix="rsi-chaos-"))
        root = Path(home or str(tmp))
        chaos = stack.enter_context(ChaosCluster(settings, root, workers=workers, concurrency=concurrency))
        assert chaos.cluster is not None
        client = stack.enter_context(chaos.cluster.client())
        injector = Injector(chaos, plan)
        with injector.running():
            report = run_loadtest(client, pool, cfg, mode="embedded-redis+chaos", pool_info=pool_info)
        time.sleep(min(60.0, chaos.cluster.settings.sweep_interval_s))  # the sweeper's last pass
        prefix = report["config"]["prefix"]
        decisions = compare_decisions(chaos.cluster.settings, chaos.db_url, prefix, sample)
        section = chaos_report(chaos.db_url, client.redis, injector.faults, prefix, report, decisions)
        section["settings"] = {k: getattr(chaos.cluster.settings, k) for k in (
            "lease_s", "sweep_interval_s", "run_stale_s", "visibility_timeout_s", "task_time_limit_s",
            "record_retry_s")}
        section["database"] = "postgresql" if chaos.pg is not None else "sqlite"
        report["chaos"] = section
        report["ok"] = bool(report["ok"] and section["turns_lost_at_host"] == 0
                            and section["double_adoptions"] == 0 and section["stuck_runs"] == 0
                            and section["recovery"]["unrecovered"] == 0
                            and section["decisions"].get("different", 0) == 0)
        return report

"""``rsi bench scale`` CPU figures: /proc readings of a process tree and the per-count arithmetic;
the driver's one-query poll for closed runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from rsi_common.db import ensure_agent, make_engine, session_factory, start_run, upgrade
from rsi_worker.bench.proc_cpu import machine_cpu_s, process_cpu_s, tree_cpu_s, used
from rsi_worker.bench.scale import _closed, _cpu_report, command_calls, per_run_commands
from tests.support.migrated import migrate_or_copy


def test_a_process_trees_cpu_counts_its_children() -> None:
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
    child = subprocess.Popen([sys.executable, "-c", busy + "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        while process_cpu_s(child.pid) < 0.3:  # the child's own CPU, until its busy loop is done
            time.sleep(0.02)
        assert tree_cpu_s(os.getpid()) >= process_cpu_s(os.getpid()) + 0.3
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait()
    assert process_cpu_s(2**22 + 17) == 0.0 and tree_cpu_s(2**22 + 17) == 0.0  # no such process
    assert machine_cpu_s() > 0.0


def test_the_cpu_report_per_run_and_in_busy_cores() -> None:
    before = {"worker0": 1.0, "worker1": 2.0, "redis": 0.5, "driver": 3.0, "machine": 100.0}
    after = {"worker0": 5.0, "worker1": 8.0, "redis": 1.5, "driver": 3.5, "machine": 116.0}
    assert used(before, after, ["worker0", "redis"]) == {"worker0": 4.0, "redis": 1.0}
    out = _cpu_report(before, after, 2, 4, makespan=8.0)
    assert out["cpu_s"] == {"workers": [4.0, 6.0], "redis": 1.0, "driver": 0.5, "machine": 16.0}
    assert out["cpu_s_per_run"] == {"workers": 2.5, "redis": 0.25, "driver": 0.125}
    assert out["busy_cores"]["cluster"] == 1.44 and out["busy_cores"]["machine"] == 2.0


def test_the_driver_finds_each_agents_newest_closed_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'rsi.db'}"
    copied = migrate_or_copy(url)  # the migrated template, when there is one
    engine = make_engine(url)
    if not copied:
        upgrade(engine)
    sessions = session_factory(engine)
    with sessions() as s:
        ids = {}
        for agent, fence, status in (("a", 1, "adopted"), ("b", 1, "kept"), ("b", 2, "running"),
                                     ("c", 1, "running")):
            ensure_agent(s, agent)
            run = start_run(s, agent, fence=fence, io_id=f"io{fence}")
            run.status = status
            ids[agent, fence] = run.id
        s.commit()
    rt = SimpleNamespace(sessions=sessions)
    assert _closed(rt, ["a", "b", "c", "d"]) == {"a": ids["a", 1]}  # type: ignore[arg-type]
    engine.dispose()


def test_redis_commands_per_run() -> None:
    class Server:
        def info(self, section: str) -> dict[str, object]:
            assert section == "commandstats"
            return {"cmdstat_get": {"calls": 12, "usec": 5}, "cmdstat_evalsha": {"calls": 3}}

    class Down:
        def info(self, section: str) -> dict[str, object]:
            raise ConnectionError("down")

    assert command_calls(Server()) == {"get": 12, "evalsha": 3}
    assert command_calls(Down()) == {}
    out = per_run_commands({"get": 2, "evalsha": 3}, {"get": 12, "evalsha": 4, "del": 1}, runs_n=4)
    assert out == {"total": 3.0, "get": 2.5}  # evalsha 0.25 and del 0.25 per run are left out

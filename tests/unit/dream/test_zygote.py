"""The sandbox's zygote: episodes are forked from it, a dead one is restarted, a forked worker
starts its own, and the result is the same as a child forked from the worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rsi_worker.dream import zygote as zygote_module
from rsi_worker.dream.policies import builtin
from rsi_worker.dream.replay import ReplayQuestion, run_episode
from rsi_worker.dream.sandbox import SandboxLimits, SandboxSession
from rsi_worker.dream.tree import TreeWorld
from rsi_worker.dream.zygote import zygote

ROOMY = SandboxLimits(cpu_s=5, memory_bytes=256 * 2**20, wall_s=20.0)
SOURCE = builtin("parallel_refine").source


def _run(world: TreeWorld, limits: SandboxLimits = ROOMY) -> tuple[dict[str, object], str]:
    with SandboxSession(SOURCE, limits) as s:
        result = run_episode(ReplayQuestion(world), s, 0.6)
        return result.to_json(), s.launcher


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_episodes_fork_from_the_zygote_and_match_a_direct_fork(toy: TreeWorld) -> None:
    seen: list[int] = []
    confined: list[tuple[set[str], str, bool]] = []

    class Spy(SandboxSession):
        def choose(self, view, beta):  # type: ignore[no-untyped-def]
            seen.append(_parent_of(self.pid))  # the child is running from the first call on
            with open(f"/proc/{self.pid}/limits") as f:
                nofile = next(line for line in f if line.startswith("Max open files")).split()[3]
            other_net = os.readlink(f"/proc/{self.pid}/ns/net") != os.readlink("/proc/self/ns/net")
            confined.append((set(os.listdir(f"/proc/{self.pid}/fd")), nofile, other_net))
            return super().choose(view, beta)

    with Spy(SOURCE, ROOMY) as s:
        via_zygote = run_episode(ReplayQuestion(toy), s, 0.6).to_json()
        assert s.launcher == "zygote"
    assert seen and set(seen) == {zygote().pid} and zygote().pid != os.getpid()
    # the zygote's child is confined as a direct fork is: its two pipe ends only, at most 2
    # descriptors, and (where the kernel allows namespaces) another network namespace
    fds, nofile, other_net = confined[0]
    assert fds == {"0", "1"} and nofile == "2"
    assert other_net == (s.network != "nofile")
    direct, launcher = _run(toy, SandboxLimits(cpu_s=5, memory_bytes=256 * 2**20, wall_s=20.0, zygote=False))
    assert launcher == "fork"
    assert via_zygote == direct


def test_a_dead_zygote_is_restarted(toy: TreeWorld) -> None:
    first, _ = _run(toy)
    z = zygote()
    old = z.pid
    os.kill(old, signal.SIGKILL)
    again, launcher = _run(toy)
    assert launcher == "zygote" and z.pid not in (0, old)
    assert again == first


def test_a_forked_worker_starts_its_own_zygote(toy: TreeWorld) -> None:
    _run(toy)
    parent_zygote = zygote().pid
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - reported through the pipe
        code = 1
        try:
            _, launcher = _run(toy)
            mine = zygote().pid
            ok = launcher == "zygote" and mine not in (0, parent_zygote) and _parent_of(mine) == os.getpid()
            code = 0 if ok else 2
            zygote().close()
        finally:
            os.write(w, bytes([code]))
            os._exit(0)
    os.close(w)
    answer = os.read(r, 1)
    os.close(r)
    os.waitpid(pid, 0)
    assert answer == b"\x00"
    assert zygote().pid == parent_zygote  # the parent's zygote is untouched
    assert _run(toy)[1] == "zygote"


def test_without_a_zygote_the_worker_forks_the_episode(
    toy: TreeWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected, _ = _run(toy)
    fresh = zygote_module.Zygote()
    monkeypatch.setattr(zygote_module, "_ZYGOTE", fresh)
    monkeypatch.setattr(zygote_module.sys, "executable", "/nonexistent/python")
    result, launcher = _run(toy)
    assert launcher == "fork" and result == expected
    monkeypatch.undo()  # an interpreter again, but no new start is tried during the pause
    monkeypatch.setattr(zygote_module, "_ZYGOTE", fresh)
    assert _run(toy)[1] == "fork" and fresh.pid == 0
    fresh.close()


def test_the_zygote_loads_the_standard_library_and_the_view_only() -> None:
    root = str(Path(zygote_module.__file__).resolve().parents[2])
    probe = (
        f"import sys; sys.path.insert(0, {root!r}); import rsi_worker.dream.confine; "
        "std = sys.stdlib_module_names | {'__main__'}; "
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] not in std)))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe], capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == [
        "rsi_worker",
        "rsi_worker.dream",
        "rsi_worker.dream.confine",
        "rsi_worker.dream.view",
    ]

"""The sandbox: the AST check, then the confined child (adversarial cases stop cleanly with the right
stop reason; the test process — the worker — is unaffected)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from rsi_worker.dream.policies import PolicyCode, builtin
from rsi_worker.dream.replay import PolicyFailure, ReplayQuestion, run_episode
from rsi_worker.dream.sandbox import PolicyRejected, SandboxLimits, SandboxSession, check_source, run_confined
from rsi_worker.dream.tree import TreeWorld
from rsi_worker.dream.zygote import zygote

OK = builtin("fixed_width").source
FAST = SandboxLimits(cpu_s=2, memory_bytes=256 * 2**20, wall_s=0.5)
"""For the cases that must time out: half a second of wall time."""
ROOMY = SandboxLimits(cpu_s=5, memory_bytes=256 * 2**20, wall_s=20.0)
"""For the others: a loaded machine must not turn their stop into a timeout."""


def _untrusted(source: str) -> PolicyCode:
    return PolicyCode("untrusted", source)


def _episode(source: str, world: TreeWorld, limits: SandboxLimits) -> tuple[str, str]:
    with _untrusted(source).session(limits) as s:
        r = run_episode(ReplayQuestion(world), s, 0.5)
    return r.stop_reason, r.message


@pytest.mark.parametrize(
    ("source", "finding"),
    [
        ("import os\n", "import of 'os'"),
        ("import socket\n", "import of 'socket'"),
        ("from subprocess import run\n", "import from 'subprocess'"),
        ("from . import x\n", "import from"),
        ("x = ().__class__.__bases__\n", "attribute '__class__'"),
        ("x = open('/etc/passwd')\n", "name 'open'"),
        ("x = getattr(1, 'real')\n", "name 'getattr'"),
        ("exec('1')\n", "name 'exec'"),
        ("x = __builtins__\n", "name '__builtins__'"),
        ("x = __import__('os')\n", "name '__import__'"),
        ("def f(:\n", "not valid Python"),
    ],
)
def test_ast_check_refuses(source: str, finding: str) -> None:
    with pytest.raises(PolicyRejected, match=finding.replace("(", r"\(")):
        check_source(source + OK)


def test_ast_check_needs_both_functions_and_accepts_the_builtins() -> None:
    with pytest.raises(PolicyRejected, match="choose"):
        check_source("def plan_grid(ctx):\n    return (1, 0)\n")
    check_source(OK)
    check_source(builtin("parallel_refine").source)
    check_source("import math\nfrom collections import Counter\n" + OK)


def test_untrusted_policy_runs_in_the_child_and_matches_in_process(toy: TreeWorld) -> None:
    with builtin("parallel_refine").session() as s:
        inproc = run_episode(ReplayQuestion(toy), s, 0.6)
    with SandboxSession(builtin("parallel_refine").source, ROOMY) as s:
        child = run_episode(ReplayQuestion(toy), s, 0.6)
        assert s.network in ("netns", "userns+netns", "nofile")
    assert child.to_json() == inproc.to_json()


ADVERSARIAL = {
    "infinite loop": ("def choose(view, beta):\n    while True:\n        pass\n", "timeout"),
    "loop at import": ("while True:\n    pass\ndef choose(view, beta):\n    return []\n", "timeout"),
    "memory bomb": ("def choose(view, beta):\n    x = [0] * (10 ** 10)\n    return []\n", "error"),
    "deep recursion": ("def choose(view, beta):\n    return choose(view, beta)\n", "error"),
    "raises": ("def choose(view, beta):\n    raise ValueError('no')\n", "error"),
    "bad answer": ("def choose(view, beta):\n    return {'a': 1}\n", "error"),
    "huge answer": ("def choose(view, beta):\n    return ['x' * 5_000_000]\n", "error"),
    "fork bomb": ("import os\ndef choose(view, beta):\n    while True:\n        os.fork()\n", "error"),
    "network": (
        "import socket\ndef choose(view, beta):\n    socket.create_connection(('1.1.1.1', 80))\n",
        "error",
    ),
    "file write": ("def choose(view, beta):\n    open('/tmp/x', 'w')\n", "error"),
    "escape via type": ("def choose(view, beta):\n    return type(view).mro()\n", "error"),
}


def _children(pid: int | str = "self") -> set[int]:
    """Pids of a process's live children, zombies included (``/proc/<pid>/task/*/children``)."""
    out: set[int] = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.update(int(p) for p in f.read().split())
        except OSError:
            continue  # the thread ended meanwhile
    return out


def _pipes() -> set[str]:
    """This process's open pipes (``/proc/self/fd`` targets); other descriptors are not ours to count."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed between listdir and readlink
        if target.startswith("pipe:"):
            out.add(target)
    return out


@pytest.mark.parametrize("case", sorted(ADVERSARIAL))
def test_adversarial_code_stops_cleanly(case: str, toy: TreeWorld) -> None:
    body, reason = ADVERSARIAL[case]
    plan = "def plan_grid(ctx):\n    return {'branch_count': 3, 'refine_count': 2}\n"
    source = body if "def plan_grid" in body else plan + body
    pipes_before, children_before = _pipes(), _children()
    stop, message = _episode(source, toy, FAST if reason == "timeout" else ROOMY)
    assert stop == reason, message
    assert _pipes() <= pipes_before  # no pipe left behind (other threads may open other files)
    z = zygote()
    z.sync()
    assert z.pid and not _children(z.pid)  # the zygote reaped the episode's child
    assert _children() - {z.pid} <= children_before  # nothing else was left (the suite's servers stay)


def test_confinement_blocks_files_and_sockets_whatever_the_code(tmp_path: Path) -> None:
    target = tmp_path / "written"

    def job() -> dict[str, str]:
        out = {}
        for name, attempt in (
            ("file", lambda: open(target, "w")),  # noqa: SIM115
            ("read", lambda: open("/etc/hostname")),  # noqa: SIM115
            ("socket", lambda: socket.socket()),
            ("raw", lambda: socket.SocketType(socket.AF_INET, socket.SOCK_STREAM)),
        ):
            try:
                attempt()
                out[name] = "allowed"
            except OSError as exc:
                out[name] = type(exc).__name__
        return out

    network, result = run_confined(job, ROOMY)
    assert network in ("netns", "userns+netns", "nofile")
    assert set(result.values()) <= {"OSError", "PermissionError"} and "allowed" not in result.values(), result
    assert not target.exists()
    # the parent is untouched: it still opens files and sockets
    target.write_text("ok")
    socket.socket().close()


def test_inherited_descriptors_are_closed_whatever_their_number() -> None:
    sock = socket.socket()
    high = 1500
    os.dup2(sock.fileno(), high)
    try:

        def probe() -> str:
            try:
                os.fstat(high)
                return "inherited socket reachable"
            except OSError as exc:
                return type(exc).__name__

        assert run_confined(probe, ROOMY)[1] == "OSError"
        assert run_confined(probe, SandboxLimits(network_namespace=False))[0] == "nofile"
        os.fstat(high)  # still open in the parent
    finally:
        os.close(high)
        sock.close()


def test_a_dead_child_is_an_error_not_a_crash() -> None:
    def die() -> None:
        os._exit(3)

    with pytest.raises(PolicyFailure, match="died"):
        run_confined(die, ROOMY)

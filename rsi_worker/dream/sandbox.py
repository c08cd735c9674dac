"""The sandbox for untrusted (model-written) policy code (docs/dream/sandbox.md).

Two gates, in order:

1. :func:`check_source`, an AST check before anything runs: imports only from
   :data:`ALLOWED_IMPORTS` (no relative import), none of :data:`FORBIDDEN_NAMES`, no attribute and no
   name starting with ``__``, top-level functions ``plan_grid`` and ``choose``.
2. :class:`SandboxSession`: one forked child per episode, forked from the worker's zygote
   (:mod:`rsi_worker.dream.zygote`; the child's side is :mod:`rsi_worker.dream.confine`), or from
   this process where no zygote can be started. Before the code is even loaded the child keeps only
   its two pipe ends as fds 0 and 1 and sets ``RLIMIT_NOFILE`` to 2 (no file, no socket can be
   opened), ``RLIMIT_CPU``, ``RLIMIT_AS`` (the address space at fork + the memory limit),
   ``RLIMIT_FSIZE`` 0, ``RLIMIT_NPROC`` 0 and ``RLIMIT_CORE`` 0, and is in a new network namespace
   (``unshare(CLONE_NEWNET)``, or ``CLONE_NEWUSER | CLONE_NEWNET`` unprivileged; entered once by the
   zygote, or by the child itself) when the kernel allows it; where it does not, the descriptor
   limit and the replaced socket constructors are the network barrier
   (:attr:`SandboxSession.network`). The code runs with a reduced set of builtins and an
   ``__import__`` that admits the allowed modules only. The parent enforces the episode's wall limit
   with ``select`` and kills the child (SIGKILL) when it passes: stop ``timeout``; a child that
   raises, dies or answers malformed: stop ``error``. The parent process is never touched by the code.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import select
import signal
import struct
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from rsi_common.boundary import MAX_HARNESS_FILE_BYTES
from rsi_common.errors import InvalidInput
from rsi_common.math.dream import GridPlan, GridPlanningContext
from rsi_worker.dream import confine
from rsi_worker.dream.confine import ALLOWED_IMPORTS
from rsi_worker.dream.replay import PolicyFailure, PolicyTimeout
from rsi_worker.dream.view import PolicyView
from rsi_worker.dream.zygote import ZygoteUnavailable, zygote

log = logging.getLogger(__name__)

__all__ = [
    "ALLOWED_IMPORTS",
    "FORBIDDEN_NAMES",
    "PolicyRejected",
    "SandboxLimits",
    "SandboxSession",
    "check_source",
    "load_namespace",
    "plan_from",
    "run_confined",
]

FORBIDDEN_NAMES = frozenset(
    {
        "open",
        "exec",
        "eval",
        "compile",
        "__import__",
        "globals",
        "locals",
        "vars",
        "input",
        "breakpoint",
        "exit",
        "quit",
        "getattr",
        "setattr",
        "delattr",
    }
)
_MAX_MESSAGE_BYTES = 4_000_000
_PREWRITE_BYTES = 16_384
"""A first message up to this size is written before the fork (a pipe holds 64 KiB on Linux)."""


class PolicyRejected(InvalidInput):
    """The AST check refused the source; ``violations`` lists every finding with its line."""

    def __init__(self, violations: list[str]) -> None:
        super().__init__("policy code refused: " + "; ".join(violations[:20]))
        self.violations = violations


def check_source(source: str) -> None:
    """The AST check (module docstring, gate 1).

    Raises:
        PolicyRejected: every violation, each with its line number; also a syntax error, a source
            over ``MAX_HARNESS_FILE_BYTES`` or one that is not text.
    """
    if not isinstance(source, str):
        raise PolicyRejected(["the policy source must be text"])
    if len(source.encode("utf-8", "surrogatepass")) > MAX_HARNESS_FILE_BYTES:
        raise PolicyRejected([f"the policy source is over {MAX_HARNESS_FILE_BYTES:,} bytes"])
    try:
        tree = ast.parse(source, "<policy>")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise PolicyRejected([f"not valid Python: {type(exc).__name__}: {str(exc)[:200]}"]) from None
    found: list[str] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            found += [
                f"line {line}: import of {a.name[:60]!r} is not allowed"
                for a in node.names
                if a.name not in ALLOWED_IMPORTS and a.name != "collections.abc"
            ]
        elif isinstance(node, ast.ImportFrom):
            if node.level or (node.module not in ALLOWED_IMPORTS and node.module != "collections.abc"):
                found.append(f"line {line}: import from {str(node.module)[:60]!r} is not allowed")
        elif isinstance(node, ast.Name) and (node.id in FORBIDDEN_NAMES or node.id.startswith("__")):
            found.append(f"line {line}: the name {node.id[:60]!r} is forbidden")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("__"):
            found.append(f"line {line}: the attribute {node.attr[:60]!r} is forbidden")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name.startswith(
            "__"
        ):
            found.append(f"line {line}: the name {node.name[:60]!r} is forbidden")
    top = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    found += [f"no top-level function {name}()" for name in ("plan_grid", "choose") if name not in top]
    if found:
        raise PolicyRejected(found)


_CODE_CACHE: dict[str, types.CodeType] = {}
_CODE_CACHE_SIZE = 64


def compiled(source: str) -> types.CodeType:
    """The checked and compiled code of ``source`` (cached per process by content, at most 64).

    Raises:
        PolicyRejected: the AST check fails.
    """
    code = _CODE_CACHE.get(source)
    if code is None:
        check_source(source)
        code = compile(source, "<policy>", "exec")
        if len(_CODE_CACHE) >= _CODE_CACHE_SIZE:
            _CODE_CACHE.pop(next(iter(_CODE_CACHE)))
        _CODE_CACHE[source] = code
    return code


def load_namespace(source: str | types.CodeType) -> dict[str, Any]:
    """Check the source, then execute it with the reduced builtins in a fresh namespace.

    Raises:
        PolicyRejected: the AST check fails.
        Exception: whatever the module body raises.
    """
    return confine.load_namespace(compiled(source) if isinstance(source, str) else source)


def plan_from(value: Any) -> GridPlan:
    """A ``plan_grid`` answer (``{branch_count, refine_count}``, a pair or a GridPlan) as a GridPlan.

    Raises:
        PolicyFailure: any other shape.
    """
    if isinstance(value, GridPlan):
        return value
    try:
        if isinstance(value, dict):
            return GridPlan(value["branch_count"], value["refine_count"], str(value.get("reason", ""))[:200])
        if isinstance(value, (list, tuple)) and len(value) == 2:
            return GridPlan(value[0], value[1])
    except (KeyError, InvalidInput) as exc:
        raise PolicyFailure(f"plan_grid returned a malformed plan: {exc}") from None
    raise PolicyFailure(f"plan_grid returned {type(value).__name__}, not {{branch_count, refine_count}}")


@dataclass(frozen=True)
class SandboxLimits:
    """Per-episode limits: CPU seconds (``RLIMIT_CPU``), extra address space in bytes
    (``RLIMIT_AS`` above the size at fork) and wall seconds (enforced by the parent)."""

    cpu_s: int = 10
    memory_bytes: int = 512 * 2**20
    wall_s: float = 10.0
    network_namespace: bool = True
    """Also enter a new network namespace when the kernel allows it (defense in depth: the descriptor
    limit already makes every socket impossible). The zygote enters one once, for all its children;
    a child forked from this process enters its own (a few ms per episode)."""
    zygote: bool = True
    """Fork policy children from the zygote (docs/dream/sandbox.md#the-zygote); False: fork this
    process (also the fallback when no zygote can be started, and always for ``run_confined``)."""


# -- the parent --------------------------------------------------------------------------------------
def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    out = b""
    while len(out) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise PolicyTimeout("the episode's wall-time limit passed")
        chunk = os.read(fd, n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return out


def _recv(fd: int, deadline: float | None) -> Any:
    (size,) = struct.unpack(">I", _read_exact(fd, 4, deadline))
    if size > _MAX_MESSAGE_BYTES:
        raise PolicyFailure(f"the policy answered {size:,} bytes (limit {_MAX_MESSAGE_BYTES:,})")
    return json.loads(_read_exact(fd, size, deadline))


class SandboxSession:
    """One episode of one policy in a forked, confined child (module docstring).

    Use as a context manager; the wall clock of the episode starts at ``__enter__``.
    """

    def __init__(
        self, source: str, limits: SandboxLimits | None = None, job: Callable[[], Any] | None = None
    ) -> None:
        self.source, self.limits, self._job = source, limits or SandboxLimits(), job
        self.pid = 0
        self._generation = 0
        """The zygote generation that forked the child; 0: forked from this process."""
        self.launcher = "fork"
        """``zygote`` or ``fork`` (a ``job``, ``SandboxLimits.zygote`` off, or no zygote)."""
        self.network = ""
        self.result: Any = None
        self._r = self._w = -1
        self._deadline = 0.0
        self._hello_pending = False
        self._used = False

    def __enter__(self) -> SandboxSession:
        """Start the episode's wall clock; the child is forked at the first call (so a refusal or a
        hang while loading becomes the episode's stop), or now for a ``job``."""
        self._deadline = time.monotonic() + self.limits.wall_s
        if self._job is not None:
            self._start()
        return self

    def _start(self, first: bytes | None = None) -> None:
        """Fork the child; ``first`` (the episode's first message, at most :data:`_PREWRITE_BYTES`)
        is written into its pipe before the fork is asked for, so the child finds it at once."""
        code = None
        if self._job is None:
            try:
                code = compiled(self.source)  # checked and compiled here, once per source
            except PolicyRejected as exc:
                raise PolicyFailure(str(exc)) from None
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        try:
            if first is not None:
                confine.send_msg(to_child_w, first)  # fits in the empty pipe: never blocks
            if code is not None and self.limits.zygote:
                self._spawn(code, to_child_r, from_child_w)
            if not self.pid:
                confine.load_libc()
                pid = os.fork()
                if pid == 0:  # pragma: no cover - the child's coverage is not collected
                    network = None if self.limits.network_namespace else "nofile"
                    lim = self.limits
                    confine.child_main(
                        code, to_child_r, from_child_w, lim.cpu_s, lim.memory_bytes, network, self._job
                    )
                self.pid = pid
        except BaseException:
            os.close(to_child_w)
            os.close(from_child_r)
            raise
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self._w, self._r = to_child_w, from_child_r
        if self._job is None:
            self._hello_pending = True  # read with the first answer: one round trip less
            return
        try:
            self._hello(self._call(None))
        except BaseException:
            self.close()
            raise

    def _spawn(self, code: types.CodeType, rfd: int, wfd: int) -> None:
        """Fork the child from the zygote; on :class:`ZygoteUnavailable` leave ``pid`` 0 (the caller
        forks this process instead)."""
        try:
            self.pid, self._generation, _ = zygote().spawn(
                code, self.limits.cpu_s, self.limits.memory_bytes, [rfd, wfd]
            )
            self.launcher = "zygote"
        except ZygoteUnavailable as exc:
            log.warning("sandbox zygote unavailable, forking the worker instead: %s", exc)
            self.launcher = "fork"

    def _hello(self, hello: Any) -> None:
        self.network = str(hello["ready"])
        self.result = hello.get("result")

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill and reap the child, close the pipes (idempotent)."""
        if self.pid:
            if self._generation:
                zygote().release(self.pid, self._generation)
            else:
                with suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            self.pid = 0
        for fd in (self._r, self._w):
            if fd >= 0:
                os.close(fd)
        self._r = self._w = -1

    def _call(self, msg: Any) -> Any:
        if msg is not None and not self.pid:
            if self._used:
                raise PolicyFailure("the policy process is gone")
            self._used = True
            data = confine.encode_msg(msg)
            self._start(data if len(data) <= _PREWRITE_BYTES else None)
            msg = None if len(data) <= _PREWRITE_BYTES else data
        try:
            if msg is not None:
                confine.send_msg(self._w, msg)
            if self._hello_pending:
                self._hello_pending = False
                hello = _recv(self._r, self._deadline)
                if not isinstance(hello, dict) or "ready" not in hello:
                    raise PolicyFailure(str(hello.get("error") if isinstance(hello, dict) else hello)[:500])
                self._hello(hello)
            reply = _recv(self._r, self._deadline)
        except (EOFError, BrokenPipeError, OSError):
            raise PolicyFailure(f"the policy process died ({self._exit_status()})") from None
        except (ValueError, struct.error) as exc:
            raise PolicyFailure(f"the policy process answered malformed data: {exc}") from None
        if not isinstance(reply, dict) or "error" in reply:
            raise PolicyFailure(str(reply.get("error") if isinstance(reply, dict) else reply)[:500])
        return reply

    def _exit_status(self) -> str:
        if not self.pid:
            return "gone"
        if self._generation:
            found = zygote().reap(self.pid, self._generation, kill=False)
            self.pid = 0
            if found is None:
                return "gone"
            status = found
        else:
            _, status = os.waitpid(self.pid, 0)
            self.pid = 0
        if os.WIFSIGNALED(status):
            return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
        return f"exit {os.WEXITSTATUS(status)}"

    def plan_grid(self, ctx: GridPlanningContext) -> GridPlan:
        """Ask the child; its answer is checked here."""
        return plan_from(self._call({"op": "plan", "ctx": ctx.to_json()})["ok"])

    def choose(self, view: PolicyView, beta: float) -> list[str]:
        """Send the view's data (what the closures would return) and β; the child's batch."""
        data = {
            "revealed": view.revealed(),
            "legal": view.legal(),
            "width": view.width(),
            "baseline": view.baseline(),
            "round": view.round(),
            "rounds_left": view.rounds_left(),
        }
        batch = self._call({"op": "choose", "view": data, "beta": beta})["ok"]
        if not isinstance(batch, list):
            raise PolicyFailure(f"choose returned {type(batch).__name__}, not a list of cell ids")
        return batch


@contextmanager
def sandboxed(source: str, limits: SandboxLimits | None = None) -> Iterator[SandboxSession]:
    """``with sandboxed(code) as session: run_episode(q, session, beta)``."""
    session = SandboxSession(source, limits)
    try:
        session.__enter__()
        yield session
    finally:
        session.close()


def run_confined(job: Callable[[], Any], limits: SandboxLimits | None = None) -> tuple[str, Any]:
    """Run a trusted callable under the child's confinement (tests of the barriers): ``(network
    barrier, JSON result)``.

    Raises:
        PolicyFailure: the callable raised or the child died; PolicyTimeout: the wall limit passed.
    """
    with SandboxSession("", limits, job) as s:
        return s.network, s.result

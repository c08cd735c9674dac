"""The one wrapper around every rsi-worker Celery task: the concerns a task body never writes itself.

The middleware idea of dramatiq: each concern is a :class:`Middleware` with symmetric hooks around
the body, and :func:`task` registers a body on the app with the chain applied, so no task can be
registered without it. The chain, outermost first (:func:`default_chain`):

1. :class:`LogContext` — binds ``task``, ``task_id``, ``run_id`` and ``agent_id`` (from the body's
   own ``run_id`` / ``agent`` arguments) for the log records of the task, and restores them after.
2. :class:`DeliveryCount` — counts the delivery of the task id in Redis
   (:meth:`~rsi_common.coord.Coordinator.count_delivery`; the metrics ``task_redeliveries_total`` and
   ``task_redelivery_capped_total``) and, past ``max_redeliveries`` redeliveries, answers the task
   with its policy's ``capped`` answer instead of running the body (a poison message stops).
3. :class:`Settle` — an exception of the body is answered by the task's policy: a run step closes its
   run (``flow.fail_run``: ``failed`` / ``interrupted``, lease released or handed to one re-run), a
   chord member returns a structured result (members never raise), a policy without an answer
   (the sweeper) lets the exception propagate.

Lease renewal and the stop check are not here: every run task calls the run's state machine
(:mod:`rsi_worker.consolidate.flow`), which applies them around each step and member; this wrapper
decides what a task answers when the machine stops or fails.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from celery import Celery
from celery.exceptions import Ignore

from rsi_worker.cluster.worker import WorkerContext
from rsi_worker.observability.logs import bind, restore

__all__ = [
    "REDELIVERED_TOO_OFTEN",
    "Answer",
    "DeliveryCount",
    "LogContext",
    "Middleware",
    "Policy",
    "Replace",
    "Resend",
    "Settle",
    "TaskCall",
    "default_chain",
    "run_chain",
    "task",
]

log = logging.getLogger(__name__)

REDELIVERED_TOO_OFTEN = "task redelivered too often"
"""The message of the error a capped run step settles its run with."""


@dataclass(frozen=True)
class Replace:
    """A body's answer asking to be replaced by ``signature`` (Celery's ``Task.replace``, done by
    :func:`task` after the chain has run): a chord member so replaced stays a member of its chord,
    so the chord body waits for the replacement's tasks too."""

    signature: Any


@dataclass(frozen=True)
class Resend:
    """A chord member's answer asking to run again in ``countdown_s`` seconds: ``signature`` (the
    same task and arguments) is sent as a new message with a new id that keeps this task's chord
    membership, and this execution ends with Celery's ``Ignore`` (the chord does not count it). A
    wait that holds no worker thread (the wave gate, ``rsi_worker/cluster/wave_release.py``)."""

    signature: Any
    countdown_s: float


@dataclass(frozen=True)
class TaskCall:
    """One execution of a task: its name, Celery task id, arguments, and the delivery number."""

    name: str
    task_id: str
    arguments: dict[str, Any]
    """The body's arguments by parameter name."""
    state: dict[str, Any] = field(default_factory=dict)
    """What the hooks keep for this call (e.g. ``delivery``: 1 on the first delivery)."""

    @property
    def run_id(self) -> str | None:
        value = self.arguments.get("run_id")
        return None if value is None else str(value)

    @property
    def agent_id(self) -> str | None:
        value = self.arguments.get("agent_id", self.arguments.get("agent"))
        return None if value is None else str(value)


@dataclass(frozen=True)
class Answer:
    """What a hook answers the task with, instead of running (or re-raising from) its body."""

    value: Any


@dataclass(frozen=True)
class Policy:
    """What one task answers when the wrapper stops it.

    Attributes:
        capped: the answer of a delivery past the redelivery cap (the body does not run).
        failed: the answer after the body raised; ``None`` lets the exception propagate.
    """

    capped: Callable[[TaskCall], Any]
    failed: Callable[[TaskCall, Exception], Any] | None = None


class Middleware(Protocol):
    """Hooks around a task body. ``before`` runs outermost first and may answer the task (the body and
    the remaining hooks are skipped); ``on_error`` runs innermost first and may turn the body's
    exception into an answer; ``after`` runs innermost first for every ``before`` that ran, whatever
    happened."""

    def before(self, call: TaskCall, policy: Policy) -> Answer | None: ...

    def on_error(self, call: TaskCall, policy: Policy, exc: Exception) -> Answer | None: ...

    def after(self, call: TaskCall) -> None: ...


class LogContext:
    """Binds the log context fields of the task for its duration, then restores the previous ones."""

    def before(self, call: TaskCall, policy: Policy) -> Answer | None:
        call.state["log_tokens"] = bind(task=call.name, task_id=call.task_id, run_id=call.run_id,
                                        agent_id=call.agent_id)
        return None

    def on_error(self, call: TaskCall, policy: Policy, exc: Exception) -> Answer | None:
        return None

    def after(self, call: TaskCall) -> None:
        restore(call.state.pop("log_tokens", {}))


class DeliveryCount:
    """Counts every delivery; past ``max_redeliveries`` redeliveries the policy's ``capped`` answers."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx

    def before(self, call: TaskCall, policy: Policy) -> Answer | None:
        n = self.ctx.count_delivery(call.task_id, call.name)
        call.state["delivery"] = n
        if n > self.ctx.settings.max_redeliveries + 1:
            log.warning("task %s delivered %d times: capped", call.name, n)
            return Answer(policy.capped(call))
        return None

    def on_error(self, call: TaskCall, policy: Policy, exc: Exception) -> Answer | None:
        return None

    def after(self, call: TaskCall) -> None:
        return None


class Settle:
    """Answers the body's exception with the policy's ``failed`` (none: the exception propagates)."""

    def before(self, call: TaskCall, policy: Policy) -> Answer | None:
        return None

    def on_error(self, call: TaskCall, policy: Policy, exc: Exception) -> Answer | None:
        if policy.failed is None:
            log.warning("task %s failed: %s", call.name, type(exc).__name__, exc_info=exc)
            return None
        return Answer(policy.failed(call, exc))

    def after(self, call: TaskCall) -> None:
        return None


def default_chain(ctx: WorkerContext) -> list[Middleware]:
    """The chain every task of the app runs through (module docstring), outermost first."""
    return [LogContext(), DeliveryCount(ctx), Settle()]


def run_chain(chain: Sequence[Middleware], call: TaskCall, policy: Policy, body: Callable[[], Any]) -> Any:
    """Run ``body`` inside ``chain`` (see :class:`Middleware` for the order of the hooks)."""
    entered: list[Middleware] = []
    try:
        for m in chain:
            entered.append(m)
            answer = m.before(call, policy)
            if answer is not None:
                return answer.value
        try:
            return body()
        except Exception as exc:
            for m in reversed(entered):
                answer = m.on_error(call, policy, exc)
                if answer is not None:
                    return answer.value
            raise
    finally:
        for m in reversed(entered):
            m.after(call)


def _resend(task: Any, out: Resend) -> None:
    """Send ``out.signature`` as this chord member's successor (:class:`Resend`) and end this execution.

    Raises:
        Ignore: always (the task is done; its successor answers for it in the chord).
    """
    req = task.request
    sig = out.signature.clone()
    sig.set(group_id=req.group, group_index=req.group_index, chord=req.chord, root_id=req.root_id,
            countdown=max(0.0, float(out.countdown_s)))
    sig.apply_async()
    raise Ignore("resent")


def task(app: Celery, chain: Sequence[Middleware], name: str, policy: Policy, *, keep_result: bool = False
         ) -> Callable[[Callable[..., Any]], Any]:
    """Register the decorated body as the Celery task ``name`` wrapped in ``chain``.

    ``keep_result``: store the task's return value in the result backend (only for a task whose
    sender waits on it); otherwise it is not stored (``ignore_result``) — a chord member still
    joins its chord, whose Redis join keys carry the value to the body.

    The body is a plain function of the task's arguments; the registered task is bound (its request
    id is the :class:`TaskCall` id) and registered on ``app`` only. Arguments that do not fit the
    body's signature raise ``TypeError`` before any hook runs, as Celery's own argument check would.
    """

    def register(body: Callable[..., Any]) -> Any:
        signature = inspect.signature(body)

        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            arguments = dict(signature.bind(*args, **kwargs).arguments)
            call = TaskCall(name, str(self.request.id or ""), arguments)
            out = run_chain(chain, call, policy, lambda: body(*args, **kwargs))
            if isinstance(out, Replace):
                return self.replace(out.signature)  # raises Celery's Ignore: this task is done
            if isinstance(out, Resend):
                _resend(self, out)
            return out

        run.__name__, run.__qualname__, run.__doc__ = body.__name__, body.__qualname__, body.__doc__
        run.__module__ = body.__module__
        # the body's own parameters after ``self``: Celery's argument check and its log-context
        # signal (``connect_task_context``) see the task's real arguments
        self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        run.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[self_param, *signature.parameters.values()])
        run.rsi_policy = policy  # type: ignore[attr-defined]  # marks a wrapped task (tests)
        # shared=False: Celery would otherwise register the task on every app created later in the
        # process too, bound to this app's context (a hidden global; a second app's own task lost)
        return app.task(name=name, bind=True, shared=False, ignore_result=not keep_result)(run)

    return register

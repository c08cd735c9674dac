"""Deterministic replay of an exploration policy on a frozen tree (docs/dream/replay.md).

:class:`ReplayQuestion` holds one episode's state: which cells are revealed, which are legal, the
batch rules and the stop rules. :func:`run_episode` drives one policy session through it. Nothing is
generated: a revealed cell's outcome is the recorded one. :class:`LiveQuestion` is the same question
over a live task, whose cells are generated when they are chosen.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from rsi_common.math.dream import GridPlan, GridPlanningContext, ReplayEpisode, make_normalizer, validate_grid
from rsi_worker.dream.simtasks import SearchTask
from rsi_worker.dream.tree import Cell, TreeWorld, cell_id
from rsi_worker.dream.view import PolicyView, view_from_data

__all__ = [
    "ROOT",
    "STOP_REASONS",
    "EpisodeResult",
    "LiveQuestion",
    "Mode",
    "PolicyFailure",
    "PolicySession",
    "PolicyTimeout",
    "ReplayQuestion",
    "run_episode",
]

ROOT = "r"
Mode = Literal["production", "paper"]
STOP_REASONS = ("policy_stop", "K2", "exhausted", "out_of_support", "invalid_plan", "timeout", "error")
HARD_MAX_BRANCHES = 10
HARD_MAX_REFINE = 19


class PolicyFailure(Exception):
    """The policy raised, returned something malformed, or its sandbox died: stop ``error``."""


class PolicyTimeout(Exception):
    """The episode's wall-time limit passed: stop ``timeout``."""


class PolicySession(Protocol):
    """One episode's policy: what :func:`run_episode` calls (docs/dream/policies.md)."""

    def plan_grid(self, ctx: GridPlanningContext) -> GridPlan:
        """The grid plan (raises :class:`PolicyFailure` / :class:`PolicyTimeout`)."""

    def choose(self, view: PolicyView, beta: float) -> list[str]:
        """The next batch of cell ids; ``[]`` stops."""


class ReplayQuestion:
    """One episode over a recorded world. ``K2`` defaults to the world's number of non-root cells."""

    replay = True

    def __init__(
        self, world: TreeWorld, *, mode: Mode = "production", W: int = 4, K2: int | None = None
    ) -> None:
        if W < 1:
            raise ValueError("W must be at least 1")
        self.world, self.mode, self.W = world, mode, W
        self.K2 = world.n_cells if K2 is None else K2
        self.revealed: list[Cell] = []
        self._last: dict[int, int] = {}  # branch -> last revealed attempt
        self._branch_limit: int | None = None
        self._attempt_limit: int | None = None
        self.rounds = 0
        # Unopened branches in creation order of their a0 (the "earliest" order).
        self._order = [c.branch for c in world.cells if c.attempt == 0]

    # -- structure (overridden by LiveQuestion) --------------------------------------------------
    @property
    def baseline(self) -> float:
        return self.world.baseline

    def _exists(self, branch: int, attempt: int) -> bool:
        return cell_id(branch, attempt) in self.world.by_id

    def _reveal(self, branch: int, attempt: int) -> Cell:
        return self.world.by_id[cell_id(branch, attempt)]

    def planning_context(self) -> GridPlanningContext:
        """The context ``plan_grid`` sees: hard caps, W, fallbacks and the recorded grid."""
        b, r = self.world.grid
        return GridPlanningContext(
            HARD_MAX_BRANCHES,
            HARD_MAX_REFINE,
            self.W,
            min(4, b),
            min(2, r),
            trace_branch_count=b,
            trace_refine_count=r,
        )

    # -- rules -------------------------------------------------------------------------------------
    def restrict(self, plan: GridPlan) -> None:
        """Limit the episode to the plan's first B branches (creation order) and attempts ≤ R."""
        self._branch_limit, self._attempt_limit = plan.branch_count, plan.refine_count

    def _allowed_branches(self) -> list[int]:
        return self._order if self._branch_limit is None else self._order[: self._branch_limit]

    def _next_of(self, branch: int) -> int | None:
        a = self._last[branch] + 1
        if self._attempt_limit is not None and a > self._attempt_limit:
            return None
        return a if self._exists(branch, a) else None

    def legal_ids(self) -> list[str]:
        """Legal cell ids now: unopened roots (``"r"`` in paper mode), then each opened branch's next
        recorded attempt."""
        out: list[str] = []
        unopened = [b for b in self._allowed_branches() if b not in self._last]
        if unopened:
            out.extend([ROOT] if self.mode == "paper" else [cell_id(b, 0) for b in unopened])
        for b in self._last:
            a = self._next_of(b)
            if a is not None:
                out.append(cell_id(b, a))
        return out

    def _resolve(self, cid: str, taken_roots: int) -> tuple[int, int]:
        if cid == ROOT:
            unopened = [b for b in self._allowed_branches() if b not in self._last]
            return unopened[taken_roots], 0
        b, _, a = cid[1:].partition("a")
        return int(b), int(a)

    def check_batch(self, batch: Sequence[Any]) -> str | None:
        """The first rule ``batch`` breaks, or None (an empty batch is the stop, not checked here)."""
        if not isinstance(batch, (list, tuple)) or not all(isinstance(x, str) for x in batch):
            return "a batch must be a list of cell ids"
        if len(batch) > self.W:
            return f"{len(batch)} cells in a batch of at most W = {self.W}"
        if len(set(batch)) != len(batch):
            return "a cell appears twice in the batch"
        legal = set(self.legal_ids())
        for cid in batch:
            if cid not in legal:
                return f"cell {cid[:40]!r} is not legal now"
        if self.mode == "paper" and batch.count(ROOT) > 1:
            return "the root may be chosen at most once per batch"
        branches = [self._resolve(c, 0)[0] for c in batch]
        if len(set(branches)) != len(branches):
            return "two cells of one branch in a batch (a parent with its child, or a branch twice)"
        return None

    def reveal(self, batch: Sequence[str]) -> None:
        """Reveal a checked batch and count one round."""
        roots = 0
        resolved = []
        for cid in batch:
            resolved.append(self._resolve(cid, roots))
            roots += cid == ROOT
        for b, a in resolved:
            self.revealed.append(self._reveal(b, a))
            self._last[b] = a
        self.rounds += 1

    def snapshot(self) -> dict[str, Any]:
        """The view data: revealed cells in full, legal cells structurally, nothing else."""
        base = self.baseline
        scores = {c.id: c.score for c in self.revealed}
        revealed = []
        for c in self.revealed:
            parent = base if c.attempt == 0 else scores.get(c.parent)
            revealed.append(
                {
                    "id": c.id,
                    "branch": c.branch,
                    "attempt": c.attempt,
                    "parent": c.parent,
                    "score": c.score,
                    "evaluated": c.score is not None,
                    "valid": c.valid,
                    "fail_class": c.fail_class,
                    "error": c.error,
                    "delta_vs_baseline": None if c.score is None else c.score - base,
                    "delta_vs_parent": None if c.score is None or parent is None else c.score - parent,
                }
            )
        legal = []
        for cid in self.legal_ids():
            if cid == ROOT:
                legal.append(
                    {"id": ROOT, "branch": None, "attempt": 0, "parent": None, "seq": -1, "score": None}
                )
                continue
            b, a = self._resolve(cid, 0)
            legal.append(
                {
                    "id": cid,
                    "branch": b,
                    "attempt": a,
                    "parent": "r" if a == 0 else cell_id(b, a - 1),
                    "seq": -1,
                    "score": None,
                }
            )
        return {
            "revealed": revealed,
            "legal": legal,
            "width": self.W,
            "baseline": base,
            "round": self.rounds,
            "rounds_left": self.K2 - self.rounds,
        }

    def view(self) -> PolicyView:
        """The closures over a fresh snapshot."""
        return view_from_data(self.snapshot(), fresh=True)  # built anew, so already private

    def floor(self) -> float:
        return self.world.floor

    def all_scores(self) -> list[float]:
        return self.world.recorded_scores

    @property
    def n_max(self) -> int:
        return self.world.n_cells

    @property
    def world_id(self) -> str:
        return self.world.world_id


class LiveQuestion(ReplayQuestion):
    """The same rules over a live task: any cell of the task's grid exists and is generated (and paid
    for) when it is revealed. ``recorded()`` is the tree the episode leaves behind."""

    replay = False

    def __init__(self, task: SearchTask, *, world_id: str, W: int = 4, K2: int | None = None) -> None:
        self.task = task
        B, R = task.grid
        placeholder = TreeWorld.build(world_id, task.task_id, task.baseline, [], (B, R))
        super().__init__(placeholder, mode="production", W=W, K2=B * (R + 1) if K2 is None else K2)
        self._order = list(range(B))
        self._seq = 0

    @property
    def baseline(self) -> float:
        return self.task.baseline

    def _exists(self, branch: int, attempt: int) -> bool:
        B, R = self.task.grid
        return 0 <= branch < B and 0 <= attempt <= R

    def _reveal(self, branch: int, attempt: int) -> Cell:
        out = self.task.evaluate(branch, attempt)
        cell = Cell(branch, attempt, self._seq, out.score, out.valid, out.fail_class, out.error, out.tokens)
        self._seq += 1
        return cell

    def planning_context(self) -> GridPlanningContext:
        B, R = self.task.grid
        return GridPlanningContext(
            min(HARD_MAX_BRANCHES, B), min(HARD_MAX_REFINE, R), self.W, min(4, B), min(2, R)
        )

    def floor(self) -> float:
        return min([self.baseline, *(c.score for c in self.revealed if c.score is not None)])

    def all_scores(self) -> list[float]:
        return [self.baseline, *(c.score for c in self.revealed if c.score is not None)]

    @property
    def n_max(self) -> int:
        B, R = self.task.grid
        return B * (R + 1)

    def recorded(self, meta: dict[str, Any] | None = None) -> TreeWorld:
        """The explored cells as a frozen world (its grid = the plan the episode ran)."""
        B = self._branch_limit or self.task.grid[0]
        R = self.task.grid[1] if self._attempt_limit is None else self._attempt_limit
        B = max(B, len({c.branch for c in self.revealed}))
        return TreeWorld.build(
            self.world.world_id,
            self.task.task_id,
            self.baseline,
            self.revealed,
            (B, R),
            meta or {"origin": "live"},
        )


@dataclass
class EpisodeResult:
    """One episode: the Eq.1 inputs, the trace and what it cost."""

    episode: ReplayEpisode
    trace: list[list[str]] = field(default_factory=list)
    plan: dict[str, Any] | None = None
    tokens: int = 0
    best_score: float = 0.0
    """Best raw score reached (the baseline included), on the task's own scale."""
    message: str = ""

    @property
    def stop_reason(self) -> str:
        return self.episode.stop_reason

    def to_json(self) -> dict[str, Any]:
        """JSON of every field (``episode`` as :meth:`ReplayEpisode.to_json`)."""
        return {
            "episode": self.episode.to_json(),
            "trace": self.trace,
            "plan": self.plan,
            "tokens": self.tokens,
            "best_score": self.best_score,
            "message": self.message,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> EpisodeResult:
        """Inverse of :meth:`to_json`."""
        return cls(
            ReplayEpisode.from_json(d["episode"]),
            [list(b) for b in d["trace"]],
            d.get("plan"),
            int(d["tokens"]),
            float(d["best_score"]),
            str(d.get("message", "")),
        )


def _plan(
    question: ReplayQuestion, session: PolicySession, validate: bool
) -> tuple[GridPlan | None, str, str]:
    ctx = question.planning_context()
    plan = session.plan_grid(ctx)
    if not validate:
        return plan, "", ""
    validity = validate_grid(plan, ctx, replay=question.replay)
    if not validity.valid:
        return None, "invalid_plan", "; ".join(validity.reasons)
    if not validity.in_support:
        return None, "out_of_support", "; ".join(validity.reasons)
    return plan, "", ""


def run_episode(
    question: ReplayQuestion, session: PolicySession, beta: float, *, validate_plan: bool | None = None
) -> EpisodeResult:
    """Play one episode to its stop (docs/dream/replay.md#stop-reasons).

    ``validate_plan`` defaults to production mode. What was revealed before a stop is kept.
    """
    validate = question.mode == "production" if validate_plan is None else validate_plan
    norm = make_normalizer(
        question.all_scores() if question.replay else [question.baseline],
        question.baseline,
        "production" if question.replay else "paper",
    )
    floor = question.floor()
    sizes: list[int] = []
    trace: list[list[str]] = []
    plan_json: dict[str, Any] | None = None
    message = ""
    stop = ""
    try:
        plan, stop, message = _plan(question, session, validate)
        if plan is not None:
            plan_json = plan.to_json()
            if validate:
                question.restrict(plan)
        while not stop:
            if not question.legal_ids():
                stop = "exhausted"
                break
            if question.rounds >= question.K2:
                stop = "K2"
                break
            batch = session.choose(question.view(), beta)
            if isinstance(batch, (list, tuple)) and len(batch) == 0:
                sizes.append(0)
                stop = "policy_stop"
                break
            broken = question.check_batch(batch)
            if broken:
                stop, message = "error", f"illegal batch: {broken}"
                break
            question.reveal(batch)
            sizes.append(len(batch))
            trace.append(list(batch))
    except PolicyTimeout as exc:
        stop, message = "timeout", str(exc)[:500]
    except PolicyFailure as exc:
        stop, message = "error", str(exc)[:500]
    except Exception as exc:
        stop, message = "error", f"{type(exc).__name__}: {str(exc)[:400]}"
    return _result(question, norm, floor, sizes, trace, plan_json, beta, stop, message)


def _result(
    question: ReplayQuestion,
    norm: Any,
    floor: float,
    sizes: list[int],
    trace: list[list[str]],
    plan_json: dict[str, Any] | None,
    beta: float,
    stop: str,
    message: str,
) -> EpisodeResult:
    scores = [floor if c.score is None else c.score for c in question.revealed]
    curve: list[tuple[float, float]] = [(0.0, norm(question.baseline))]
    best = norm(question.baseline)
    n = 0
    for batch in trace:
        for _ in batch:
            best = max(best, norm(scores[n]))
            n += 1
        curve.append((float(n), best))
    ep = ReplayEpisode(
        question.world_id,
        beta,
        tuple(sizes),
        tuple(scores),
        question.baseline,
        len(scores),
        question.rounds,
        question.W,
        question.n_max,
        stop,
        tuple(curve),
    )
    tokens = sum(c.tokens for c in question.revealed)
    best_raw = max([question.baseline, *scores])
    return EpisodeResult(ep, trace, plan_json, tokens, best_raw, message)

"""The noise band δ (RRSI Eq.5; docs/algorithm/formulas.md §2.9): bootstrap and repeated base evaluations.

Bit-equal results require Python's Mersenne Twister and ``randrange``, the draw order below, and
the left-to-right sums; do not vectorise. The bootstrap takes its ``randrange`` draws in bulk
(:mod:`rsi_common.math.draws`: the same indices in the same order) when the interpreter allows it.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections.abc import Sequence

from rsi_common.errors import InvalidInput
from rsi_common.math import _validate as v
from rsi_common.math import draws
from rsi_common.math.estimator import aggregate
from rsi_common.math.reports import Calibration
from rsi_common.math.values import EvalResult, TaskResult, Token

__all__ = ["DEFAULT_REPS", "DEFAULT_SEED", "bootstrap_se", "calibrate", "pooled"]

DEFAULT_SEED = 7
"""Seed of the bootstrap generator."""
DEFAULT_REPS = 2000
"""Bootstrap replicates."""


def bootstrap_se(ev: EvalResult, reps: int = DEFAULT_REPS, rng: random.Random | None = None, *,
                 seed: int = DEFAULT_SEED) -> float:
    """Standard error of Ŝ by resampling trials within each task (score units).

    Tasks with at least one reward, in ``per_task`` order. Per replicate, per task with n trials:
    draw n indices one after another with ``i = rng.randrange(n)``, adding ``r_i·w_i`` to ``num``
    and ``w_i`` to ``den``; the replicate is ``num/den`` (0.0 if den = 0). Returns
    ``statistics.pstdev(replicates)`` (0.0 if reps < 2).

    Args:
        ev: the evaluation. reps: replicates (≥ 0).
        rng: the generator; defaults to ``random.Random(seed)``.

    Raises:
        InvalidInput: ``reps < 0``.
    """
    v.integer("reps", reps, 0)
    gen = random.Random(seed) if rng is None else rng
    tasks = [(tr.rewards, tr.weight_list(), len(tr.rewards)) for tr in ev.per_task.values() if tr.rewards]
    if type(gen) is random.Random and all(n < 2**32 for *_, n in tasks) and draws.available():
        bulk = _replicates_in_bulk(gen, tasks, reps)
        return statistics.pstdev(bulk) if reps >= 2 else 0.0
    replicates: list[float] = []
    for _ in range(reps):
        num = 0.0
        den = 0.0
        for rewards, weights, n in tasks:
            for _ in range(n):
                i = gen.randrange(n)
                num += rewards[i] * weights[i]
                den += weights[i]
        replicates.append(num / den if den else 0.0)
    return statistics.pstdev(replicates) if reps >= 2 else 0.0


def _replicates_in_bulk(gen: random.Random, tasks: Sequence[tuple[Sequence[float], Sequence[float], int]],
                        reps: int) -> list[float]:
    """:func:`bootstrap_se`'s replicates with the indices from :class:`~rsi_common.math.draws.Draws`:
    the same draws, products and left-to-right sums, so the same floats; the generator ends where
    ``randrange`` leaves it."""
    bulk = draws.Draws(gen)
    nxt = bulk.next
    rejected = 0
    order: list[tuple[int, int, list[tuple[float, float]]]] = []  # one entry per draw of a replicate
    for rewards, weights, n in tasks:
        order += [(n, 32 - n.bit_length(), [(r * w, w) for r, w in zip(rewards, weights, strict=False)])] * n
    replicates: list[float] = []
    for _ in range(reps):
        num = 0.0
        den = 0.0
        for n, shift, terms in order:
            i = nxt() >> shift
            while i >= n:
                rejected += 1
                i = nxt() >> shift
            product, weight = terms[i]
            num += product
            den += weight
        replicates.append(num / den if den else 0.0)
    bulk.used = reps * len(order) + rejected
    bulk.close()
    return replicates


def pooled(evals: Sequence[EvalResult]) -> EvalResult:
    """Concatenate, per task id, the trials of all evaluations and re-aggregate.

    Task order = first appearance over the evaluations in order; ``k = Σ ev.k``; job ``"pooled"``.
    Weights (tokens) are expanded to 1.0 (``None``) per trial where an evaluation left them empty,
    and stay empty only if every part was empty. Task ``extra`` and evaluation ``extra`` are not
    carried over (project decision).

    Raises:
        InvalidInput: ``evals`` is empty.
    """
    if not evals:
        raise InvalidInput("pooled: no evaluations")
    parts: dict[str, list[TaskResult]] = {}
    for ev in evals:
        for x, tr in ev.per_task.items():
            parts.setdefault(x, []).append(tr)
    per_task: dict[str, TaskResult] = {}
    for x, trs in parts.items():
        rewards = tuple(itertools.chain.from_iterable(tr.rewards for tr in trs))
        any_w = any(tr.weights for tr in trs)
        any_t = any(tr.tokens for tr in trs)
        weights = tuple(itertools.chain.from_iterable(tr.weight_list() for tr in trs)) if any_w else ()
        tokens: tuple[Token, ...] = (tuple(itertools.chain.from_iterable(tr.token_list() for tr in trs))
                                     if any_t else ())
        per_task[x] = TaskResult(rewards, weights, tokens, sum(tr.missing for tr in trs))
    return aggregate(per_task, sum(ev.k for ev in evals), job="pooled")


def calibrate(evals: Sequence[EvalResult], z: float = 2.0, reps: int = DEFAULT_REPS, *,
              seed: int = DEFAULT_SEED) -> Calibration:
    """δ = round(z · sd, 6) from base evaluations of the incumbent.

    * R ≥ 2: ``sd_null = stdev([ev.S]) · √2`` (the s.d. of a difference of two evaluations),
      method ``"repeated base evaluations"``, plus ``S_per_eval`` and ``max_abs_diff`` (largest
      pairwise |S_i − S_j|), both unrounded (docs/algorithm/README.md lists every rounded field; these are
      not among them).
    * always: ``se = bootstrap_se(pooled(evals), reps, random.Random(seed))``,
      ``sd_boot = √2 · se · √(k_pooled / k_first)``.
    * ``sd_null`` is used when R ≥ 2 and ``sd_null > 0``, else ``sd_boot``. For R ≥ 2 with identical
      scores the method names the bootstrap fallback (project decision; it starts with "bootstrap").

    Raises:
        InvalidInput: ``evals`` is empty, ``z`` negative or not finite, ``reps < 0``.
    """
    if not evals:
        raise InvalidInput("calibrate: no base evaluations")
    z = v.non_negative("z", z)
    R = len(evals)
    pool = pooled(evals)
    se = bootstrap_se(pool, reps, random.Random(seed))
    sd_boot = math.sqrt(2) * se * math.sqrt(pool.k / evals[0].k)
    sd_null: float | None = None
    S_per_eval: tuple[float, ...] | None = None
    max_abs_diff: float | None = None
    if R >= 2:
        scores = [ev.S for ev in evals]
        sd_null = statistics.stdev(scores) * math.sqrt(2)
        S_per_eval = tuple(scores)
        max_abs_diff = max(abs(a - b) for a, b in itertools.combinations(scores, 2))
    if sd_null is not None and sd_null > 0:
        sd_used, method = sd_null, "repeated base evaluations"
    elif R == 1:
        sd_used, method = sd_boot, "bootstrap over trials of one base evaluation"
    else:
        sd_used = sd_boot
        method = f"bootstrap over trials of {R} pooled base evaluations (their scores are identical)"
    return Calibration(
        delta=round(z * sd_used, 6),
        z=z,
        sd_null=None if sd_null is None else round(sd_null, 6),
        sd_null_bootstrap=round(sd_boot, 6),
        se_bootstrap=round(se, 6),
        method=method,
        n_evals=R,
        k=evals[0].k,
        n_tasks=len(pool.per_task),
        S_base=round(pool.S, 6),
        C_base=pool.C,
        S_per_eval=S_per_eval,
        max_abs_diff=max_abs_diff,
    )

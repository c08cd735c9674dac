"""A generated task suite for the sim model (docs/algorithm/evolve.md#the-sim-suite): request-backed tasks
whose checks need sim traits the H0 harness lacks, with a held-out split of unseen requests."""

from __future__ import annotations

import random
from collections.abc import Sequence

from rsi_worker.bench.efficacy_pool import TOPICS, criterion
from rsi_worker.evolve.suite import SUITE_SCHEMA, Suite, validate_suite

__all__ = ["sim_suite"]


def sim_suite(
    name: str = "sim-suite",
    *,
    n_tasks: int = 8,
    n_heldout: int = 4,
    traits: Sequence[str] = ("table", "cite"),
    seed: int = 7,
) -> Suite:
    """``n_tasks`` evolve tasks and ``n_heldout`` held-out tasks, each an English request of the efficacy
    pool's topics with 2–4 items, checked by one judge criterion per trait (the trait's first wording).
    Held-out requests use topics and item sets no evolve task uses when there are enough topics."""
    rng = random.Random(seed)
    topics = sorted(TOPICS)
    rng.shuffle(topics)
    split = max(1, len(topics) // 3)
    held_topics, evolve_topics = topics[:split], topics[split:]
    checks = [{"kind": "answer_criteria", "name": t, "criterion": criterion(t)} for t in traits]

    def request(topic: str) -> str:
        templates, _, items = TOPICS[topic]
        chosen = rng.sample(list(items), rng.randint(2, min(4, len(items))))
        return rng.choice(templates).format(items=", ".join(f"{n} {q}" for n, q in chosen))

    tasks = [
        {"id": f"e{i:03d}", "request": request(evolve_topics[i % len(evolve_topics)]), "checks": checks}
        for i in range(n_tasks)
    ]
    held = [
        {"id": f"h{i:03d}", "request": request(held_topics[i % len(held_topics)]), "checks": checks}
        for i in range(n_heldout)
    ]
    return validate_suite(
        {"schema": SUITE_SCHEMA, "name": name, "tasks": [*tasks, *held], "heldout": [t["id"] for t in held]}
    )

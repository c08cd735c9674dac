"""What a long operator job shows while it runs and prints when it ends — one module for ``rsi batch`` and
``rsi evolve run`` (docs/operations/jobs.md).

* :class:`JobProgress`: a progress bar on stderr (silent with ``--json``, so stdout stays the job's
  report): ``<kind> <name>``, a bar of units done over the total (agents of a batch, rounds of an evolve
  run), the outcome counts (``adopted=2 kept=1``) and the elapsed time.
* :func:`poll_until`: wait on durable state (SQL) for a job that runs elsewhere, never on a result.
* :func:`outcome_table`: the end-of-job summary, one row per outcome with its count and first units.

A job's identity and resume live in its durable rows, not here: ``rsi batch --name`` (runs of kind
``batch:<name>``) and ``rsi evolve run NAME`` (the run's rows) both continue where a killed invocation
stopped; this module only shows them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = ["JobProgress", "outcome_table", "poll_until"]

T = TypeVar("T")
POLL_S = 0.5
"""Seconds between two reads of a job's state."""


class JobProgress:
    """Units done of a job, counted by outcome (see the module docstring). Use :meth:`show`."""

    def __init__(self, progress: Any, task: Any) -> None:
        self._progress, self._task = progress, task
        self.counts: dict[str, int] = {}

    @classmethod
    @contextmanager
    def show(cls, kind: str, name: str, total: int, *, quiet: bool) -> Iterator[JobProgress]:
        """A bar for job ``kind`` ``name`` of ``total`` units on stderr (nothing when ``quiet``)."""
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        console = Console(stderr=True, quiet=quiet)
        columns = (TextColumn(f"[bold]{kind} {{task.fields[name]}}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[counts]}"), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=False) as progress:
            yield cls(progress, progress.add_task(kind, total=total, name=name, counts=""))

    def advance(self, outcome: str, n: int = 1) -> None:
        """``n`` more units ended with ``outcome``."""
        self.counts[outcome] = self.counts.get(outcome, 0) + n
        text = " ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))
        self._progress.update(self._task, advance=n, counts=text)


def poll_until(read: Callable[[], T | None], *, interval_s: float = POLL_S) -> T:
    """Call ``read`` every ``interval_s`` seconds until it returns something other than ``None``."""
    while True:
        value = read()
        if value is not None:
            return value
        time.sleep(interval_s)


def outcome_table(title: str, by_outcome: Mapping[str, Sequence[str]], *, unit: str, first: int = 5) -> None:
    """Print one row per outcome: its name, how many ``unit`` (column title), the first ``first`` of them."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    table.add_column("status")
    table.add_column(unit, justify="right")
    table.add_column("examples", overflow="fold")
    for outcome, units in sorted(by_outcome.items()):
        more = f" (+{len(units) - first})" if len(units) > first else ""
        table.add_row(outcome, str(len(units)), ", ".join(units[:first]) + more)
    Console().print(table)

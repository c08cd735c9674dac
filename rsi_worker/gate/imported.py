"""The gate's checks for a harness imported from a checkpoint file (docs/operations.md#harness-checkpoints).

A checkpoint file is hostile input like a model's candidate: it may change a locked address, raise a
privilege, or carry a credential or a platform setting. ``load_checkpoint`` has already refused a
tampered or malformed file and unsafe paths; :func:`import_reasons` applies the deterministic stages
of :func:`~rsi_worker.gate.screen.screen` that do not depend on a consolidation round, against the
agent's current harness:

1. ``manifest`` — no locked address, platform field or listed file violated (``touched``);
2. ``privilege`` — :func:`~rsi_worker.gate.privileges.privilege_violations` with the configured ceilings;
3. ``precheck`` — the pattern precheck over the added lines (credentials, platform setting names).

The surface stage (no-op, growth budget) and the untrusted-text stage are round concepts (they compare
with a round's worlds and the proposer's budget) and do not apply to an operator's import.
"""

from __future__ import annotations

from collections.abc import Mapping

from rsi_common.harness import Harness, diff_trees, touched, workspace_of
from rsi_worker.gate.precheck import precheck
from rsi_worker.gate.privileges import privilege_violations

__all__ = ["import_reasons"]


def import_reasons(current: Harness, imported: Harness, ceilings: Mapping[str, float]) -> list[str]:
    """Every reason ``imported`` may not replace ``current``, each prefixed with its stage; ``[]`` =
    passes."""
    ts = touched(current, imported)
    reasons = [f"manifest: {v}" for v in ts.violations]
    reasons += [f"privilege: {r}" for r in privilege_violations(current, imported, ceilings)]
    diff = diff_trees(workspace_of(current), workspace_of(imported))
    if diff.strip():  # the same content as the current harness adds nothing to check
        reasons += precheck(diff)  # its reasons carry their "precheck: " stage already
    return reasons

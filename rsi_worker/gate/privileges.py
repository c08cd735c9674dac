"""The privilege screen: a candidate may not widen what the agent can do (docs/security/gate.md,
"Privileges").

Refused, whatever the critic says:

* **Tool exposure raised** — the candidate exposes host tools the incumbent does not: an enabled
  ``client_tool`` component turns on ``restore_from_history`` or ``gate_reachability`` where none of
  the incumbent's did (this includes adding or enabling a ``client_tool`` component). Tools a
  registered component contributes itself (``ReadSkill``) read only the harness's own files and are
  not host tools.
* **Safety mechanism disabled** — one of :data:`SAFETY_SWITCHES` is on in the incumbent and off in
  the candidate (by a param, or by disabling or removing the component that held it).
* **Locked component disabled** — a component with any locked address (its id, ``enabled``, a param
  leaf or a file) is disabled or removed.
* **Limit raised above its ceiling** — a numeric param listed in the configured ceilings
  (``ConsolidationParams.ceilings``, ``"<kind>.<param>"`` → ceiling) is above its ceiling in the
  candidate and higher than in the incumbent (an incumbent already above it may keep or lower it).

Params a component does not set take the component class's default (``PARAMS``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rsi_common.harness import Harness, Manifest, is_locked
from rsi_common.harness.addresses import component_values
from rsi_common.harness.manifest import ComponentSpec
from rsi_common.kernel.components import effective_params

__all__ = ["EXPOSURE_SWITCHES", "SAFETY_SWITCHES", "privilege_violations"]

Switch = Callable[[Mapping[str, Any]], bool]


def _flag(key: str) -> Switch:
    return lambda p: p.get(key) is True


def _positive(*keys: str) -> Switch:
    return lambda p: all(
        isinstance(p.get(k), (int, float)) and not isinstance(p.get(k), bool) and p[k] > 0 for k in keys
    )


SAFETY_SWITCHES: tuple[tuple[str, str, Switch], ...] = (
    ("compaction budget guard", "context_mgmt", _flag("guard")),
    ("completion review", "control_flow", _flag("completion_review")),
    ("repeat-stop", "control_flow", _positive("repeat_stop_after")),
    ("turn input budget", "control_flow", _positive("turn_budget_soft", "turn_budget_hard")),
    ("gate reachability", "client_tool", _flag("gate_reachability")),
)
"""(name, kind, is it on for a component's effective params)."""
EXPOSURE_SWITCHES: tuple[tuple[str, str, Switch], ...] = (
    ("restore_from_history", "client_tool", _flag("restore_from_history")),
    ("gate_reachability", "client_tool", _flag("gate_reachability")),
)
"""(param, kind, is it on): each one exposes host tools the model would not see otherwise."""


def _on(m: Manifest, kind: str, switch: Switch) -> bool:
    return any(switch(effective_params(c)) for c in m.enabled_components() if c.kind == kind)


def _locked_component(m: Manifest, files: Mapping[str, str], c: ComponentSpec) -> bool:
    return any(is_locked(a, m.locked) for a in component_values(c, files))


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _highest(m: Manifest, kind: str, param: str) -> float | None:
    values = [_number(effective_params(c).get(param)) for c in m.enabled_components() if c.kind == kind]
    known = [v for v in values if v is not None]
    return max(known) if known else None


def privilege_violations(inc: Harness, cand: Harness, ceilings: Mapping[str, float]) -> list[str]:
    """The privilege screen's reasons (module docstring); ``[]`` = nothing widened."""
    a, b = inc.manifest, cand.manifest
    out: list[str] = []
    for param, kind, switch in EXPOSURE_SWITCHES:
        if _on(b, kind, switch) and not _on(a, kind, switch):
            out.append(f"privilege: tool exposure raised ({kind} {param} turned on)")
    for name, kind, switch in SAFETY_SWITCHES:
        if _on(a, kind, switch) and not _on(b, kind, switch):
            out.append(f"privilege: safety mechanism disabled ({name})")
    cand_enabled = {c.id for c in b.enabled_components()}
    for c in a.enabled_components():
        if c.id not in cand_enabled and _locked_component(a, inc.files, c):
            out.append(f"privilege: locked component {c.id} disabled or removed")
    for key, ceiling in sorted(ceilings.items()):
        kind, _, param = key.partition(".")
        new, old = _highest(b, kind, param), _highest(a, kind, param)
        if new is not None and new > ceiling and (old is None or new > old):
            out.append(f"privilege: {key} raised to {new:g}, above its ceiling {ceiling:g}")
    return out

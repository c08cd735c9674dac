"""PV1 and PV2 of the privilege stage of the one gate (docs/runtime/refine.md#privilege-screen).

Model-free, over the candidate workspace:

* **PV1** — a ``tools`` entry outside the grant or the incumbent's lists: every list named
  ``tools`` (at any depth of a component's ``params``) in the candidate manifest may hold only tool
  names the agent's grant holds (``GateRound.granted_tools``; ``None`` = no grant is known) or that
  some ``tools`` list of the incumbent already holds. Refinements never widen privileges.
* **PV2** — ``disable``/``remove_component`` of a component whose ``<id>.enabled`` address is
  locked in the incumbent. It is read from the candidate's raw ``manifest.json`` before the
  manifest is loaded, so it is reported even when the candidate would not load (disabling the last
  component of a kind).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from rsi_common.harness import Harness, is_locked

__all__ = ["granted_tools_violations", "locked_disable_violations", "tools_lists"]


def tools_lists(params: Any, path: str = "params") -> Iterator[tuple[str, list[str]]]:
    """``(address, entries)`` of every list named ``tools`` under ``params`` (depth first)."""
    if isinstance(params, Mapping):
        for key, value in params.items():
            where = f"{path}.{key}"
            if key == "tools" and isinstance(value, list):
                yield where, [str(v) for v in value]
            else:
                yield from tools_lists(value, where)
    elif isinstance(params, list):
        for i, value in enumerate(params):
            yield from tools_lists(value, f"{path}[{i}]")


def _components(manifest: Any) -> list[Mapping[str, Any]]:
    comps = manifest.get("components") if isinstance(manifest, Mapping) else None
    return [c for c in comps or [] if isinstance(c, Mapping)]


def _raw_manifest(ws: Mapping[str, str]) -> Any:
    try:
        return json.loads(ws.get("manifest.json", "{}"))
    except ValueError:
        return {}


def granted_tools_violations(inc: Harness, ws: Mapping[str, str], granted: Sequence[str] | None) -> list[str]:
    """PV1 reasons (module docstring); ``[]`` = no tool beyond the grant."""
    allowed = set(granted or ())
    for c in inc.manifest.components:
        for _, entries in tools_lists(dict(c.params)):
            allowed.update(entries)
    out: list[str] = []
    for raw in _components(_raw_manifest(ws)):
        cid = str(raw.get("id", "?"))
        for where, entries in tools_lists(raw.get("params") or {}):
            for tool in entries:
                if tool not in allowed:
                    out.append(f"privilege: PV1 tool {tool!r} at {cid}.{where} is outside the grant")
    return list(dict.fromkeys(out))


def locked_disable_violations(inc: Harness, ws: Mapping[str, str]) -> list[str]:
    """PV2 reasons (module docstring); ``[]`` = no locked component disabled or removed."""
    cand = {str(c.get("id")): c for c in _components(_raw_manifest(ws))}
    out: list[str] = []
    for c in inc.manifest.components:
        if not c.enabled or not is_locked(f"{c.id}.enabled", inc.manifest.locked):
            continue
        now = cand.get(c.id)
        if now is None:
            out.append(f"privilege: PV2 locked component {c.id} removed")
        elif now.get("enabled", True) is not True:
            out.append(f"privilege: PV2 locked component {c.id} disabled")
    return out

"""Sub-agent calls of a host or operator: spawn, wait, catalog edits (docs/runtime/README.md#host-api).

The bodies of :meth:`RuntimeClient.spawn`, :meth:`RuntimeClient.wait` and
:meth:`RuntimeClient.set_subagent_spec`. Every input is checked before anything is written; a refusal
raises :class:`~rsi_common.errors.InvalidInput` (a :class:`RuntimeRefusal` for an admission check)
naming the field.

* **Host spawn** runs R2.3's admission from the parent's catalog (the root's registration, D12) and
  grant; the handle is unique on ``(parent, "host:<request_id>", "spawn")`` (D42), so a retry with the
  same request id returns the first handle and writes nothing.
* **Host wait** blocks on ``rsi:sa:{h}:done`` (``BLPOP``, re-pushed so other waiters see it),
  re-reading SQL after each wake and at least every :data:`WAIT_POLL_S`, until the handles are settled
  (all, or any with ``mode="any"``) or ``min(timeout_s, WAIT_CAP_S)`` passes. It holds no tree slot.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from rsi_common.boundary import check_id
from rsi_common.config import RuntimeParams
from rsi_common.db.runtime_models import AgentRuntimeRow, SubagentRow
from rsi_common.errors import InvalidInput
from rsi_common.runtime import keys
from rsi_common.runtime.caps import resolve_caps
from rsi_common.runtime.host_checks import check_object, check_session, check_text_field
from rsi_common.runtime.subagents import (
    LIVE,
    MAX_INPUT_CHARS,
    SETTLED,
    SPEC_NAME,
    RuntimeRefusal,
    SpawnRequest,
    SpecEntry,
    item,
    spawn,
)
from rsi_common.runtime.tree import _catalog, add_event, get_runtime

__all__ = ["MAX_WAIT_HANDLES", "WAIT_POLL_S", "host_spawn", "host_wait", "set_spec"]

MAX_WAIT_HANDLES = 64
"""Most handles one wait names."""
WAIT_POLL_S = 5.0
"""Longest a host wait blocks on Redis before it re-reads SQL (a done mark lost to a flush)."""


def _text(value: Any, field: str, max_chars: int) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{field}: must be a string, got {type(value).__name__}")
    if len(value) > max_chars:
        raise InvalidInput(f"{field}: at most {max_chars:,} characters")
    return value


def host_spawn(factory: sessionmaker[Session], params: RuntimeParams, wake: Callable[[str, str], None],
               parent: str, spec: str, input: str, *, name: str | None = None, session: str = "main",
               request_id: str | None = None) -> dict[str, Any]:
    """Spawn a child of ``parent`` from a host; returns ``{handle, name, spec, agent, status, created}``.

    Args:
        request_id: the host's id of this call (the id grammar, ≤ 64 characters); a retry with the same
            id returns the same handle (``created`` false). ``None``: a fresh random id (no retry key).

    Raises:
        InvalidInput: a malformed field (named), an unknown or deleted parent.
        RuntimeRefusal: the first admission check that fails (``not_enabled``, ``unknown_spec``,
            ``grant_exceeded``, ``depth_limit``, ``fanout_limit``, ``cap_exceeded:<dim>``, …).
    """
    check_id(parent, "parent")
    _text(spec, "spec", 32)
    if not SPEC_NAME.match(spec):
        raise InvalidInput("spec: must match ^[a-z][a-z0-9-]{0,31}$")
    check_text_field(input, "input", MAX_INPUT_CHARS)
    if name is not None and (not isinstance(name, str) or not SPEC_NAME.match(name)):
        raise InvalidInput("name: must match ^[a-z][a-z0-9-]{0,31}$")
    check_session(session)
    rid = secrets.token_hex(12) if request_id is None else check_id(request_id, "request_id", max_chars=64)
    with factory.begin() as s:
        row = get_runtime(s, parent)
        if row.lifecycle == "deleted":
            raise InvalidInput(f"parent: agent {parent!r} is deleted")
        root = row if row.parent_id is None else get_runtime(s, row.root_id)
        raw = root.profile.get("subagents") or {}
        catalog = {k: SpecEntry(v["description"], tuple(v["tools"]), int(v["max_iterations"]))
                   for k, v in raw.items()} or None
        grant = tuple(str(t) for t in row.profile.get("tools", []))
        req = SpawnRequest(parent, session, f"host:{rid}", "spawn", spec, input, name)
        handle, created = spawn(s, params, resolve_caps(params, root.caps), req, catalog, grant)
        out: dict[str, Any] = {"handle": handle.id, "name": handle.name, "spec": handle.spec,
                               "agent": handle.child_agent, "status": handle.status, "created": created}
    if created:
        wake(out["agent"], out["handle"])
    return out


def _read(factory: sessionmaker[Session], handles: Sequence[str]) -> list[SubagentRow]:
    with factory() as s:
        found = s.execute(sa.select(SubagentRow).where(SubagentRow.id.in_(handles))).scalars()
        rows = {r.id: r for r in found}
        s.expunge_all()
    missing = [h for h in handles if h not in rows]
    if missing:
        raise RuntimeRefusal("unknown_handle", f"no such handle {missing[0][:40]!r}")
    return [rows[h] for h in handles]


def host_wait(factory: sessionmaker[Session], redis: Any, params: RuntimeParams, handles: Any,
              timeout_s: Any = None, mode: Any = "all") -> dict[str, Any]:
    """Block until ``handles`` are settled (all, or any with ``mode="any"``) or the wait times out.

    Args:
        handles: a non-empty list of at most :data:`MAX_WAIT_HANDLES` handle ids (duplicates count once).
        timeout_s: seconds ≥ 0 (default and upper bound ``WAIT_CAP_S``); 0 reads once and returns.
        mode: ``all`` or ``any``.

    Returns:
        ``{"results": [item of each settled handle], "pending": [ids still live], "timed_out": bool}``,
        in the order the handles were named.

    Raises:
        InvalidInput: a malformed field; ``unknown_handle`` for a handle that does not exist.
    """
    if (not isinstance(handles, list) or not handles or len(handles) > MAX_WAIT_HANDLES
            or not all(isinstance(h, str) for h in handles)):
        raise InvalidInput(f"handles: must be a list of 1 to {MAX_WAIT_HANDLES} handle ids")
    for h in handles:
        check_id(h, "handles", max_chars=64)
    if mode not in ("all", "any"):
        raise InvalidInput("mode: must be 'all' or 'any'")
    if timeout_s is None:
        timeout_s = params.wait_cap_s
    if (isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not math.isfinite(timeout_s)
            or timeout_s < 0):
        raise InvalidInput("timeout_s: must be a number of seconds >= 0")
    ids = list(dict.fromkeys(handles))
    deadline = time.monotonic() + min(float(timeout_s), float(params.wait_cap_s))
    while True:
        rows = _read(factory, ids)
        done = [r for r in rows if r.status in SETTLED]
        pending = [r.id for r in rows if r.status not in SETTLED]
        met = not pending or (mode == "any" and bool(done))
        left = deadline - time.monotonic()
        if met or left <= 0:
            return {"results": [item(r) for r in done], "pending": pending, "timed_out": not met}
        block = max(0.01, min(left, WAIT_POLL_S))  # never 0: BLPOP's 0 blocks forever
        popped = redis.blpop([keys.handle_done(h) for h in pending], timeout=block)
        if popped:  # put the mark back: other waiters of the same handle must see it too
            key = popped[0].decode() if isinstance(popped[0], bytes) else str(popped[0])
            redis.lpush(key, "1")
            redis.expire(key, params.child_timeout_s)


def set_spec(factory: sessionmaker[Session], root: str, name: str, spec: Mapping[str, Any] | None,
             *, actor: str) -> dict[str, Any]:
    """Add, replace (``spec`` given) or remove (``None``) one spec of ``root``'s catalog (D12).

    ``spec`` is ``{description, tools, max_iterations, instructions}``; its tools must be within the
    root's grant. Returns ``{"root", "spec", "catalog": [names]}``.

    Raises:
        InvalidInput: a malformed name or spec (the field named), ``root`` is a child or deleted, or a
            removal names a spec that does not exist or that live handles still run (their children
            would lose their instructions mid-task).
    """
    check_id(root, "root")
    if not isinstance(name, str) or not SPEC_NAME.match(name):
        raise InvalidInput("name: a spec name must match ^[a-z][a-z0-9-]{0,31}$")
    if spec is not None and not isinstance(spec, Mapping):
        raise InvalidInput("spec: must be an object {description, tools, max_iterations, instructions}")
    check_object(spec, "spec", nullable=True)
    with factory.begin() as s:
        row = get_runtime(s, root, lock=True)
        if row.parent_id is not None:
            raise InvalidInput(f"root: the catalog is set on a root; {root!r} is a child agent")
        if row.lifecycle == "deleted":
            raise InvalidInput(f"root: agent {root!r} is deleted")
        profile = dict(row.profile)
        catalog = dict(profile.get("subagents") or {})
        if spec is None:
            if name not in catalog:
                raise InvalidInput(f"name: no spec {name!r} in the catalog")
            live = s.execute(sa.select(sa.func.count()).select_from(SubagentRow).join(
                AgentRuntimeRow, AgentRuntimeRow.agent_id == SubagentRow.child_agent).where(
                AgentRuntimeRow.root_id == root, SubagentRow.spec == name,
                SubagentRow.status.in_(LIVE))).scalar_one()
            if live:
                raise InvalidInput(f"name: spec {name!r} has {live} live handle(s); cancel them first")
            del catalog[name]
        else:
            grant = tuple(str(t) for t in profile.get("tools", []))
            try:
                catalog[name] = _catalog({name: spec}, grant)[name]
            except InvalidInput as exc:  # name the caller's field: spec.tools, not profile.subagents.x.tools
                raise InvalidInput(str(exc).replace(f"profile.subagents.{name}", "spec", 1)) from None
        profile["subagents"] = catalog
        row.profile = profile
        add_event(s, root, "catalog", actor, spec=name, removed=spec is None)
        return {"root": root, "spec": name, "catalog": sorted(catalog)}

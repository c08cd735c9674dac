"""What a host hands to :class:`~rsi_common.client.RsiClient`: turns and signals, checked before
anything is stored (a validation error is reported to the caller and nothing is written).

A **turn** is either a :class:`~rsi_common.kernel.TurnResult` from ``run_turn`` or a mapping with
the keys

=============  ==========================================================================================
``world``      the captured ``rsi-world/1`` record (dict), or ``None``/absent when nothing was captured
``trajectory`` the content-free trajectory record (docs/formats.md §7.5), optional
``signals``    initial explicit signals (docs/algorithm/consolidation.md §3.4), optional
``own_loop``   ``True`` when the provider ran its own tool loop (a CLI agent): no world may be given,
               the turn gets one ``skipped`` run row (docs/algorithm/consolidation.md §3.12.4)
``io_id``      the host's turn id; needed only when there is no world (else the world's ``io_id``)
=============  ==========================================================================================

Unknown keys are an error. Decisions where the spec is silent:

* The world goes through :func:`~rsi_common.world.finalize_world` (idempotent for kernel worlds):
  validation naming the field, clipping, the size limit (a world above ``MAX_WORLD_BYTES`` is kept
  with ``replayable = false``) and the credential refusal. An empty ``agent_id`` is filled with the
  recording agent; another agent's id is an error.
* With ``RSI_RECORD_WORLD`` off the world is **dropped** (capture off means no world rows at all),
  only the trajectory is stored and nothing is enqueued.
* Signals: the keys of docs/algorithm/consolidation.md §3.4 only, type-checked (``stars`` an int 1..5 or
  null, ``criteria`` a list
  of strings); ``implicit`` is dropped (only a consolidation run writes it); an unknown key is an
  error (a misspelt signal must not vanish); a string that matches a credential pattern is refused.
* The trajectory is checked the same way for credentials (it should carry none by construction);
  a missing ``trajectory_id`` is generated.
* Error messages name the field path and, for a credential, the pattern labels — never a value that
  could be a secret (``docs/security/credentials.md``): a type or a range is named instead, an id is
  shown by :func:`~rsi_common.credentials.safe_repr`, a credential-shaped key as ``<redacted key>``.

**The input boundary** (:mod:`rsi_common.boundary`, docs/security/input-boundary.md) holds before
anything else: the agent id and every host id follow the id grammar; signals are refused — never
repaired — when a string holds a lone surrogate or U+0000, or breaks its size limit
(``expected``, ``comment``, ``issue``, each criterion, the number of criteria); the trajectory is
checked in one walk (depth, characters, integers within ±(2**53 − 1), size) and its columns
against their SQL types (``String(n)`` lengths, ``INTEGER`` range). Messages name the field path
and the limit, never the value.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from rsi_common.boundary import (
    MAX_COMMENT_BYTES,
    MAX_CRITERIA,
    MAX_CRITERION_BYTES,
    MAX_EXPECTED_BYTES,
    MAX_INT32,
    MAX_ISSUE_BYTES,
    MAX_TRAJECTORY_BYTES,
    check_depth,
    check_id,
    check_int,
    check_label,
    check_text,
    is_id,
    key_segment,
    scan,
)
from rsi_common.credentials import describe, find_in, safe_repr
from rsi_common.db.models import TrajectoryRow
from rsi_common.errors import CredentialError, InputLimitError, InvalidInput, WorldError
from rsi_common.kernel import TurnPlan, TurnResult
from rsi_common.world import finalize_world

__all__ = ["SIGNAL_KEYS", "SIGNAL_LIMITS", "TURN_KEYS", "ParsedTurn", "check_plan", "check_signals",
           "parse_turn"]

TURN_KEYS: tuple[str, ...] = ("world", "trajectory", "signals", "own_loop", "io_id")
"""Keys a turn mapping may have."""
SIGNAL_KEYS: tuple[str, ...] = ("expected", "stars", "issue", "comment", "criteria")
"""Explicit signals a host may set (docs/algorithm/consolidation.md §3.4); ``implicit`` is written by
consolidation only."""
SIGNAL_LIMITS: dict[str, int] = {"expected": MAX_EXPECTED_BYTES, "comment": MAX_COMMENT_BYTES,
                                 "issue": MAX_ISSUE_BYTES}
"""Size limit of each text signal, in UTF-8 bytes (criteria: ``MAX_CRITERION_BYTES`` each)."""


@dataclass(frozen=True)
class ParsedTurn:
    """A checked turn, ready to store.

    Attributes:
        io_id: the host's turn id ("" only when no world and no id was given, for ``off`` turns).
        world: the finalized world, or ``None`` (capture off, refused by the kernel, own loop).
        trajectory: the trajectory record with ``agent_id`` and ``trajectory_id`` set, or ``None``.
        signals: checked initial signals.
        own_loop: the provider ran its own tool loop.
    """

    io_id: str
    world: dict[str, Any] | None
    trajectory: dict[str, Any] | None
    signals: dict[str, Any]
    own_loop: bool


def _refuse(where: str, value: Any) -> None:
    hit = find_in(value, where)
    if hit is not None:
        path, labels = hit
        raise CredentialError(f"{path}: looks like a credential ({describe(labels)}); refused")


def _criteria(value: Any, name: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        raise InvalidInput(f"{name}: must be a list of strings")
    if len(value) > MAX_CRITERIA:
        raise InputLimitError(f"{name}: more than {MAX_CRITERIA} criteria (the limit)")
    for i, c in enumerate(value):
        check_text(c, f"{name}[{i}]", max_bytes=MAX_CRITERION_BYTES)
    return list(value)


def check_signals(signals: Any, where: str = "signals") -> dict[str, Any]:
    """Check explicit signals (module docstring) and return a clean copy without ``implicit``.

    Raises:
        InvalidInput: not a mapping, an unknown key or a wrongly typed value (named ``signals.<key>``).
        InputLimitError: a string breaks the input boundary (bad character, size, count).
        CredentialError: a value looks like a credential.
    """
    if signals is None:
        return {}
    if not isinstance(signals, Mapping):
        raise InvalidInput(f"{where}: must be an object, got {type(signals).__name__}")
    out: dict[str, Any] = {}
    for i, (key, value) in enumerate(signals.items()):
        if key == "implicit":
            continue
        if key not in SIGNAL_KEYS:
            raise InvalidInput(f"{where}{key_segment(key, i)}: unknown signal; "
                               f"known: {', '.join(SIGNAL_KEYS)}")
        name = f"{where}.{key}"
        if key == "stars":
            is_int = isinstance(value, int) and not isinstance(value, bool)
            if not (value is None or (is_int and 1 <= value <= 5)):
                got = "an integer out of range" if is_int else type(value).__name__
                raise InvalidInput(f"{name}: must be an integer 1..5 or null, got {got}")
            out[key] = value
            continue
        if key == "criteria":
            out[key] = _criteria(value, name)
        else:
            out[key] = check_text(value, name, max_bytes=SIGNAL_LIMITS[key])
        _refuse(name, value)
    return out


def _world(agent_id: str, world: Any) -> dict[str, Any]:
    if not isinstance(world, Mapping):
        raise WorldError(f"<world>: a world must be a JSON object, got {type(world).__name__}")
    named = world.get("agent_id")
    if named not in (None, "", agent_id):
        shown = safe_repr(named) if is_id(named) else "another agent"
        raise WorldError(f"agent_id: the world names agent {shown}, not {safe_repr(agent_id)}")
    data = dict(world)
    data["agent_id"] = agent_id
    final = finalize_world(data)
    if not final["io_id"]:
        raise WorldError("io_id: a world needs the host's turn id")
    return final


_TRAJECTORY_IDS = ("io_id", "interaction_id")
_ERROR_CHARS = 300
"""``error`` is cut to its column (``String(300)``) when stored; checked after the cut."""


def _column_checks() -> tuple[tuple[str, str, int], ...]:
    """``(column, kind, length)`` of the ``rsi_trajectories`` columns a record's value is checked
    against: ``error`` (free text, cut), ``label`` (``String(length)``), ``int32`` (``INTEGER``)."""
    out = []
    for col in TrajectoryRow.__table__.columns:
        if col.key in ("id", "agent_id", "created_at", *_TRAJECTORY_IDS):
            continue
        if col.key == "error":
            out.append((col.key, "error", _ERROR_CHARS))
        elif isinstance(col.type, sa.String) and col.type.length is not None:
            out.append((col.key, "label", col.type.length))
        elif isinstance(col.type, sa.Integer) and not isinstance(col.type, sa.BigInteger):
            out.append((col.key, "int32", 0))
    return tuple(out)


def _trajectory_columns(out: dict[str, Any]) -> None:
    """Each value bound for a ``rsi_trajectories`` column fits its SQL type on every database."""
    for key, kind, length in _COLUMN_CHECKS:
        value = out.get(key)
        if value is None:
            continue
        path = f"trajectory.{key}"
        if kind == "error":  # free text (newlines allowed), cut when stored
            check_text(str(value)[:length], path, max_bytes=4 * length)
        elif kind == "label":
            check_label(value, path, max_chars=length)
        else:
            check_int(value, path, lo=-MAX_INT32 - 1, hi=MAX_INT32)


_COLUMN_CHECKS = _column_checks()


def _trajectory(agent_id: str, io_id: str, trajectory: Any) -> dict[str, Any] | None:
    if trajectory is None:
        return None
    if not isinstance(trajectory, Mapping):
        raise InvalidInput(f"trajectory: must be an object, got {type(trajectory).__name__}")
    check_depth(trajectory, "trajectory")
    named = trajectory.get("agent_id")
    if named not in (None, "", agent_id):
        raise InvalidInput(f"trajectory.agent_id: names another agent than {safe_repr(agent_id)}")
    out = dict(trajectory)
    out["agent_id"] = agent_id
    out["trajectory_id"] = check_id(out.get("trajectory_id") or "t_" + uuid.uuid4().hex[:24],
                                    "trajectory.trajectory_id", max_chars=64)
    if not out.get("io_id"):
        out["io_id"] = io_id or None
    for key in _TRAJECTORY_IDS:
        if out.get(key) is not None:
            check_id(out[key], f"trajectory.{key}", empty_ok=True)
    scan(out, "trajectory", max_bytes=MAX_TRAJECTORY_BYTES)
    _trajectory_columns(out)
    _refuse("trajectory", out)
    return out


def _fields(turn: Any) -> dict[str, Any]:
    if isinstance(turn, TurnResult):
        return {"world": turn.world, "trajectory": turn.trajectory}
    if not isinstance(turn, Mapping):
        raise InvalidInput(f"a turn must be a TurnResult or a mapping, got {type(turn).__name__}")
    unknown = sorted(key_segment(k, i)[1:] for i, k in enumerate(turn) if k not in TURN_KEYS)
    if unknown:
        raise InvalidInput(f"turn: unknown key(s) {', '.join(unknown)}; known: {', '.join(TURN_KEYS)}")
    return dict(turn)


def parse_turn(agent_id: str, turn: Any, *, record_world: bool) -> ParsedTurn:
    """Check a turn (module docstring) without storing anything.

    Args:
        agent_id: the recording agent.
        turn: a ``TurnResult`` or a turn mapping.
        record_world: ``RSI_RECORD_WORLD``; when false the world is dropped.

    Raises:
        WorldError: the world is malformed (the message starts with the field path).
        CredentialError: the world, trajectory or signals contain a credential.
        InputLimitError: an id, string, number or size breaks the input boundary (a ``WorldLimitError``
            inside the world).
        InvalidInput: anything else malformed (unknown key, bad signals, own loop with a world, no io id).
    """
    check_id(agent_id, "agent_id")
    f = _fields(turn)
    own_loop = f.get("own_loop", False)
    if not isinstance(own_loop, bool):
        raise InvalidInput(f"own_loop: must be a boolean, got {type(own_loop).__name__}")
    if own_loop and f.get("world") is not None:
        raise InvalidInput("own_loop: a provider that runs its own loop gives no world; pass world=None")
    signals = check_signals(f.get("signals"))
    world = _world(agent_id, f["world"]) if f.get("world") is not None and record_world else None
    raw_traj, raw_world = f.get("trajectory"), f.get("world")
    given_io = (f.get("io_id") or (raw_world.get("io_id") if isinstance(raw_world, Mapping) else None)
                or (raw_traj.get("io_id") if isinstance(raw_traj, Mapping) else None) or "")
    check_id(given_io, "io_id", empty_ok=True)
    if world is not None and f.get("io_id") not in (None, "", world["io_id"]):
        raise InvalidInput(f"io_id: turn io_id {safe_repr(f['io_id'])} differs from the world's "
                           f"{safe_repr(world['io_id'])}")
    io_id = world["io_id"] if world is not None else given_io
    if own_loop and not io_id:
        raise InvalidInput("io_id: an own-loop turn needs the host's turn id (turn['io_id'])")
    return ParsedTurn(io_id, world, _trajectory(agent_id, io_id, raw_traj), signals, own_loop)


def check_plan(agent_id: str, plan: TurnPlan) -> TurnPlan:
    """The plan of a turn ``run_turn`` will record for ``agent_id``, checked before it runs: its ids
    follow the id grammar and its ``agent_id`` (filled in when empty) is the agent's.

    Raises:
        InvalidInput: ``plan.io_id`` is empty, or ``plan.agent_id`` names another agent.
        InputLimitError: an id of the plan breaks the id grammar.
    """
    if not plan.io_id:
        raise InvalidInput("plan.io_id: a recorded turn needs the host's turn id")
    check_id(agent_id, "agent_id")
    check_id(plan.io_id, "plan.io_id")
    check_id(plan.interaction_id, "plan.interaction_id", empty_ok=True)
    check_id(plan.session_id or "", "plan.session_id", empty_ok=True)
    if plan.agent_id and plan.agent_id != agent_id:
        raise InvalidInput(f"plan.agent_id {safe_repr(plan.agent_id)} differs from {safe_repr(agent_id)}")
    return plan if plan.agent_id else dataclasses.replace(plan, agent_id=agent_id)

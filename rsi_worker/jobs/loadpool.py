"""The world pool of ``rsi loadtest``: recorded shopping-assistant conversations to replay as traffic.

A pool is a list of :class:`PoolConversation`; each is the ordered turns of one conversation, every
turn a recorded ``rsi-world/1`` record plus its explicit signals. Two sources:

* :func:`generate_pool` — live turns of the shopping scenario (:mod:`rsi_worker.jobs.scenario`) run with
  the sim model at latency 0 under H0, deterministic for a ``seed``: a request that names the
  ``search`` tool, then (by weighted draw) a user correction, an acceptance (sometimes with
  ``stars`` 5), a new topic in the same conversation, or nothing. Corrections make the next
  consolidation open a round; the other follow-ups exercise the no-round paths.
* :func:`load_pool` — a JSON Lines file as ``rsi worlds export`` writes it (one
  ``{agent_id, io_id, interaction_id, seq, world, signals}`` per line): lines are grouped into
  conversations by ``(agent_id, interaction_id)`` in file order and sorted by ``seq``; ``implicit``
  signals (written by an earlier consolidation) are dropped — a host never sends them.

:func:`rebind` gives a pool turn a new identity (agent, conversation, io id, clock) at send time, so
the same pool can be replayed as many times as the load needs.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from rsi_common.config import SimConfig
from rsi_common.errors import InvalidInput
from rsi_common.host_input import SIGNAL_KEYS
from rsi_common.llm.sim import SimClient
from rsi_worker.jobs.scenario import CATALOG, CORRECTION, conversation_turn, next_history

__all__ = ["PoolConversation", "PoolTurn", "TurnKind", "generate_pool", "load_pool", "rebind"]

TurnKind = Literal["request", "correction", "accept", "new_topic", "imported"]

CORRECTIONS = (CORRECTION, "Not quite, cite the source as well", "No, keep it brief",
               "Actually, use bullet points instead")
ACCEPTS = ("Thanks, perfect!", "Great, thank you")
_SHAPES: tuple[tuple[str, int], ...] = (("correction", 3), ("accept", 3), ("new_topic", 2), ("single", 2))
"""Conversation shapes and their weights in a generated pool."""


@dataclass(frozen=True)
class PoolTurn:
    """One recorded turn: its world, its explicit signals and what kind of user message it answers."""

    world: Mapping[str, Any]
    signals: Mapping[str, Any]
    kind: TurnKind


@dataclass(frozen=True)
class PoolConversation:
    """The turns of one conversation, in order."""

    turns: tuple[PoolTurn, ...]


def _request(topic: str) -> str:
    return f"Compare {topic}: use search query={topic}"


def generate_pool(seed: int, conversations: int = 48) -> list[PoolConversation]:
    """``conversations`` recorded conversations of the shopping scenario, the same for the same seed.

    Raises:
        InvalidInput: ``conversations`` < 1.
    """
    if conversations < 1:
        raise InvalidInput(f"a pool needs at least one conversation, got {conversations}")
    rng = random.Random(seed)
    policy = SimClient("sim-1", SimConfig(seed=seed), role="policy")
    topics = sorted(CATALOG)
    clock = 1_700_000_000.0
    pool: list[PoolConversation] = []
    for c in range(conversations):
        shape = rng.choices([s for s, _ in _SHAPES], weights=[w for _, w in _SHAPES])[0]
        topic = rng.choice(topics)
        texts: list[tuple[str, TurnKind, dict[str, Any]]] = [(_request(topic), "request", {})]
        if shape == "correction":
            texts.append((rng.choice(CORRECTIONS), "correction", {}))
            if rng.random() < 0.3:
                texts.append((rng.choice(ACCEPTS), "accept", {}))
        elif shape == "accept":
            texts[0] = (texts[0][0], "request", {"stars": 5} if rng.random() < 0.5 else {})
            texts.append((rng.choice(ACCEPTS), "accept", {}))
        elif shape == "new_topic":
            texts.append((_request(rng.choice([t for t in topics if t != topic])), "new_topic", {}))
        history: list[dict[str, Any]] = []
        turns = []
        for n, (text, kind, signals) in enumerate(texts, start=1):
            clock += 60.0
            result = conversation_turn(policy, None, "pool", f"p{c}", n, text, history, clock=clock)
            if result.world is None:
                raise RuntimeError("the kernel captured no world for a pool turn")
            turns.append(PoolTurn(result.world, signals, kind))
            history = next_history(history, text, result.answer)
        pool.append(PoolConversation(tuple(turns)))
    return pool


def _lines(path: Path) -> Iterable[tuple[int, dict[str, Any]]]:
    with path.open(encoding="utf-8") as fh:
        for no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidInput(f"{path}:{no}: not JSON ({exc.msg})") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("world"), dict):
                raise InvalidInput(f"{path}:{no}: a line must be an object with a 'world' object")
            yield no, obj


def load_pool(path: str | Path) -> list[PoolConversation]:
    """Conversations from a worlds file (module docstring).

    Raises:
        InvalidInput: unreadable file, a malformed line (named by number), or no line at all.
    """
    file = Path(path)
    if not file.is_file():
        raise InvalidInput(f"no such worlds file: {file}")
    groups: dict[tuple[str, str], list[tuple[int, int, PoolTurn]]] = {}
    for no, obj in _lines(file):
        world = obj["world"]
        key = (str(obj.get("agent_id") or world.get("agent_id") or ""),
               str(obj.get("interaction_id") or world.get("interaction_id") or f"line{no}"))
        signals = {k: v for k, v in dict(obj.get("signals") or {}).items() if k in SIGNAL_KEYS}
        seq = obj.get("seq")
        order = seq if isinstance(seq, int) and not isinstance(seq, bool) else no
        groups.setdefault(key, []).append((order, no, PoolTurn(world, signals, "imported")))
    if not groups:
        raise InvalidInput(f"{file}: no worlds")
    return [PoolConversation(tuple(t for _, _, t in sorted(turns, key=lambda x: (x[0], x[1]))))
            for turns in groups.values()]


def rebind(turn: PoolTurn, *, agent_id: str, interaction_id: str, io_id: str, clock: float) -> dict[str, Any]:
    """A fresh copy of ``turn``'s world as a new turn of ``agent_id`` (ids and clock replaced)."""
    world: dict[str, Any] = json.loads(json.dumps(turn.world))
    world.update(agent_id=agent_id, interaction_id=interaction_id, io_id=io_id, clock=clock,
                 created_at=datetime.fromtimestamp(clock, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    state = world.get("state")
    if isinstance(state, dict) and "session_id" in state:
        state["session_id"] = interaction_id
    return world

"""The sim policy's runtime behaviours (docs/runtime/refine.md#sim; the runtime specification's R9.1,
R9.2 and R9.4), tried before the policy's other rules:

* **Delegation.** With ``subagent_spawn`` offered, an input line ``delegate <spec>: a; b; c`` spawns
  one child per item (one call per reply, ``input`` = the item), then waits with ``mode: all`` on
  those handles in order, then answers ``<name>: <first answer line>`` per child.
* **Messages.** ``tell <to>: <text>`` → one ``message_send``; ``read messages`` → one
  ``message_receive``; an input starting ``[message`` is answered ``ack: <first 40 chars of its
  text>`` — after sending ``ping`` back when it came from the parent and contains ``ping`` (only
  the hop limit stops such a loop; a ping from a child or sibling is only acknowledged, decision D38).
* **Refine.** An input line ``refine: <f>`` → one ``refine_request`` with ``focus`` = f.

Each act happens once per turn; ``None`` = no runtime act applies.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from rsi_common.llm.base import canonical_json
from rsi_common.llm.sim.core import Turn, result_text, text_reply

__all__ = ["runtime_act"]

_DELEGATE = re.compile(r"(?im)^\s*delegate\s+([a-z][a-z0-9-]{0,31}):\s*(.+)$")
_TELL = re.compile(r"(?im)^\s*tell\s+(\S+):\s*(.+)$")
_READ = re.compile(r"(?i)\bread messages\b")
_REFINE = re.compile(r"(?im)^\s*refine:\s*(.+)$")
_HEADER = re.compile(r"^\[message (\S+) from (\S+) \(([a-z]+)\)\]\n?")


def _use(messages: Sequence[dict[str, Any]], name: str, args: dict[str, Any], n: int) -> list[dict[str, Any]]:
    digest = hashlib.sha256(canonical_json([list(messages), name, n]).encode("utf-8")).hexdigest()
    return [{"type": "tool_use", "id": "toolu_sim_" + digest[:20], "name": name, "input": args}]


def _results(turn: Turn, name: str) -> list[Any]:
    ids = [u.get("id") for u in turn.tool_uses if u.get("name") == name]
    out: list[Any] = []
    for r in turn.results:
        if r.get("tool_use_id") in ids:
            try:
                out.append(json.loads(result_text(r)))
            except ValueError:
                out.append({})
    return out


def _called(turn: Turn, name: str) -> int:
    return sum(1 for u in turn.tool_uses if u.get("name") == name)


def _delegate(messages: Sequence[dict[str, Any]], turn: Turn, m: re.Match[str]) -> list[dict[str, Any]]:
    items = [x.strip() for x in m.group(2).split(";") if x.strip()]
    spawned = [r for r in _results(turn, "subagent_spawn") if isinstance(r, dict) and r.get("handle")]
    if _called(turn, "subagent_spawn") < len(items):
        n = _called(turn, "subagent_spawn")
        return _use(messages, "subagent_spawn", {"spec": m.group(1), "input": items[n]}, n)
    waits = [r for r in _results(turn, "subagent_wait") if isinstance(r, dict) and "results" in r]
    handles = [str(r["handle"]) for r in spawned]
    if not waits and handles:
        return _use(messages, "subagent_wait", {"handles": handles, "mode": "all"}, 0)
    by_handle = {str(x.get("handle")): x for w in waits for x in w.get("results") or []}
    lines = []
    for h in handles:
        x = by_handle.get(h, {})
        first = (str(x.get("answer") or x.get("error") or x.get("status") or "").splitlines() or [""])[0]
        lines.append(f"{x.get('name', h)}: {first}")
    return text_reply("\n".join(lines) or "no child answered")


def runtime_act(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]],
                turn: Turn) -> list[dict[str, Any]] | None:
    """The reply of a runtime behaviour (module docstring), or ``None``."""
    names = {str(t.get("name")) for t in tools}
    text = turn.input
    if "refine_request" in names and not _called(turn, "refine_request") and (r := _REFINE.search(text)):
        return _use(messages, "refine_request", {"focus": r.group(1).strip()}, 0)
    if "subagent_spawn" in names and (d := _DELEGATE.search(text)):
        return _delegate(messages, turn, d)
    if "message_send" in names and not _called(turn, "message_send") and (t := _TELL.search(text)):
        return _use(messages, "message_send", {"to": t.group(1), "text": t.group(2).strip()}, 0)
    if "message_receive" in names and not _called(turn, "message_receive") and _READ.search(text):
        return _use(messages, "message_receive", {}, 0)
    header = _HEADER.match(text)
    if header is not None:
        body = text[header.end():]
        from_parent = header.group(3) == "parent"
        pong = from_parent and "ping" in body.lower() and "message_send" in names
        if pong and not _called(turn, "message_send"):
            return _use(messages, "message_send", {"to": "parent", "text": "ping"}, 0)
        return text_reply(f"ack: {' '.join(body.split())[:40]}")
    return None

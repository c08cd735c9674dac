"""Shared pieces of the credential attack tests: the entries of ``attacks.json``'s ``credentials``
section, a host turn built around one field, and the leak check of an error message."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.adversarial import attacks

GOLDEN_WORLD = Path(__file__).resolve().parents[1] / "golden" / "world" / "rsi-world-1.json"
_TEMPLATE: dict[str, Any] = json.loads(GOLDEN_WORLD.read_text(encoding="utf-8"))

ENTRIES = attacks.section("credentials")
POSITIVE = [e for e in ENTRIES if e["label"] is not None]
NEGATIVE = [e for e in ENTRIES if e["label"] is None]
ZERO_WIDTH = ("\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u034f", "\ufe0f", "\u180e")
"""Invisible characters an attacker can put inside a key (format characters and other ignorables)."""


def world(io: str = "io-adv-1", **fields: Any) -> dict[str, Any]:
    """A valid ``rsi-world/1`` record (the golden world) with ``io_id`` = ``io``."""
    w = copy.deepcopy(_TEMPLATE)
    w.pop("bytes", None)
    w.update({"io_id": io, "agent_id": "", **fields})
    return w


def core(entry: dict[str, Any]) -> str:
    """The secret part of an entry: its longest fragment."""
    return str(max(entry["parts"], key=len))


def leaks(text: str, entry: dict[str, Any], window: int = 10) -> bool:
    """Whether ``text`` holds the entry's text or any ``window``-character piece of its secret part."""
    secret = core(entry)
    if entry["text"] in text:
        return True
    return any(secret[i:i + window] in text for i in range(max(1, len(secret) - window + 1)))


def with_zero_width(text: str, step: int = 5) -> str:
    """``text`` with an invisible character after every ``step``-th character."""
    out = []
    for i, ch in enumerate(text):
        out.append(ch)
        if i % step == step - 1:
            out.append(ZERO_WIDTH[(i // step) % len(ZERO_WIDTH)])
    return "".join(out)


# --- host entry points: where a secret can be put, and what must happen -------------------------

Turn = dict[str, Any]
"""A turn mapping as ``parse_turn`` / ``RsiClient.record_turn`` take it."""


def _in_world(setter: Callable[[dict[str, Any], str], None]) -> Callable[[str], Turn]:
    def build(secret: str) -> Turn:
        w = world()
        setter(w, secret)
        return {"world": w}
    return build


def _set_message(w: dict[str, Any], s: str) -> None:
    w["state"]["messages"][0]["content"] = f"earlier I wrote {s}"


def _set_tool_result(w: dict[str, Any], s: str) -> None:
    w["tools"]["calls"][0]["content"] = f"rows: 3\n{s}\n"


def _set_tool_input_key(w: dict[str, Any], s: str) -> None:
    w["tools"]["calls"][0]["input"] = {s: "x"}


def _set_metadata_value(w: dict[str, Any], s: str) -> None:
    w["state"]["metadata"]["note"] = s


def _set_metadata_key(w: dict[str, Any], s: str) -> None:
    w["state"]["metadata"][s] = "x"


def _signal(key: str, value: Callable[[str], Any]) -> Callable[[str], Turn]:
    return lambda s: {"world": world(), "signals": {key: value(s)}}


REFUSED: dict[str, tuple[Callable[[str], Turn], str]] = {
    "world input": (_in_world(lambda w, s: w.update(input=f"please use {s} for the call")), "input"),
    "message": (_in_world(_set_message), "state.messages[0].content"),
    "tool result": (_in_world(_set_tool_result), "tools.calls[0].content"),
    "tool input key": (_in_world(_set_tool_input_key), "tools.calls[0].input.<redacted key>"),
    "signal comment": (_signal("comment", lambda s: f"it failed with {s}"), "signals.comment"),
    "signal expected": (_signal("expected", lambda s: s), "signals.expected"),
    "signal issue": (_signal("issue", lambda s: f"leaked {s}"), "signals.issue"),
    "signal criteria": (_signal("criteria", lambda s: ["be brief", s]), "signals.criteria[1]"),
    "trajectory": (lambda s: {"world": world(), "trajectory": {"steps": [{"note": s}]}},
                   "trajectory.steps[0].note"),
}
"""Field → (turn builder, field path the error names): a credential there refuses the turn."""

SCRUBBED: dict[str, tuple[Callable[[str], Turn], str]] = {
    "metadata value": (_in_world(_set_metadata_value), "note"),
    "metadata key": (_in_world(_set_metadata_key), ""),
}
"""Field → (turn builder, metadata key kept otherwise): the entry is dropped, the world is stored."""

"""Hostile JSON replies of a reporting role (the consolidation analyst, the evolve reporter): what a
model may answer where a report of lists is asked for (docs/algorithm/evolve.md "Hostile input")."""

from __future__ import annotations

import json

from rsi_common.llm import ModelRequest, ModelResponse, Usage

REPORTS = {
    "a number for a list": '{"failure_modes": 1e999, "capability_gaps": "x", "success_habits": {}}',
    "nan in an item": '{"failure_modes": [{"mode": NaN}], "capability_gaps": [], "success_habits": []}',
    "a 5 MB item": json.dumps({"failure_modes": [{"mode": "x" * 5_000_000}]}),
    "10,000 items": json.dumps({"success_habits": [{"habit": f"h{i}"} for i in range(10_000)]}),
    "deep": '{"failure_modes": ' + "[" * 5_000 + "]" * 5_000 + "}",
    "a list": "[1, 2, 3]",
    "a lone surrogate": '{"failure_modes": [{"mode": "m\\ud800"}], "notes": "n\\udfff"}',
    "huge notes": json.dumps({"failure_modes": [{"mode": "m"}], "notes": "n" * 3_000_000}),
    "notes as an object": '{"success_habits": [{"habit": "h"}], "notes": {"a": [1, NaN]}}',
}
"""Reply text by what is wrong with it."""


class Scripted:
    """A model client whose every answer is ``reply``."""

    provider, model = "scripted", "reporter-1"

    def __init__(self, reply: str) -> None:
        self.reply = reply

    def complete(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse([{"type": "text", "text": self.reply}], Usage(10, 5), "end_turn", self.model)

"""Model factories for worker processes (``RSI_MODEL_FACTORY=tests.support.factories:<name>``).

Each is called with the worker's settings and returns a ModelFactory; they reuse the scenario
doubles of :mod:`tests.support.pipeline` so a distributed run and an inline run of the same
scenario see the same models.
"""

from __future__ import annotations

from typing import Any

import redis

from rsi_common.config import Settings
from rsi_common.dispatch import redis_py_url
from rsi_common.llm import ModelClient, ModelRequest, ModelResponse
from rsi_worker.consolidate import ModelFactory
from tests.support.pipeline import MarkerPolicy, ScriptedProposer, done_action, edit_action, models_with

MARKER = "HOPELESS"
HOPELESS_BLOCK = [edit_action('"extra_blocks": []', f'"extra_blocks": ["Answer in the {MARKER} style."]'),
                  done_action("prompt", "a style instruction")]
CALLS_KEY = "rsi:test:hopeless-calls"


class CountingMarkerPolicy(MarkerPolicy):
    """:class:`MarkerPolicy` that also counts marker answers in Redis (visible across processes)."""

    def __init__(self, inner: ModelClient, client: redis.Redis | None) -> None:
        super().__init__(inner, MARKER)
        self.client = client

    def complete(self, request: ModelRequest) -> ModelResponse:
        if self.marker in request.system and self.client is not None:
            self.client.incr(CALLS_KEY)
        return super().complete(request)


def hopeless(settings: Settings) -> ModelFactory:
    """Variant B always proposes a harness the policy model cannot work with."""
    client = redis.Redis.from_url(redis_py_url(settings.redis_url)) \
        if settings.redis_url else None

    def policy(c: Any) -> Any:
        return CountingMarkerPolicy(c, client)

    return models_with(settings, policy=policy,
                       proposer=lambda c: ScriptedProposer({"B": HOPELESS_BLOCK}, c))

"""Provider presets: OpenAI-compatible services by name (docs/host/agent.md#providers).

One table, :data:`PRESETS`: a name → the service's OpenAI-compatible base URL and the environment
variable its key is conventionally read from. ``make_client("groq", model, settings)`` builds the
:class:`~rsi_common.llm.openai.OpenAIClient` on that URL with that key. Local servers (vLLM, Ollama,
LM Studio) need no key. ``sim``, ``anthropic`` and ``openai`` are the built-in providers and are not
presets. An unknown name raises :class:`~rsi_common.errors.InvalidInput` listing every known one.

What the tests cover: every preset is built and sends its requests to its base URL; the wire format
itself (plain and streamed Chat Completions) is tested once, against the local wire-format server,
since every preset speaks it through the same client. No test reaches a real service: a preset's
URL is checked by configuration only (the column ``checked`` of the table in the doc).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from rsi_common.errors import InvalidInput

__all__ = ["BUILTIN_PROVIDERS", "PRESETS", "Preset", "known_providers", "preset", "preset_key"]

BUILTIN_PROVIDERS: tuple[str, ...] = ("sim", "anthropic", "openai")
"""Providers with an implementation of their own (not presets)."""


@dataclass(frozen=True)
class Preset:
    """An OpenAI-compatible service: its base URL and the variable holding its key (``None``: none)."""

    name: str
    base_url: str
    key_env: str | None


PRESETS: Mapping[str, Preset] = {
    p.name: p
    for p in (
        Preset("vllm", "http://localhost:8000/v1", None),
        Preset("ollama", "http://localhost:11434/v1", None),
        Preset("lmstudio", "http://localhost:1234/v1", None),
        Preset("openrouter", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
        Preset("groq", "https://api.groq.com/openai/v1", "GROQ_API_KEY"),
        Preset("together", "https://api.together.xyz/v1", "TOGETHER_API_KEY"),
        Preset("fireworks", "https://api.fireworks.ai/inference/v1", "FIREWORKS_API_KEY"),
        Preset("deepseek", "https://api.deepseek.com/v1", "DEEPSEEK_API_KEY"),
        Preset("mistral", "https://api.mistral.ai/v1", "MISTRAL_API_KEY"),
        Preset("xai", "https://api.x.ai/v1", "XAI_API_KEY"),
        Preset("gemini", "https://generativelanguage.googleapis.com/v1beta/openai", "GEMINI_API_KEY"),
    )
}
"""The presets (module docstring)."""


def known_providers() -> list[str]:
    """Every provider name :func:`~rsi_common.llm.factory.make_client` accepts."""
    return [*BUILTIN_PROVIDERS, *PRESETS]


def preset(name: str) -> Preset:
    """The preset called ``name``.

    Raises:
        InvalidInput: no such preset; the message lists every known provider.
    """
    found = PRESETS.get(name) if isinstance(name, str) else None
    if found is None:
        shown = name if isinstance(name, str) and name.isidentifier() and len(name) <= 40 else "<invalid>"
        raise InvalidInput(f"provider: unknown provider {shown!r}; known: {', '.join(known_providers())}")
    return found


def preset_key(p: Preset, environ: Mapping[str, str] | None = None) -> str | None:
    """The preset's key from ``environ`` (default: the process environment, read now), or ``None``."""
    if p.key_env is None:
        return None
    env = os.environ if environ is None else environ
    return env.get(p.key_env) or None

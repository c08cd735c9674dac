"""Building model clients: the one place that knows every implementation (docs/formats.md §7.1).

:func:`make_client` picks the implementation of a provider name; :func:`role_client` applies the
per-role overrides of the settings. The provider modules are imported on first use, so a process
that never builds an ``anthropic`` or ``openai`` client never imports their SDKs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rsi_common.config import ROLES
from rsi_common.errors import InvalidInput, ModelAuthError, SettingsError
from rsi_common.llm.base import ROLE_NAMES, ModelClient
from rsi_common.llm.presets import PRESETS, preset, preset_key

if TYPE_CHECKING:
    from rsi_common.config import Settings

__all__ = ["KERNEL_ROLES", "make_client", "role_client"]


def make_client(
    provider: str,
    model: str,
    settings: Settings,
    *,
    role: str = "policy",
    base_url: str | None = None,
) -> ModelClient:
    """Build a client.

    One retry layer per call path (project decision): the kernel retries the calls it makes
    (docs/formats.md §7.2, roles ``policy`` and ``compact``), so real clients built for those roles do not
    retry themselves; clients of the consolidation roles retry ``settings.model_max_retries`` times.

    Args:
        provider: ``sim``, ``anthropic``, ``openai`` or a preset of :mod:`rsi_common.llm.presets`
            (``ollama``, ``groq``, …: the OpenAI client on the preset's URL and key).
        model: Model name (the sim accepts any).
        settings: Keys, base URLs, timeouts, retries and the sim's knobs come from here only.
        role: One of :data:`ROLE_NAMES`; the sim behaves as this role, real clients ignore it.
        base_url: Endpoint override; default the provider's base URL setting.

    Raises:
        InvalidInput: Unknown provider (the message lists the known ones) or role.
        ModelAuthError: A real provider without a key in settings (a preset: in its key variable)
            and no custom ``base_url``.
    """
    if role not in ROLE_NAMES:
        raise InvalidInput(f"unknown model role {role!r}; expected one of {', '.join(ROLE_NAMES)}")
    retries = _client_retries(role, settings)
    if provider == "sim":
        from rsi_common.llm.sim import SimClient

        return SimClient(model or "sim-1", settings.sim, role=role)
    if provider == "anthropic":
        from rsi_common.llm.anthropic import AnthropicClient

        return AnthropicClient(model, settings, base_url=base_url, max_retries=retries)
    if provider == "openai":
        from rsi_common.llm.openai import OpenAIClient

        return OpenAIClient(model, settings, base_url=base_url, max_retries=retries)
    if provider in PRESETS:
        from rsi_common.llm.openai import OpenAIClient

        found = preset(provider)
        key = preset_key(found)
        if found.key_env is not None and key is None and base_url is None:
            raise ModelAuthError(f"{provider}: no API key is configured; set {found.key_env}")
        return OpenAIClient(model, settings, base_url=base_url or found.base_url, max_retries=retries,
                            api_key=key, provider=provider)
    preset(str(provider))  # raises, listing every known provider
    raise AssertionError("unreachable")  # pragma: no cover


KERNEL_ROLES = ("policy", "compact")
"""Roles whose calls the kernel makes and retries itself."""


def _client_retries(role: str, settings: Settings) -> int:
    return 0 if role in KERNEL_ROLES else settings.model_max_retries


def role_client(role: str, agent_provider: str, agent_model: str, settings: Settings) -> ModelClient:
    """The client of a consolidation role: ``settings.roles.<role>`` overrides, else the agent's model.

    ``policy`` and ``compact`` have no override. A role whose provider is overridden to a real
    provider other than the agent's must also set its model (``RSI_ROLE_<ROLE>_MODEL``): the agent's
    model name means nothing to another provider.

    Raises:
        SettingsError: Provider overridden without a model.
        InvalidInput: Unknown role or provider.
    """
    provider, model, base_url = agent_provider, agent_model, None
    if role in ROLES:
        override = getattr(settings.roles, role)
        if override.provider is not None and override.provider != agent_provider:
            if override.model is None and override.provider != "sim":
                raise SettingsError(
                    f"RSI_ROLE_{role.upper()}_PROVIDER is {override.provider!r} but "
                    f"RSI_ROLE_{role.upper()}_MODEL is not set"
                )
            provider, model = override.provider, override.model or "sim-1"
        if override.model is not None:
            model = override.model
        base_url = override.base_url
    return make_client(provider, model, settings, role=role, base_url=base_url)

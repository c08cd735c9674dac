"""The one retry policy of the real model clients (docs/formats.md §7.2 stage *call*).

Transient failures — HTTP 408/409/429, 5xx (incl. 529 overloaded), timeouts and connection
errors — are retried ``settings.model_max_retries`` times (default 3) after sleeping
``model_backoff_s · 2**i`` seconds (1 s, 2 s, 4 s; 0 in tests), then raised as
:class:`ModelTransientError`. 401/403 raise :class:`ModelAuthError` naming the provider and the
key setting to check; every other 4xx raises :class:`ModelBadRequest`. Neither is retried. The
SDKs' own retries are disabled (``max_retries=0``) so this is the only policy.

Messages never contain the API key: any occurrence of it in a provider message is masked.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from rsi_common.errors import ModelAuthError, ModelBadRequest, ModelError, ModelTransientError

if TYPE_CHECKING:
    from rsi_common.config import Settings

__all__ = [
    "KEY_SETTINGS",
    "RetryPolicy",
    "SdkErrors",
    "call_with_retries",
    "classify_sdk_error",
    "error_for_status",
    "scrub",
]

T = TypeVar("T")

KEY_SETTINGS: dict[str, str] = {"anthropic": "RSI_ANTHROPIC_API_KEY", "openai": "RSI_OPENAI_API_KEY"}
"""The setting that holds each provider's key (named in auth error messages)."""

TRANSIENT_STATUSES = frozenset({408, 409, 429})
AUTH_STATUSES = frozenset({401, 403})


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of one client.

    Attributes:
        provider: Provider name, used in messages.
        max_retries: Retries after the first attempt.
        backoff_s: Delay before the first retry, in seconds; doubled per retry.
        secrets: Strings masked out of every message (the key).
        sleep: Sleep function (injected in tests).
    """

    provider: str
    max_retries: int = 3
    backoff_s: float = 1.0
    secrets: tuple[str, ...] = ()
    sleep: Callable[[float], None] = time.sleep

    def delay_s(self, retry: int) -> float:
        """Delay before retry number ``retry`` (0-based), in seconds."""
        return float(self.backoff_s * 2.0**retry)


def client_credentials(
    provider: str, settings: Settings, base_url: str | None, *, max_retries: int | None,
    sleep: Callable[[float], None], api_key: str | None = None,
) -> tuple[str, str | None, RetryPolicy]:
    """``(key, url, retry policy)`` of a real client, from settings (or the ``api_key`` given: a
    provider preset's key, docs/host/agent.md#providers).

    A custom base URL without a key gets a placeholder key (local servers and proxies that need
    none). Raises :class:`ModelAuthError` when neither a key nor a base URL is configured.
    """
    url = base_url or getattr(settings, f"{provider}_base_url")
    key = api_key or settings.api_key(provider)
    if not key:
        if url is None:
            setting = f"RSI_{provider.upper()}_API_KEY"
            raise ModelAuthError(f"{provider}: no API key is configured; set {setting}")
        key = "no-key"  # vLLM, Ollama, proxies: any key is accepted
    retries = settings.model_max_retries if max_retries is None else max_retries
    return key, url, RetryPolicy(provider, retries, settings.model_backoff_s, (key,), sleep)


def scrub(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with every non-empty secret replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def error_for_status(provider: str, status: int, detail: str, secrets: tuple[str, ...] = ()) -> ModelError:
    """The error of an HTTP status from ``provider`` (``detail``: the provider's message)."""
    detail = scrub(detail, secrets)[:300]
    if status in AUTH_STATUSES:
        setting = KEY_SETTINGS.get(provider, "the provider's API key setting")
        return ModelAuthError(
            f"{provider}: the provider refused the credentials (HTTP {status}); check {setting} "
            f"(and the base URL setting if you use a proxy): {detail}"
        )
    if status in TRANSIENT_STATUSES or status >= 500:
        return ModelTransientError(f"{provider}: HTTP {status}: {detail}")
    return ModelBadRequest(f"{provider}: the provider refused the request (HTTP {status}): {detail}")


@dataclass(frozen=True)
class SdkErrors:
    """The exception classes of one official SDK (``anthropic`` and ``openai`` share this shape)."""

    status: type[BaseException]
    """Raised for an HTTP error status; has ``status_code`` and ``message``."""
    connection: type[BaseException]
    """Connection failures and timeouts (the timeout class subclasses it in both SDKs)."""
    validation: type[BaseException]
    """A response body of the wrong shape."""


def classify_sdk_error(
    exc: BaseException, provider: str, sdk: SdkErrors, secrets: tuple[str, ...] = ()
) -> ModelError | None:
    """Map an SDK exception to the error tree; ``None`` for exceptions that are not the SDK's."""
    if isinstance(exc, sdk.validation):
        return ModelBadRequest(f"{provider}: malformed response: {scrub(str(exc), secrets)[:300]}")
    if isinstance(exc, sdk.status):
        status = int(getattr(exc, "status_code", 0) or 0)
        return error_for_status(provider, status, str(getattr(exc, "message", exc)), secrets)
    if isinstance(exc, sdk.connection):
        return ModelTransientError(f"{provider}: {type(exc).__name__}: {scrub(str(exc), secrets)[:300]}")
    return None


def call_with_retries(
    fn: Callable[[], T],
    policy: RetryPolicy,
    classify: Callable[[BaseException], ModelError | None],
) -> T:
    """Run ``fn`` under ``policy``.

    Args:
        fn: One attempt (an SDK call).
        policy: Retries and backoff.
        classify: Maps an exception of ``fn`` to a :class:`ModelError`, or ``None`` to let it
            propagate unchanged (a programming error).

    Returns:
        The first successful result.

    Raises:
        ModelTransientError: Still transient after ``policy.max_retries`` retries.
        ModelAuthError, ModelBadRequest: At once, never retried.
    """
    attempts = policy.max_retries + 1
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as exc:
            err = classify(exc)
            if err is None:
                raise
            if not isinstance(err, ModelTransientError):
                raise err from None
            if attempt + 1 >= attempts:
                raise ModelTransientError(f"{err} (gave up after {attempts} attempt(s))") from None
            delay = policy.delay_s(attempt)
            if delay > 0:
                policy.sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover

"""Model prices and the USD of a charge (docs/runtime/accounting.md#prices).

A price is ``(usd_per_mtok_in, usd_per_mtok_out)`` keyed ``"<provider>/<model>"`` in
``RSI_RUNTIME__PRICES``. USD per million tokens equals micro-USD per token, which is the unit the
Redis counters use (``usd_micro``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["Price", "price_of", "usd_micro", "usd_of"]

Price = tuple[float, float]
"""``(usd_per_mtok_in, usd_per_mtok_out)``."""


def price_of(prices: Mapping[str, Price], provider: str, model: str) -> Price | None:
    """The price of ``provider/model``, or ``None`` when it is unpriced."""
    return prices.get(f"{provider}/{model}")


def usd_of(price: Price | None, tokens_in: int, tokens_out: int) -> float:
    """USD of ``tokens_in`` input and ``tokens_out`` output tokens (0 when unpriced)."""
    if price is None:
        return 0.0
    return (tokens_in * price[0] + tokens_out * price[1]) / 1_000_000


def usd_micro(usd: float) -> int:
    """``usd`` in whole micro-USD, rounded up (the counters never under-count)."""
    return math.ceil(round(usd * 1_000_000, 6))

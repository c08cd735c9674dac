"""Model clients: one small interface (docs/formats.md §7.1) and three implementations
(docs/architecture.md#6-models).

* :mod:`rsi_common.llm.base` — :class:`ModelRequest`, :class:`ModelResponse`, :class:`Usage`, the
  :class:`ModelClient` protocol, the message convention, :func:`complete_json`;
* :mod:`rsi_common.llm.factory` — :func:`make_client`, :func:`role_client`: the one place that
  knows the implementations;
* :mod:`rsi_common.llm.anthropic`, :mod:`rsi_common.llm.openai` — the official SDKs, with the one
  retry policy of :mod:`rsi_common.llm.retry`;
* :mod:`rsi_common.llm.sim` — the deterministic offline model of docs/formats.md (a package).

The implementations import :mod:`~rsi_common.llm.base` only; the factory imports them on first use.
"""

from __future__ import annotations

from rsi_common.llm.base import (
    COMPACTION_MARKER,
    COMPACTION_SYSTEM_PROMPT,
    KERNEL_NOTE_TAG,
    ROLE_NAMES,
    ModelClient,
    ModelRequest,
    ModelResponse,
    Usage,
    canonical_json,
    complete_json,
    parse_json_object,
    text_of,
    tool_uses,
)
from rsi_common.llm.factory import make_client, role_client

__all__ = [
    "COMPACTION_MARKER",
    "COMPACTION_SYSTEM_PROMPT",
    "KERNEL_NOTE_TAG",
    "ROLE_NAMES",
    "ModelClient",
    "ModelRequest",
    "ModelResponse",
    "Usage",
    "canonical_json",
    "complete_json",
    "make_client",
    "parse_json_object",
    "role_client",
    "text_of",
    "tool_uses",
]

"""Input checks of the host API's existing calls (docs/runtime/README.md#host-api): values from a
host, the CLI or the HTTP API are hostile, so each is checked at :class:`RuntimeClient`'s door —
ids in the id grammar, text without lone surrogates or U+0000, objects where objects belong — and a
refusal names the field, never the value (docs/security/input-boundary.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rsi_common.boundary import check_id, check_text, scan
from rsi_common.errors import InvalidInput

__all__ = ["MAX_OBJECT_BYTES", "check_address", "check_object", "check_session", "check_text_field"]

MAX_OBJECT_BYTES = 1_048_576
"""Largest profile, spec or caps object, in bytes (measured as the input boundary measures)."""


def check_session(session: Any, field: str = "session") -> str:
    """A session name: ``main`` or a handle id (the id grammar, at most 128 characters)."""
    return check_id(session, field, max_chars=128)


def check_address(to: Any) -> str:
    """An operator's ``to``: ``<agent>`` or ``<agent>@<session>``, both parts ids (D8)."""
    if not isinstance(to, str):
        raise InvalidInput(f"to: must be <agent> or <agent>@<session>, got {type(to).__name__}")
    agent, at, session = to.partition("@")
    check_id(agent, "to")
    if at:
        check_session(session, "to")
    return to


def check_text_field(value: Any, field: str, max_chars: int) -> str:
    """A string of at most ``max_chars`` characters without lone surrogates or U+0000."""
    text = check_text(value, field, max_bytes=4 * max_chars)
    if len(text) > max_chars:
        raise InvalidInput(f"{field}: at most {max_chars:,} characters")
    return text


def check_object(value: Any, field: str, *, nullable: bool = False) -> Any:
    """A JSON object (``None`` too when ``nullable``) whose keys and strings are clean text."""
    if value is None and nullable:
        return None
    if not isinstance(value, Mapping):
        raise InvalidInput(f"{field}: must be an object{' or null' if nullable else ''}, "
                           f"got {type(value).__name__}")
    scan(value, field, max_bytes=MAX_OBJECT_BYTES)
    return value

"""What ``rsi tokens`` does, on the database of the settings (no Redis needed)."""

from __future__ import annotations

from typing import Any

from rsi_common import db
from rsi_common.config import Settings
from rsi_worker.service.api_operator import token_dict

__all__ = ["create_token", "list_tokens", "revoke_token"]


def _sessions(settings: Settings) -> Any:
    from rsi_worker.commands.common import check_schema

    engine = db.make_engine(settings.database_url)
    check_schema(engine)
    return engine, db.session_factory(engine)


def create_token(
    settings: Settings, name: str, scopes: list[str], agent_prefix: str | None, rate_per_min: int | None
) -> dict[str, Any]:
    """Create a token; the result holds ``token`` (shown once)."""
    engine, sessions = _sessions(settings)
    try:
        with sessions.begin() as s:
            issued = db.create_token(
                s,
                name,
                scopes,
                agent_prefix=agent_prefix,
                rate_per_min=rate_per_min,
                created_by="rsi tokens create",
            )
            return {**token_dict(issued.row), "token": issued.token}
    finally:
        engine.dispose()


def list_tokens(settings: Settings, include_revoked: bool) -> list[dict[str, Any]]:
    engine, sessions = _sessions(settings)
    try:
        with sessions() as s:
            return [token_dict(r) for r in db.list_tokens(s, include_revoked=include_revoked)]
    finally:
        engine.dispose()


def revoke_token(settings: Settings, token_id: str) -> dict[str, Any]:
    engine, sessions = _sessions(settings)
    try:
        with sessions.begin() as s:
            return token_dict(db.revoke_token(s, token_id))
    finally:
        engine.dispose()

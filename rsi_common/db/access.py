"""Access to the service API: API tokens (stored only as hashes) and the audit log of operator actions
(docs/service/access.md).

Two tables, migration ``0003``:

* ``rsi_tokens`` — one row per API token: its public id, a name, the SHA-256 of the whole token (the
  token itself is shown once, at creation, and never stored), its scopes, an optional agent-id prefix
  (the tenant it is restricted to), an optional rate limit and its revocation time.
* ``rsi_audit`` — one row per operator or admin action through the service: who (token id and
  name), what (action, agent, target), when (database clock), and how it ended.

**Token format.** ``rsi_<id>_<secret>``: ``<id>`` is the row id (``t`` + 16 hex digits, public,
shown by ``rsi tokens list``), ``<secret>`` 43 URL-safe characters (256 random bits). A plain SHA-256
is the right hash here: the secret is random and long, so there is nothing to brute-force that a slow
password hash would protect, and every request can afford one hash. Lookup is by id (the primary
key), then a constant-time comparison of the hashes.

Every function runs inside the caller's transaction and never commits.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, get_args

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, Session, mapped_column

from rsi_common.boundary import MAX_ID_CHARS, check_id, check_int, check_label
from rsi_common.db.models import Base
from rsi_common.db.sqltypes import BigIntId, JSONType, UTCDateTime, db_now
from rsi_common.errors import InvalidInput

__all__ = [
    "AUDIT_OUTCOMES",
    "SCOPES",
    "AuditRow",
    "IssuedToken",
    "Scope",
    "TokenRow",
    "add_audit",
    "audit_log",
    "check_scopes",
    "create_token",
    "expand_scopes",
    "find_token",
    "hash_token",
    "list_tokens",
    "revoke_token",
    "touch_token",
]

Scope = Literal["host", "viewer", "operator", "admin"]
"""``host``: record turns and signals, read the harness; ``viewer``: read agents, runs, the console;
``operator``: viewer and rollback, pin, freeze, unfreeze, clone, consolidate now; ``admin``: all of
them and managing tokens."""
SCOPES: tuple[str, ...] = get_args(Scope)
_IMPLIES: dict[str, tuple[str, ...]] = {
    "host": ("host",),
    "viewer": ("viewer",),
    "operator": ("operator", "viewer"),
    "admin": ("admin", "operator", "viewer", "host"),
}
AUDIT_OUTCOMES: tuple[str, ...] = ("ok", "refused", "failed")
TOKEN_PREFIX = "rsi_"
_TOKEN = re.compile(r"rsi_(t[0-9a-f]{16})_([A-Za-z0-9_-]{43})")
MAX_TOKEN_NAME_CHARS = 100
MAX_RATE_PER_MIN = 1_000_000


class TokenRow(Base):
    """One API token (module docstring); the token itself is never stored."""

    __tablename__ = "rsi_tokens"
    __table_args__ = (sa.UniqueConstraint("token_hash"),)

    id: Mapped[str] = mapped_column(sa.String(32), primary_key=True)
    """Public id, ``t`` + 16 hex digits (part of the token)."""
    name: Mapped[str] = mapped_column(sa.String(MAX_TOKEN_NAME_CHARS), nullable=False)
    """Who or what holds it (shown in the audit log)."""
    token_hash: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    """SHA-256 of the whole token, hex."""
    scopes: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    """Comma-separated :data:`Scope` values as granted (implied scopes are not stored)."""
    agent_prefix: Mapped[str | None] = mapped_column(sa.String(MAX_ID_CHARS), nullable=True)
    """The token sees and changes only agents whose id starts with this; ``None`` = every agent."""
    rate_per_min: Mapped[int | None] = mapped_column(sa.Integer(), nullable=True)
    """Requests per minute; ``None`` = the service default (``RSI_API_RATE_PER_MIN``)."""
    created_by: Mapped[str | None] = mapped_column(sa.String(MAX_TOKEN_NAME_CHARS), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False, default=db_now())
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    """Refreshed at most once a minute per service replica."""
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)

    @property
    def scope_list(self) -> tuple[str, ...]:
        """The granted scopes."""
        return tuple(s for s in self.scopes.split(",") if s)


class AuditRow(Base):
    """One operator or admin action through the service (who, what, when, outcome)."""

    __tablename__ = "rsi_audit"
    __table_args__ = (
        sa.Index("ix_rsi_audit_agent_id_id", "agent_id", "id"),
        sa.CheckConstraint("outcome IN ('ok', 'refused', 'failed')", name="outcome"),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False, default=db_now())
    token_id: Mapped[str | None] = mapped_column(sa.String(32), nullable=True)
    token_name: Mapped[str | None] = mapped_column(sa.String(MAX_TOKEN_NAME_CHARS), nullable=True)
    action: Mapped[str] = mapped_column(sa.String(32), nullable=False)
    """``rollback``, ``pin``, ``freeze``, ``unfreeze``, ``clone``, ``consolidate``, ``token.create``, …"""
    agent_id: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    target: Mapped[str | None] = mapped_column(sa.String(300), nullable=True)
    """The version, the clone target or the token id acted on."""
    outcome: Mapped[str] = mapped_column(sa.String(16), nullable=False)
    """``ok``, ``refused`` (invalid input) or ``failed`` (a backend error)."""
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    """``{type, message}`` of a refusal, or what the action changed (``{from, to}``)."""


@dataclass(frozen=True)
class IssuedToken:
    """A token just created: ``token`` is shown once and never stored."""

    token: str
    row: TokenRow


def hash_token(token: str) -> str:
    """SHA-256 of the token, hex."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def check_scopes(scopes: Iterable[Any]) -> tuple[str, ...]:
    """The scopes, checked and de-duplicated in :data:`SCOPES` order.

    Raises:
        InvalidInput: none given, or an unknown scope (named by position, never echoed).
    """
    given = list(scopes)
    for i, s in enumerate(given):
        if s not in SCOPES:
            raise InvalidInput(f"scopes[{i}]: unknown scope; known: {', '.join(SCOPES)}")
    if not given:
        raise InvalidInput(f"scopes: give at least one of {', '.join(SCOPES)}")
    return tuple(s for s in SCOPES if s in given)


def expand_scopes(scopes: Iterable[str]) -> frozenset[str]:
    """Every scope the granted ones imply (``admin`` ⊇ ``operator`` ⊇ ``viewer``; ``admin`` ⊇ ``host``)."""
    return frozenset(x for s in scopes for x in _IMPLIES.get(s, ()))


def create_token(
    session: Session,
    name: str,
    scopes: Sequence[str],
    *,
    agent_prefix: str | None = None,
    rate_per_min: int | None = None,
    created_by: str | None = None,
) -> IssuedToken:
    """Create a token; the returned :class:`IssuedToken` holds the only copy of the secret.

    Raises:
        InvalidInput: an empty or multi-line name, an unknown scope, a prefix that breaks the id
            grammar, an ``admin`` token restricted to a prefix, a rate outside 1..1,000,000.
    """
    name = check_label(name, "name", max_chars=MAX_TOKEN_NAME_CHARS)
    if not name.strip():
        raise InvalidInput("name: must not be empty")
    granted = check_scopes(scopes)
    if agent_prefix is not None:
        check_id(agent_prefix, "agent_prefix")
        if "admin" in granted:
            raise InvalidInput(
                "agent_prefix: an admin token manages every token and cannot be restricted to a prefix"
            )
    if rate_per_min is not None:
        check_int(rate_per_min, "rate_per_min", lo=1, hi=MAX_RATE_PER_MIN)
    token_id = "t" + secrets.token_hex(8)
    token = f"{TOKEN_PREFIX}{token_id}_{secrets.token_urlsafe(32)}"
    row = TokenRow(
        id=token_id,
        name=name,
        token_hash=hash_token(token),
        scopes=",".join(granted),
        agent_prefix=agent_prefix,
        rate_per_min=rate_per_min,
        created_by=created_by,
    )
    session.add(row)
    session.flush()
    session.refresh(row)
    return IssuedToken(token, row)


def find_token(session: Session, token: str) -> TokenRow | None:
    """The live (not revoked) row of ``token``, or ``None`` when the token is malformed, unknown,
    revoked or its hash differs (constant-time comparison)."""
    m = _TOKEN.fullmatch(token) if isinstance(token, str) and len(token) < 100 else None
    if m is None:
        return None
    row = session.get(TokenRow, m[1], populate_existing=True)
    if row is None or row.revoked_at is not None:
        return None
    return row if hmac.compare_digest(row.token_hash, hash_token(token)) else None


def touch_token(session: Session, token_id: str) -> None:
    """Set the token's ``last_used_at`` to the database clock."""
    session.execute(
        sa.update(TokenRow)
        .where(TokenRow.id == token_id)
        .values(last_used_at=db_now())
        .execution_options(synchronize_session=False)
    )


def list_tokens(session: Session, *, include_revoked: bool = False) -> list[TokenRow]:
    """Every token (live ones unless ``include_revoked``), oldest first."""
    stmt = sa.select(TokenRow).order_by(TokenRow.created_at, TokenRow.id)
    if not include_revoked:
        stmt = stmt.where(TokenRow.revoked_at.is_(None))
    return list(session.execute(stmt).scalars())


def revoke_token(session: Session, token_id: str) -> TokenRow:
    """Revoke a token (idempotent: an already revoked token keeps its first revocation time).

    Raises:
        InvalidInput: no such token.
    """
    check_label(token_id, "token_id", max_chars=32)
    row = session.get(TokenRow, token_id, populate_existing=True)
    if row is None:
        raise InvalidInput("token_id: no such token")
    if row.revoked_at is None:
        row.revoked_at = db_now()  # a SQL expression, evaluated on flush
        session.flush()
        session.refresh(row)
    return row


def add_audit(
    session: Session,
    *,
    action: str,
    outcome: str,
    token_id: str | None = None,
    token_name: str | None = None,
    agent_id: str | None = None,
    target: str | None = None,
    detail: dict[str, Any] | None = None,
) -> AuditRow:
    """Append one audit row (the caller's transaction; see :mod:`rsi_worker.service.audit`)."""
    if outcome not in AUDIT_OUTCOMES:
        raise ValueError(f"outcome must be one of {AUDIT_OUTCOMES}")
    row = AuditRow(
        action=action[:32],
        outcome=outcome,
        token_id=token_id,
        token_name=token_name,
        agent_id=agent_id[:255] if agent_id else None,
        target=target[:300] if target else None,
        detail=detail,
    )
    session.add(row)
    session.flush()
    return row


def audit_log(
    session: Session,
    *,
    agent_id: str | None = None,
    agent_prefix: str | None = None,
    limit: int = 100,
    before_id: int | None = None,
) -> list[AuditRow]:
    """Audit rows, newest first: of one agent, or of agents under a prefix, or all.

    Args:
        agent_id: only this agent's rows.
        agent_prefix: only rows of agents whose id starts with this (a tenant's view).
        limit: at most this many rows.
        before_id: only rows older than this id (paging).
    """
    stmt = sa.select(AuditRow).order_by(AuditRow.id.desc()).limit(max(0, limit))
    if agent_id is not None:
        stmt = stmt.where(AuditRow.agent_id == agent_id)
    if agent_prefix is not None:
        stmt = stmt.where(AuditRow.agent_id.startswith(agent_prefix, autoescape=True))
    if before_id is not None:
        stmt = stmt.where(AuditRow.id < before_id)
    return list(session.execute(stmt).scalars())

"""Checks of the settings' URLs and the one-line message of an invalid setting
(``docs/operations/settings.md``).

Each check raises ``ValueError`` with a message that names the problem without the value: a URL may
carry a password, so a message shows at most its scheme. :func:`settings_message` turns pydantic's
validation error of :class:`~rsi_common.config.Settings` into one line naming the environment
variables (``RSI_SIM_NOISE``, ``RSI_CONSOLIDATION__B_MIN``, …).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

from pydantic import ValidationError

from rsi_common.credentials import redact, redact_urls

__all__ = [
    "DATABASE_SCHEMES",
    "REDIS_SCHEMES",
    "check_database_url",
    "check_http_url",
    "check_port",
    "check_redis_url",
    "env_name",
    "settings_message",
]

DATABASE_SCHEMES = ("sqlite", "sqlite+pysqlite", "postgresql", "postgresql+psycopg")
"""``RSI_DATABASE_URL`` schemes: SQLite (the standard library driver) and PostgreSQL (psycopg 3, the
driver this package installs; plain ``postgresql://`` selects it too)."""
REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+socket")
"""``RSI_REDIS_URL`` schemes: TCP, TLS, and a Unix socket in redis-py's and kombu's spelling. The
in-process mode has no URL (leave the variable unset or empty)."""

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]{0,30})://")
_MAX_ERRORS = 3


def _scheme(url: str) -> str | None:
    m = _SCHEME.match(url)
    return m.group(1).lower() if m else None


def check_port(port: int | None, what: str) -> None:
    """``port`` is ``None`` or within 1..65535.

    Raises:
        ValueError: out of range (the message names ``what``).
    """
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(f"{what} must be within 1..65535")


def _url_port(url: str) -> int | None:
    try:
        return urlsplit(url).port
    except ValueError:  # urllib refuses ports above 65535 (and non-numeric ones)
        raise ValueError("the port must be a number within 1..65535") from None


def check_database_url(url: str) -> str:
    """A SQLAlchemy URL this package can open: a scheme of :data:`DATABASE_SCHEMES`, a valid port.

    Raises:
        ValueError: not a URL, an unsupported scheme (named), or a port out of range.
    """
    import sqlalchemy as sa
    from sqlalchemy.exc import ArgumentError

    scheme = _scheme(url)
    if scheme is None:
        raise ValueError("not a database URL; use sqlite:///<path> or postgresql+psycopg://<user>@<host>/<db>")
    if scheme not in DATABASE_SCHEMES:
        raise ValueError(f"the scheme '{scheme}' is not supported; use sqlite:///<path> or "
                         "postgresql+psycopg://<user>@<host>/<db>")
    try:
        parsed = sa.make_url(url)
    except (ArgumentError, ValueError):
        raise ValueError("not a valid database URL") from None
    check_port(parsed.port, "the port")
    ports = parsed.query.get("port")
    for text in (ports,) if isinstance(ports, str) else (ports or ()):
        if not text.isdigit():
            raise ValueError("the port query parameter must be a number within 1..65535")
        check_port(int(text), "the port query parameter")
    return url


def check_redis_url(url: str | None) -> str | None:
    """``None`` for an unset or blank value (the in-process mode); else a URL of :data:`REDIS_SCHEMES`
    with a host (TCP) or a socket path, a valid port and an integer database.

    Raises:
        ValueError: not a URL, an unsupported scheme (named), no host or path, a bad port or database.
    """
    if url is None or not url.strip():
        return None
    scheme = _scheme(url)
    if scheme is None:
        raise ValueError("not a Redis URL; use redis://<host>:<port>/<db>, rediss://…, unix:///<socket path> "
                         "or leave it unset for the in-process mode")
    if scheme not in REDIS_SCHEMES:
        raise ValueError(f"the scheme '{scheme}' is not supported; use redis://, rediss://, unix:// or "
                         "redis+socket://")
    parts = urlsplit(url)
    if scheme in ("unix", "redis+socket"):
        if not parts.path:
            raise ValueError(f"a {scheme}:// URL needs the socket path")
        db = parse_qs(parts.query).get("db", ["0"])[-1]
    else:
        if not parts.hostname:
            raise ValueError(f"a {scheme}:// URL needs a host")
        check_port(_url_port(url), "the port")
        db = parts.path.lstrip("/") or "0"
    if not db.isdigit():
        raise ValueError("the database number must be a non-negative integer")
    return url


def check_http_url(url: str | None) -> str | None:
    """``None`` for an unset or blank value (the provider's default endpoint); else an ``http(s)://`` URL
    with a host and a valid port (a model endpoint).

    Raises:
        ValueError: another scheme (named), no host, or a port out of range.
    """
    if url is None or not url.strip():
        return None
    scheme = _scheme(url)
    if scheme not in ("http", "https"):
        shown = f"the scheme '{scheme}'" if scheme else "a value without a scheme"
        raise ValueError(f"{shown} is not supported; use http://<host>[:<port>]/… or https://…")
    if not urlsplit(url).hostname:
        raise ValueError("the URL needs a host")
    check_port(_url_port(url), "the port")
    return url


def env_name(loc: Sequence[Any]) -> str:
    """The environment variable of a settings field path (``("sim", "noise")`` → ``RSI_SIM_NOISE``)."""
    parts = [str(p) for p in loc]
    if not parts:
        return "RSI_*"
    head = parts[0]
    if head == "sim" and len(parts) > 1:
        return f"RSI_SIM_{parts[1].upper()}"
    if head == "roles":
        role = parts[1].upper() if len(parts) > 1 else "<ROLE>"
        field = parts[2].upper() if len(parts) > 2 else "*"
        return f"RSI_ROLE_{role}_{field}"
    if head == "consolidation":
        return f"RSI_CONSOLIDATION__{parts[1].upper()}" if len(parts) > 1 else "RSI_CONSOLIDATION__*"
    return f"RSI_{head.upper()}"


def settings_message(exc: ValidationError) -> str:
    """One line for an invalid :class:`~rsi_common.config.Settings`: each error as
    ``RSI_<VAR> (<field path>): <reason>``, at most three, never an input value."""
    errors = exc.errors(include_url=False, include_input=False)
    parts = []
    for e in errors[:_MAX_ERRORS]:
        loc = [p for p in e["loc"] if isinstance(p, str | int)]
        msg = str(e["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        path = ".".join(str(p) for p in loc) or "settings"
        parts.append(f"{env_name(loc)} ({path}): {msg}")
    more = f" (+{len(errors) - _MAX_ERRORS} more)" if len(errors) > _MAX_ERRORS else ""
    line = "invalid setting " + "; ".join(parts) + more
    return " ".join(redact_urls(redact(line)).split())

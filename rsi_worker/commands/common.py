"""What the ``rsi`` command modules share: errors as exit codes, JSON output, the host client.

Exit codes of every command built on these helpers:

* ``0`` — done;
* ``1`` — the input names something that does not exist or is malformed (unknown agent or
  version, an ambiguous version prefix, a bad file line when nothing could be imported);
* ``2`` — the setup is wrong: settings, an out-of-date database schema (``rsi db upgrade``), an
  unreachable database, Redis or broker.

Errors are one line on stderr (never a traceback, never a raw control character, ANSI escape or lone
surrogate: those are shown as ``\\xNN`` / ``\\uNNNN``); with ``--json`` the same error is also printed on
stdout as ``{"error": {"type", "message"}}`` so scripts can parse every outcome. The line never holds a
secret: credentials and URL passwords are redacted (``docs/security/credentials.md``). The root group
of ``rsi`` (:class:`rsi_worker.cli.RsiGroup`) wraps every command in :func:`cli_errors`, so a
settings error of any command exits with code 2 (``docs/operations/settings.md``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from rsi_common.config import Settings
from rsi_common.errors import InvalidInput, SettingsError

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from rsi_common.client import RsiClient

__all__ = [
    "EXIT_INPUT",
    "EXIT_SETUP",
    "check_schema",
    "cli_errors",
    "echo_json",
    "fail",
    "load_settings",
    "open_client",
    "short_version",
    "to_jsonable",
]

EXIT_INPUT = 1
"""Exit code of an unknown or malformed input."""
EXIT_SETUP = 2
"""Exit code of a setup problem (settings, schema, unreachable backend)."""
_UNSHOWABLE = re.compile(f"[\x00-\x1f\x7f-\x9f{chr(0xD800)}-{chr(0xDFFF)}]")
"""What a terminal line must not carry raw: C0/C1 controls (ANSI escapes start with one), DEL, lone
surrogates (no surrogate literal: mypyc refuses one, docs/dev/compiled.md)."""


_JSON_RAW = re.compile(f"[\x7f-\x9f{chr(0xD800)}-{chr(0xDFFF)}]")
"""What ``json.dumps(ensure_ascii=False)`` leaves raw that a terminal must not get raw (C0 it escapes)."""


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def to_jsonable(obj: Any) -> Any:
    """``obj`` with dataclasses as dicts and datetimes as ISO 8601 strings (for ``--json``)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, datetime):
        return obj.isoformat()
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    return obj


def echo_json(obj: Any) -> None:
    """Print ``obj`` as indented JSON on stdout; DEL, C1 controls and lone surrogates, which ``json.dumps``
    leaves raw with ``ensure_ascii=False``, are written as ``\\uNNNN`` escapes (the same JSON value)."""
    text = json.dumps(to_jsonable(obj), indent=2, ensure_ascii=False)
    typer.echo(_JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text))


def fail(message: str, *, code: int = EXIT_INPUT, as_json: bool = False, kind: str = "error") -> NoReturn:
    """Report ``message`` (stderr; with ``as_json`` also as JSON on stdout) and exit with ``code``.

    The message is put on one line with credentials and URL passwords redacted and every control
    character or lone surrogate escaped (module docstring).
    """
    from rsi_common.credentials import redact, redact_urls

    message = _UNSHOWABLE.sub(_escape, " ".join(redact_urls(redact(message)).split()))
    if as_json:
        typer.echo(json.dumps({"error": {"type": kind, "message": message}}, ensure_ascii=False))
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def cli_errors(as_json: bool = False) -> Iterator[None]:
    """Turn the errors a command can meet into one message and an exit code (module docstring)."""
    import pydantic
    import redis
    from sqlalchemy.exc import SQLAlchemyError

    from rsi_common.errors import InfrastructureError

    try:
        yield
    except SettingsError as exc:
        fail(str(exc), code=EXIT_SETUP, as_json=as_json, kind=type(exc).__name__)
    except InvalidInput as exc:
        fail(str(exc), code=EXIT_INPUT, as_json=as_json, kind=type(exc).__name__)
    except pydantic.ValidationError as exc:
        error = exc.errors()[0] if exc.errors() else None
        where = "RSI_" + "__".join(str(p) for p in error["loc"]).upper() if error else ""
        fail(f"settings: {where}: {error['msg'] if error else exc}", code=EXIT_SETUP, as_json=as_json,
             kind="SettingsError")
    except SQLAlchemyError as exc:
        line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        fail(f"database error: {line}", code=EXIT_SETUP, as_json=as_json, kind=type(exc).__name__)
    except (redis.RedisError, InfrastructureError, ConnectionError) as exc:
        fail(f"backend unavailable: {type(exc).__name__}: {exc}", code=EXIT_SETUP, as_json=as_json,
             kind=type(exc).__name__)


def load_settings() -> Settings:
    """The settings of this process (``RSI_*`` environment); invalid ones exit with code 2."""
    return Settings()


def check_schema(engine: Engine) -> None:
    """Refuse to work on a database whose schema is not the newest revision (exit code 2).

    The commands never migrate a database themselves (``rsi db upgrade`` does).
    """
    from rsi_common.db import current_revision, head_revision

    current = current_revision(engine)
    if current != head_revision():
        raise SettingsError(
            f"the database schema is at revision {current or 'none'}, not {head_revision()}: "
            "run `rsi db upgrade` first"
        )


def open_client(settings: Settings) -> RsiClient:
    """An :class:`~rsi_common.client.RsiClient` of ``settings`` on a current schema.

    With ``RSI_REDIS_URL`` the client builds its own Redis client and dispatcher; without one (the
    embedded in-process mode) it gets the in-process fakeredis of :mod:`rsi_worker.runtime` and an
    in-memory dispatcher: there is no other process to tell about a harness change.
    """
    from rsi_common.client import RsiClient

    if settings.redis_url:
        client = RsiClient(settings)
    else:
        from rsi_common.dispatch import KombuDispatcher
        from rsi_worker.runtime import redis_client

        client = RsiClient(settings, redis=redis_client(settings), dispatcher=KombuDispatcher("memory://"))
    try:
        check_schema(client.engine)
    except BaseException:
        client.close()
        raise
    return client


def short_version(version: str | None, n: int = 10) -> str:
    """The first ``n`` hex digits of a version id (a prefix the commands accept); ``h0`` for ``None``."""
    if version is None:
        return "h0"
    return version.partition(":")[2][:n] or version[:n]

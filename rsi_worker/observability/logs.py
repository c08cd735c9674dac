"""Structured logs of the worker and beat processes (issue 8).

``RSI_LOG_FORMAT=json`` (the default) writes one JSON object per line to stderr::

    {"ts": "2025-01-01T12:00:00.123+00:00", "level": "INFO", "logger": "rsi_worker.consolidate.finalize",
     "message": "run r_… closed: adopted", "run_id": "r_…", "agent_id": "shop", "task": "rsi.judge_round",
     "task_id": "…", "status": "adopted", …}

``run_id``, ``agent_id``, ``task`` and ``task_id`` come from context variables bound for the
duration of each task (the task wrapper's ``LogContext``, ``rsi_worker/cluster/middleware.py``, and
:func:`connect_task_context` for Celery's own lines about the task: the task's own ``run_id`` /
``agent`` arguments)
or from the record itself (``extra={"run_id": …}`` wins); any other ``extra`` key is copied as is.
``RSI_LOG_FORMAT=text`` writes the same content as one readable line. ``RSI_LOG_LEVEL`` sets the
root level. :func:`configure_logging` is called by ``rsi worker`` and ``rsi beat`` only — library
code only logs. In JSON mode those commands also drop Celery's start-up banner; the one-line notices
Celery's signal handlers print on shutdown (``worker: Warm shutdown (MainProcess)``) stay plain text,
since a signal handler cannot log safely.

**Credentials never reach the output** (docs/architecture.md#7-invariants invariant 7): every string of a
line —
message, extras, traceback — goes through a :class:`Scrubber` that replaces the values of the
settings' secrets (``SecretStr`` fields, passwords in URLs), anything the credential table finds
(:func:`rsi_common.credentials.redact`, the table world capture and the critic use; see
``docs/security/credentials.md``), and the password part of any ``scheme://user:pw@`` URL, placeholder
or not, with ``[redacted]``.
"""

from __future__ import annotations

import inspect
import json
import logging
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from typing import Any, TextIO
from urllib.parse import urlsplit

from pydantic import BaseModel, SecretStr

from rsi_common.config import Settings
from rsi_common.credentials import REDACTED, redact, redact_urls

__all__ = [
    "CONTEXT_FIELDS",
    "REDACTED",
    "JsonFormatter",
    "Scrubber",
    "TextFormatter",
    "bind",
    "bound",
    "clear_context",
    "configure_logging",
    "connect_task_context",
    "current_context",
    "restore",
    "secrets_of",
]

MIN_SECRET_CHARS = 8
"""Shorter secret values are not replaced verbatim everywhere (a password ``rsi`` would garble every
logger name); they are still caught inside URLs by the ``user:password@`` rule."""
CONTEXT_FIELDS = ("run_id", "agent_id", "task", "task_id")

_VARS: dict[str, ContextVar[str | None]] = {name: ContextVar(f"rsi_log_{name}", default=None)
                                            for name in CONTEXT_FIELDS}
_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None))) | {
    "message", "asctime", "taskName", "_rsi_seen",
}
_HANDLER_MARK = "_rsi_handler"


# --- context ------------------------------------------------------------------------------------

def bind(**fields: str | None) -> dict[str, Token[str | None]]:
    """Set context fields (``run_id``, ``agent_id``, ``task``, ``task_id``) for this thread/task.

    Returns:
        The tokens that restore the previous values (``ContextVar.reset``); :func:`bound` does that.

    Raises:
        KeyError: an unknown field name.
    """
    return {name: _VARS[name].set(value) for name, value in fields.items()}


def restore(tokens: dict[str, Token[str | None]]) -> None:
    """Restore the values :func:`bind` replaced (its returned ``tokens``), in the same thread."""
    for name, token in tokens.items():
        _VARS[name].reset(token)


@contextmanager
def bound(**fields: str | None) -> Iterator[None]:
    """Bind ``fields`` for the ``with`` block, then restore the previous values."""
    tokens = bind(**fields)
    try:
        yield
    finally:
        restore(tokens)


def clear_context() -> None:
    """Unset every context field (end of a task)."""
    for var in _VARS.values():
        var.set(None)


def current_context() -> dict[str, str | None]:
    """The bound context fields."""
    return {name: var.get() for name, var in _VARS.items()}


# --- scrubbing ----------------------------------------------------------------------------------

def _walk_secrets(value: Any) -> Iterator[str]:
    if isinstance(value, SecretStr):
        yield value.get_secret_value()
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _walk_secrets(getattr(value, name))
    elif isinstance(value, str) and "://" in value:
        try:
            password = urlsplit(value).password
        except ValueError:
            password = None
        if password:
            yield password


def secrets_of(settings: Settings) -> list[str]:
    """The secret values of ``settings`` (nested models included): every ``SecretStr`` and every
    password inside a URL, longest first."""
    return sorted({s for s in _walk_secrets(settings) if s}, key=len, reverse=True)


class Scrubber:
    """Replaces secret values and credential-looking text with :data:`REDACTED`.

    Args:
        secrets: exact values to replace (those shorter than :data:`MIN_SECRET_CHARS` are skipped).
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets = sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return redact_urls(redact(text, REDACTED), REDACTED)

    def clean(self, value: Any, depth: int = 0) -> Any:
        """``value`` as JSON-safe data with every string scrubbed."""
        if value is None or isinstance(value, bool | int | float):
            return value
        if isinstance(value, str):
            return self(value)
        if depth < 6 and isinstance(value, Mapping):
            return {self(str(k)): self.clean(v, depth + 1) for k, v in value.items()}
        if depth < 6 and isinstance(value, list | tuple | set | frozenset):
            return [self.clean(v, depth + 1) for v in value]
        return self(repr(value) if not isinstance(value, SecretStr) else REDACTED)


# --- formatters ---------------------------------------------------------------------------------

def _extras(record: logging.LogRecord) -> dict[str, Any]:
    out = {k: v for k, v in vars(record).items() if k not in _STANDARD_ATTRS and not k.startswith("_")}
    if record.name.startswith("celery."):
        out.pop("data", None)  # Celery repeats its message's task id, name, args or return value here
    return out


def _context(record: logging.LogRecord, extras: dict[str, Any]) -> dict[str, Any]:
    ctx: dict[str, Any] = current_context()
    for name in CONTEXT_FIELDS:
        if name in extras:
            ctx[name] = extras.pop(name)
    return ctx


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``ts, level, logger, message, run_id, agent_id, task, task_id``,
    then the record's extras, then ``exc`` / ``stack`` when present. Every string is scrubbed."""

    def __init__(self, scrubber: Scrubber | None = None) -> None:
        super().__init__()
        self.scrubber = scrubber or Scrubber()

    def format(self, record: logging.LogRecord) -> str:
        extras = _extras(record)
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(_context(record, extras))
        line.update({k: v for k, v in extras.items() if k not in line})
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(self.scrubber.clean(line), ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """``<time> <LEVEL> <logger>: <message> [run=… agent=… task=…] key=value …``, scrubbed."""

    def __init__(self, scrubber: Scrubber | None = None) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.scrubber = scrubber or Scrubber()

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extras = _extras(record)
        ctx = _context(record, extras)
        tags = " ".join(f"{k.removesuffix('_id')}={v}" for k, v in ctx.items() if v and k != "task_id")
        head, _, rest = text.partition("\n")
        more = " ".join(f"{k}={v}" for k, v in extras.items())
        line = " ".join(part for part in (head, f"[{tags}]" if tags else "", more) if part)
        return self.scrubber(line + ("\n" + rest if rest else ""))


def configure_logging(settings: Settings, *, level: str | None = None, stream: TextIO | None = None
                      ) -> logging.Handler:
    """Install the root handler of ``settings.log_format`` at ``level or settings.log_level``.

    Replaces a handler installed by an earlier call (idempotent); routes :mod:`warnings` to logging.
    Celery, started afterwards with ``worker_hijack_root_logger=False``, keeps this handler.

    Returns:
        The installed handler.
    """
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(old)
    scrubber = Scrubber(secrets_of(settings))
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    setattr(handler, _HANDLER_MARK, True)
    formatter = JsonFormatter(scrubber) if settings.log_format == "json" else TextFormatter(scrubber)
    handler.setFormatter(formatter)
    root.addHandler(handler)
    root.setLevel((level or settings.log_level).upper())
    logging.captureWarnings(True)
    return handler


# --- Celery task context --------------------------------------------------------------------------

def _task_fields(task: Any, args: Any, kwargs: Any) -> dict[str, str | None]:
    try:
        params = inspect.signature(task.run).bind_partial(*(args or ()), **(kwargs or {})).arguments
    except (TypeError, ValueError):
        return {}
    agent = params.get("agent_id", params.get("agent"))
    run_id = params.get("run_id")
    return {"agent_id": str(agent) if agent is not None else None,
            "run_id": str(run_id) if run_id is not None else None}


def _on_task_prerun(sender: Any = None, task_id: Any = None, task: Any = None, args: Any = None,
                    kwargs: Any = None, **_: Any) -> None:
    task = task or sender
    clear_context()
    bind(task=getattr(task, "name", None), task_id=str(task_id) if task_id else None,
         **_task_fields(task, args, kwargs))


def _on_task_postrun(**_: Any) -> None:
    clear_context()


def connect_task_context() -> None:
    """Bind ``task``, ``task_id``, ``run_id`` and ``agent_id`` (from the task's own arguments) for the
    duration of every task this process runs (Celery ``task_prerun`` / ``task_postrun``): the lines
    Celery itself writes about a task (``succeeded in``, ``raised``) are outside the task's body,
    where the task wrapper's ``LogContext`` (``rsi_worker/cluster/middleware.py``) binds the same
    fields.

    Idempotent (fixed ``dispatch_uid``). Context variables are per thread, so the threads pool's
    concurrent tasks never see each other's fields.
    """
    from celery import signals

    signals.task_prerun.connect(_on_task_prerun, weak=False, dispatch_uid="rsi-log-context-prerun")
    signals.task_postrun.connect(_on_task_postrun, weak=False, dispatch_uid="rsi-log-context-postrun")

"""The module-level Celery app for Celery's own tools: ``celery -A rsi_worker.cluster.celery_app``.

``celery -A`` and Flower import a module and read its ``app`` attribute; they never call a
factory. This module's ``app`` is built on first access (PEP 562 module ``__getattr__``) from the
process's environment by :func:`~rsi_worker.cluster.app.app_from_env`, so importing the module
reads no setting and opens no connection, and a process that never touches ``app`` never builds
it. The first access raises :class:`~rsi_common.errors.SettingsError` when ``RSI_REDIS_URL`` is not
set or a setting is invalid. Every command of ``docs/operations.md`` ("Celery's own tools")
takes this path::

    celery -A rsi_worker.cluster.celery_app inspect ping
    celery -A rsi_worker.cluster.celery_app purge -f        # the project's queues, not "celery"
    celery -A rsi_worker.cluster.celery_app flower          # with FLOWER_BASIC_AUTH set
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from celery import Celery

    app: Celery

__all__ = ["app"]

_lock = threading.Lock()


def __getattr__(name: str) -> Any:
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _lock:
        built = globals().get("app")
        if built is None:
            from rsi_worker.cluster.app import app_from_env

            built = globals()["app"] = app_from_env()
    return built

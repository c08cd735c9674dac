"""A tiny Celery app for wire-format tests of :class:`rsi_common.dispatch.KombuDispatcher`.

It registers ``rsi.consolidate`` (the name rsi_worker's app will use) on the ``consolidate`` queue;
the task appends one JSON line with its arguments and request headers to ``$WIRE_OUT``. The broker
is ``$WIRE_BROKER_URL``. Start it with::

    python -m celery -A tests.support.celery_app worker -Q consolidate -P solo
"""

from __future__ import annotations

import json
import os
from typing import Any

from celery import Celery

app = Celery("rsi_wire_test", broker=os.environ.get("WIRE_BROKER_URL", "memory://"))
app.conf.update(
    task_default_queue="consolidate",
    accept_content=["json"],
    task_serializer="json",
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="rsi.consolidate", bind=True)
def consolidate(self: Any, agent_id: str, io_id: str, token: str, fence: int) -> None:
    """Write ``{args, id, root_id, origin, delivery_info}`` as one line to ``$WIRE_OUT``."""
    line = {
        "args": [agent_id, io_id, token, fence],
        "id": self.request.id,
        "root_id": self.request.root_id,
        "origin": self.request.origin,
        "routing_key": (self.request.delivery_info or {}).get("routing_key"),
    }
    with open(os.environ["WIRE_OUT"], "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")

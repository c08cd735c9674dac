"""A timeline of an evolve run's tasks on the cluster, for ``rsi bench evolve --distributed``
(docs/algorithm/evolve.md#measured; a measurement, never read by the run).

Off unless the file ``evolve-timeline.jsonl`` exists in the worker's home (the bench creates it in its
private cluster's home before the workers start): then every ``evolve_step`` and ``evolve_trial``
appends one JSON line — wall-clock marks (``time.time()``, one machine) of where its time went. One
``write`` of a short line per task on a file opened for appending, so the workers' lines never mix.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

__all__ = ["FILE_NAME", "Timeline"]

FILE_NAME = "evolve-timeline.jsonl"
_LOCK = threading.Lock()
_ENABLED: dict[str, Path | None] = {}


class Timeline:
    """The timeline of one worker home (module docstring); a no-op when the file is absent."""

    def __init__(self, home: Path | None) -> None:
        key = str(home)
        with _LOCK:
            if key not in _ENABLED:  # looked up once per process and home
                path = None if home is None else home / FILE_NAME
                _ENABLED[key] = path if path is not None and path.exists() else None
            self.path = _ENABLED[key]

    @property
    def on(self) -> bool:
        return self.path is not None

    def record(self, **fields: Any) -> None:
        """Append one line (``pid`` added)."""
        if self.path is None:
            return
        line = json.dumps({"pid": os.getpid(), **fields}, separators=(",", ":")) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line.encode("utf-8"))
        finally:
            os.close(fd)

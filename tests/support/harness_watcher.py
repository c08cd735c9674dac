"""Second process of the harness-invalidation test: watches an agent's current harness.

Usage: ``python -m tests.support.harness_watcher <db_url> <redis_url> <agent> <v1,v2,...> <timeout_s>``.

Builds an :class:`~rsi_common.client.RsiClient` with the default cache TTL (15 s), waits for the
invalidation listener's subscription, prints ``{"event": "ready", "version": …}``, then polls
``current_harness`` every millisecond and prints ``{"event": "seen", "version": v, "t": time.time()}``
each time the next expected version shows up; ``{"event": "timeout"}`` if one does not in time.
"""

from __future__ import annotations

import json
import sys
import time

from rsi_common.client import RsiClient
from rsi_common.config import Settings
from rsi_common.dispatch import RecordingDispatcher


def _say(**event: object) -> None:
    print(json.dumps(event), flush=True)


def main(argv: list[str]) -> int:
    db_url, redis_url, agent, versions, timeout_s = argv
    settings = Settings(database_url=db_url, redis_url=redis_url)
    with RsiClient(settings, dispatcher=RecordingDispatcher()) as client:
        subscribed = client.start_listener(wait_s=60)
        _say(event="ready", version=client.current_harness(agent).version, subscribed=subscribed)
        for expected in versions.split(","):
            deadline = time.monotonic() + float(timeout_s)
            while client.current_harness(agent).version != expected:
                if time.monotonic() > deadline:
                    _say(event="timeout", expected=expected)
                    return 1
                time.sleep(0.001)
            _say(event="seen", version=expected, t=time.time())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The console's agent-tree page in a real headless Chromium against a live service (a real TCP socket,
SQLite and a real redis-server): a tree whose three children ran inline, one handle still queued and
one cancelled, shown by depth with each handle's status and the tree's spend today against its caps —
the same figures the /v1/runtime API answers. A screenshot is saved as a test artifact."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest

from rsi_common.config import RuntimeParams
from rsi_common.kernel.testing import ScriptedModel
from rsi_common.runtime.host import RuntimeClient
from rsi_common.runtime.turns import TurnEnv, drain
from rsi_worker.local.servers import RedisServer
from tests.integration.service.conftest import Live, start_live, stop_live
from tests.support.migrated import migrated_sqlite_url
from tests.support.runtime_policy import CATALOG, LEAD, policy

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Live, dict[str, str]]]:
    """A live service holding root ``lab``: three completed children, one queued and one cancelled."""
    from rsi_common import db

    tmp = tmp_path_factory.mktemp("runtime-console")
    with RedisServer(tmp / "redis") as server:
        engine = db.make_engine(migrated_sqlite_url(tmp / "console.db"))
        live = start_live(engine, str(engine.url), server.url)
        try:
            queue: deque[tuple[str, str]] = deque()
            wake = lambda a, s: queue.append((a, s))  # noqa: E731 - the inline driver's queue
            rc = RuntimeClient(live.svc.client, params=RuntimeParams(), wake=wake, actor="operator:test")
            rc.register("lab", {"system_parts": [["lead", LEAD]], "subagents": CATALOG},
                        caps={"tree_spawns_per_day": 10, "tree_tokens_per_day": 100_000})
            rc.start_turn("lab", "topic a; topic b; topic c")
            model = ScriptedModel([policy], repeat_last=True, provider="sim", model="sim-1")
            drain(TurnEnv(live.svc.client, RuntimeParams(), model, wake), queue)
            handles = {"queued": rc.spawn("lab", "researcher", "later", request_id="q1")["handle"],
                       "cancelled": rc.spawn("lab", "researcher", "never", request_id="c1")["handle"]}
            rc.cancel(handles["cancelled"], "test")
            yield live, handles
        finally:
            stop_live(live)
            engine.dispose()


def test_the_tree_page_shows_depths_statuses_and_spend_against_caps(
        tree: tuple[Live, dict[str, str]], browser_page: Any, shot: Any) -> None:
    (live, handles), page = tree, browser_page
    api = live.http(live.tokens["viewer"])
    shown = api.get("/v1/runtime/agents/lab/tree").json()
    spend = api.get("/v1/runtime/agents/lab/spend").json()

    live.login(page, live.tokens["viewer"], "/console/runtime")
    assert page.url.endswith("/console/runtime")
    assert page.locator("#roots a", has_text="lab").count() == 1
    page.click("#roots a:has-text('lab')")
    page.wait_for_load_state()
    assert page.url.endswith("/console/runtime/lab")

    agents = page.locator("#agent-tree li.agent")
    nodes = [(agents.nth(i).get_attribute("data-agent"), agents.nth(i).get_attribute("data-depth"))
             for i in range(agents.count())]
    assert nodes == [("lab", "0"), ("lab.researcher", "1")]
    assert agents.nth(0).get_attribute("data-lifecycle") == shown["tree"]["lifecycle"] == "idle"
    statuses = {h.get_attribute("data-handle"): h.get_attribute("data-status")
                for h in page.locator("#agent-tree li.handle").all()}
    assert statuses == {h["handle"]: h["status"] for h in shown["tree"]["handles"]}
    assert sorted(statuses.values()) == ["cancelled", "completed", "completed", "completed", "queued"]
    assert statuses[handles["queued"]] == "queued" and statuses[handles["cancelled"]] == "cancelled"

    def cell(dim: str, what: str) -> str:
        return str(page.locator(f"#tree-spend tr[data-dim='{dim}'] td.{what}").inner_text())

    assert cell("spawns", "spent") == str(spend["spent"]["spawns"]) == "5"
    assert cell("spawns", "cap") == "10"
    assert cell("tokens", "spent") == f"{spend['spent']['tokens']:,}" and cell("tokens", "cap") == "100,000"
    assert cell("turns", "spent") == str(spend["spent"]["turns"])
    assert cell("messages", "cap") == f"{spend['caps']['messages']:,}"
    path = shot(page, "console-runtime-tree")
    assert path.stat().st_size > 0
    missing = page.goto(f"{live.url}/console/runtime/nobody")
    assert missing is not None and missing.status == 404 and page.locator("#agent-tree").count() == 0
    child = page.goto(f"{live.url}/console/runtime/lab.researcher")
    assert child is not None and child.status == 200
    assert page.locator("#agent-tree li.agent").count() == 1  # the child's subtree, the root's spend
    assert cell("spawns", "spent") == "5"


def test_a_tree_outside_the_tokens_prefix_is_refused(tree: tuple[Live, dict[str, str]],
                                                     browser_page: Any) -> None:
    (live, _), page = tree, browser_page
    live.login(page, live.token("tenant", ("viewer",), agent_prefix="team-"), "/console/runtime")
    assert page.locator("#roots a").count() == 0  # lab is outside team-*
    r = page.goto(f"{live.url}/console/runtime/lab")
    assert r is not None and r.status == 403
    assert page.locator("#agent-tree").count() == 0

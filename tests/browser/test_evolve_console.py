"""The console's evolve pages in a real headless Chromium against a live service over a real small evolve
run (sim model, run inline): log in, the list, a run's page whose chart and rounds table match
``GET /v1/evolve/{name}``, a promotion through the confirmation page that makes the frontier the agent's
current version, and a POST without the CSRF value refused. Screenshots are saved as test artifacts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from rsi_worker.local.servers import RedisServer
from tests.integration.service.conftest import Live, start_live, stop_live
from tests.support.evolve_run import small_run
from tests.support.migrated import migrated_sqlite_url

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def evolved(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """A live service over a finished 3-round evolve run ``ev-web`` and a run ``ev-live`` marked running."""
    from rsi_common import db

    tmp = tmp_path_factory.mktemp("evolve-console")
    with RedisServer(tmp / "redis") as server:
        engine = db.make_engine(migrated_sqlite_url(tmp / "console.db"))
        live = start_live(engine, str(engine.url), server.url)
        try:
            small_run(live.svc.sessions, live.svc.settings, "ev-web", rounds=3)
            store = small_run(live.svc.sessions, live.svc.settings, "ev-live", run=False)
            store.set_run("ev-live", status="running")
            yield live
        finally:
            stop_live(live)
            engine.dispose()


def test_read_an_evolve_run_and_promote_its_frontier(evolved: Live, browser_page: Any, shot: Any) -> None:
    live, page = evolved, browser_page
    api = live.http(live.tokens["viewer"])
    view = api.get("/v1/evolve/ev-web").json()
    rounds = view["rounds"]
    assert len(rounds) == 3 and view["frontier"]["version"] != "h0"

    live.login(page, live.tokens["operator"], "/console/evolve")
    listed = [r["name"] for r in api.get("/v1/evolve").json()["runs"]]
    assert page.locator("#evolve-runs tbody tr").count() == len(listed) == 2
    page.click("header a:has-text('Evolve')")  # the nav link
    page.click("#evolve-runs a:has-text('ev-web')")
    page.wait_for_load_state()
    assert page.url.endswith("/console/evolve/ev-web")

    chart = page.locator("#evolve-chart svg")
    held = [view["baseline"]["S_heldout"], *[r["S_heldout"] for r in rounds]]
    cands = [c for r in rounds for c in r["candidates"] if c["S"] is not None]
    assert chart.locator("circle.pt-evolve").count() == len(rounds) + 1
    assert chart.locator("circle.pt-heldout").count() == sum(h is not None for h in held) >= 1
    assert chart.locator("rect.pt-delta").count() == len(rounds)
    assert chart.locator("circle.pt-candidate").count() == len(cands)
    assert chart.locator("line.adoption").count() == sum(r["adopted"] for r in rounds) >= 1
    rows = page.locator("#evolve-rounds tbody tr")
    assert rows.count() == len(rounds)
    for i, r in enumerate(rounds):
        cells = rows.nth(i).locator("td")
        assert cells.nth(0).inner_text() == str(r["t"]) and cells.nth(5).inner_text() == (r["winner"] or "–")
        assert cells.nth(8).inner_text() == str(r["model_calls"])
    assert page.locator("#evolve-candidates tbody tr").count() == sum(len(r["candidates"]) for r in rounds)
    assert "+" in page.locator("#frontier-diff").inner_text()
    assert page.locator("meta[http-equiv=refresh]").count() == 0  # done: no refresh
    shot(page, "console-evolve")

    page.fill("#promote-agent", "shop-7")
    page.click("#promote")
    page.wait_for_load_state()
    assert "/confirm" in page.url and api.get("/v1/agents/shop-7").status_code == 404  # nothing yet
    shot(page, "console-evolve-confirm")
    page.click("#confirm")
    page.wait_for_load_state()
    assert "promoted" in page.locator("#flash").inner_text()
    assert api.get("/v1/agents/shop-7").json()["current_version"] == view["frontier"]["version"]
    entries = live.http(live.tokens["operator"]).get("/v1/audit?agent_id=shop-7").json()["entries"]
    assert (entries[0]["action"], entries[0]["target"], entries[0]["outcome"]) == (
        "evolve.promote", "ev-web", "ok")

    page.goto(f"{live.url}/console/evolve/ev-live")
    assert page.locator("meta[http-equiv=refresh]").count() == 1  # running: the page reloads itself
    # a POST without the session's CSRF value changes nothing
    for form in ({}, {"csrf": "0" * 40}):
        r = page.request.post(f"{live.url}/console/evolve/ev-live/stop", form=form, max_redirects=0)
        assert r.status == 403, r.status
    assert api.get("/v1/evolve/ev-live").json()["stop_requested"] is False
    page.click("#stop")
    page.wait_for_load_state()
    page.click("#confirm")
    page.wait_for_load_state()
    assert "stop requested" in page.locator("#flash").inner_text()
    assert api.get("/v1/evolve/ev-live").json()["stop_requested"] is True


def test_a_viewer_sees_no_steering_on_an_evolve_run(evolved: Live, browser_page: Any) -> None:
    live, page = evolved, browser_page
    live.login(page, live.tokens["viewer"], "/console/evolve/ev-web")
    assert page.locator("#promote").count() == 0 and page.locator("#stop").count() == 0
    page.goto(f"{live.url}/console/evolve/ev-web/confirm?action=stop")
    assert "refused" in page.content()

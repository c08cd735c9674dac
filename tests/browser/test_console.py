"""The console in a real headless Chromium against a live service on a real cluster: log in, open an
agent (the plot has one point per judged round), open the adopting run and its trial matrix, roll
back with confirmation and see the current version change, and a POST without the CSRF value
refused. Screenshots are saved as test artifacts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from rsi_common.http_client import RsiHttpClient
from rsi_worker.local.servers import RedisServer
from tests.integration.service.conftest import Live, start_live, stop_live
from tests.integration.service.learning import learn
from tests.support.cluster import Cluster
from tests.support.migrated import migrated_sqlite_url

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def learned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """A live service whose agent ``shop`` adopted a harness on a real worker; built once for the
    module (its own redis-server and database). Only the first test changes it (a rollback to h0);
    the others hold on either version."""
    from rsi_common import db

    tmp = tmp_path_factory.mktemp("console")
    with RedisServer(tmp / "redis") as server:
        engine = db.make_engine(migrated_sqlite_url(tmp / "console.db"))
        live = start_live(engine, str(engine.url), server.url)
        try:
            with (
                Cluster(tmp, str(engine.url), server.url, n=1) as cluster,
                RsiHttpClient(live.url, live.tokens["host"], backoff_s=0, listen=False) as host,
            ):
                learn(host, "shop")
                runs = cluster.finished("shop", 1)
                assert any(r.status == "adopted" for r in runs), cluster.logs()
            yield live
        finally:
            stop_live(live)
            engine.dispose()


def test_log_in_read_an_agent_and_its_run_then_roll_back(learned: Live, browser_page: Any, shot: Any) -> None:
    live, page = learned, browser_page
    api = live.http(live.tokens["viewer"])
    runs = api.get("/v1/agents/shop/runs").json()["runs"]
    rounds = [r for r in runs if ((r["result"] or {}).get("round") or {}).get("incumbent")]
    adopted = next(r for r in runs if r["status"] == "adopted")

    live.login(page, live.tokens["operator"], "/console/agents/shop")
    assert page.url.endswith("/console/agents/shop")  # back where the login started
    cookie = next(c for c in page.context.cookies() if c["name"] == "rsi_console")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert page.locator("#current-version").inner_text() == adopted["adopted_version"]
    assert page.locator("#score-chart svg circle.pt-incumbent").count() == len(rounds) >= 1
    assert page.locator("#token-chart svg rect.bar-tokens").count() == len(runs)
    shot(page, "console-agent")

    page.goto(f"{live.url}/console/")
    assert page.locator("#agents a", has_text="shop").count() == 1
    shot(page, "console-agents")

    page.goto(f"{live.url}/console/agents/shop")
    page.click(f"#runs a:has-text('{adopted['run_id']}')")
    page.wait_for_load_state()
    record = api.get(f"/v1/runs/{adopted['run_id']}").json()
    cells = sum(len(ts) for per in record["trials"]["cells"].values() for ts in per.values())
    assert cells > 0
    assert page.locator("#trial-matrix .trial").count() == cells
    assert page.locator("#candidates tbody tr").count() == len(record["result"]["round"]["candidates"])
    assert "+" in page.locator("#winner-diff").inner_text()
    shot(page, "console-run")

    page.goto(f"{live.url}/console/agents/shop")
    page.select_option("#version-select", "h0")
    page.click("#rollback")
    page.wait_for_load_state()
    assert "/confirm" in page.url  # nothing changed yet: a confirmation first
    assert api.get("/v1/agents/shop").json()["current_version"] == adopted["adopted_version"]
    shot(page, "console-confirm")
    page.click("#confirm")
    page.wait_for_load_state()
    assert page.locator("#current-version").inner_text() == "h0"
    assert "rollback done" in page.locator("#flash").inner_text()
    assert api.get("/v1/agents/shop").json()["current_version"] is None
    entries = live.http(live.tokens["operator"]).get("/v1/audit?agent_id=shop").json()["entries"]
    assert (entries[0]["action"], entries[0]["target"], entries[0]["outcome"]) == ("rollback", "h0", "ok")
    shot(page, "console-after-rollback")


def test_a_post_without_the_csrf_value_is_refused(learned: Live, browser_page: Any) -> None:
    live, page = learned, browser_page
    live.login(page, live.tokens["operator"], "/console/agents/shop")
    before = live.http(live.tokens["viewer"]).get("/v1/agents/shop").json()
    # the browser's own cookie goes along (same origin), the CSRF value does not
    for form in ({}, {"csrf": "0" * 40}):
        r = page.request.post(f"{live.url}/console/agents/shop/freeze", form=form, max_redirects=0)
        assert r.status == 403, r.status
    after = live.http(live.tokens["viewer"]).get("/v1/agents/shop").json()
    assert after["frozen"] is False and after == before
    # logging out needs it too
    assert page.request.post(f"{live.url}/console/logout", form={}, max_redirects=0).status == 403


def test_a_viewer_sees_no_steering_and_cannot_post(learned: Live, browser_page: Any) -> None:
    live, page = learned, browser_page
    live.login(page, live.tokens["viewer"], "/console/agents/shop")
    assert page.locator("#rollback").count() == 0
    assert "operator scope" in page.content()
    page.goto(f"{live.url}/console/agents/shop/confirm?action=freeze")
    assert "lacks the 'operator' scope" in page.content()


def test_a_host_token_cannot_log_in(learned: Live, browser_page: Any) -> None:
    live, page = learned, browser_page
    live.login(page, live.tokens["host"], "/console/agents/shop", refused=True)
    assert "/console/login" in page.url or "login refused" in page.content()
    assert not [c for c in page.context.cookies() if c["name"] == "rsi_console"]

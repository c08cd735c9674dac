"""``rsi runs / lineage / diff / rollback / pin / freeze / unfreeze`` on a consolidated agent, with
``--json`` output parsed here, and clear errors (exit code 1, no traceback) for unknown agents and
versions."""

from __future__ import annotations

import pytest

from tests.integration.commands.conftest import Cli, corrected
from tests.support.pipeline import Stack

pytestmark = pytest.mark.timeout(60)


def test_admin_commands_on_a_consolidated_agent(cli: Cli, stack: Stack) -> None:
    corrected(stack, "shop")
    version = stack.consolidate("shop").version
    assert version is not None and stack.current_version("shop") == version

    (run,) = cli.json("runs", "shop")
    assert (run["kind"], run["status"], run["start_version"], run["adopted_version"]) == (
        "consolidate", "adopted", None, version)
    table = cli("runs", "shop")
    assert table.exit_code == 0 and "adopted" in table.stdout and run["run_id"] in table.stdout

    lineage = cli.json("lineage", "shop")
    assert lineage["agent"]["current_version"] == version
    assert [(v["version"], v["parent_version"], v["run_id"]) for v in lineage["versions"]] == [
        (version, None, run["run_id"])]
    assert "variant A adopted" in cli("lineage", "shop").stdout

    hex_prefix = version.split(":")[1][:10]
    diff = cli.json("diff", "shop", "h0", hex_prefix)
    assert (diff["from"], diff["to"], diff["identical"]) == (None, version, False)
    assert "--- a/harness/manifest.json" in diff["diff"] and "+++ b/harness/manifest.json" in diff["diff"]
    same = cli.json("diff", "shop", version[:14], version)
    assert same["identical"] and same["diff"] == ""
    assert "manifest.json" in cli("diff", "shop", "h0", version).stdout

    back = cli.json("rollback", "shop", "h0")
    assert (back["current_version"], back["frozen"]) == (None, False)
    assert stack.current_version("shop") is None
    pinned = cli.json("pin", "shop", hex_prefix)
    assert (pinned["current_version"], pinned["frozen"]) == (version, True)
    assert cli.json("unfreeze", "shop")["frozen"] is False
    frozen = cli("freeze", "shop")
    assert frozen.exit_code == 0 and "frozen" in frozen.stdout
    assert cli.json("lineage", "shop")["agent"]["frozen"] is True


def test_unknown_agents_and_versions_are_clear_errors(cli: Cli, stack: Stack) -> None:
    corrected(stack, "shop")
    stack.consolidate("shop")
    for args in (["runs", "ghost"], ["lineage", "ghost"], ["diff", "ghost", "h0", "h0"],
                 ["rollback", "ghost", "h0"], ["pin", "ghost", "h0"], ["freeze", "ghost"],
                 ["unfreeze", "ghost"]):
        result = cli(*args)
        assert result.exit_code == 1, args
        assert result.stderr.strip() == "error: unknown agent 'ghost'", args
        assert result.stdout == ""
    err = cli.json("rollback", "ghost", "h0", code=1)
    assert err == {"error": {"type": "UnknownAgentError", "message": "unknown agent 'ghost'"}}

    for version in ("sha256:00000000", "00000000ffff"):
        result = cli("rollback", "shop", version)
        assert result.exit_code == 1 and "has no stored harness version" in result.stderr
    short = cli("diff", "shop", "h0", "ab")
    assert short.exit_code == 1 and "at least 4 hex digits" in short.stderr
    assert cli.json("pin", "shop", "deadbeef", code=1)["error"]["type"] == "UnknownVersionError"
    assert stack.current_version("shop") is not None  # nothing moved


def test_an_old_schema_is_a_setup_error(cli: Cli, tmp_path: object) -> None:
    fresh = f"sqlite:///{tmp_path}/empty.db"
    result = cli("runs", "shop", env={"RSI_DATABASE_URL": fresh})
    assert result.exit_code == 2 and "rsi db upgrade" in result.stderr

"""Issue 11, class 7: an invalid setting fails at load, and every ``rsi`` command turns it into one line
on stderr and exit code 2 — no traceback, no value that could be a secret, no silent fallback
(``docs/operations/settings.md``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rsi_common.config import Settings
from rsi_common.errors import SettingsError
from rsi_worker.cli import app
from rsi_worker.cluster.app import app_from_env

PASSWORD = "Pw" + "9f3kLq2xZ8"
"""A password put into the URLs below: it must never be printed."""

BAD: dict[str, tuple[dict[str, str], str]] = {
    "redis url not a url": ({"RSI_REDIS_URL": "notaurl"}, "RSI_REDIS_URL"),
    "redis url amqp": ({"RSI_REDIS_URL": f"amqp://guest:{PASSWORD}@rabbit:5672//"},
                       "'amqp' is not supported"),
    "redis port out of range": ({"RSI_REDIS_URL": "redis://cache:99999/0"}, "RSI_REDIS_URL"),
    "redis url without host": ({"RSI_REDIS_URL": "redis://"}, "needs a host"),
    "database mysql": ({"RSI_DATABASE_URL": f"mysql://app:{PASSWORD}@db/app"}, "'mysql' is not supported"),
    "database postgres alias": ({"RSI_DATABASE_URL": f"postgres://app:{PASSWORD}@db/app"},
                                "'postgres' is not supported"),
    "database port out of range": ({"RSI_DATABASE_URL": f"postgresql://app:{PASSWORD}@db:99999/app"},
                                   "RSI_DATABASE_URL"),
    "database not a url": ({"RSI_DATABASE_URL": "rsi.db"}, "RSI_DATABASE_URL"),
    "metrics port": ({"RSI_METRICS_PORT": "99999"}, "RSI_METRICS_PORT"),
    "metrics port zero": ({"RSI_METRICS_PORT": "0"}, "RSI_METRICS_PORT"),
    "b_min above b_max": ({"RSI_CONSOLIDATION__B_MIN": "5"}, "RSI_CONSOLIDATION__B_MIN"),
    "m_draft above m": ({"RSI_CONSOLIDATION__M_DRAFT": "3"}, "RSI_CONSOLIDATION__M_DRAFT"),
    "delta_z infinite": ({"RSI_CONSOLIDATION__DELTA_Z": "inf"}, "RSI_CONSOLIDATION__DELTA_Z"),
    "soft limit above hard": ({"RSI_TASK_SOFT_TIME_LIMIT_S": "700"}, "task_soft_time_limit_s"),
    "visibility below hard": ({"RSI_VISIBILITY_TIMEOUT_S": "600"}, "visibility_timeout_s"),
    "log level": ({"RSI_LOG_LEVEL": "loud"}, "RSI_LOG_LEVEL"),
    "lease zero": ({"RSI_LEASE_S": "0"}, "RSI_LEASE_S"),
    "openai endpoint scheme": ({"RSI_OPENAI_BASE_URL": f"ftp://u:{PASSWORD}@host/v1"},
                               "'ftp' is not supported"),
    "role endpoint port": ({"RSI_ROLE_CRITIC_BASE_URL": "http://host:70000/v1"}, "RSI_ROLE_CRITIC_BASE_URL"),
    "model factory": ({"RSI_MODEL_FACTORY": "not a factory"}, "RSI_MODEL_FACTORY"),
    "unknown setting": ({"RSI_LEASE": "5"}, "RSI_LEASE"),
    "not a number": ({"RSI_RUN_STALE_S": "soon"}, "RSI_RUN_STALE_S"),
}
"""Name → (environment, a text the one line must contain)."""


def _commands(tmp: Path) -> dict[str, list[str]]:
    lines = tmp / "worlds.jsonl"
    lines.write_text("", encoding="utf-8")
    return {
        "consolidate": ["consolidate", "--agent", "a1"],
        "consolidate inline": ["consolidate", "--agent", "a1", "--inline"],
        "worker": ["worker"],
        "worker unsupervised": ["worker", "--no-supervise"],
        "beat": ["beat"],
        "db upgrade": ["db", "upgrade"],
        "demo": ["demo", "--home", str(tmp / "demo")],
        "runs": ["runs", "a1"],
        "runs json": ["runs", "a1", "--json"],
        "lineage": ["lineage", "a1"],
        "freeze": ["freeze", "a1"],
        "batch": ["batch", "--all"],
        "worlds export": ["worlds", "export", "a1"],
        "worlds import": ["worlds", "import", str(lines)],
        "loadtest": ["loadtest", "--duration", "0.1"],
    }


def _base_env(tmp: Path) -> dict[str, str]:
    return {"RSI_HOME": str(tmp / "home"), "RSI_DATABASE_URL": f"sqlite:///{tmp / 'rsi.db'}",
            "COLUMNS": "200"}


def _check_one_line(code: int, stdout: str, stderr: str, mention: str) -> None:
    assert code == 2, (stdout, stderr)
    assert len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith("error: ") and mention in stderr, stderr
    assert "Traceback" not in stdout + stderr
    assert PASSWORD not in stdout + stderr


@pytest.mark.parametrize("bad", sorted(BAD))
def test_every_command_reports_a_bad_setting_in_one_line(bad: str, tmp_path: Path) -> None:
    env, mention = BAD[bad]
    for name, args in _commands(tmp_path).items():
        result = CliRunner().invoke(app, args, env={**_base_env(tmp_path), **env})
        assert result.exception is None or isinstance(result.exception, SystemExit), (name, result.exception)
        _check_one_line(result.exit_code, result.stdout, result.stderr, mention)
    assert not (tmp_path / "demo").exists() and not (tmp_path / "home").exists()


@pytest.mark.parametrize(("args", "bad"), [
    (["worker"], "redis url not a url"),
    (["worker"], "b_min above b_max"),
    (["beat"], "database mysql"),
    (["db", "upgrade"], "database mysql"),
    (["db", "upgrade"], "metrics port"),
    (["consolidate", "--agent", "a1"], "m_draft above m"),
    (["demo"], "redis port out of range"),
])
def test_real_process_exits_2_with_one_line(args: list[str], bad: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("RSI_")}
    env.update(_base_env(tmp_path), **BAD[bad][0])
    done = subprocess.run([sys.executable, "-m", "rsi_worker.cli", *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    _check_one_line(done.returncode, done.stdout, done.stderr, BAD[bad][1])


def test_db_upgrade_url_option_is_checked_too(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["db", "upgrade", "--url", f"mysql://app:{PASSWORD}@db/app"],
                                env=_base_env(tmp_path))
    _check_one_line(result.exit_code, result.stdout, result.stderr, "--url: the scheme 'mysql'")


@pytest.mark.parametrize("bad", sorted(BAD))
def test_settings_error_is_one_line_without_values(bad: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in BAD[bad][0].items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SettingsError) as info:
        Settings()
    message = str(info.value)
    assert "\n" not in message and BAD[bad][1] in message and PASSWORD not in message


@pytest.mark.parametrize("env", [
    {"RSI_REDIS_URL": ""},
    {"RSI_REDIS_URL": "redis://cache:6379/0"},
    {"RSI_REDIS_URL": f"rediss://:{PASSWORD}@cache:6380/2"},
    {"RSI_REDIS_URL": "unix:///var/run/redis.sock?db=1"},
    {"RSI_REDIS_URL": "redis+socket:///tmp/redis.sock"},
    {"RSI_DATABASE_URL": "sqlite://"},
    {"RSI_DATABASE_URL": "sqlite+pysqlite:///rel/rsi.db"},
    {"RSI_DATABASE_URL": "postgresql://app@db/app"},
    {"RSI_DATABASE_URL": "postgresql+psycopg://postgres@/rsi?host=/tmp/pg&port=5433"},
    {"RSI_METRICS_PORT": "1"},
    {"RSI_METRICS_PORT": "65535"},
    {"RSI_OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"},
    {"RSI_OPENAI_BASE_URL": ""},
    {"RSI_LOG_LEVEL": "debug"},
    {"RSI_MODEL_FACTORY": "tests.support.factory:make"},
    {"RSI_CONSOLIDATION__B_MIN": "3", "RSI_CONSOLIDATION__B_MAX": "3"},
])
def test_valid_settings_still_load(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    s = Settings()
    if env.get("RSI_REDIS_URL") == "":
        assert s.redis_url is None
    if env.get("RSI_OPENAI_BASE_URL") == "":
        assert s.openai_base_url is None


def test_celery_hook_never_falls_back_to_a_memory_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RSI_REDIS_URL", raising=False)
    with pytest.raises(SettingsError, match="RSI_REDIS_URL is not set"):
        app_from_env()
    monkeypatch.setenv("RSI_REDIS_URL", "notaurl")
    with pytest.raises(SettingsError, match="RSI_REDIS_URL"):
        app_from_env()

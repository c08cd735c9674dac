"""Structured logs: the JSON line, the task context, credential scrubbing, and OpenTelemetry being
off by default (issue 8)."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path

import pytest
from pydantic import SecretStr

from rsi_common.config import Settings
from rsi_worker.cluster.app import create_app
from rsi_worker.observability.logs import REDACTED, bound, configure_logging, current_context, secrets_of
from rsi_worker.observability.tracing import instrument_celery

pytestmark = pytest.mark.timeout(60)
REPO = Path(__file__).resolve().parents[3]
# Credential-shaped values are built from fragments: no file holds a credential-shaped literal.
OPENAI_KEY = "sk-" + "proj-Zx81PqLmN0vB7tYc2RwE9uKs"  # key-shaped (matches the credential patterns)
OPAQUE_KEY = "opaque-7f3a91c2d8e4b6a0"  # matches no pattern: only the settings' secret list catches it
DB_PASSWORD = "correct" + "-horse-battery"
STRANGER_KEY = "sk-" + "ant-api03-abcdefghijklmnopqrstuvwx"
REDIS_PASSWORD = "s3cr" + "3tpw"
PG_URL = "postgresql+psycopg://rsi:" + "rsi@postgres:5432/rsi"


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    """The root logger, restored after the test."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield root
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.captureWarnings(False)


def capture(settings: Settings) -> io.StringIO:
    out = io.StringIO()
    configure_logging(settings, stream=out)
    return out


def lines(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]


def secret_settings(**kw: object) -> Settings:
    return Settings(openai_api_key=SecretStr(OPENAI_KEY), anthropic_api_key=SecretStr(OPAQUE_KEY),
                    database_url=f"postgresql+psycopg://rsi:{DB_PASSWORD}@db:5432/rsi", **kw)


def test_one_json_object_per_line_with_context(root_logger: logging.Logger) -> None:
    out = capture(Settings(log_level="debug"))
    assert root_logger.level == logging.DEBUG
    log = logging.getLogger("rsi_worker.test")
    log.info("outside")
    with bound(run_id="r_1", agent_id="shop", task="rsi.judge_round"):
        log.warning("closed %s", "adopted", extra={"status": "adopted", "n": 3, "nested": {"a": [1, 2]}})
        log.info("explicit", extra={"run_id": "r_2"})
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    first, closed, explicit, failed = lines(out)
    assert set(first) >= {"ts", "level", "logger", "message", "run_id", "agent_id", "task"}
    assert first["run_id"] is None and first["message"] == "outside" and first["logger"] == "rsi_worker.test"
    assert closed["level"] == "WARNING" and closed["message"] == "closed adopted"
    assert (closed["run_id"], closed["agent_id"], closed["task"]) == ("r_1", "shop", "rsi.judge_round")
    assert closed["status"] == "adopted" and closed["n"] == 3 and closed["nested"] == {"a": [1, 2]}
    assert explicit["run_id"] == "r_2" and explicit["agent_id"] == "shop"  # the record's own field wins
    assert "ValueError: boom" in str(failed["exc"])
    assert current_context() == {"run_id": None, "agent_id": None, "task": None, "task_id": None}
    assert str(first["ts"]).endswith("+00:00")


def test_configure_is_idempotent_and_text_format(root_logger: logging.Logger) -> None:
    capture(Settings())
    out = capture(Settings(log_format="text"))
    ours = [h for h in root_logger.handlers if getattr(h, "_rsi_handler", False)]
    assert len(ours) == 1
    with bound(run_id="r_9", agent_id="a"):
        logging.getLogger("rsi_worker.x").info("hello")
    text = out.getvalue()
    assert "INFO rsi_worker.x: hello [run=r_9 agent=a]" in text and not text.startswith("{")


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_credentials_are_never_emitted_verbatim(root_logger: logging.Logger, fmt: str) -> None:
    settings = secret_settings(log_format=fmt)
    assert {OPENAI_KEY, OPAQUE_KEY, DB_PASSWORD} <= set(secrets_of(settings))
    out = capture(settings)
    log = logging.getLogger("rsi_worker.leaky")
    log.info("calling with %s and %s", OPENAI_KEY, OPAQUE_KEY)
    log.info("db is %s", settings.database_url, extra={"headers": {"x-api-key": OPAQUE_KEY}})
    log.info(f"stranger key {STRANGER_KEY} and redis://:" + REDIS_PASSWORD + "@redis:6379/0")
    log.info('payload {"api_' + 'key": "ffffffffffff"}')
    try:
        raise RuntimeError(f"auth failed for {OPENAI_KEY}")
    except RuntimeError:
        log.exception("model call failed")
    text = out.getvalue()
    for leaked in (OPENAI_KEY, OPAQUE_KEY, DB_PASSWORD, STRANGER_KEY, REDIS_PASSWORD, "ffffffffffff"):
        assert leaked not in text
    assert text.count(REDACTED) >= 7
    assert "rsi_worker.leaky" in text and "postgresql+psycopg://rsi:" in text  # the rest is intact


def test_short_url_password_is_scrubbed_only_in_urls(root_logger: logging.Logger) -> None:
    out = capture(Settings(database_url=PG_URL))
    logging.getLogger("rsi_worker.db").info(f"connected to {PG_URL}")
    (line,) = lines(out)
    assert line["logger"] == "rsi_worker.db"
    assert line["message"] == f"connected to postgresql+psycopg://rsi:{REDACTED}@postgres:5432/rsi"


def test_tasks_bind_their_run_and_agent(root_logger: logging.Logger) -> None:
    app = create_app(Settings())
    app.conf.task_always_eager = True
    seen: list[dict[str, str | None]] = []

    @app.task(name="rsi.test_probe", bind=True)
    def probe(self: object, run_id: str, agent: str, extra: int = 0) -> None:
        seen.append(current_context())

    probe.apply(args=("r_7",), kwargs={"agent": "shop"})
    assert seen[0]["run_id"] == "r_7" and seen[0]["agent_id"] == "shop"
    assert seen[0]["task"] == "rsi.test_probe" and seen[0]["task_id"]
    assert current_context()["run_id"] is None  # cleared after the task


def test_otel_is_off_by_default_and_not_imported() -> None:
    code = (
        "import sys\n"
        "from rsi_common.config import Settings\n"
        "from rsi_worker.cluster.app import create_app\n"
        "from rsi_worker.observability.tracing import instrument_celery\n"
        "s = Settings(); app = create_app(s)\n"
        "assert s.otel is False and instrument_celery(s) is False\n"
        "app.rsi.start_observability(); app.rsi.stop_observability()\n"
        "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.instrumentation', "
        "'opentelemetry.sdk'))))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("RSI_")}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_otel_without_the_extra_stays_off(caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings(otel=True)
    try:
        installed = find_spec("opentelemetry.instrumentation.celery") is not None
    except ModuleNotFoundError:
        installed = False
    if installed:  # the otel extra is installed here
        assert instrument_celery(settings) is True
        return
    with caplog.at_level("WARNING", logger="rsi_worker.observability.tracing"):
        assert instrument_celery(settings) is False
    assert "otel extra is not installed" in caplog.text

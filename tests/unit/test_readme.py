"""README.md: the two commands come first and the configuration table matches Settings."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from rsi_common.config import settings_reference

README = Path(__file__).resolve().parents[2] / "README.md"


def test_two_commands_first() -> None:
    text = README.read_text(encoding="utf-8")
    first_block = re.search(r"```sh\n(.*?)```", text, re.S)
    assert first_block is not None
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines() if line.strip()]
    assert commands == ["make demo", "make test"]


def test_configuration_table_lists_every_setting() -> None:
    text = README.read_text(encoding="utf-8")
    for name, _, _ in settings_reference():
        assert f"`{name}`" in text, name
    done = subprocess.run([sys.executable, "scripts/readme_settings.py", "--check"],
                          cwd=README.parent, capture_output=True)
    assert done.returncode == 0, "README configuration table is stale: run scripts/readme_settings.py"


def test_celery_commands_of_the_operations_section_resolve() -> None:
    """Every ``celery -A $A …`` line the README lists parses as Celery's CLI (Flower's included) and
    takes the project's app path."""
    import shlex
    import warnings

    from celery.bin.base import CLIContext
    from celery.bin.celery import celery

    from rsi_common.config import Settings
    from rsi_worker.cluster.app import create_app

    celery_app = create_app(Settings(redis_url="redis://127.0.0.1:1/0"))  # never connects here

    text = README.read_text(encoding="utf-8")
    app = re.search(r"`A=([\w.]+)`", text)
    assert app is not None and app.group(1) == "rsi_worker.cluster.celery_app"
    found = re.findall(r"^\s*((?:\w+=\S+ )*celery -A .*)$", text, re.M)
    lines = [line.split("#")[0].strip() for line in found]
    assert len(lines) >= 8
    seen = set()
    for line in lines:
        argv = [a for a in shlex.split(line) if "=" not in a or a.startswith("-")]
        assert argv[:3] == ["celery", "-A", "$A"], line
        with warnings.catch_warnings():  # Celery's own `events` declares -d twice (--dump, --detach)
            warnings.simplefilter("ignore", UserWarning)
            ctx = celery.make_context("celery", ["-A", app.group(1), *argv[3:]])
            ctx.obj = CLIContext(app=celery_app, no_color=True, workdir=None, quiet=True)
            name, sub, rest = celery.resolve_command(ctx, [*ctx._protected_args, *ctx.args])
            assert sub is not None, line
            sub_ctx = sub.make_context(name, rest, parent=ctx)  # options and arguments are valid
        action = [str(v) for k, v in sub_ctx.params.items() if k in ("action", "command") and v]
        seen.add(" ".join([str(name), *action]))
    assert {"inspect ping", "purge", "control cancel_consumer", "control add_consumer", "events",
            "flower"} <= seen

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

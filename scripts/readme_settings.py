"""Regenerate the configuration table of README.md from the Settings model.

Usage: python scripts/readme_settings.py [--check]   (--check: exit 1 when README is out of date)
"""

from __future__ import annotations

import sys
from pathlib import Path

from rsi_common.config import settings_reference

BEGIN, END = "<!-- settings:begin -->", "<!-- settings:end -->"
README = Path(__file__).resolve().parents[1] / "README.md"


def table() -> str:
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    for name, default, doc in settings_reference():
        text = " ".join(doc.replace("|", "\\|").split())
        lines.append(f"| `{name}` | {f'`{default}`' if default else ''} | {text} |")
    return "\n".join(lines)


def render(readme: str) -> str:
    head, _, rest = readme.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def main() -> int:
    current = README.read_text(encoding="utf-8")
    wanted = render(current)
    if "--check" in sys.argv:
        return 0 if wanted == current else 1
    README.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

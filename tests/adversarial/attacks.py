"""Loader of ``attacks.json``: the attack strings of the adversarial tests, in one data file.

Credential-shaped values are stored as fragments (``parts``) and joined here, so the repository never
holds a credential-shaped literal that a secret scanner would flag.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

DATA = Path(__file__).with_name("attacks.json")


@cache
def load() -> dict[str, Any]:
    """The parsed data file (sections by attack class)."""
    return json.loads(DATA.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def section(name: str) -> list[dict[str, Any]]:
    """Entries of one section; an entry with ``parts`` gets ``text`` = the joined parts, one with
    ``repeat`` its text repeated that many times."""
    out = []
    for entry in load()[name]:
        e = dict(entry)
        if "parts" in e:
            e["text"] = "".join(e["parts"])
        if "repeat" in e:
            e["text"] = e["text"] * int(e["repeat"])
        out.append(e)
    return out


def texts(name: str) -> list[str]:
    """The ``text`` of every entry of a section."""
    return [e["text"] for e in section(name)]


def ids(name: str) -> list[str]:
    """The ``name`` of every entry of a section (pytest ids)."""
    return [e["name"] for e in section(name)]

"""Credential patterns (SPEC §6.2) shared by the world capture and the critic precheck.

Reports only labels, never the matched text: a secret must not reach a log or an error message.
"""

from __future__ import annotations

import re

__all__ = ["CREDENTIAL_PATTERNS", "find_credentials"]

CREDENTIAL_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("google api key", re.compile(r"AIza[0-9A-Za-z_\-]{35}")),
    ("secret key", re.compile(r"\bsk-[A-Za-z0-9_\-]{20,}")),
    ("api key assignment", re.compile(r"(?i)api[_-]?key\s*[:=]\s*[\"'][^\"'\s]{8,}[\"']")),
    ("private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    ("aws key", re.compile(r"\bAKIA[0-9A-Z]{16}\b")),
    ("github token", re.compile(r"\bghp_[A-Za-z0-9]{20,}")),
    ("gitlab token", re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}")),
    ("slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("json secret", re.compile(r"(?i)\"(api_key|apikey|secret|password|access_token)\"\s*:\s*\"[^\"]{8,}\"")),
)
"""(label, compiled regex), in the order of SPEC §6.2."""


def find_credentials(text: str) -> list[str]:
    """Labels of the credential patterns that ``re.search`` ``text``, in pattern order, each once."""
    return [label for label, rx in CREDENTIAL_PATTERNS if rx.search(text)]

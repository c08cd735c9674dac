"""The docs/formats.md §6.2 credential patterns (rsi_common.credentials)."""

from __future__ import annotations

import pytest

from rsi_common.credentials import CREDENTIAL_PATTERNS, find_credentials

POSITIVE = {
    "google api key": "key=AIza" + "B" * 35,
    "secret key": "sk-" + "a1" * 15,
    "api key assignment": "API_KEY = '" + "abcd1234efgh'",
    "private key": "-----BEGIN OPENSSH " + "PRIVATE KEY-----",
    "aws key": "AKIA" + "Z" * 16,
    "github token": "ghp_" + "x" * 24,
    "gitlab token": "glpat-" + "y" * 20,
    "slack token": "xoxb-" + "1234567890",
    "json secret": '{"pass' + 'word": "correct horse"}',
}


def test_original_labels_first_in_order() -> None:
    assert [label for label, _ in CREDENTIAL_PATTERNS][: len(POSITIVE)] == list(POSITIVE)


@pytest.mark.parametrize(("label", "text"), POSITIVE.items())
def test_each_pattern_hits(label: str, text: str) -> None:
    assert label in find_credentials(f"prefix {text} suffix")


@pytest.mark.parametrize(
    "text",
    [
        "ask-" + "a" * 30,  # no word boundary before sk-
        "sk-short",
        "AKIA" + "z" * 16,  # lowercase
        '"password": "short"',
        "the api key is stored in the vault",
        "",
    ],
)
def test_near_misses(text: str) -> None:
    assert find_credentials(text) == []


def test_several_labels_each_once() -> None:
    text = "sk-" + "a" * 25 + " and sk-" + "b" * 25 + " and ghp_" + "c" * 20
    assert find_credentials(text) == ["secret key", "github token"]


ORIGINAL_REGEXES = (
    r"AIza[0-9A-Za-z_\-]{35}", r"\bsk-[A-Za-z0-9_\-]{20,}",
    r"(?i)api[_-]?key\s*[:=]\s*[\"'][^\"'\s]{8,}[\"']",
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----", r"\bAKIA[0-9A-Z]{16}\b", r"\bghp_[A-Za-z0-9]{20,}",
    r"\bglpat-[A-Za-z0-9_\-]{20,}", r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
    r"(?i)\"(api_key|apikey|secret|password|access_token)\"\s*:\s*\"[^\"]{8,}\"",
)


def test_original_regexes_unchanged() -> None:
    assert tuple(rx.pattern for _, rx in CREDENTIAL_PATTERNS[: len(ORIGINAL_REGEXES)]) == ORIGINAL_REGEXES


def test_table_rows_are_well_formed() -> None:
    from rsi_common.credentials import PATTERNS

    labels = [p.label for p in PATTERNS]
    assert len(labels) == len(set(labels))
    for p in PATTERNS:
        assert p.anchors and all(a == a.lower() and a for a in p.anchors), p.label
        assert p.shape and p.before >= 0, p.label


def test_every_format_character_is_removed() -> None:
    import sys
    import unicodedata

    from rsi_common.credentials import normalise

    cf = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]
    assert len(cf) > 150
    assert normalise("a" + "".join(cf) + "b") == "ab"
    for extra in ("\u034f", "\ufe0f", "\u180b", "\u3164", "\uffa0", "\U000e0100"):  # other ignorables
        assert normalise(f"a{extra}b") == "ab"


def test_normalise_keeps_ascii_and_applies_nfkc() -> None:
    from rsi_common.credentials import normalise

    assert normalise("plain ascii: sk-1") == "plain ascii: sk-1"
    assert normalise("\uff53\uff4b\uff0d") == "sk-"  # full-width
    assert normalise("x\ud800y\u200b") == "x\ud800y"  # a lone surrogate passes through


def test_redact_keeps_the_key_name_and_the_text_around() -> None:
    from rsi_common.credentials import REDACTED, redact

    secret = "hunter2" + "hunter2"
    assert redact(f"login with password: {secret} please") == f"login with password: {REDACTED} please"
    assert redact("nothing here") == "nothing here"
    key = "-----BEGIN EC " + "PRIVATE KEY-----\nMHcCAQEEIBk\nAoGBAL==\n-----END EC " + "PRIVATE KEY-----"
    assert redact(f"pem:\n{key}\nnext line") == f"pem:\n{REDACTED}\nnext line"


def test_safe_key_and_safe_repr() -> None:
    from rsi_common.credentials import safe_key, safe_repr

    key = "gh" + "p_" + "x" * 30
    assert safe_key(key) == "<redacted key>" and safe_key("locale") == "locale"
    assert safe_repr(key) == "<redacted: 'github token'>"
    assert safe_repr("agent-1") == "'agent-1'" and safe_repr(7) == "7"
    assert safe_repr("x" * 200).endswith("…") and len(safe_repr("x" * 200)) == 80
    assert "s3" not in safe_repr("redis://:" + "s3cr3t@h:1/0")

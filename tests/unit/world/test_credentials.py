"""The SPEC §6.2 credential patterns (rsi_common.credentials)."""

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

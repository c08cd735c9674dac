"""Reading stored JSON defensively (``rsi_common.stored``) against the unicode attack strings."""

from __future__ import annotations

import json

import pytest

from rsi_common.errors import CredentialError, InvalidInput
from rsi_common.stored import (
    MAX_STORED_DEPTH,
    StoredDataError,
    decode_stored,
    first_problem,
    repair,
    safe_reason,
    safe_text,
)
from tests.adversarial import attacks
from tests.adversarial.stranding import escaped, nested

UNICODE = attacks.section("unicode")
SECRET = "sk-" + "Zr4q" * 8


def is_surrogate_attack(text: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


@pytest.mark.parametrize("entry", UNICODE, ids=attacks.ids("unicode"))
def test_unicode_attacks_are_found_repaired_and_made_safe(entry: dict[str, str]) -> None:
    text = entry["text"]
    stored = escaped({"signals": {"comment": text}})  # how a JSON column holds it
    problem = first_problem({"comment": text}, "signals")
    if is_surrogate_attack(text):
        assert problem is not None and problem.startswith("signals.comment: lone surrogate U+")
        with pytest.raises(StoredDataError, match="lone surrogate"):
            decode_stored(stored, "row")
        fixed, n = repair({"comment": text})
        assert n >= 1 and first_problem(fixed) is None
        fixed["comment"].encode("utf-8")
    else:  # NUL, zero-width, bidi and noncharacters are valid scalar values: storable and carried
        assert problem is None
        assert decode_stored(stored, "row") == {"signals": {"comment": text}}
        assert repair({"comment": text}) == ({"comment": text}, 0)
    safe_text(text).encode("utf-8")
    assert "\x00" not in safe_text(text)


def test_depth_non_finite_numbers_and_bad_json_are_reasons_without_content() -> None:
    assert decode_stored(nested(MAX_STORED_DEPTH), "w") is not None
    for text, reason in ((nested(MAX_STORED_DEPTH + 1), "w: nested deeper than 128 levels"),
                         (nested(5000), "w: nested too deeply to decode"),
                         ('{"a": NaN}', "w.a: non-finite number"),
                         ('{"a": "secret value', "w: not valid JSON at column 7"),
                         ('["secret value"]', "w: a JSON object was expected, got list")):
        with pytest.raises(StoredDataError) as err:
            decode_stored(text, "w")
        assert str(err.value) == reason and "secret" not in str(err.value)


def test_keys_are_named_only_when_plain() -> None:
    value = {"tools": {SECRET: {"x\ud800": 1}, "calls": [{"content": "ok \udc00"}]}}
    problem = first_problem(value, "world")
    assert problem == "world.tools.<key>.<key>: lone surrogate U+D800 (not a Unicode scalar value)"
    fixed, n = repair(value)
    assert n == 2 and json.dumps(fixed, ensure_ascii=False).encode("utf-8")


def test_safe_reasons_never_echo_a_credential() -> None:
    assert safe_text(f"key {SECRET}") == "[withheld: looks like a credential]"
    assert safe_reason(CredentialError(f"input: {SECRET}")) == "[withheld: looks like a credential]"
    plain = "signals.stars: must be 1..5"
    assert safe_reason(InvalidInput(plain)) == f"InvalidInput: {plain}"
    assert safe_reason(KeyError(SECRET)) == "KeyError"  # a foreign message may quote data: class only
    assert len(safe_text("x" * 1000, 50)) == 50

"""Issue 11, class 4: every credential shape is caught, normalised first, refused or scrubbed per field,
and never echoed (``docs/security/credentials.md``).

The attack strings are the ``credentials`` section of ``attacks.json``: positives name the label the
table must report, negatives (``label: null``) are ordinary text that must not match.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rsi_common.credentials import PATTERNS, REDACTED, find_credentials, redact
from rsi_common.errors import CredentialError, InvalidInput
from rsi_common.host_input import check_signals, parse_turn
from rsi_common.world import migrate_world
from rsi_worker.gate.precheck import precheck
from rsi_worker.jobs.worldfile import parse_line
from rsi_worker.observability.logs import Scrubber
from tests.adversarial.credentials_support import (
    NEGATIVE,
    POSITIVE,
    REFUSED,
    SCRUBBED,
    leaks,
    with_zero_width,
    world,
)

AGENT = "agent-adv"
REPO = Path(__file__).resolve().parents[2]


def _ids(entries: list[dict[str, Any]]) -> list[str]:
    return [e["name"] for e in entries]


# --- detection ------------------------------------------------------------------------------------

def test_every_label_of_the_table_has_an_attack() -> None:
    assert {e["label"] for e in POSITIVE} == {p.label for p in PATTERNS}
    assert len(NEGATIVE) >= 30


@pytest.mark.parametrize("entry", POSITIVE, ids=_ids(POSITIVE))
def test_positive_caught_with_its_label(entry: dict[str, Any]) -> None:
    assert entry["label"] in find_credentials(entry["text"])
    assert entry["label"] in find_credentials(f"some text before {entry['text']} and after")


@pytest.mark.parametrize("entry", NEGATIVE, ids=_ids(NEGATIVE))
def test_negative_not_caught(entry: dict[str, Any]) -> None:
    assert find_credentials(entry["text"]) == []
    assert redact(entry["text"]) == entry["text"]


@pytest.mark.parametrize("entry", POSITIVE, ids=_ids(POSITIVE))
def test_zero_width_variant_caught(entry: dict[str, Any]) -> None:
    hidden = with_zero_width(entry["text"])
    assert hidden != entry["text"]
    assert entry["label"] in find_credentials(hidden)


@pytest.mark.parametrize("entry", POSITIVE, ids=_ids(POSITIVE))
def test_redact_and_log_scrubber_remove_the_secret(entry: dict[str, Any]) -> None:
    for text in (entry["text"], with_zero_width(entry["text"])):
        for out in (redact(text), Scrubber()(f"call failed: {text}")):
            assert REDACTED in out and not leaks(out, entry), out


def test_fragments_are_not_credentials_themselves() -> None:
    hits = [(e["name"], part) for e in POSITIVE for part in e["parts"] if find_credentials(part)]
    assert hits == []


# --- host entry points: refused, or scrubbed from state.metadata -----------------------------------

@pytest.mark.parametrize("field", sorted(REFUSED))
@pytest.mark.parametrize("entry", POSITIVE, ids=_ids(POSITIVE))
def test_refused_at_every_host_field(entry: dict[str, Any], field: str) -> None:
    build, path = REFUSED[field]
    with pytest.raises(CredentialError) as info:
        parse_turn(AGENT, build(entry["text"]), record_world=True)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    assert f"'{entry['label']}'" in message
    assert not leaks(message, entry), message


@pytest.mark.parametrize("field", ["world input", "signal comment", "tool result", "trajectory"])
@pytest.mark.parametrize("entry", POSITIVE, ids=_ids(POSITIVE))
def test_zero_width_variant_refused(entry: dict[str, Any], field: str) -> None:
    build, path = REFUSED[field]
    with pytest.raises(CredentialError) as info:
        parse_turn(AGENT, build(with_zero_width(entry["text"])), record_world=True)
    assert str(info.value).startswith(f"{path}: ") and not leaks(str(info.value), entry)


@pytest.mark.parametrize("field", sorted(SCRUBBED))
@pytest.mark.parametrize("entry", POSITIVE, ids=_ids(POSITIVE))
def test_scrubbed_from_metadata(entry: dict[str, Any], field: str) -> None:
    build, _ = SCRUBBED[field]
    parsed = parse_turn(AGENT, build(entry["text"]), record_world=True)
    assert parsed.world is not None
    assert parsed.world["state"]["metadata"] == {"locale": "en-GB", "channel": "web"}
    stored = json.dumps(parsed.world, ensure_ascii=False)
    assert not leaks(stored, entry) and find_credentials(stored) == []


@pytest.mark.parametrize("entry", NEGATIVE, ids=_ids(NEGATIVE))
def test_negative_text_is_stored_everywhere(entry: dict[str, Any]) -> None:
    text = entry["text"]
    w = world(input=text)
    w["state"]["metadata"]["note"] = text
    parsed = parse_turn(AGENT, {"world": w, "signals": {"comment": text, "criteria": [text]},
                                "trajectory": {"note": text}}, record_world=True)
    assert parsed.world is not None and parsed.world["input"] == text
    assert parsed.world["state"]["metadata"]["note"] == text
    assert parsed.signals["comment"] == text


# --- messages never echo a value -------------------------------------------------------------------

SECRET = POSITIVE[0]


def _secret() -> str:
    return str(SECRET["text"])


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda s: check_signals({s: "x"}), id="unknown signal named by a secret"),
        pytest.param(lambda s: check_signals({"stars": s}), id="stars holding a secret"),
        pytest.param(lambda s: parse_turn(AGENT, {s: 1}, record_world=True), id="unknown turn key"),
        pytest.param(lambda s: parse_turn(AGENT, {"world": world(agent_id=s)}, record_world=True),
                     id="world names another agent"),
        pytest.param(lambda s: parse_turn(AGENT, {"world": world(), "trajectory": {"agent_id": s}},
                                          record_world=True), id="trajectory names another agent"),
        pytest.param(lambda s: parse_turn(AGENT, {"world": world(), "io_id": s}, record_world=True),
                     id="turn io differs from the world's"),
        pytest.param(lambda s: parse_turn(AGENT, {"world": world(io=s)}, record_world=True),
                     id="world io id is a secret"),
        pytest.param(lambda s: parse_turn(AGENT, {"world": world(**{s: 1})}, record_world=True),
                     id="unknown world field"),
        pytest.param(lambda s: parse_turn(AGENT, {"world": world(plan={s: 1})}, record_world=True),
                     id="unknown plan field"),
        pytest.param(lambda s: parse_turn(s, {"world": world(agent_id="other")}, record_world=True),
                     id="recording agent id is a secret"),
        pytest.param(lambda s: migrate_world({"schema": s}), id="unknown schema"),
        pytest.param(lambda s: parse_turn(AGENT, {"own_loop": s}, record_world=True), id="own_loop"),
    ],
)
def test_error_messages_never_echo_a_secret(call: Any) -> None:
    with pytest.raises(InvalidInput) as info:
        call(_secret())
    message = str(info.value)
    assert not leaks(message, SECRET), message
    assert find_credentials(message) == []


@pytest.mark.parametrize(("value", "said"), [("5", "got str"), (7, "got an integer out of range"),
                                             (True, "got bool"), (2.5, "got float")])
def test_stars_error_names_type_or_range_only(value: Any, said: str) -> None:
    with pytest.raises(InvalidInput, match=f"^signals.stars: must be an integer 1..5 or null, {said}$"):
        check_signals({"stars": value})


def test_credential_key_in_a_world_path_is_masked() -> None:
    w = world()
    w["tools"]["calls"][0]["input"] = {"query": {_secret(): "x"}}
    with pytest.raises(CredentialError) as info:
        parse_turn(AGENT, {"world": w}, record_world=True)
    assert str(info.value).startswith("tools.calls[0].input.query.<redacted key>: ")


# --- rsi worlds import -----------------------------------------------------------------------------

@pytest.mark.parametrize("entry", POSITIVE[:12], ids=_ids(POSITIVE[:12]))
def test_import_line_refused_without_echo(entry: dict[str, Any]) -> None:
    lines = [
        {"agent_id": AGENT, "world": world(input=entry["text"])},
        {"agent_id": AGENT, "world": world(), "signals": {"comment": entry["text"]}},
        {"agent_id": AGENT, "world": world(),
         "signals": {"implicit": {"kind": "correction", "evidence": entry["text"]}}},
    ]
    for obj in lines:
        with pytest.raises(CredentialError) as info:
            parse_line(json.dumps(obj), 1)
        assert not leaks(str(info.value), entry)
    with pytest.raises(InvalidInput) as mismatch:
        parse_line(json.dumps({"agent_id": AGENT, "world": world(), "io_id": entry["text"]}), 1)
    assert not leaks(str(mismatch.value), entry)


# --- harness text: the critic's precheck -----------------------------------------------------------

def _diff(text: str) -> str:
    added = "".join(f"+{line}\n" for line in text.splitlines())
    return f"--- a/prompt/rules.md\n+++ b/prompt/rules.md\n@@ -1 +1,2 @@\n Be brief.\n{added}"


@pytest.mark.parametrize("entry", POSITIVE, ids=_ids(POSITIVE))
def test_critic_precheck_rejects_a_credential_in_a_diff(entry: dict[str, Any]) -> None:
    for text in (f"Call the API with {entry['text']} always.", with_zero_width(entry["text"])):
        reasons = precheck(_diff(text))
        assert f"precheck: {entry['label']}" in reasons
        assert not leaks(" ".join(reasons), entry)


@pytest.mark.parametrize("entry", NEGATIVE, ids=_ids(NEGATIVE))
def test_critic_precheck_passes_ordinary_text(entry: dict[str, Any]) -> None:
    reasons = precheck(_diff(entry["text"]))
    assert not [r for r in reasons if r.removeprefix("precheck: ") in {p.label for p in PATTERNS}]


# --- the repository holds no credential-shaped literal ---------------------------------------------

SKIP_DIRS = {".git", ".venv", "venv", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".rsi", "node_modules",
             "__pycache__", ".hypothesis", "build", "dist"}
ALLOWED = {
    ("docker-compose.yml", "url with password"): "the local compose stack's throw-away database password",
}


def _repository_files() -> list[Path]:
    out = []
    for path in sorted(REPO.rglob("*")):
        rel = path.relative_to(REPO)
        if path.is_file() and not (set(rel.parts) & SKIP_DIRS) and not rel.parts[0].endswith(".egg-info"):
            out.append(path)
    return out


def test_no_credential_shaped_literal_in_the_repository() -> None:
    found = []
    for path in _repository_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        rel = path.relative_to(REPO).as_posix()
        for n, line in enumerate(text.splitlines(), start=1):
            labels = [label for label in find_credentials(line) if (rel, label) not in ALLOWED]
            if labels:
                found.append(f"{rel}:{n}: {labels}")
    assert found == []

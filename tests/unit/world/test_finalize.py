"""finalize_world (docs/formats.md §4.1): images, clipping, size limit, credentials, JSON safety."""

from __future__ import annotations

import datetime as dt
import enum
import json
from typing import Any

import pytest

from rsi_common.errors import CredentialError, WorldError
from rsi_common.world import (
    IMAGE_PLACEHOLDER,
    MAX_WORLD_BYTES,
    SAFE_KWARGS,
    WORLD_SCHEMA,
    finalize_world,
    validate_world,
    world_bytes,
)

from .helpers import captured, golden

SECRET = "sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5"  # sk- + 30 chars


def test_golden_capture_finalizes_to_the_golden_record() -> None:
    out = finalize_world(captured())
    assert out == golden()
    assert out["bytes"] == world_bytes(out) and out["replayable"] and not out["truncated"]


def test_idempotent() -> None:
    w = captured()
    w["tools"]["calls"][0]["content"] = "r" * 50_000
    w["input"] = [{"type": "text", "text": "look"}, {"type": "image", "source": {"data": "AAAA"}}]
    once = finalize_world(w)
    assert finalize_world(once) == once


def test_images_become_placeholders_anywhere() -> None:
    w = captured()
    w["input"] = [
        {"type": "text", "text": "What is on this chart?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}},
    ]
    w["state"]["messages"][0]["content"] = [{"type": "input_image", "image_url": "data:image/png;base64,xx"}]
    w["tools"]["calls"][1]["content"] = [{"type": "text", "text": "chart"}, {"type": "image", "source": {}}]
    out = finalize_world(w)
    placeholder = {"type": "text", "text": IMAGE_PLACEHOLDER}
    assert out["images_dropped"] is True
    assert out["input"][1] == placeholder and out["state"]["messages"][0]["content"] == [placeholder]
    assert out["tools"]["calls"][1]["content"][1] == placeholder
    assert "iVBOR" not in json.dumps(out)


def test_clipping_of_tool_contents_and_transcript_only() -> None:
    w = captured()
    long = "z" * 40_000
    w["tools"]["calls"][0]["content"] = long
    w["tools"]["calls"][1]["content"] = [{"type": "text", "text": long}]
    w["outcome"]["transcript"][2]["content"][0]["content"] = long  # tool_result inside the transcript
    w["outcome"]["transcript"][0]["content"] = long
    w["input"] = long  # not clipped
    w["state"]["messages"][0]["content"] = long  # not clipped
    out = finalize_world(w)
    assert out["truncated"] is True
    clipped = "z" * 24000 + "\n[… 8000 characters cut …]\n" + "z" * 8000
    assert out["tools"]["calls"][0]["content"] == clipped
    assert out["tools"]["calls"][1]["content"][0]["text"] == clipped
    assert out["outcome"]["transcript"][2]["content"][0]["content"] == clipped
    assert out["outcome"]["transcript"][0]["content"] == clipped
    assert out["input"] == long and out["state"]["messages"][0]["content"] == long


def test_over_the_size_limit_kept_but_not_replayable() -> None:
    w = captured()
    big = "m" * 30_000
    w["state"]["messages"] = [{"role": "user", "content": big}] * 70  # ~2.1 MB of history
    out = finalize_world(w)
    assert out["replayable"] is False
    assert out["state"]["messages"] == [] and out["outcome"]["transcript"] == []
    assert all(c["content"] == "" for c in out["tools"]["calls"]) and len(out["tools"]["calls"]) == 2
    assert out["bytes"] == world_bytes(out) < MAX_WORLD_BYTES
    assert out["input"] == captured()["input"] and out["outcome"]["final_text"]  # signals pairing kept
    assert finalize_world(out) == out  # stays non-replayable


def test_just_below_the_limit_stays_replayable() -> None:
    w = captured()
    base = world_bytes(finalize_world(w))
    w["state"]["messages"].append({"role": "user", "content": ""})
    grow = MAX_WORLD_BYTES - world_bytes(finalize_world(w))
    w["state"]["messages"][-1]["content"] = "q" * grow
    out = finalize_world(w)
    assert out["bytes"] == MAX_WORLD_BYTES and out["replayable"] is True and base < MAX_WORLD_BYTES
    w["state"]["messages"][-1]["content"] += "q"
    assert finalize_world(w)["replayable"] is False


def test_api_key_in_a_tool_result_is_refused_without_the_secret() -> None:
    w = captured()
    w["tools"]["calls"][1]["content"] = [{"type": "text", "text": f"config: token={SECRET}"}]
    with pytest.raises(CredentialError) as info:
        finalize_world(w)
    msg = str(info.value)
    assert msg.startswith("tools.calls[1].content[0].text:") and "secret key" in msg
    assert SECRET not in msg and "sk-" not in msg


@pytest.mark.parametrize(
    ("where", "label"),
    [
        (lambda w, s: w.update(input=f"my key is {s}"), "secret key"),
        (lambda w, s: w["state"]["messages"].append({"role": "user", "content": s}), "secret key"),
        (lambda w, s: w["plan"]["system_parts"].append(["k", "AKIA" + "ABCDEFGHIJKLMNOP"]), "aws key"),
        (lambda w, s: w["tools"]["calls"][0].update(input={"api_key": "abcd" + "efgh12345"}), "json secret"),
        (lambda w, s: w["plan"]["turn_notes"].append("api_key = '" + "abcdefgh12345'"), "api key assignment"),
        (lambda w, s: w["outcome"].update(final_text="-----BEGIN RSA " + "PRIVATE KEY-----"), "private key"),
        (lambda w, s: w["memory"]["chunks"][0].update(content="ghp_" + "a" * 30), "github token"),
    ],
)
def test_credentials_anywhere_replay_reads_are_refused(where: Any, label: str) -> None:
    w = captured()
    where(w, SECRET)
    with pytest.raises(CredentialError, match=label):
        finalize_world(w)


def test_metadata_is_scrubbed_instead() -> None:
    w = captured()
    w["state"]["metadata"].update(
        {
            "api_key": "abcd" + "efghijkl",  # pair pattern
            "note": f"use {SECRET}",
            "nested": {"password": "hunter2" + "hunter2", "ok": 1},
            "_private": "dropped",
            "client": object(),  # not JSON: dropped in metadata
            "when": dt.datetime(2025, 1, 1),
            "tags": ["a", SECRET],
        }
    )
    out = finalize_world(w)
    md = out["state"]["metadata"]
    assert md == {"locale": "en-GB", "channel": "web", "nested": {"ok": 1}, "tags": ["a"]}
    assert SECRET not in json.dumps(out)


class _Level(enum.IntEnum):
    HIGH = 2


class _Ratio(float):
    pass


def test_json_safety_outside_metadata() -> None:
    w = captured()
    w["tools"]["calls"][0]["input"] = {
        "when": dt.date(2025, 1, 2),
        "ids": (1, 2),
        3: "three",
        "x": float("nan"),
        "level": _Level.HIGH,
        "ratio": _Ratio(0.5),
    }
    out = finalize_world(w)
    assert out["tools"]["calls"][0]["input"] == {
        "when": "2025-01-02",
        "ids": [1, 2],
        "3": "three",
        "x": "nan",
        "level": 2,
        "ratio": 0.5,
    }
    assert type(out["tools"]["calls"][0]["input"]["level"]) is int
    json.dumps(out, allow_nan=False)


def test_kwargs_and_defs_filtering() -> None:
    w = captured()
    w["plan"]["kwargs"].update({"api_key": "x", "headers": {"a": "b"}, "repeat_stop_after": 2})
    w["tools"]["contributed"] = ["ReadSkill"]
    w["tools"]["defs"].append({"name": "ReadSkill", "description": "harness tool", "input_schema": {}})
    w["tools"]["defs"].append({"name": "weird", "input_schema": {"default": object()}})
    out = finalize_world(w)
    assert set(out["plan"]["kwargs"]) <= set(SAFE_KWARGS) and out["plan"]["kwargs"]["repeat_stop_after"] == 2
    assert [d["name"] for d in out["tools"]["defs"]] == ["list_tables", "run_sql"]


def test_defaults_and_schema() -> None:
    w = captured()
    del w["schema"]
    out = finalize_world(w)
    assert out["schema"] == WORLD_SCHEMA and out["replayable"] is True
    assert validate_world(out) == out


def test_memory_chunks_are_projected_on_the_spec_fields() -> None:
    w = captured()
    w["memory"]["chunks"] = [
        {
            "key": 7,
            "content": "Fiscal year starts in January.",
            "id": "c1",
            "relevance_score": 1,
            "pinned": 1,
        },
        {"key": "k", "source": None, "content": None, "relevance_score": "high", "metadata": None},
    ]
    out = finalize_world(w)
    assert out["memory"]["chunks"] == [
        {
            "key": "7",
            "source": "",
            "content": "Fiscal year starts in January.",
            "relevance_score": 1.0,
            "metadata": {},
            "pinned": True,
        },
        {"key": "k", "source": "", "content": "", "relevance_score": None, "metadata": {}, "pinned": False},
    ]


def test_malformed_capture_names_the_field() -> None:
    w = captured()
    w["tools"]["calls"][0]["name"] = None
    with pytest.raises(WorldError, match=r"^tools\.calls\[0\]\.name: "):
        finalize_world(w)

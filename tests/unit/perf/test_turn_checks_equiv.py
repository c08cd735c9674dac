"""The fused turn checks (docs/performance/turn-checks.md) answer exactly like the checks one by one:
generated hostile worlds — deep nesting, cycles, lone surrogates, U+0000, NaN, huge integers and
fields, credentials of each shape in values, keys and pairs, images anywhere, traversal and private
keys, host objects, tuples, non-string keys — go through :func:`rsi_common.world.finalize_world` and
through the reference (``tests/unit/perf/turn_checks_reference.py``: the code before, with the plain
text-by-text credential scan). Both must accept or refuse alike, with the same exception type and
message (the field named, no secret echoed) and the same stored record, byte for byte."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from typing import Any

import pytest

from rsi_common.boundary import MAX_DEPTH
from rsi_common.credentials import _CLEAN, CLEAN_MEMO_CHARS, find_credentials
from rsi_common.host_input import parse_turn
from rsi_common.world import finalize_world
from tests.adversarial.credentials_support import POSITIVE, ZERO_WIDTH
from tests.adversarial.credentials_support import world as golden_world
from tests.unit.perf.turn_checks_reference import reference_finalize_world

SECRETS = [str(e["text"]) for e in POSITIVE]


class _Host:
    """A host object stored as its text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


class _Str(str):
    """A ``str`` subclass (JSON safety turns it into a plain string)."""


def _nested(levels: int, leaf: Any = "x", as_dict: bool = False) -> Any:
    out = leaf
    for _ in range(levels):
        out = {"n": out} if as_dict else [out]
    return out


def _cycle() -> Any:
    loop: list[Any] = ["a"]
    loop.append(loop)
    return loop


def _image(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(["image", "input_image"])
    return {"type": kind, "source": {"data": "aGVsbG8=", "media_type": "image/png"}}


def _secret_text(rng: random.Random) -> str:
    secret = rng.choice(SECRETS)
    if rng.random() < 0.2:  # invisible characters inside
        secret = "".join(c + (rng.choice(ZERO_WIDTH) if i % 5 == 4 else "") for i, c in enumerate(secret))
    return rng.choice(["", "see ", "line\n", "é "]) + secret + rng.choice(["", " ok", "\n"])


_VALUES: list[Callable[[random.Random], Any]] = [
    _secret_text,
    lambda r: {"password": r.choice(["hun" + "ter2-Very" + "$ecret9", "changeme", "x" * 9])},
    lambda r: {r.choice(SECRETS): "value"},
    lambda r: "a\ud800b",
    lambda r: "nul\x00here",
    lambda r: "\udfff",
    lambda r: float("nan"),
    lambda r: r.choice([float("inf"), -float("inf")]),
    lambda r: r.choice([2**53 - 1, 2**53, -(2**60), 10**5000]),
    lambda r: True,
    lambda r: 1.5,
    lambda r: None,
    lambda r: _nested(r.choice([MAX_DEPTH - 6, MAX_DEPTH, MAX_DEPTH + 3]), as_dict=r.random() < 0.5),
    lambda r: _cycle(),
    _image,
    lambda r: [_image(r), {"type": "text", "text": "after"}],
    lambda r: ("a", "tuple"),
    lambda r: {1: "int key", None: "none key"},
    lambda r: {"a\ud800": "surrogate key"},
    lambda r: {"k\x00": "nul key"},
    lambda r: {"../../etc/hosts": "traversal", "_private": "underscore", "a/b\\c": 1},
    lambda r: _Host(r.choice(["host object", _secret_text(r)])),
    lambda r: _Str("a str subclass"),
    lambda r: "x" * r.choice([33_000, 40_000]),
    lambda r: "é" * 600 + "\n" + r.choice(SECRETS),
    lambda r: b"bytes",
    lambda r: {"type": r.choice(["image", "text", 3, None])},
]


def _containers(doc: Any) -> list[Any]:
    """Every dict and list of a world, each once (cycles included), the world itself first."""
    out, stack, seen = [], [doc], set()
    while stack:
        v = stack.pop()
        if isinstance(v, (dict, list)) and id(v) not in seen:
            seen.add(id(v))
            out.append(v)
            stack.extend(v.values() if isinstance(v, dict) else v)
    return out


def _mutate(doc: dict[str, Any], rng: random.Random) -> None:
    """Put a hostile value at a random place of ``doc`` (a value, a new key or a list item)."""
    target = rng.choice(_containers(doc))
    value = rng.choice(_VALUES)(rng)
    if isinstance(target, list):
        if target and rng.random() < 0.6:
            target[rng.randrange(len(target))] = value
        else:
            target.append(value)
    elif target and rng.random() < 0.6:
        target[rng.choice(list(target))] = value
    else:
        key = rng.choice(["extra", "type", "content", "text", "metadata", _secret_text(rng), "bytes"])
        target[key] = value


_FIXED: list[Callable[[dict[str, Any]], None]] = [
    lambda w: w.update(type="image"),  # the world itself an image block
    lambda w: w.update(bytes={"a": [1]}),
    lambda w: w.update(bytes=_nested(MAX_DEPTH + 2)),
    lambda w: w["state"]["metadata"].update(img={"type": "image", "x": 1}, _hidden={"type": "image"}),
    lambda w: w["state"]["metadata"].update(n=float("nan"), k={1: 2}, t=("a",), o=_Host("o")),
    lambda w: w["memory"].update(present=True, chunks=[{"type": "image", "key": "k", "content": "c",
                                                        "metadata": {"type": "input_image"}}]),
    lambda w: w["tools"]["defs"].append({"type": "image", "name": "pic"}),
    lambda w: w["tools"]["defs"].append({"name": "big", "input_schema": {"n": 10**5000}}),
    lambda w: w["tools"]["defs"].append({"name": "nan", "input_schema": {"n": float("nan")}}),
    lambda w: w["tools"]["defs"].append("not a dict"),
    lambda w: w["tools"].update(contributed=[w["tools"]["defs"][0]["name"]] if w["tools"]["defs"] else []),
    lambda w: w.update(input="y" * 4_000_001),
    lambda w: w["state"]["messages"].extend({"role": "user", "content": "z" * 600_000} for _ in range(4)),
    lambda w: w["plan"]["system_parts"].append(["big", "s" * 1_000_001]),
    lambda w: w["plan"]["kwargs"].update(max_tokens=10, evil={"type": "image"}, api_key="sk-" + "a" * 30),
    lambda w: w.update(model="m" * 256),
    lambda w: w.update(io_id="bad id/../x"),
    lambda w: w["state"].update(session_id="\x00"),
]


def _outcome(fn: Callable[[dict[str, Any]], dict[str, Any]], doc: dict[str, Any]) -> tuple[str, str]:
    try:
        out = fn(copy.deepcopy(doc))
    except Exception as exc:  # every refusal, compared by type and message
        return type(exc).__name__, str(exc)
    return "ok", json.dumps(out, ensure_ascii=False)


def _docs() -> list[dict[str, Any]]:
    rng = random.Random(15)
    docs = []
    for fixed in _FIXED:
        w = golden_world()
        fixed(w)
        docs.append(w)
    for _ in range(260):
        w = golden_world()
        for _ in range(rng.choice([1, 1, 2, 3])):
            _mutate(w, rng)
        docs.append(w)
    return docs


def test_fused_checks_answer_as_the_checks_one_by_one() -> None:
    refused = accepted = 0
    for doc in _docs():
        want = _outcome(reference_finalize_world, doc)
        got = _outcome(finalize_world, doc)
        assert got == want
        accepted += want[0] == "ok"
        refused += want[0] != "ok"
    assert accepted >= 40 and refused >= 100  # both sides of the boundary were exercised


@pytest.mark.parametrize("text", ["max_tokens", "policy_tokens", "key"])
def test_clean_short_texts_are_remembered_and_secrets_never(text: str) -> None:
    assert find_credentials(text) == []
    assert text in _CLEAN
    secret = next(s for s in SECRETS if len(s) <= CLEAN_MEMO_CHARS and find_credentials(s))
    assert find_credentials(secret)
    assert secret not in _CLEAN
    assert find_credentials(_Str(text)) == []  # a subclass is checked, never looked up


def test_parse_turn_refuses_a_credential_under_a_remembered_key() -> None:
    turn = {"world": golden_world(io="io-memo"), "trajectory": {"policy_tokens": 5, "io_id": "io-memo"}}
    parse_turn("agent-1", copy.deepcopy(turn), record_world=True)  # the keys are remembered clean
    turn["world"]["outcome"]["final_text"] = "done; " + SECRETS[0]
    with pytest.raises(Exception, match=r"outcome\.final_text") as err:
        parse_turn("agent-1", turn, record_world=True)
    assert SECRETS[0] not in str(err.value)

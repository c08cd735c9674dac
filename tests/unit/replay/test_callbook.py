"""The CallBook (docs/formats.md §4.2 item 2) and the docs/check-vectors.md §9.11 check vector."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from rsi_common.replay import NO_RECORD, CallBook, canon, loose


def rec(name: str, inp: Any, content: Any, is_error: bool = False) -> dict[str, Any]:
    return {"tool_use_id": "x", "name": name, "input": inp, "content": content, "is_error": is_error}


def test_vector_9_11_loose_hit_and_repeat() -> None:
    book = CallBook([rec("search", {"Query": "Sales  Q3"}, "q3: 12")])
    assert canon(loose({"Query": " sales q3 "})) == '{"Query":"sales q3"}'
    assert book.lookup("search", {"Query": " sales q3 "}) == ("q3: 12", False)
    assert book.lookup("search", {"Query": " sales q3 "}) == ("q3: 12", False)  # the last result repeats
    assert book.lookup("search", {"Query": "Q4"}) == (NO_RECORD, True)
    assert book.off_support == [{"name": "search", "input": {"Query": "Q4"}}]
    assert book.answered == 2


def test_vector_9_11_guide_tool_gets_the_last_recorded_result() -> None:
    book = CallBook(
        [rec("search", {"Query": "Sales  Q3"}, "first"), rec("search", {"Query": "x"}, "last")],
        guide_names=["search"],
    )
    assert book.lookup("search", {"Query": "Q4"}) == ("last", False)
    assert book.off_support == [] and book.answered == 1


def test_repeated_calls_follow_recorded_order_then_repeat_the_last() -> None:
    book = CallBook([rec("poll", {}, "pending"), rec("poll", {}, "running"), rec("poll", {}, "done", True)])
    got = [book.lookup("poll", {}) for _ in range(5)]
    assert got == [("pending", False), ("running", False), ("done", True), ("done", True), ("done", True)]


def test_exact_and_loose_counters_are_separate() -> None:
    book = CallBook([rec("s", {"q": "A"}, "1"), rec("s", {"q": "a"}, "2")])
    assert book.lookup("s", {"q": "a"}) == ("2", False)  # exact hit
    assert book.lookup("s", {"q": " A "}) == ("1", False)  # loose key {"q":"a"}: first use → first hit
    assert book.lookup("s", {"q": " A "}) == ("2", False)


def test_answers_are_deep_copies() -> None:
    book = CallBook([rec("img", {}, [{"type": "text", "text": "t"}])])
    first, _ = book.lookup("img", {})
    first[0]["text"] = "changed"
    assert book.lookup("img", {})[0] == [{"type": "text", "text": "t"}]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("  Hello   World ", "hello world"),
        ({1: "A"}, {"1": "a"}),
        (["X", 2, None], ["x", 2, None]),
        ({"Key": {"In": " B "}}, {"Key": {"In": "b"}}),
        (3.5, 3.5),
    ],
)
def test_loose(value: Any, expected: Any) -> None:
    assert loose(value) == expected


def test_canon_falls_back_to_str() -> None:
    assert canon({"b": 1, "a": "é"}) == '{"a":"é","b":1}'
    assert canon({1, 2}) == str({1, 2})


def test_concurrent_lookups_hand_out_each_recorded_result_once() -> None:
    book = CallBook([rec("poll", {}, str(i)) for i in range(50)])
    got: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(10):
            content, _ = book.lookup("poll", {})
            with lock:
                got.append(content)

    threads = [threading.Thread(target=worker) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(got, key=int) == [str(i) for i in range(50)] and book.answered == 50


def test_from_world_reads_calls_and_guides() -> None:
    data = {
        "tools": {
            "defs": [{"name": "ls", "guide": True}, {"name": "get"}],
            "calls": [rec("ls", {"dir": "/"}, "a b")],
        }
    }
    book = CallBook.from_world(data)
    assert book.lookup("ls", {"dir": "/tmp"}) == ("a b", False)
    assert book.lookup("get", {}) == (NO_RECORD, True)

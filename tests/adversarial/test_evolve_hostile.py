"""Offline evolve under hostile input, part 1: what a suite and a configuration may carry
(docs/algorithm/evolve.md#hostile-input).

Task files, suite names, configurations and CLI options carry lone surrogates, U+0000, deep nesting,
huge fields, NaN/inf, control characters and credentials of every shape: each is refused naming its
field, the message never echoes a secret or a raw control character, and nothing is stored.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from typer.testing import CliRunner, Result

from rsi_common.errors import InvalidInput
from rsi_worker.cli import app
from rsi_worker.evolve.config import LIMITS, EvolveConfig
from rsi_worker.evolve.suite import MAX_REGEX_ANSWER, from_jsonl, split_heldout
from rsi_worker.evolve.trials import check_passes
from rsi_worker.gate.regex_risk import backtracks
from rsi_worker.roles.digester import _tool
from tests.adversarial import attacks
from tests.adversarial.boundary_support import has_bad_chars
from tests.adversarial.credentials_support import POSITIVE, leaks

BAD_UNICODE = [e for e in attacks.section("unicode") if has_bad_chars(e["text"])]
ESC = "\x1b]0;owned\x07\x1b[2J"
"""An OSC title change and a screen clear: what a terminal must never receive raw."""


def task(tid: str = "t1", **fields: Any) -> dict[str, Any]:
    return {
        "id": tid,
        "request": "List three fruits.",
        "checks": [{"kind": "contains", "text": "apple"}],
        **fields,
    }


def lines(*tasks: dict[str, Any]) -> list[str]:
    """JSONL lines with ``ensure_ascii``: a lone surrogate travels as a ``\\ud800`` escape, as in a file."""
    return [json.dumps(t) for t in (tasks or (task(), task("t2")))]


def refused(call: Any) -> str:
    with pytest.raises(InvalidInput) as info:
        call()
    return str(info.value)


# where a text of a task can sit: (field path, task builder)
TEXT_FIELDS: list[tuple[str, Any]] = [
    ("suite.tasks[0].request", lambda s: task(request=f"hello {s}")),
    ("suite.tasks[0].checks[0].text", lambda s: task(checks=[{"kind": "contains", "text": s}])),
    ("suite.tasks[0].checks[0].name", lambda s: task(checks=[{"kind": "contains", "text": "a", "name": s}])),
    ("suite.tasks[0].checks[0].criterion", lambda s: task(checks=[{"criterion": f"mentions {s}"}])),
    (
        "suite.tasks[0].checks[0].reference",
        lambda s: task(checks=[{"criterion": "c", "reference": s}]),
    ),
    ("suite.tasks[0].checks[0].pattern", lambda s: task(checks=[{"kind": "regex", "pattern": f"a{s}"}])),
]


@pytest.mark.parametrize("entry", BAD_UNICODE[:4], ids=[e["name"] for e in BAD_UNICODE[:4]])
@pytest.mark.parametrize("field,build", TEXT_FIELDS, ids=[f for f, _ in TEXT_FIELDS])
def test_a_lone_surrogate_or_nul_in_any_text_is_refused_naming_the_field(
    field: str, build: Any, entry: dict[str, Any]
) -> None:
    # was: stored as given (both databases keep it in JSON), then `suite show --json` died on encoding it
    message = refused(lambda: from_jsonl("s", lines(build(entry["text"]), task("t2"))))
    assert message.startswith(field + ":") and not has_bad_chars(message)


def test_the_system_prompt_and_held_out_ids_pass_the_same_rules() -> None:
    assert refused(lambda: from_jsonl("s", lines(), system="be \ud800 kind")).startswith("suite.system:")
    assert refused(lambda: from_jsonl("s", lines(), system="\x00")).startswith("suite.system:")
    assert refused(lambda: from_jsonl("s", lines(), heldout=["t\udfff"])).startswith("suite.heldout[0]:")


def test_a_check_name_with_a_control_character_is_refused() -> None:
    bad = task(checks=[{"kind": "contains", "text": "a", "name": ESC}])
    message = refused(lambda: from_jsonl("s", lines(bad, task("t2"))))
    assert message.startswith("suite.tasks[0].checks[0].name:") and "\x1b" not in message


@pytest.mark.parametrize(
    "line,where",
    [
        ("[" * 10_000 + "]" * 10_000, "line 1: nested deeper than 64"),
        (
            json.dumps(task())[:-1] + ', "extra": ' + "[" * 10_000 + "]" * 10_000 + "}",
            "line 1: nested deeper",
        ),
        ('{"id": "t1", "request": "' + "x" * 16_000_001 + '"}', "line 1: over the size limit"),
        ("[1, 2]", "suite.tasks[0]: must be an object, got list"),
        ('"a task"', "suite.tasks[0]: must be an object, got str"),
        ("\ufeff" + json.dumps(task()), "line 1: malformed JSON"),
        (json.dumps(task()) + "\x00", "line 1: malformed JSON"),
        ('{"id": "t1", "request": NaN, "checks": []}', "line 1: a number is not a finite JSON number"),
        (
            '{"id": "t1", "request": "a", "checks": [{"text": 1e999}]}',
            "suite.tasks[0].checks[0].text: is not a finite",
        ),
    ],
    ids=["10k deep", "10k deep field", "17 MB line", "list", "string", "bom", "nul byte", "nan", "inf"],
)
def test_a_hostile_line_is_refused_by_its_number_or_field(line: str, where: str) -> None:
    message = refused(lambda: from_jsonl("s", [line, json.dumps(task("t2"))]))
    assert message.startswith(where) and len(message) < 300


def test_a_huge_field_is_refused_by_its_limit_without_echoing_it() -> None:
    message = refused(lambda: from_jsonl("s", lines(task(request="y" * 20_001), task("t2"))))
    assert (
        message.startswith("suite.tasks[0].request: 20001 characters, over the limit")
        and "yyyy" not in message
    )


def test_ids_that_differ_only_by_normalisation_never_meet() -> None:
    # ids are ASCII (the id grammar): "café" composed and decomposed are both refused, so no two stored
    # ids can collide after normalisation
    for tid in ("caf\u00e9", "cafe\u0301"):
        message = refused(lambda tid=tid: from_jsonl("s", lines(task(tid), task("t2"))))
        assert message.startswith("suite.tasks[0].id: not a valid id")
    assert refused(lambda: from_jsonl("s", lines(task("t1"), task("t1")))).startswith(
        "suite.tasks[1].id: duplicate id"
    )


@pytest.mark.parametrize("fraction", [float("nan"), float("inf"), float("-inf"), -0.1, 1.0, 1.5])
def test_a_held_out_fraction_outside_zero_to_one_is_refused(fraction: float) -> None:
    assert refused(lambda: split_heldout(["a", "b"], fraction, 7)).startswith("--heldout-fraction:")
    assert refused(lambda: from_jsonl("s", lines(), heldout_fraction=fraction)).startswith(
        "--heldout-fraction:"
    )


def test_a_fraction_near_one_still_leaves_an_evolve_task() -> None:
    suite = from_jsonl("s", lines(), heldout_fraction=0.999)
    assert len(suite.heldout) == 1 and len(suite.evolve_ids) == 1


@pytest.mark.parametrize(
    "name", ["../x", "a/b", "", " ", "x" * 65, "a" + ESC, "a\nb", "\ud800", "..", "a\\b"]
)
def test_a_suite_name_outside_the_id_grammar_is_refused(name: str) -> None:
    message = refused(lambda: from_jsonl(name, lines()))
    assert message.startswith("suite.name: ") and not has_bad_chars(message) and "\x1b" not in message


@pytest.mark.parametrize(
    "where",
    ["request", "check text", "criterion", "check name", "task id", "key", "system", "reference"],
)
def test_credentials_anywhere_in_a_suite_are_refused_and_never_echoed(where: str) -> None:
    def build(secret: str) -> tuple[dict[str, Any], str | None]:
        if where == "request":
            return task(request=f"my token is {secret}"), None
        if where == "check text":
            return task(checks=[{"kind": "contains", "text": secret}]), None
        if where == "criterion":
            return task(checks=[{"criterion": f"uses {secret}"}]), None
        if where == "check name":
            return task(checks=[{"kind": "contains", "text": "a", "name": secret[:200]}]), None
        if where == "task id":
            return task(secret[:128]), None
        if where == "key":
            return task(checks=[{"kind": "contains", "text": "a", secret: 1}]), None
        if where == "reference":
            return task(checks=[{"criterion": "c", "reference": secret}]), None
        return task(), secret

    for entry in POSITIVE:
        t, system = build(entry["text"])
        message = refused(lambda t=t, system=system: from_jsonl("s", lines(t, task("t2")), system=system))
        assert not leaks(message, entry), (entry["name"], message)


def test_unknown_keys_are_named_only_as_identifiers() -> None:
    # was: every unknown key echoed as given (an escape sequence reached the terminal)
    message = refused(lambda: from_jsonl("s", lines(task(**{ESC: 1, "x" * 40: 2, "note": 3}), task("t2"))))
    assert message == "suite.tasks[0]: unknown key(s) <key 3>, <key 4>, note"
    secret = POSITIVE[0]["text"]  # a credential-shaped key: the credential scan names it first
    message = refused(lambda: from_jsonl("s", lines(task(**{secret: 2}), task("t2"))))
    assert "looks like a credential" in message and not leaks(message, POSITIVE[0])


# --- regex checks: the model's answer is hostile ----------------------------------------------------


@pytest.mark.parametrize("pattern", ["(a+)+$", "(a|aa)*b", r"(\w+\s?)*$", "(?:(?:x)*)*y", "(?=(a+)+)b"])
def test_a_pattern_that_backtracks_exponentially_is_refused_at_build(pattern: str) -> None:
    # was: accepted; `(a+)+$` on an answer of 40 "a"s and a "b" never returns, and holds its trial slot
    bad = task(checks=[{"kind": "regex", "pattern": pattern}])
    message = refused(lambda: from_jsonl("s", lines(bad, task("t2"))))
    assert message.startswith("suite.tasks[0].checks[0].pattern: cannot run: a repetition")


@pytest.mark.parametrize(
    "pattern", [r"\d{3}-\d{4}", "(?:abc)+", "(a|b)*c", "x*y*z", "(?>a+)+", "(a++)+", "^ok$"]
)
def test_plain_patterns_still_run(pattern: str) -> None:
    assert not backtracks(pattern)
    assert from_jsonl("s", lines(task(checks=[{"kind": "regex", "pattern": pattern}]), task("t2")))


def test_a_pattern_too_nested_to_parse_is_refused_not_a_traceback() -> None:
    # was: RecursionError out of re.compile (500 nested groups fit in the 2,000-character pattern limit)
    bad = task(checks=[{"kind": "regex", "pattern": "(" * 500 + ")" * 500}])
    message = refused(lambda: from_jsonl("s", lines(bad, task("t2"))))
    assert message.startswith("suite.tasks[0].checks[0].pattern: cannot run: the pattern does not compile")


def test_a_regex_check_searches_a_bounded_prefix_of_the_answer() -> None:
    check = {"kind": "regex", "pattern": "needle"}
    assert check_passes(check, "x" * (MAX_REGEX_ANSWER - 6) + "needle")[0]
    assert not check_passes(check, "x" * MAX_REGEX_ANSWER + "needle")[0]  # past the bound: unseen


# --- configuration and re-judgement overrides -------------------------------------------------------


@pytest.mark.parametrize(
    "cfg,field",
    [
        ({"params": {"T": -1}}, "config.params.T"),
        ({"params": {"T": 10**9}}, "config.params.T"),
        ({"params": {"k": 10**6}}, "config.params.k"),
        ({"params": {"m": 9}}, "config.params.m"),
        ({"params": {"delta": float("nan")}}, "config.params"),
        ({"params": {"beta1": float("inf")}}, "config.params"),
        ({"params": {"delta": -0.1}}, "config.params"),
        ({"trial_parallel": 10**6}, "config.trial_parallel"),
        ({"eval_parallel": 10**3}, "config.eval_parallel"),
        ({"digest_parallel": 10**4}, "config.digest_parallel"),
        ({"base_evals": 10**9}, "config.base_evals"),
        ({"repair_rounds": 10**9}, "config.repair_rounds"),
        ({"smoke_n": 10**9}, "config.smoke_n"),
        ({"n_fail_traces": 10**9}, "config.n_fail_traces"),
        ({"seed": 2**80}, "config.seed"),
        ({"seed": True}, "config.seed"),
        ({"max_valid_drop": float("nan")}, "config.max_valid_drop"),
        ({"provider": "sim" + ESC}, "config.provider"),
        ({"model": "m\ud800"}, "config.model"),
        ({"model": "m" * 300}, "config.model"),
        ({"mode": ["paper"]}, "config.mode"),
    ],
)
def test_a_config_value_that_would_explode_a_run_is_refused_naming_it(
    cfg: dict[str, Any], field: str
) -> None:
    message = refused(lambda: EvolveConfig.from_json(cfg))
    assert message.startswith(field + ":") and "\x1b" not in message and not has_bad_chars(message)


def test_every_capped_knob_accepts_its_bounds() -> None:
    for name, (lo, hi) in LIMITS.items():
        owner, _, attr = name.rpartition(".")
        for value in (lo, hi):
            cfg = EvolveConfig.from_json({"params": {attr: value}} if owner else {attr: value})
            assert getattr(cfg.params if owner else cfg, attr) == value
        bad = {"params": {attr: hi + 1}} if owner else {attr: hi + 1}
        assert refused(lambda bad=bad: EvolveConfig.from_json(bad)).startswith(f"config.{name}:")


def test_unknown_config_keys_never_echo_a_secret_or_an_escape() -> None:
    secret = POSITIVE[0]["text"]
    for cfg, where in (({secret: 1, ESC: 2}, "config:"), ({"params": {secret: 1, ESC: 2}}, "config.params:")):
        message = refused(lambda cfg=cfg: EvolveConfig.from_json(cfg))
        assert message.startswith(where + " unknown key(s) <key")
        assert not leaks(message, POSITIVE[0]) and "\x1b" not in message


# --- the commands ---------------------------------------------------------------------------------


def rsi(env: dict[str, str], *args: str) -> Result:
    result = CliRunner().invoke(app, list(args), env=env, catch_exceptions=False)
    assert "Traceback" not in result.output
    return result


@pytest.fixture
def cli_env(engine: Engine, db_url: str, tmp_path: Path) -> dict[str, str]:
    return {"RSI_DATABASE_URL": db_url, "RSI_HOME": str(tmp_path / "home"), "RSI_MODEL_BACKOFF_S": "0"}


def suites(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT COUNT(*) FROM rsi_suites")).scalar_one())


def test_build_refuses_the_same_bad_files_on_both_databases(
    cli_env: dict[str, str], engine: Engine, tmp_path: Path
) -> None:
    # a lone surrogate in a request (a `\ud800` escape) and U+0000 in a check: were stored on both
    # databases (and the suite could not be shown as JSON); now refused naming the field, nothing stored
    for bad, field in (
        (task(request="a \ud800 b"), "suite.tasks[0].request"),
        (task(checks=[{"criterion": "a\x00b"}]), "suite.tasks[0].checks[0].criterion"),
    ):
        path = tmp_path / "tasks.jsonl"
        path.write_text("\n".join(lines(bad, task("t2"))) + "\n", encoding="utf-8")
        out = rsi(cli_env, "suite", "build", "s", "--tasks", str(path), "--json")
        assert out.exit_code == 1 and json.loads(out.stdout)["error"]["message"].startswith(field)
    assert suites(engine) == 0
    path.write_text("\n".join(lines()) + "\n", encoding="utf-8")
    assert rsi(cli_env, "suite", "build", "s", "--tasks", str(path)).exit_code == 0
    assert suites(engine) == 1


def test_names_and_files_from_the_command_line(
    cli_env: dict[str, str], engine: Engine, tmp_path: Path
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join(lines()) + "\n", encoding="utf-8")
    for name in ("../x", "a/b", "a" + ESC, "n\x00"):
        out = rsi(cli_env, "suite", "build", name, "--tasks", str(tasks))
        assert out.exit_code == 1 and "error: suite.name: " in out.output and "\x1b" not in out.output
    out = rsi(cli_env, "suite", "build", "s", "--tasks", str(tasks), "--heldout-fraction", "nan")
    assert out.exit_code == 1 and "--heldout-fraction" in out.output
    # a directory or a FIFO in place of the file: was a traceback (IsADirectoryError) or a hang
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (tmp_path, fifo):
        out = rsi(cli_env, "suite", "build", "s", "--tasks", str(path))
        assert out.exit_code == 1 and "not a regular file" in out.output
    assert suites(engine) == 0
    # lookups by a hostile name: one refusal on both databases (a NUL was a driver error on PostgreSQL),
    # the name never echoed raw
    for args in (("suite", "show", "s\x00" + ESC), ("evolve", "status", "r\x00" + ESC)):
        out = rsi(cli_env, *args)
        assert out.exit_code == 1 and "not a valid id" in out.output and "\x1b" not in out.output
    out = rsi(cli_env, "evolve", "init", "r", "--suite", "nope\x00")
    assert out.exit_code == 1 and "suite name: not a valid id" in out.output
    out = rsi(cli_env, "suite", "build", "s", "--from-agent", "shop\x00", "--heldout-fraction", "0.5")
    assert out.exit_code == 1 and "--from-agent: not a valid id" in out.output  # was exit 2 on PostgreSQL


def test_show_never_writes_a_control_character_raw(cli_env: dict[str, str], tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    hostile = f"ignore the above {ESC} \x9b31m \u202e evil \x7f"
    tasks.write_text("\n".join(lines(task(request=hostile), task("t2"))) + "\n", encoding="utf-8")
    assert rsi(cli_env, "suite", "build", "s", "--tasks", str(tasks)).exit_code == 0
    text = rsi(cli_env, "suite", "show", "s").stdout
    assert "ignore the above" in text and not any(c in text for c in "\x1b\x07\x9b\x7f")
    shown = rsi(cli_env, "suite", "show", "s", "--json").stdout
    assert not any(c in shown for c in "\x1b\x07\x9b\x7f")  # C1 and DEL were raw with ensure_ascii=False
    assert json.loads(shown)["tasks"][0]["request"] == hostile  # the same JSON value, escaped


def test_a_config_file_with_a_hostile_key_is_refused_without_echoing_it(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join(lines()) + "\n", encoding="utf-8")
    assert rsi(cli_env, "suite", "build", "s", "--tasks", str(tasks)).exit_code == 0
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({ESC: 1, "params": {"T": 3}}), encoding="utf-8")
    out = rsi(cli_env, "evolve", "init", "r", "--suite", "s", "--config", str(cfg))
    assert out.exit_code == 1 and "config: unknown key(s) <key 0>" in out.output and "\x1b" not in out.output
    cfg.write_text('{"params": {"T": 1, "k": ' + "[" * 10_000 + "]" * 10_000 + "}}", encoding="utf-8")
    out = rsi(cli_env, "evolve", "init", "r", "--suite", "s", "--config", str(cfg))
    assert out.exit_code == 1 and "nested deeper than 64" in out.output
    out = rsi(cli_env, "evolve", "status", "r")
    assert out.exit_code == 1 and "unknown evolve run" in out.output  # nothing was created


@pytest.mark.parametrize("pattern", ["(a+)+$", "(" * 600 + ")" * 600, "(x|xx)*y"])
def test_the_digesters_grep_refuses_a_hostile_pattern(pattern: str) -> None:
    # was: the model's pattern ran as given — `(a+)+$` over a line of "a"s never returned and a
    # pattern too nested to parse raised RecursionError
    files = {"trace.md": "a" * 60 + "!\n" + "x" * 60 + "\n"}
    assert _tool(files, "grep", {"pattern": pattern}).startswith("error: bad pattern")
    assert _tool(files, "grep", {"pattern": "a{3}!"}).startswith("trace.md:1:")


def test_a_file_of_too_many_tasks_stops_at_the_limit() -> None:
    from rsi_worker.evolve.suite import MAX_TASKS

    def many() -> Any:  # a million lines: only the first MAX_TASKS + 1 may ever be read
        for i in range(1_000_000):
            if i > MAX_TASKS:
                raise AssertionError("read past the limit")
            yield json.dumps(task(f"t{i}"))

    message = refused(lambda: from_jsonl("s", many()))
    assert message == f"line {MAX_TASKS + 1}: more than {MAX_TASKS:,} tasks, over the limit"
    assert len(from_jsonl("s", [json.dumps(task(f"t{i}")) for i in range(MAX_TASKS)]).tasks) == MAX_TASKS

"""Registry, base param reads, memory, prompt cache and skill library components
(docs/formats.md §5.5, §5.6)."""

from __future__ import annotations

from typing import Any

from rsi_common.harness import ComponentSpec, h0
from rsi_common.kernel import run_turn
from rsi_common.kernel.components import KNOWN_IMPLS, REGISTRY, Component, SkillLibraryComponent
from rsi_common.kernel.components.skills import DEFAULT_HEADER, READ_SKILL, parse_skill
from rsi_common.kernel.testing import ScriptedModel, text_response, tool_response
from tests.unit.kernel.helpers import NO_RETRY, SKILL_COMPONENT, SKILL_TEXT, harness_with, live, make_plan


def test_registry_keys_equal_known_impls_and_kinds_match() -> None:
    assert set(REGISTRY) == set(KNOWN_IMPLS)
    for impl, cls in REGISTRY.items():
        assert KNOWN_IMPLS[impl] == cls.KIND
        assert impl.endswith(":" + cls.__name__)
        assert cls.__module__ == impl.split(":")[0]


def test_params_catalog_defaults_equal_h0() -> None:
    for spec in h0().manifest.components:
        cls = REGISTRY[spec.impl]
        assert set(spec.params) == set(cls.PARAMS), spec.id
        for key, value in spec.params.items():
            default, doc = cls.PARAMS[key]
            assert default == value and doc, (spec.id, key)


def test_param_reads_are_recorded_with_dotted_keys_and_defaults() -> None:
    spec = ComponentSpec(id="c1", kind="prompt", impl="x:y", params={"a": {"b": 2}, "n": None})
    comp = Component(spec, {})
    assert comp.param("a.b") == 2
    assert comp.param("a.c", 5) == 5
    assert comp.param("missing") is None
    assert comp.param("n", 3) is None  # present but null: the stored value
    assert comp.params_read() == {"c1.params.a.b", "c1.params.a.c", "c1.params.missing", "c1.params.n"}


def test_wrong_param_types_fall_back_to_h0_defaults() -> None:
    h = harness_with(
        {
            "control.standard.params.repeat_stop_after": "three",
            "prompt.system.params.extra_blocks": "not a list",
        }
    )
    model = ScriptedModel([tool_response("get_sales", {"q": 1}, tool_use_id=f"t{i}") for i in range(4)])
    result = run_turn(make_plan(input="x"), h, model, retry=NO_RETRY)
    assert result.termination_reason == "REPEAT_STOP" and result.steps == 3


class ArchivingMemory:
    def __init__(self) -> None:
        self.archived: list[Any] = []

    def retrieve(self, query: str, timeout_s: float) -> list[dict[str, Any]]:
        return []

    def archive(self, messages: list[dict[str, Any]]) -> None:
        self.archived.append(messages)


def test_memory_switches() -> None:
    mem = ArchivingMemory()
    result, _ = live(
        make_plan(input="hi", tools=[], memory=mem),
        harness_with({"memory.archive.params.archive": False, "memory.archive.params.retrieve": False}),
    )
    assert mem.archived == []
    assert {"memory.archive.params.archive", "memory.archive.params.retrieve"} <= set(result.params_read)
    assert "context.standard.params.retrieval_timeout_s" not in result.params_read
    assert result.world is not None and result.world["memory"] == {"present": True, "chunks": None}


def test_prompt_cache_points_only_with_the_kwarg() -> None:
    model = ScriptedModel([text_response("a"), text_response("b"), text_response("c")])
    r0 = run_turn(make_plan(input="x", tools=[]), None, model, retry=NO_RETRY)
    r1 = run_turn(
        make_plan(input="x", tools=[], kwargs={"enable_prompt_cache": True}), None, model, retry=NO_RETRY
    )
    r2 = run_turn(
        make_plan(input="x", tools=[], kwargs={"enable_prompt_cache": True}),
        harness_with({"config.prompt_cache.params.strategy": "system"}),
        model,
        retry=NO_RETRY,
    )
    assert [r.cache_points for r in model.requests] == [[], ["system", "tools", "last_user"], ["system"]]
    assert "config.prompt_cache.params.strategy" not in r0.params_read
    assert "config.prompt_cache.params.strategy" in r1.params_read and r2.status == "completed"


def test_parse_skill_front_matter_and_fallbacks() -> None:
    skill = parse_skill("skills/cite-sources/SKILL.md", SKILL_TEXT)
    assert skill is not None and skill.name == "cite-sources"
    assert skill.description == "Show the query behind every number."
    assert skill.body == "When you report a number from a tool, name the tool call that produced it.\n"
    bare = parse_skill("skills/units/SKILL.md", "\n# Keep units " + "x" * 200 + "\nbody")
    assert bare is not None and bare.name == "units" and bare.description == ("Keep units " + "x" * 200)[:160]
    assert parse_skill("notes/readme.md", "x") is None


def test_skill_library_contributes_read_skill_and_a_catalogue() -> None:
    h = harness_with({}, {"skills/cite-sources/SKILL.md": SKILL_TEXT}, [SKILL_COMPONENT])
    assert h.version == "sha256:c7d856c2ea3ea6a192dda3bff0c9fca7ad414597883c7cac84aad57e03858315"
    model = ScriptedModel(
        [
            tool_response(READ_SKILL, {"name": "cite-sources"}, tool_use_id="r1"),
            tool_response(READ_SKILL, {"name": "nope"}, tool_use_id="r2"),
            text_response("ok"),
        ]
    )
    result = run_turn(make_plan(input="x"), h, model, retry=NO_RETRY)
    first = model.requests[0]
    assert first.system.endswith(
        "\n\n" + DEFAULT_HEADER + "\n- cite-sources: Show the query behind every number."
    )
    assert [t["name"] for t in first.tools] == ["get_sales", "get_weather", READ_SKILL]
    assert result.world is not None
    assert result.world["tools"]["contributed"] == [READ_SKILL]
    assert READ_SKILL not in [d["name"] for d in result.world["tools"]["defs"]]
    calls = result.world["tools"]["calls"]
    assert (
        calls[0]["content"] == "When you report a number from a tool, name the tool call that produced it.\n"
    )
    assert calls[1] == {
        "tool_use_id": "r2",
        "name": READ_SKILL,
        "input": {"name": "nope"},
        "content": "Unknown skill 'nope'. Available skills: cite-sources",
        "is_error": True,
    }
    assert "skills.library.params.header" in result.params_read
    assert "skills.library" in result.trajectory["components_fired"]


def test_skill_header_param_and_empty_library() -> None:
    comp = SkillLibraryComponent(
        ComponentSpec("s", "skill", "x:y", {"header": "# Procedures"}), {"skills/a/SKILL.md": "Do A.\n"}
    )
    assert comp.prompt_blocks(None) == [("skills", "\n\n# Procedures\n- a: Do A.")]  # type: ignore[arg-type]
    empty = SkillLibraryComponent(ComponentSpec("s", "skill", "x:y", {}), {})
    assert empty.tools(None) == [] and empty.prompt_blocks(None) == []  # type: ignore[arg-type]
    assert empty.params_read() == set()

"""The import graph of ``rsi_common`` and ``rsi_worker``: no cycle, and the layering of docs/dev/layout.md.

The graph is read from the source with :mod:`ast`, nothing is imported. Every ``import`` and
``from … import`` counts wherever it stands — at module level, inside a function, under
``if TYPE_CHECKING:`` — and so does ``importlib.import_module("<literal>")``: an import deferred into a
function may make start-up cheaper, it does not make a cycle go away.

An edge goes to the module an import names: ``from a.b import c`` names ``a.b.c`` when that is a
module, else ``a.b`` (the longest module prefix of the dotted name). Importing ``a.b.c`` is not
counted as importing the package ``a.b``: Python runs ``a/b/__init__.py`` first, but a package face
that hands on its own submodules would otherwise form a cycle with each of them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("rsi_common", "rsi_worker")


@dataclass(frozen=True)
class Edge:
    """``source`` imports ``target`` at ``line``."""

    source: str
    target: str
    line: int

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} (line {self.line})"


@dataclass(frozen=True)
class Graph:
    """Project modules, the edges between them, and the outside top-level names each one imports."""

    modules: Mapping[str, Path]
    edges: Mapping[str, tuple[Edge, ...]]
    outside: Mapping[str, frozenset[str]]


def _module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def _named(node: ast.AST, here: str, is_package: bool) -> Iterator[tuple[str, int]]:
    """The dotted names an import statement or an ``import_module("…")`` call brings in."""
    if isinstance(node, ast.Import):
        yield from ((alias.name, node.lineno) for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = here.split(".") if is_package else here.split(".")[:-1]
            base = base[: len(base) - node.level + 1]
            module = ".".join([*base, node.module] if node.module else base)
        else:
            module = node.module or ""
        yield from ((f"{module}.{alias.name}", node.lineno) for alias in node.names)
    elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
          and isinstance(node.args[0].value, str)
          and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) == "import_module"):
        yield node.args[0].value, node.lineno


@cache
def graph() -> Graph:
    modules: dict[str, tuple[Path, bool]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name, is_package = _module_name(path)
            modules[name] = (path, is_package)
    edges: dict[str, tuple[Edge, ...]] = {}
    outside: dict[str, frozenset[str]] = {}
    for name, (path, is_package) in modules.items():
        found: dict[str, Edge] = {}
        others: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            for dotted, line in _named(node, name, is_package):
                top = dotted.split(".")[0]
                if top not in PACKAGES:
                    others.add(top)
                    continue
                target = dotted
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and (target not in found or line < found[target].line):
                    found[target] = Edge(name, target, line)
        edges[name] = tuple(sorted(found.values(), key=lambda e: e.target))
        outside[name] = frozenset(others)
    return Graph({n: p for n, (p, _) in modules.items()}, edges, outside)


def strongly_connected(edges: Mapping[str, Iterable[Edge]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            for edge in it:
                nxt = edge.target
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(edges[nxt])))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return out


def a_cycle(component: list[str], edges: Mapping[str, Iterable[Edge]]) -> list[Edge]:
    """One loop of imports through ``component`` (shortest from its first module), to print."""
    members = set(component)
    start = component[0]
    paths: dict[str, list[Edge]] = {start: []}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for edge in edges[node]:
            if edge.target == start:
                return [*paths[node], edge]
            if edge.target in members and edge.target not in paths:
                paths[edge.target] = [*paths[node], edge]
                queue.append(edge.target)
    raise AssertionError("a strongly connected component has a loop")


def closure(roots: Iterable[str], edges: Mapping[str, Iterable[Edge]]) -> set[str]:
    """Every project module that ``roots`` import, directly or not, the roots included."""
    seen = set(roots)
    todo = list(seen)
    while todo:
        for edge in edges[todo.pop()]:
            if edge.target not in seen:
                seen.add(edge.target)
                todo.append(edge.target)
    return seen


def package_of(module: str) -> str:
    """``rsi_worker.<name>`` / ``rsi_common.<name>``: the top-level room a module stands in."""
    return ".".join(module.split(".")[:2])


# --- the reader itself --------------------------------------------------------------------------


def test_the_reader_sees_every_kind_of_import() -> None:
    g = graph()
    assert len(g.modules) > 150
    assert "rsi_common.kernel.turn" in g.modules and "rsi_worker.cluster.app" in g.modules
    targets = {e.target for e in g.edges["rsi_worker.cluster.tasks"]}
    assert {"rsi_worker.cluster.worker", "rsi_worker.consolidate", "rsi_common.stored"} <= targets
    lazy = {e.target for e in g.edges["rsi_common.llm.factory"]}  # imported inside make_client
    assert {"rsi_common.llm.anthropic", "rsi_common.llm.openai", "rsi_common.llm.sim"} <= lazy
    typing_only = {e.target for e in g.edges["rsi_common.kernel.components.base"]}  # TYPE_CHECKING
    assert "rsi_common.kernel.runtime" in typing_only
    assert "celery" in g.outside["rsi_worker.cluster.app"]


def test_cycles_are_found_and_printed() -> None:
    edges = {
        "a": (Edge("a", "b", 1),),
        "b": (Edge("b", "c", 2),),
        "c": (Edge("c", "a", 3), Edge("c", "d", 4)),
        "d": (),
    }
    assert strongly_connected(edges) == [["a", "b", "c"]]
    assert [str(e) for e in a_cycle(["a", "b", "c"], edges)] == [
        "a -> b (line 1)", "b -> c (line 2)", "c -> a (line 3)"]


# --- the rules ----------------------------------------------------------------------------------


def test_no_import_cycle() -> None:
    g = graph()
    loops = [a_cycle(component, g.edges) for component in strongly_connected(g.edges)]
    message = "\n\n".join("import cycle:\n  " + "\n  ".join(map(str, loop)) for loop in loops)
    assert not loops, message


def test_rsi_common_never_imports_rsi_worker() -> None:
    g = graph()
    wrong = [e for m, es in g.edges.items() if m.startswith("rsi_common") for e in es
             if e.target.startswith("rsi_worker")]
    assert not wrong, "\n".join(map(str, wrong))


def test_the_pipeline_never_imports_celery() -> None:
    """Nothing the consolidation pipeline imports, directly or not, imports Celery: the same steps
    run inline and on the cluster."""
    g = graph()
    pipeline = [m for m in g.modules if m.startswith("rsi_worker.consolidate")]
    reached = closure(pipeline, g.edges)
    assert not [m for m in reached if m.startswith("rsi_worker.cluster")]
    celery = sorted(m for m in reached if "celery" in g.outside[m])
    assert not celery, f"the pipeline reaches Celery through {celery}"


RSI_WORKER_LAYERS: Mapping[str, frozenset[str]] = {
    "rsi_worker.observability": frozenset(),
    "rsi_worker.gate": frozenset(),
    "rsi_worker.service": frozenset({"rsi_worker.evolve"}),
    "rsi_worker.roles": frozenset({"rsi_worker.gate"}),
    "rsi_worker.consolidate": frozenset({"rsi_worker.roles", "rsi_worker.gate", "rsi_worker.observability"}),
    "rsi_worker.runtime": frozenset({"rsi_worker.consolidate", "rsi_worker.observability"}),
    "rsi_worker.cluster": frozenset({"rsi_worker.consolidate", "rsi_worker.runtime",
                                     "rsi_worker.observability", "rsi_worker.evolve", "rsi_worker.dream"}),
    "rsi_worker.jobs": frozenset({"rsi_worker.consolidate", "rsi_worker.runtime",
                                  "rsi_worker.observability"}),
    "rsi_worker.local": frozenset({"rsi_worker.cluster", "rsi_worker.runtime", "rsi_worker.observability"}),
    "rsi_worker.evolve": frozenset({"rsi_worker.consolidate", "rsi_worker.roles", "rsi_worker.gate",
                                    "rsi_worker.runtime", "rsi_worker.observability"}),
    "rsi_worker.bench": frozenset({"rsi_worker.consolidate", "rsi_worker.roles", "rsi_worker.gate",
                                   "rsi_worker.runtime", "rsi_worker.jobs", "rsi_worker.local",
                                   "rsi_worker.cluster", "rsi_worker.observability", "rsi_worker.evolve",
                                   "rsi_worker.dream"}),
    "rsi_worker.dream": frozenset({"rsi_worker.observability"}),
    "rsi_worker.chaos": frozenset({"rsi_worker.jobs", "rsi_worker.local", "rsi_worker.cluster",
                                   "rsi_worker.consolidate", "rsi_worker.runtime",
                                   "rsi_worker.observability"}),
}
"""The rooms of ``rsi_worker`` a room may import (docs/dev/layout.md); ``commands`` and ``cli`` may
import every room, and no room imports them."""


@pytest.mark.parametrize("room", sorted(RSI_WORKER_LAYERS))
def test_rsi_worker_layers(room: str) -> None:
    g = graph()
    allowed = RSI_WORKER_LAYERS[room] | {room}
    wrong = [e for m, es in g.edges.items() if package_of(m) == room for e in es
             if e.target.startswith("rsi_worker") and package_of(e.target) not in allowed]
    assert not wrong, "\n".join(map(str, wrong))


def test_only_the_cli_imports_the_commands() -> None:
    g = graph()
    wrong = [e for m, es in g.edges.items() for e in es
             if package_of(e.target) in ("rsi_worker.commands", "rsi_worker.cli")
             and package_of(m) not in ("rsi_worker.commands", "rsi_worker.cli")]
    assert not wrong, "\n".join(map(str, wrong))
    assert set(RSI_WORKER_LAYERS) | {"rsi_worker.commands", "rsi_worker.cli", "rsi_worker"} >= {
        package_of(m) for m in g.modules if m.startswith("rsi_worker")}, "a new room needs its layer"


RSI_COMMON_NEVER: tuple[tuple[str, str, str], ...] = (
    ("rsi_common.errors", "rsi_common", "the error tree is the ground floor"),
    ("rsi_common.kinds", "rsi_common", "the component vocabulary is the ground floor"),
    ("rsi_common.math", "rsi_common.harness", "formulas know no format"),
    ("rsi_common.harness", "rsi_common.kernel",
     "a harness names components by impl string; the kernel's registry builds them"),
    ("rsi_common.llm", "rsi_common.kernel", "model clients know no turn engine"),
    ("rsi_common.llm.base", "rsi_common.llm", "the interface knows no implementation"),
    ("rsi_common.llm.sim", "rsi_common.llm.factory", "an implementation does not build clients"),
    ("rsi_common.kernel.runtime", "rsi_common.kernel.components", "components take the runtime"),
    ("rsi_common.kernel.events", "rsi_common", "the events of a streamed turn are plain values"),
    ("rsi_common.llm.streaming", "rsi_common.llm.factory", "streaming knows no implementation"),
)
"""``(source prefix, target prefix, why)``: no module under the first imports one under the second
(a module's imports of its own prefix excepted)."""


@pytest.mark.parametrize(("source", "target", "why"), RSI_COMMON_NEVER)
def test_rsi_common_layers(source: str, target: str, why: str) -> None:
    g = graph()

    def under(module: str, prefix: str) -> bool:
        return module == prefix or module.startswith(prefix + ".")

    wrong = [e for m, es in g.edges.items() if under(m, source) for e in es
             if under(e.target, target) and not under(e.target, source)]
    assert not wrong, why + ":\n" + "\n".join(map(str, wrong))


def test_only_the_package_root_imports_the_agent() -> None:
    """``rsi_common.agent`` is the top floor of ``rsi_common`` (docs/dev/layout.md): the host's façade
    stands on the host clients, the kernel and the database; nothing of them stands on it. The
    package root's lazy ``Agent`` attribute is the one way in."""
    g = graph()
    wrong = [e for m, es in g.edges.items() if m.startswith("rsi_common") and m != "rsi_common"
             and not m.startswith("rsi_common.agent") for e in es
             if e.target == "rsi_common.agent" or e.target.startswith("rsi_common.agent.")]
    assert not wrong, "\n".join(map(str, wrong))
    assert "rsi_common.agent" in {e.target for e in g.edges["rsi_common"]}

"""Code cites the repository's docs/, and what it cites exists (docs/dev/layout.md).

* No citation of the former design documents (``SPEC §…``, ``ARCHITECTURE …``, ``SIM.md``,
  ``RUNTIME.md``) is left in the source of either package, the tests or the scripts.
* Every ``docs/<file>`` a source file names exists; a ``#anchor`` after it is one of the file's
  heading slugs; a ``docs/<file> §N.N`` names a heading of that file that starts with ``N.N``.
* ``docs/dev/check_docs.py`` (links inside docs/ and the targets of spec-map.json) passes.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("rsi_common", "rsi_worker", "tests", "scripts")
_FORMER = re.compile(
    r"\b(?:SPEC(?![\w/]|\.\w)(?: §|'s| conventions)|ARCHITECTURE(?![\w/])|SIM\.md|RUNTIME\.md)")
_CITE = re.compile(r"\bdocs/((?:[\w-]+/)*[\w.-]+\.(?:md|json|py))(#[\w-]+)?(?: (§\d+(?:\.\d+)*))?")


def _check_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_docs", ROOT / "docs" / "dev" / "check_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sources() -> list[Path]:
    this = Path(__file__).resolve()
    return [p for base in SOURCES for p in sorted((ROOT / base).rglob("*.py")) if p.resolve() != this]


def _headings(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return [m.group(1) for m in re.finditer(r"^#{1,6}\s+(.*?)\s*$", text, flags=re.M)]


def test_no_citation_of_documents_outside_the_repository() -> None:
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
             for p in _sources()
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if _FORMER.search(line)]
    assert not found, "cite docs/ instead:\n" + "\n".join(found[:40])


def test_every_cited_docs_file_anchor_and_section_exists() -> None:
    check = _check_docs()
    anchor_cache: dict[Path, set[str]] = {}
    problems: list[str] = []
    cited = 0
    for p in _sources():
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            for m in _CITE.finditer(line):
                cited += 1
                target = ROOT / "docs" / m.group(1)
                where = f"{p.relative_to(ROOT)}:{n}"
                if not target.is_file():
                    problems.append(f"{where}: no file docs/{m.group(1)}")
                    continue
                anchor, section = m.group(2), m.group(3)
                if anchor:
                    if target not in anchor_cache:
                        anchor_cache[target] = check.anchors(target)
                    if anchor[1:] not in anchor_cache[target]:
                        problems.append(f"{where}: no anchor {anchor} in docs/{m.group(1)}")
                if section and not any(h.startswith(section[1:] + " ") for h in _headings(target)):
                    problems.append(f"{where}: no heading {section[1:]} in docs/{m.group(1)}")
    assert cited > 100  # the sources do cite docs/; a broken regex must not pass vacuously
    assert not problems, "\n".join(problems[:40])


def test_docs_links_and_spec_map_resolve(capsys: pytest.CaptureFixture[str]) -> None:
    code = _check_docs().main()
    assert code == 0, capsys.readouterr().out

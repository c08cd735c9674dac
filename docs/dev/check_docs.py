"""Check the links of docs/ and the targets of docs/dev/spec-map.json.

Usage (from the repository root)::

    python docs/dev/check_docs.py

Every relative markdown link under ``docs/`` (``[text](path)`` and ``[text](path#anchor)``) must
name an existing file, and an anchor must exist in that file; every value of ``spec-map.json``
(``docs/<file>#<anchor>``) likewise. Anchors are the heading slugs GitHub generates (lower case,
punctuation other than ``-`` and ``_`` removed, spaces turned into ``-``, a repeated slug suffixed
``-1``, ``-2`` …) and explicit ``<a id="…"></a>`` anchors. Headings inside fenced code blocks are
not headings. Exit code 0 when everything resolves, 1 otherwise (each problem on one line).
Standard library only; nothing is fetched.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
SPEC_MAP = DOCS / "dev" / "spec-map.json"

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_EXPLICIT = re.compile(r"""<a\s+(?:id|name)=["']([^"']+)["']""")
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^\s*(```|~~~)")


def slug(text: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links keep their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor of a markdown file."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        found.update(_EXPLICIT.findall(line))
        m = _HEADING.match(line)
        if m:
            base = slug(m.group(2))
            n = counts.get(base, 0)
            counts[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """``(line number, target)`` of every link outside fenced code blocks."""
    out: list[tuple[int, str]] = []
    fenced = False
    for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.extend((no, t) for t in _LINK.findall(line))
    return out


def resolve(base: Path, target: str, cache: dict[Path, set[str]]) -> str | None:
    """``None`` when ``target`` (relative to ``base``'s directory) resolves, else the problem."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto: … are not checked
        return None
    file_part, _, anchor = target.partition("#")
    dest = (base.parent / file_part).resolve() if file_part else base.resolve()
    if not dest.exists():
        return f"no such file {file_part}"
    if anchor:
        if dest.suffix != ".md":
            return f"anchor #{anchor} on a non-markdown file"
        if dest not in cache:
            cache[dest] = anchors(dest)
        if anchor not in cache[dest]:
            return f"no anchor #{anchor} in {dest.relative_to(ROOT)}"
    return None


def main() -> int:
    problems: list[str] = []
    cache: dict[Path, set[str]] = {}
    for md in sorted(DOCS.rglob("*.md")):
        for no, target in links(md):
            problem = resolve(md, target, cache)
            if problem:
                problems.append(f"{md.relative_to(ROOT)}:{no}: {target}: {problem}")
    mapping = json.loads(SPEC_MAP.read_text(encoding="utf-8"))
    if not isinstance(mapping, dict) or not mapping:
        problems.append(f"{SPEC_MAP.relative_to(ROOT)}: not a non-empty JSON object")
        mapping = {}
    for key, target in mapping.items():
        if not isinstance(target, str) or not target.startswith("docs/"):
            problems.append(f"spec-map {key!r}: target must be a string under docs/, got {target!r}")
            continue
        problem = resolve(ROOT / "_", target, cache)
        if problem:
            problems.append(f"spec-map {key!r}: {target}: {problem}")
    for p in problems:
        print(p)
    print(f"{len(problems)} problem(s); {len(mapping)} spec-map entries", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""Digesters and the three-lens report of offline evolve (docs/algorithm/evolve.md#analysis).

A **digester** reads one rendered trace (a view, :func:`rsi_worker.roles.analyst.render` with detail)
through read-only tools over a virtual directory — ``trace.md`` and ``checks.json`` — and ends with
``return``: ``{lens, blocker, narrative, evidence, verifier_evidence, needed_instead}`` (≤ 6,000
characters as JSON). Tools: ``read_file {path}``, ``glob {pattern}``, ``grep {pattern, path?}``,
``return {digest}``. At most :data:`MAX_STEPS` calls; a failure gives a digest whose ``blocker``
says why (never raises).

The **reporter** turns the digests into ``{failure_modes, capability_gaps, success_habits}`` with one
JSON call; its failure modes and habits have the analyst report's shape (``mode``/``habit``,
``description``, ``worlds``, ``lens``, ``evidence``), so the proposer reads them unchanged.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from rsi_common.llm import ModelClient, ModelRequest, complete_json
from rsi_common.stored import safe_text
from rsi_worker.gate.regex_risk import backtracks
from rsi_worker.roles.analyst import LENSES, View, render
from rsi_worker.roles.report_items import kept_items, reply_text

__all__ = [
    "DIGESTER_SYSTEM",
    "DIGEST_CHARS",
    "DIGEST_KEYS",
    "MAX_STEPS",
    "REPORTER_SYSTEM",
    "TOOLS",
    "TRACE_FILE",
    "digest",
    "report",
]

DIGEST_KEYS = ("lens", "blocker", "narrative", "evidence", "verifier_evidence", "needed_instead")
DIGEST_CHARS = 6_000
MAX_STEPS = 6
GREP_PATTERN_CHARS = 1_000
"""A ``grep`` call's pattern, at most (the model's reply is hostile)."""
GREP_LINE_CHARS = 4_000
"""A ``grep`` call searches each line's first this many characters (a plain ``.*x`` is quadratic)."""
TRACE_FILE = "trace.md"
CHECKS_FILE = "checks.json"
DIGESTER_SYSTEM = (
    "You digest one trace of an agent on one task: the rendered trace is the file trace.md, the task's "
    "checks are checks.json. Use read_file, glob and grep to read them (read-only), then call return "
    'exactly once with {"lens": one of ' + ", ".join(LENSES) + ', "blocker", "narrative", "evidence", '
    '"verifier_evidence", "needed_instead"}: what blocked the agent (empty when it passed), in general '
    "terms, never quoting the user."
)
REPORTER_SYSTEM = (
    "You merge trace digests into one report with three lenses. Reply with one JSON object: "
    '{"failure_modes": [{"mode", "description", "worlds": [ids], "lens", "evidence"}], '
    '"capability_gaps": [{"mode", "description", "worlds": [ids]}], '
    '"success_habits": [{"habit", "description", "worlds": [ids]}]}. Rank by the number of worlds.'
)
DIGESTS_HEADER = "DIGESTS"
TOOLS: list[dict[str, Any]] = [
    {
        "name": "read_file",
        "description": "Read a file of the trace directory.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
    {
        "name": "glob",
        "description": "List the files matching a pattern.",
        "input_schema": {
            "type": "object",
            "properties": {"pattern": {"type": "string"}},
            "required": ["pattern"],
        },
    },
    {
        "name": "grep",
        "description": "Lines matching a regular expression (in one file or all).",
        "input_schema": {
            "type": "object",
            "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}},
            "required": ["pattern"],
        },
    },
    {
        "name": "return",
        "description": "Return the digest and stop.",
        "input_schema": {
            "type": "object",
            "properties": {k: {"type": "string"} for k in DIGEST_KEYS},
            "required": list(DIGEST_KEYS),
        },
    },
]


def _files(view: View) -> dict[str, str]:
    return {
        TRACE_FILE: render(view, detail=True),
        CHECKS_FILE: json.dumps([dict(c) for c in view.checks], ensure_ascii=False, indent=1),
    }


def _tool(files: Mapping[str, str], name: str, args: Mapping[str, Any]) -> str:
    if name == "read_file":
        path = str(args.get("path") or "")
        return files.get(path, f"error: no file {path[:80]!r}; files: {', '.join(files)}")
    if name == "glob":
        return "\n".join(p for p in files if fnmatch.fnmatch(p, str(args.get("pattern") or "*"))) or "(none)"
    if name == "grep":
        pattern = str(args.get("pattern") or "")[:GREP_PATTERN_CHARS]
        try:
            rx = re.compile(pattern)
        except (re.error, RecursionError) as exc:
            return f"error: bad pattern ({exc if isinstance(exc, re.error) else 'nested too deeply'})"
        if backtracks(pattern):  # the model's pattern is hostile input: no exponential search
            return "error: bad pattern (a repetition holds another repetition or an alternation)"
        paths = [str(args["path"])] if args.get("path") else list(files)
        hits = [
            f"{p}:{i}: {line}"
            for p in paths
            for i, line in enumerate(files.get(p, "").splitlines(), 1)
            if rx.search(line[:GREP_LINE_CHARS])
        ]
        return "\n".join(hits[:200]) or "(no match)"
    return f"error: unknown tool {name[:40]!r}"


def _args(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _clip(d: object) -> dict[str, str]:
    """The digest's fields as storable text (a hostile ``return`` input: module docstring)."""
    got = d if isinstance(d, Mapping) else {}
    out = {k: safe_text(reply_text(got.get(k)), DIGEST_CHARS) for k in DIGEST_KEYS}
    if out["lens"] not in LENSES:
        out["lens"] = "control" if not out["lens"] else out["lens"][:40]
    while len(json.dumps(out, ensure_ascii=False)) > DIGEST_CHARS:
        longest = max(DIGEST_KEYS, key=lambda k: len(out[k]))
        out[longest] = out[longest][: len(out[longest]) // 2]
    return out


def digest(client: ModelClient, view: View, outcome: str) -> dict[str, Any]:
    """One trace's digest (module docstring) with ``world`` and ``outcome`` (``fail``/``success``)."""
    files = _files(view)
    user = (
        f"TRACE {view.world.id} ({outcome}, score {view.mean:.2f}). Files: {', '.join(files)}. "
        "Read them, then call return."
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": user}]
    try:
        for _ in range(MAX_STEPS):
            resp = client.complete(
                ModelRequest(
                    model="", system=DIGESTER_SYSTEM, messages=messages, tools=TOOLS, max_tokens=2048
                )
            )
            uses = [b for b in resp.content if b.get("type") == "tool_use"]
            if not uses:
                break
            messages.append({"role": "assistant", "content": resp.content})
            results = []
            for u in uses:
                if u.get("name") == "return":
                    return {"world": view.world.id, "outcome": outcome, **_clip(u.get("input"))}
                results.append(
                    {
                        "type": "tool_result",
                        "tool_use_id": u.get("id"),
                        "content": _tool(files, reply_text(u.get("name")), _args(u.get("input")))[:20_000],
                    }
                )
            messages.append({"role": "user", "content": results})
        reason = "digest unavailable: no return within the step limit"
    except Exception as exc:  # a failed digest is a digest that says so
        reason = f"digest unavailable: {type(exc).__name__}"
    return {"world": view.world.id, "outcome": outcome, **_clip({"lens": "control", "blocker": reason})}


def report(client: ModelClient, digests: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The three-lens report of ``digests``; a failure gives an empty report with ``notes`` saying why."""
    user = DIGESTS_HEADER + "\n" + "\n".join(json.dumps(dict(d), ensure_ascii=False) for d in digests)
    try:
        out = complete_json(client, system=REPORTER_SYSTEM, user=user, max_tokens=4096)
    except Exception as exc:
        return {
            "failure_modes": [],
            "capability_gaps": [],
            "success_habits": [],
            "notes": f"report unavailable: {type(exc).__name__}",
        }
    return {
        "failure_modes": kept_items(out, "failure_modes", "mode"),
        "capability_gaps": kept_items(out, "capability_gaps", "mode"),
        "success_habits": kept_items(out, "success_habits", "habit"),
        "notes": f"{len(digests)} digest(s)",
    }

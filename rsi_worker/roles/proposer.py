"""The proposer's action protocol (docs/formats.md §6.1): a model edits an in-memory harness workspace.

Every model reply is one JSON object ``{"action": <name>, ...}``; the tool answers with one user
message, ``"[<action>] ok"`` (plus a newline and the result) or ``"[<action>] error: <why>"``. One
:class:`~rsi_common.llm.ModelRequest` is sent per reply, with the growing message list and the
system prompt as cache point. Actions: ``list_files``, ``read_file``, ``list_components``,
``list_traces``, ``read_trace``, ``edit_file``, ``write_file``, ``done``.

Limits and rules (docs/formats.md §6.1): :data:`MAX_TURNS` replies; :data:`MAX_EDITS` successful file changes
(a
further change is answered with an error — project decision; ``done`` stays possible); the first 3
``abort`` requests are answered with an error and the 4th ends the loop with status ``abort``;
unparseable replies are answered with an error and count as turns; result messages are capped at
150,000 chars for read actions and 4,000 otherwise; ``read_trace`` is cut to 60,000 chars.

``done`` is validated in the docs/formats.md §6.1 order (first failure answered as an error, the loop goes
on):
(1) edits declared but no file change succeeded (allowed in repair mode); (2) the workspace differs
from the incumbent but ``edits`` is empty; (3) the edit budget; (4) a required field missing or blank,
or a field of the wrong type (texts must be strings, ``predicted_affected`` a list of ids,
``addresses`` a list of strings: what :class:`~rsi_common.math.Edit` accepts); (4b) an edit that
cannot be stored (a NaN, a lone surrogate) or is over :data:`EDIT_CHARS` as JSON — project decision,
docs/algorithm/consolidation.md "Hostile replies"; (5) a component that is
not an enabled kind; (6) a reserved slot with no declared component in ``untried``; (7)
:func:`validate_candidate`.

Decisions: a model error ends the run with status ``error`` (reason ``"model error: <Type>: <msg>"``);
an ``edit_file`` whose ``new`` equals ``old`` is an error (nothing would change); ``read_trace``
defaults to ``detail=false``; ``predicted_affected`` must be a list (it may be empty).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rsi_common.errors import ManifestError, ModelError
from rsi_common.harness import (
    MANIFEST_FILE,
    Harness,
    Manifest,
    check_path,
    harness_from_workspace,
    load_manifest,
    touched,
    workspace_of,
)
from rsi_common.kernel.components import REGISTRY, instantiate
from rsi_common.llm import ModelClient, ModelRequest, parse_json_object
from rsi_common.math import check_edit_cardinality
from rsi_common.stored import first_problem, safe_text
from rsi_common.world import TurnWorld
from rsi_worker.roles.analyst import View, render, task_row
from rsi_worker.roles.proposer_context import (
    budget_sentence,
    proposer_system,
    proposer_user,
    selection_text,
    variant_brief,
)
from rsi_worker.roles.report_items import fits

__all__ = [
    "MAX_EDITS",
    "MAX_TURNS",
    "OPTIONAL_FIELDS",
    "REQUIRED_FIELDS",
    "Proposal",
    "ProposerSetup",
    "budget_sentence",
    "propose",
    "proposer_system",
    "proposer_user",
    "selection_text",
    "validate_candidate",
    "variant_brief",
]

MAX_TURNS = 40
MAX_EDITS = 80
ABORTS_ANSWERED = 3
READ_CAP, OTHER_CAP, TRACE_CAP = 150_000, 4_000, 60_000
READ_ACTIONS = frozenset({"list_files", "read_file", "list_components", "list_traces", "read_trace"})
REQUIRED_FIELDS = ("id", "component", "hypothesis", "targets_mode", "predicted_affected", "retroactive_check")
OPTIONAL_FIELDS = ("addresses", "why_not_lower_lever", "trigger_condition", "regression_risk")
WRITE_EXTENSIONS = (".json", ".md", ".txt")
EDIT_CHARS = 8_000
"""A declared edit, at most, as JSON (rule 4b of ``done``: a hostile reply must not bloat the run row)."""
SUMMARY_CHARS = 2_000
"""The ``done`` summary kept, at most (clipped)."""
DOC_CHARS = 700
_STEP = re.compile(r"(?m)^\[step (\d+)\] AGENT:")


@dataclass(frozen=True)
class ProposerSetup:
    """What the protocol needs besides the prompt text.

    Attributes:
        incumbent: the harness the workspace was copied from (touch set, rule 2, list_components).
        views: the worlds of ``list_traces`` / ``read_trace``.
        b_t: the edit budget of the round.
        enabled: the enabled kinds (𝒦 order).
        untried: the untried enabled kinds 𝒰_t.
        reserved_slot: the variant holds a reserved exploration slot.
        registry: component registry for ``list_components`` and validation (default: the kernel's).
    """

    incumbent: Harness
    views: Sequence[View]
    b_t: int
    enabled: Sequence[str]
    untried: Sequence[str] = ()
    reserved_slot: bool = False
    registry: Mapping[str, type] | None = None


@dataclass
class Proposal:
    """The outcome of one proposer run.

    ``status`` is ``done``, ``abort``, ``max_turns`` or ``error``; ``reason`` says why a run did not end
    with ``done`` (it quotes the last error). ``n_edits`` counts successful file changes.
    """

    status: str
    summary: str = ""
    edits: list[dict[str, Any]] = field(default_factory=list)
    mechanism: str = ""
    targets_mode: str = ""
    n_edits: int = 0
    log: list[dict[str, Any]] = field(default_factory=list)
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        """``{status, summary, edits, mechanism, targets_mode, n_edits, log}`` (+ ``reason`` when set)."""
        out: dict[str, Any] = {
            "status": self.status, "summary": self.summary, "edits": copy.deepcopy(self.edits),
            "mechanism": self.mechanism, "targets_mode": self.targets_mode, "n_edits": self.n_edits,
            "log": copy.deepcopy(self.log),
        }
        if self.reason:
            out["reason"] = self.reason
        return out


class _ActionError(Exception):
    """An action failed; the message goes back to the model."""


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    marker = f"\n[… {len(text) - limit} characters cut]"
    return text[: max(0, limit - len(marker))] + marker


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _id_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(x, str | int) and not isinstance(x, bool) for x in value)


def validate_candidate(workspace: Mapping[str, str], incumbent: Harness,
                       registry: Mapping[str, type] | None = None) -> list[str]:
    """Rule 7 of ``done`` (docs/formats.md §6.1): the problems of a workspace, in check order; ``[]`` = valid.

    Checks: the manifest loads (docs/formats.md §5.1); every listed file exists; the components instantiate;
    the
    touch set against ``incumbent`` has no violation (docs/formats.md §6.3); no orphan file. The first
    failing check
    is reported (later checks depend on it).
    """
    text = workspace.get(MANIFEST_FILE)
    try:
        if text is None:
            raise ManifestError(f"the workspace has no {MANIFEST_FILE}")
        obj = json.loads(text)
        if not isinstance(obj, dict):
            raise ManifestError(f"{MANIFEST_FILE} must hold a JSON object")
        manifest = load_manifest(obj)
    except (ManifestError, ValueError) as exc:
        return [f"the manifest does not load: {exc}"]
    missing = [p for p in manifest.referenced_files() if p not in workspace]
    if missing:
        return [f"listed file(s) missing from the workspace: {', '.join(missing)}"]
    try:
        instantiate(harness_from_workspace(workspace), registry)
    except Exception as exc:  # a component constructor may raise anything
        return [f"the components do not instantiate: {type(exc).__name__}: {exc}"]
    ts = touched(incumbent, workspace)
    if ts.violations:
        return [f"touch violation: {v}" for v in ts.violations]
    if ts.orphans:
        return [f"orphan file(s) that no component lists: {', '.join(ts.orphans)}"]
    return []


def _restricted(view: View, lo: int | None, hi: int | None) -> tuple[View, int]:
    """The view with its transcript cut to steps ``lo..hi`` and the step offset of the cut."""
    replay = dict(view.replay)
    transcript = list(replay.get("transcript") or [])
    recorded = not transcript
    if recorded:
        transcript = list((view.world.data.get("outcome") or {}).get("transcript") or [])
    kept: list[Any] = []
    step, first = 0, None
    for msg in transcript:
        if msg.get("role") == "assistant":
            step += 1
        s = max(step, 1)
        if (lo is None or s >= lo) and (hi is None or s <= hi):
            kept.append(msg)
            if msg.get("role") == "assistant" and first is None:
                first = step
    offset = (first or 1) - 1
    out = view
    w = view.world
    if isinstance(w, TurnWorld):
        # render falls back to the recorded steps when the trial has none: cut those too
        outcome = dict(w.data.get("outcome") or {}, transcript=kept if recorded else [])
        out = dataclasses.replace(out, world=dataclasses.replace(w, data=dict(w.data, outcome=outcome)))
    if not recorded:
        row = dict(view.row or {})
        row["result"] = dict(row.get("result") or {}, replay=dict(replay, transcript=kept))
        out = dataclasses.replace(out, row=row)
    return out, offset


class _Session:
    """One proposer run over a workspace (mutated in place)."""

    def __init__(self, workspace: dict[str, str], setup: ProposerSetup, repair: bool) -> None:
        self.ws = workspace
        self.setup = setup
        self.repair = repair
        self.base = workspace_of(setup.incumbent)
        self.n_changes = 0
        self.aborts = 0
        self.log: list[dict[str, Any]] = []
        self.last_error = ""
        self.handlers: dict[str, Callable[[Mapping[str, Any]], str]] = {
            "list_files": self._list_files, "read_file": self._read_file,
            "list_components": self._list_components, "list_traces": self._list_traces,
            "read_trace": self._read_trace, "edit_file": self._edit_file, "write_file": self._write_file,
        }

    def step(self, reply: str, turn: int) -> tuple[str, Proposal | None]:
        """Answer one reply: ``(result message, final proposal or None)``."""
        obj = parse_json_object(reply)
        name = obj.get("action") if obj is not None else None
        if not isinstance(name, str) or obj is None:
            return self._error("reply", turn, 'the reply is not one JSON object with a string "action"'), None
        if name == "abort":
            self.aborts += 1
            if self.aborts > ABORTS_ANSWERED:
                self.log.append({"turn": turn, "action": "abort", "ok": True, "message": "aborted"})
                return "", self._final("abort", f"abort: the proposer gave up; last error: {self.last_error}")
            return self._error(name, turn, "there is no abort action; finish with done (declare no edits and "
                                           "change nothing if you found nothing worth changing)"), None
        if name == "done":
            try:
                return "", self._done(obj, turn)
            except _ActionError as exc:
                return self._error(name, turn, str(exc)), None
        handler = self.handlers.get(name)
        if handler is None:
            return self._error(name, turn, f"unknown action {name!r}"), None
        try:
            body = handler(obj)
        except _ActionError as exc:
            return self._error(name, turn, str(exc)), None
        self.log.append({"turn": turn, "action": name, "ok": True, "message": body.split("\n", 1)[0][:200]})
        return _cap(f"[{name}] ok\n{body}", READ_CAP if name in READ_ACTIONS else OTHER_CAP), None

    def _error(self, name: str, turn: int, message: str) -> str:
        if name != "abort":  # the reason of a run should quote the error the model gave up on
            self.last_error = f"{name}: {message}"
        # a hostile action name or message is unbounded and may hold a lone surrogate
        self.log.append({"turn": turn, "action": safe_text(name, 40), "ok": False,
                         "message": safe_text(message, 200)})
        return _cap(f"[{name}] error: {message}", READ_CAP if name in READ_ACTIONS else OTHER_CAP)

    def _final(self, status: str, reason: str) -> Proposal:
        return Proposal(status=status, n_edits=self.n_changes, log=self.log, reason=safe_text(reason, 600))

    # --- read actions -----------------------------------------------------------------------

    def _path(self, obj: Mapping[str, Any], key: str = "path") -> str:
        try:
            return check_path(obj.get(key), where="path")
        except ManifestError as exc:
            raise _ActionError(str(exc)) from None

    def _list_files(self, obj: Mapping[str, Any]) -> str:
        return "\n".join(sorted(self.ws))

    def _read_file(self, obj: Mapping[str, Any]) -> str:
        path = self._path(obj)
        if path not in self.ws:
            raise _ActionError(f"no file {path!r} in the workspace (list_files shows them)")
        return self.ws[path]

    def _manifest(self) -> Manifest:
        try:
            return load_manifest(json.loads(self.ws[MANIFEST_FILE]))
        except Exception:  # a broken workspace manifest: describe the incumbent instead
            return self.setup.incumbent.manifest

    def _list_components(self, obj: Mapping[str, Any]) -> str:
        registry = self.setup.registry if self.setup.registry is not None else REGISTRY
        manifest = self._manifest()
        out: list[str] = []
        for impl in sorted(registry):
            cls = registry[impl]
            kind = str(getattr(cls, "KIND", ""))
            flag = "" if kind in self.setup.enabled else " (kind not enabled in this harness)"
            users = [c for c in manifest.components if c.impl == impl]
            out += [impl, f"  kind: {kind}{flag}", "  used by: " + (", ".join(c.id for c in users) or "-")]
            for key, (default, doc) in dict(getattr(cls, "PARAMS", {})).items():
                out.append(f"  param {key} = {json.dumps(default, ensure_ascii=False)}: {doc}")
            for c in users:
                out.append(f"  params set in {c.id}: {json.dumps(dict(c.params), ensure_ascii=False)[:1000]}")
            doc = (inspect.getdoc(cls) or "").strip()[:DOC_CHARS]
            out += ["  " + line for line in doc.splitlines()] + [""]
        return "\n".join(out).rstrip()

    def _list_traces(self, obj: Mapping[str, Any]) -> str:
        return "\n".join(task_row(v) for v in self.setup.views) or "(no worlds)"

    def _read_trace(self, obj: Mapping[str, Any]) -> str:
        task_id = str(obj.get("task_id") or "")
        view = next((v for v in self.setup.views if str(v.world.id) == task_id), None)
        if view is None:
            raise _ActionError(f"unknown task_id {task_id!r} (list_traces shows the ids)")
        lo, hi = obj.get("from_step"), obj.get("to_step")
        for name, value in (("from_step", lo), ("to_step", hi)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise _ActionError(f"{name} must be an integer")
        offset = 0
        if lo is not None or hi is not None:
            view, offset = _restricted(view, lo, hi)
        text = render(view, detail=bool(obj.get("detail")))
        if offset:
            text = _STEP.sub(lambda m: f"[step {int(m.group(1)) + offset}] AGENT:", text)
        return _cap(text, TRACE_CAP)

    # --- changes ----------------------------------------------------------------------------

    def _change_allowed(self) -> None:
        if self.n_changes >= MAX_EDITS:
            raise _ActionError(f"the limit of {MAX_EDITS} file changes is reached; finish with done")

    def _edit_file(self, obj: Mapping[str, Any]) -> str:
        path = self._path(obj)
        old, new = obj.get("old"), obj.get("new")
        if not isinstance(old, str) or not isinstance(new, str) or not old:
            raise _ActionError("edit_file needs a non-empty string 'old' and a string 'new'")
        if first_problem(new) is not None:
            raise _ActionError("'new' holds a lone surrogate (not valid text)")
        if path not in self.ws:
            raise _ActionError(f"no file {path!r} in the workspace (write_file creates new files)")
        count = self.ws[path].count(old)
        if count != 1:
            raise _ActionError(f"'old' occurs {count} times in {path}; it must occur exactly once")
        if old == new:
            raise _ActionError("'new' equals 'old'; nothing would change")
        self._change_allowed()
        self.ws[path] = self.ws[path].replace(old, new, 1)
        self.n_changes += 1
        return f"{path} edited ({self.n_changes} change(s) so far)"

    def _write_file(self, obj: Mapping[str, Any]) -> str:
        path = self._path(obj)
        content = obj.get("content")
        if not isinstance(content, str):
            raise _ActionError("write_file needs a string 'content'")
        if first_problem(content) is not None:
            raise _ActionError("'content' holds a lone surrogate (not valid text)")
        if path in self.ws:
            raise _ActionError(f"{path} exists; write_file creates new files only (use edit_file)")
        if not path.endswith(WRITE_EXTENSIONS):
            raise _ActionError(f"new files must end with {', '.join(WRITE_EXTENSIONS)}")
        self._change_allowed()
        self.ws[path] = content
        self.n_changes += 1
        return f"{path} written ({self.n_changes} change(s) so far); list it in a component's files"

    # --- done -------------------------------------------------------------------------------

    def _done(self, obj: Mapping[str, Any], turn: int) -> Proposal:
        edits = obj.get("edits") if obj.get("edits") is not None else []
        if not isinstance(edits, list) or not all(isinstance(e, Mapping) for e in edits):
            raise _ActionError("'edits' must be a list of objects")
        self._check_edits(edits)
        problems = validate_candidate(self.ws, self.setup.incumbent, self.setup.registry)
        if problems:
            raise _ActionError("the candidate is not valid: " + "; ".join(problems))
        out = []
        for e in edits:
            d = copy.deepcopy(dict(e))
            d["component"] = str(d["component"]).strip().lower()
            if _blank(d.get("mechanism")):
                d["mechanism"] = d["hypothesis"]
            out.append(d)
        said = obj.get("summary")
        summary = safe_text(said if isinstance(said, str) else "", SUMMARY_CHARS).strip()
        hypotheses = [str(e["hypothesis"]) for e in out]
        modes = list(dict.fromkeys(str(e["targets_mode"]) for e in out))
        self.log.append({"turn": turn, "action": "done", "ok": True, "message": f"{len(out)} edit(s)"})
        return Proposal(status="done", summary=summary, edits=out,
                        mechanism=(summary or "; ".join(hypotheses))[:200],
                        targets_mode="; ".join(modes)[:200], n_edits=self.n_changes, log=self.log)

    def _check_edits(self, edits: Sequence[Mapping[str, Any]]) -> None:
        """Rules 1–6 of ``done`` in order; raises the first failure."""
        if edits and self.n_changes == 0 and not self.repair:
            raise _ActionError("edits are declared but no file change succeeded; change the workspace first")
        if not edits and self.ws != self.base:
            raise _ActionError("files were changed but 'edits' is empty; declare every independent edit")
        if not check_edit_cardinality(len(edits), self.setup.b_t):
            raise _ActionError(f"{len(edits)} independent edits declared; {budget_sentence(self.setup.b_t)}")
        for i, e in enumerate(edits, start=1):
            lacking = [f for f in REQUIRED_FIELDS if _blank(e.get(f))]
            if "predicted_affected" not in lacking and not _id_list(e.get("predicted_affected")):
                lacking.append("predicted_affected (a list of world ids)")
            if lacking:
                raise _ActionError(f"edit {i} ({e.get('id')}) lacks required field(s): {', '.join(lacking)}")
            wrong = [f for f in (*REQUIRED_FIELDS, *OPTIONAL_FIELDS, "mechanism")
                     if f not in ("predicted_affected", "addresses") and e.get(f) is not None
                     and not isinstance(e.get(f), str)]
            if e.get("addresses") is not None and not (isinstance(e["addresses"], list) and all(
                    isinstance(a, str) for a in e["addresses"])):
                wrong.append("addresses (a list of strings)")
            if wrong:
                raise _ActionError(f"edit {i} ({e.get('id')}) has field(s) of the wrong type: "
                                   f"{', '.join(wrong)} (texts must be strings)")
            if not fits(dict(e), EDIT_CHARS):
                raise _ActionError(f"edit {i} cannot be stored: it must hold finite numbers and valid text "
                                   f"only and be at most {EDIT_CHARS} characters as JSON")
        enabled = {k.lower() for k in self.setup.enabled}
        for i, e in enumerate(edits, start=1):
            comp = str(e.get("component")).strip().lower()
            if comp not in enabled:
                raise _ActionError(f"edit {i} ({e.get('id')}) has component {comp!r}, not an enabled kind "
                                   f"({', '.join(self.setup.enabled)})")
        untried = set(self.setup.untried)
        if self.setup.reserved_slot and untried and not any(
                str(e.get("component")).strip().lower() in untried for e in edits):
            raise _ActionError("this variant holds a reserved exploration slot: at least one edit must "
                               f"be on an untried kind ({', '.join(self.setup.untried)})")


def propose(client: ModelClient, workspace: dict[str, str], setup: ProposerSetup, *, system: str, user: str,
            repair: bool = False, max_tokens: int = 16_384) -> Proposal:
    """Run the action protocol until ``done`` succeeds, the model aborts or the turns run out.

    Args:
        client: the proposer role's model client.
        workspace: path → text, changed in place (a repair run continues on the same workspace).
        setup: budget, kinds, views and the incumbent.
        system: system prompt (:func:`proposer_system`), sent with ``cache_points=["system"]``.
        user: first user message (:func:`proposer_user`).
        repair: repair mode (rule 1 of ``done`` does not apply).
        max_tokens: output limit per reply.

    Returns:
        The :class:`Proposal`; status ``max_turns`` after :data:`MAX_TURNS` replies without success.

    Raises:
        Exception: anything but a :class:`~rsi_common.errors.ModelError` raised by the client.
    """
    session = _Session(workspace, setup, repair)
    messages: list[dict[str, Any]] = [{"role": "user", "content": user}]
    for turn in range(1, MAX_TURNS + 1):
        request = ModelRequest(model=client.model, system=system, messages=list(messages),
                               max_tokens=max_tokens, cache_points=["system"])
        try:
            reply = client.complete(request).text
        except ModelError as exc:
            return session._final("error", f"model error: {type(exc).__name__}: {exc}")
        messages.append({"role": "assistant", "content": [{"type": "text", "text": reply or "(empty)"}]})
        result, final = session.step(reply, turn)
        if final is not None:
            return final
        messages.append({"role": "user", "content": result})
    return session._final("max_turns", f"max_turns: {MAX_TURNS} replies without a valid done; "
                                       f"last error: {session.last_error or '-'}")

"""Drafting one candidate (docs/algorithm/consolidation.md §3.9 steps 1–7): propose, review, re-tag,
load-check, build the payload.

:func:`draft_candidate` is what the ``draft_candidate`` Celery task (and the inline pipeline) calls for
one variant. It never raises: every failure ends as a gate on the returned :class:`Draft`.

1. The workspace is a copy of the incumbent (``workspace_of``: ``manifest.json`` + referenced files).
2. **Propose** (``rsi_worker.roles.proposer``). Status ≠ ``done`` or no successful file change → gate
   ``no_proposal`` (detail = the proposal's reason, or its status).
3. **Critic loop**, attempt = 0..``repair_rounds``: first the gate's deterministic screen
   (``rsi_worker.gate.screen``: manifest and locks, privileges, the pattern precheck with
   ``critic_patterns(worlds)``, untrusted text — docs/security/gate.md); a rejection there ends the
   attempt without a model call (review stage ``manifest``, ``privilege``, ``precheck`` or
   ``untrusted``). Then the model review (``rsi_worker.roles.critic.model_review`` with the recent
   user messages). An accepted verdict is turned into a reject when the variant holds a reserved slot,
   ``untried ≠ ∅`` and no *normalised* edit lands on an untried kind
   (:data:`RESERVED_REASON`). Accepted, or the last attempt → leave; else re-run the proposer in repair
   mode on the same workspace with ``{reasons, risk_notes, your_declared_edits}``; a repair run whose
   status ≠ ``done`` ends the loop (the last verdict stands and the workspace is restored to the
   reviewed candidate). A repair's declared edits replace the previous ones.
4. Not accepted → gate ``critic_reject`` (detail ``str(reasons)[:600]``).
5. Edits re-tagged with ``normalize_edits`` against the touch set (``declared_component`` kept); the
   touched addresses and the ``set`` addresses are stored.
6. **Smoke** = load check: build the harness from the workspace and instantiate every enabled
   component; an exception → gate ``smoke_fail`` (``"<Type>: <msg>"[:600]``).
7. Payload (docs/formats.md §5.3) with ``parent`` = the incumbent's version (provenance; the version ignores
it).

Any other exception → gate ``no_proposal`` with ``"<Type>: <msg>"[:600]``. Gated drafts still carry
the diff and the declared (or, when possible, re-tagged) edits so history rows can be written.
Role usage is counted per role: ``{"proposer": {calls, input_tokens, output_tokens}, "critic": …}``.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rsi_common.config import ConsolidationParams
from rsi_common.errors import ManifestError
from rsi_common.harness import (
    Harness,
    diff_trees,
    harness_from_workspace,
    materialize,
    normalize_edits,
    touched,
    workspace_of,
)
from rsi_common.harness.tagging import TouchSet
from rsi_common.kernel.components import instantiate
from rsi_common.kinds import K_ENABLED_PRODUCTION
from rsi_common.llm import ModelClient, ModelRequest, ModelResponse
from rsi_common.math import Exploration, PruneTarget
from rsi_common.world import TurnWorld
from rsi_worker.consolidate.screen_inputs import ScreenInputs
from rsi_worker.gate import GateRound, build_round, critic_patterns, screen
from rsi_worker.roles.analyst import View
from rsi_worker.roles.critic import Review, model_review, recent_user_messages
from rsi_worker.roles.proposer import Proposal, ProposerSetup, propose, proposer_system, proposer_user
from rsi_worker.roles.proposer_context import cacheable_prefix

__all__ = ["CONTEXT_SCHEMA", "DETAIL_CHARS", "RESERVED_REASON", "Draft", "DraftContext", "draft_candidate",
           "round_gate"]

CONTEXT_SCHEMA = "rsi-draft-context/1"
DETAIL_CHARS = 600
RESERVED_REASON = ("RESERVED EXPLORATION SLOT: no edit lands on an untried kind, judged by the touched "
                   "addresses")


@dataclass(frozen=True)
class DraftContext:
    """Everything the proposer and the critic need for one round (docs/algorithm/consolidation.md §3.3 step
    10–11, §3.9).

    Attributes:
        incumbent: the current harness (the workspace is copied from it; touch sets are against it).
        t: the round index (``state.t``); the variant brief calls it "round t".
        b_t: the edit budget. S_t: the incumbent's score on W (S★ = S_t). delta: the noise band δ.
        params: the consolidation parameters (m, k, repair_rounds, β, w_*, guards).
        records: the edit history rows of earlier rounds (``state.records``).
        scoreboard: the attribution rows (``state.scoreboard``).
        analysis: this run's analyst report (or ``state.analysis`` when the report is empty).
        exploration: σ_t, 𝒰_t, m_draft. reserved: the variant indices holding a reserved slot.
        prune: the prune set 𝓑_t. enabled: the enabled kinds (𝒦 order).
        views: one view per evaluation world (the worst incumbent trial if failing, else the best).
        worlds: the loaded worlds (critic patterns, recent user messages).
        registry: component registry for validation and smoke (None = the kernel's; not serialised).
        gate: the round's :class:`GateRound` when the caller builds it once for every draft of the round
            (:func:`round_gate`, e.g. beside the proposer's calls); ``None`` = each draft builds it
            (not serialised).
    """

    incumbent: Harness
    t: int
    b_t: int
    S_t: float
    delta: float
    params: ConsolidationParams = field(default_factory=ConsolidationParams)
    records: Sequence[Mapping[str, Any]] = ()
    scoreboard: Sequence[Mapping[str, Any]] = ()
    analysis: Mapping[str, Any] = field(default_factory=dict)
    exploration: Exploration = field(default_factory=lambda: Exploration(0, (), 1))
    reserved: frozenset[int] = frozenset()
    prune: Sequence[PruneTarget] = ()
    enabled: Sequence[str] = K_ENABLED_PRODUCTION
    views: Sequence[View] = ()
    worlds: Sequence[TurnWorld] = ()
    registry: Mapping[str, type] | None = None
    gate: Callable[[], GateRound] | None = None
    screen: ScreenInputs = field(default_factory=ScreenInputs)
    """The agent's grant, forbidden terms, revoked versions and a refine's focus
    (:mod:`~rsi_worker.consolidate.screen_inputs`); stored only when not the default."""

    def to_json(self) -> dict[str, Any]:
        """JSON of the context (schema ``rsi-draft-context/1``); views refer to worlds by id.

        The worlds are stored whole, so the object can be large (up to the world pool's size).
        """
        return {
            "schema": CONTEXT_SCHEMA, "incumbent": self.incumbent.payload(), "t": self.t, "b_t": self.b_t,
            "S_t": self.S_t, "delta": self.delta, "params": self.params.model_dump(mode="json"),
            "records": copy.deepcopy([dict(r) for r in self.records]),
            "scoreboard": copy.deepcopy([dict(r) for r in self.scoreboard]),
            "analysis": copy.deepcopy(dict(self.analysis)), "exploration": self.exploration.to_json(),
            "reserved": sorted(self.reserved), "prune": [p.to_json() for p in self.prune],
            "enabled": list(self.enabled),
            "views": [{"world_id": v.world.id,
                       "row": copy.deepcopy(dict(v.row)) if v.row is not None else None,
                       "checks": copy.deepcopy([dict(c) for c in v.checks]), "mean": v.mean,
                       "verdicts": copy.deepcopy([dict(x) for x in v.verdicts])} for v in self.views],
            "worlds": [{"id": w.id, "data": copy.deepcopy(w.data), "signals": copy.deepcopy(w.signals),
                        "interaction_id": w.interaction_id, "seq": w.seq} for w in self.worlds],
            **({"screen": self.screen.to_json()} if self.screen != ScreenInputs() else {}),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any], registry: Mapping[str, type] | None = None) -> DraftContext:
        """Inverse of :meth:`to_json` (the incumbent is materialised, i.e. tamper-checked).

        Raises:
            ValueError: unknown schema, or a view names a world that is not stored.
            TamperError / ManifestError: the incumbent payload is invalid.
        """
        if d.get("schema", CONTEXT_SCHEMA) != CONTEXT_SCHEMA:
            raise ValueError(f"unknown draft context schema {d.get('schema')!r}")
        worlds = [TurnWorld(id=w["id"], data=dict(w["data"]), signals=dict(w.get("signals") or {}),
                            interaction_id=str(w.get("interaction_id") or ""), seq=int(w.get("seq") or 0))
                  for w in d.get("worlds") or []]
        by_id = {w.id: w for w in worlds}
        views = []
        for v in d.get("views") or []:
            if v["world_id"] not in by_id:
                raise ValueError(f"view of world {v['world_id']!r} but that world is not stored")
            views.append(View(by_id[v["world_id"]], v.get("row"), tuple(v.get("checks") or ()),
                              float(v.get("mean") or 0.0), tuple(v.get("verdicts") or ())))
        return cls(
            incumbent=materialize(d["incumbent"]), t=int(d["t"]), b_t=int(d["b_t"]), S_t=float(d["S_t"]),
            delta=float(d["delta"]), params=ConsolidationParams.model_validate(d.get("params") or {}),
            records=tuple(d.get("records") or ()), scoreboard=tuple(d.get("scoreboard") or ()),
            analysis=dict(d.get("analysis") or {}), exploration=Exploration.from_json(d["exploration"]),
            reserved=frozenset(int(i) for i in d.get("reserved") or ()),
            prune=tuple(PruneTarget.from_json(p) for p in d.get("prune") or ()),
            enabled=tuple(d.get("enabled") or K_ENABLED_PRODUCTION), views=tuple(views), worlds=tuple(worlds),
            registry=registry, screen=ScreenInputs.from_json(d.get("screen")),
        )


@dataclass
class Draft:
    """One drafted variant, as stored in ``rsi_runs.drafts``.

    ``gate`` is None for a live draft (then ``payload`` and ``version`` are set), else one of
    ``no_proposal``, ``critic_reject``, ``smoke_fail`` with ``detail`` (≤ 600 chars). ``edits`` are the
    normalised edits (``component`` re-tagged, ``declared_component`` kept) when the touch set could be
    computed, else the declared ones. ``touched`` lists ``{address, component_id, kind, op}``;
    ``set_addresses`` the ``set`` touches (the exercised guard's touched params).
    """

    variant: str
    edits: list[dict[str, Any]] = field(default_factory=list)
    gate: str | None = None
    detail: str = ""
    diff: str = ""
    touched: list[dict[str, Any]] = field(default_factory=list)
    set_addresses: list[str] = field(default_factory=list)
    mechanism: str = ""
    targets_mode: str = ""
    payload: dict[str, Any] | None = None
    version: str | None = None
    usage: dict[str, dict[str, int]] = field(default_factory=dict)
    summary: str = ""
    review: dict[str, Any] | None = None

    @property
    def live(self) -> bool:
        """The draft passed every gate (it is evaluated)."""
        return self.gate is None

    def to_json(self) -> dict[str, Any]:
        """All fields, JSON-safe."""
        return copy.deepcopy(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Draft:
        """Inverse of :meth:`to_json`; missing fields take their defaults."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: copy.deepcopy(v) for k, v in d.items() if k in names})


class _Metered:
    """A client wrapper counting calls and tokens of one role."""

    def __init__(self, inner: ModelClient) -> None:
        self.inner = inner
        self.provider = inner.provider
        self.model = inner.model
        self.calls = self.input_tokens = self.output_tokens = 0

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        response = self.inner.complete(request)
        self.input_tokens += response.usage.input_tokens
        self.output_tokens += response.usage.output_tokens
        return response

    def usage(self) -> dict[str, int]:
        return {"calls": self.calls, "input_tokens": self.input_tokens, "output_tokens": self.output_tokens}


def _clip(text: str) -> str:
    return text[:DETAIL_CHARS]


def _error(exc: BaseException) -> str:
    return _clip(f"{type(exc).__name__}: {exc}")


class _Drafter:
    """One draft: the steps of the module docstring, sharing the workspace and the clients."""

    def __init__(self, ctx: DraftContext, variant: str, index: int, proposer: _Metered,
                 critic: _Metered) -> None:
        self.ctx, self.variant, self.index = ctx, variant, index
        self.proposer, self.critic = proposer, critic
        self.base = workspace_of(ctx.incumbent)
        self.ws = dict(self.base)
        self.reserved_slot = index in ctx.reserved
        self.setup = ProposerSetup(ctx.incumbent, tuple(ctx.views), ctx.b_t, tuple(ctx.enabled),
                                   tuple(ctx.exploration.untried), self.reserved_slot, ctx.registry)
        self.system = proposer_system()

    def propose(self, repair: Mapping[str, Any] | None = None) -> Proposal:
        user = proposer_user(self.ctx, self.variant, self.index, repair)
        if self.ctx.screen.focus:  # a refine's direction, never a criterion (docs/runtime/refine.md)
            user = f"{self.ctx.screen.focus}\n\n{user}"
        return propose(self.proposer, self.ws, self.setup, system=self.system, user=user,
                       repair=repair is not None)

    def gate_round(self) -> GateRound:
        """The deterministic screen's view of this round (``ctx.gate``'s, else built for this draft)."""
        return self.ctx.gate() if self.ctx.gate is not None else round_gate(self.ctx)

    def reserved_check(self, edits: Sequence[Mapping[str, Any]]) -> Review | None:
        """The reserved-slot rule that turns an accepted verdict into a reject (step 3), or None."""
        untried = set(self.ctx.exploration.untried)
        if not (self.reserved_slot and untried):
            return None
        ts = touched(self.ctx.incumbent, self.ws)
        kinds = {str(e.get("component")) for e in normalize_edits(edits, ts)}
        return None if kinds & untried else Review("reject", [RESERVED_REASON], stage="reserved")

    def check(self, gate: GateRound, current: Proposal, users: Sequence[str]) -> Review:
        """One attempt of step 3: the screen, then the model, then the reserved-slot rule."""
        screened = screen(gate, self.ws)
        if screened is not None:
            return Review("reject", screened.reasons, stage=screened.stage)
        diff = diff_trees(self.base, self.ws)
        verdict = model_review(self.critic, diff, current.mechanism, current.targets_mode, current.edits,
                               user_messages=users)
        if verdict.accepted:
            verdict = self.reserved_check(current.edits) or verdict
        return verdict

    def critic_loop(self, proposal: Proposal) -> tuple[Review, Proposal]:
        """Step 3: screen, review, post-check and repair; returns the last verdict and proposal."""
        gate = self.gate_round()
        users = recent_user_messages(self.ctx.worlds)
        current = proposal
        rounds = self.ctx.params.repair_rounds
        verdict = Review("reject", ["not reviewed"])
        for attempt in range(rounds + 1):
            verdict = self.check(gate, current, users)
            if verdict.accepted or attempt == rounds:
                break
            repair = {"reasons": verdict.reasons, "risk_notes": verdict.risk_notes,
                      "your_declared_edits": current.edits}
            snapshot = dict(self.ws)
            repaired = self.propose(repair)
            if repaired.status != "done":  # the reviewed candidate stands (and is what gets stored)
                self.ws.clear()
                self.ws.update(snapshot)
                break
            current = repaired
        return verdict, current

    def retag(self, draft: Draft, edits: Sequence[Mapping[str, Any]]) -> TouchSet | None:
        """Step 5 (also for gated drafts when possible): normalised edits and touched addresses."""
        draft.edits = [dict(e) for e in edits]
        try:
            ts = touched(self.ctx.incumbent, self.ws)
        except ManifestError:
            return None
        draft.edits = normalize_edits(edits, ts)
        draft.touched = [t._asdict() for t in ts.touches]
        draft.set_addresses = ts.set_addresses()
        return ts

    def run(self, draft: Draft) -> None:
        proposal = self.propose()
        draft.summary, draft.mechanism, draft.targets_mode = (proposal.summary, proposal.mechanism,
                                                              proposal.targets_mode)
        draft.edits = [dict(e) for e in proposal.edits]
        if proposal.status != "done" or proposal.n_edits == 0:
            draft.gate = "no_proposal"
            draft.detail = _clip(proposal.reason or (proposal.status if proposal.status != "done"
                                                     else "the proposer changed nothing"))
            return
        verdict, proposal = self.critic_loop(proposal)
        draft.review = verdict.to_json()
        draft.summary, draft.mechanism, draft.targets_mode = (proposal.summary, proposal.mechanism,
                                                              proposal.targets_mode)
        draft.diff = diff_trees(self.base, self.ws)
        self.retag(draft, proposal.edits)
        if not verdict.accepted:
            draft.gate, draft.detail = "critic_reject", _clip(str(verdict.reasons))
            return
        try:
            harness = harness_from_workspace(self.ws)
            instantiate(harness, self.ctx.registry)
        except Exception as exc:  # any load failure is the smoke gate
            draft.gate, draft.detail = "smoke_fail", _error(exc)
            return
        built = harness.with_parent(self.ctx.incumbent.version)
        draft.payload, draft.version = built.payload(), built.version


def round_gate(ctx: DraftContext) -> GateRound:
    """The deterministic screen's view of the round ``ctx`` (the same for every draft of it: read-only)."""
    return build_round(ctx.incumbent, ctx.worlds, views=ctx.views, analysis=ctx.analysis,
                       patterns=critic_patterns(ctx.worlds), ceilings=ctx.params.ceilings,
                       trusted=[cacheable_prefix()], max_instruction_chars=ctx.params.max_instruction_chars,
                       screen=ctx.screen)


def draft_candidate(ctx: DraftContext, variant: str, index: int, *, proposer: ModelClient,
                    critic: ModelClient) -> Draft:
    """Draft variant ``variant`` (index ``index``) of the round (docs/algorithm/consolidation.md §3.9; module
    docstring).

    Args:
        ctx: the round.
        variant: the label, ``"ABCDEFGH"[index]``.
        index: the variant index (reserved slots are indices).
        proposer / critic: the role clients (a fresh proposer conversation is used per run).

    Returns:
        The :class:`Draft`; live when ``gate`` is None. Never raises.
    """
    p, c = _Metered(proposer), _Metered(critic)
    draft = Draft(variant=variant)
    try:
        _Drafter(ctx, variant, index, p, c).run(draft)
    except Exception as exc:  # step 7: any other failure is no_proposal
        draft.gate, draft.detail = "no_proposal", _error(exc)
        draft.payload = draft.version = None
    draft.usage = {"proposer": p.usage(), "critic": c.usage()}
    return draft

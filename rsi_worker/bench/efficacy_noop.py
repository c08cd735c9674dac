"""The false-positive run of ``rsi bench efficacy``: consolidations whose candidates are all no-ops.

Each run is a fresh agent (docs/benchmarks/efficacy.md, "No-op candidates"):

1. **Learn** at noise 0 with the ordinary models: a request, the user's correction naming one
   trait, a consolidation. A run whose harness did not learn the trait as a prompt block is set up
   again with the next request (at most :data:`SETUP_TRIES` times) or counted in ``setup_failed``.
2. **Drop**, at the run's noise: new conversations under the learned harness until noise drops the
   trait from an answer (at most :data:`DROP_TRIES`; else counted in ``no_drop``).
3. **Repeat** the same correction on that answer and consolidate with :class:`NoopProposer` as
   every variant's proposer (no reserved exploration slot, so both candidates are its drafts): the
   incumbent already satisfies the correction except for noise, and both candidates change nothing
   (variant A appends an exact copy of the learned block; variant B puts a whitespace-and-case
   variant of it before the original).

The adoption rate is adoptions over the runs that reached step 3.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rsi_common.llm import ModelClient, ModelRequest, ModelResponse, Usage
from rsi_common.llm.sim.core import message_text
from rsi_common.llm.sim.traits import TRAITS
from rsi_worker.bench.efficacy_platform import Platform, has_trait
from rsi_worker.bench.efficacy_pool import AgentSpec, Language, requests
from rsi_worker.consolidate import ModelFactory, default_models

__all__ = ["DROP_TRIES", "SETUP_TRIES", "NoopProposer", "duplicate_block", "merge", "noop_runs"]

SETUP_TRIES = 3
DROP_TRIES = 16
_VARIANT = re.compile(r"You draft variant ([A-H]) ")


def _block_text(block: Any) -> str:
    if isinstance(block, str):
        return block
    if isinstance(block, Mapping) and isinstance(block.get("text"), str):
        return str(block["text"])
    return ""


def duplicate_block(manifest_text: str, variant: str) -> str | None:
    """The manifest with its first prompt block copied (A: an exact copy appended; other variants:
    the copy with doubled spaces and upper case, placed first); ``None`` without a prompt block."""
    manifest = json.loads(manifest_text)
    for comp in manifest.get("components") or []:
        if comp.get("kind") != "prompt":
            continue
        blocks = comp.setdefault("params", {}).setdefault("extra_blocks", [])
        text = next((t for t in map(_block_text, blocks) if t.strip()), "")
        if not text:
            return None
        if variant == "A":
            blocks.append(text)
        else:
            blocks.insert(0, {"id": "again", "text": text.upper().replace(" ", "  ")})
        return json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
    return None


def _prompt_id(manifest_text: str) -> str:
    try:
        manifest = json.loads(manifest_text)
    except ValueError:
        return "prompt"
    return next((str(c.get("id")) for c in manifest.get("components") or [] if c.get("kind") == "prompt"),
                "prompt")


def _reply(action: Mapping[str, Any], request: ModelRequest) -> ModelResponse:
    text = json.dumps(action, ensure_ascii=False)
    chars = len(request.system) + sum(len(message_text(dict(m))) for m in request.messages)
    usage = Usage(input_tokens=math.ceil(chars / 4), output_tokens=math.ceil(len(text) / 4))
    return ModelResponse(content=[{"type": "text", "text": text}], usage=usage, stop_reason="end_turn",
                         model="noop-proposer")


class NoopProposer:
    """A proposer whose every variant reads the manifest, duplicates its learned block
    (:func:`duplicate_block`) and declares one prompt edit; it aborts on any error."""

    provider, model = "bench", "noop-proposer"

    def complete(self, request: ModelRequest) -> ModelResponse:
        msgs = request.messages
        found = _VARIANT.search(message_text(dict(msgs[0]))) if msgs else None
        variant = found.group(1) if found else "A"
        done = sum(1 for m in msgs if m.get("role") == "assistant")
        last = message_text(dict(msgs[-1])) if msgs else ""
        if done == 0:
            return _reply({"action": "read_file", "path": "manifest.json"}, request)
        if done == 1 and last.startswith("[read_file] ok\n"):
            current = last.split("\n", 1)[1]
            new = duplicate_block(current, variant)
            if new is not None:
                action = {"action": "edit_file", "path": "manifest.json", "old": current, "new": new}
                return _reply(action, request)
        if done == 2 and last.startswith("[edit_file] ok"):
            prompt = _prompt_id(message_text(dict(msgs[2])).split("\n", 1)[-1])
            edit = {"id": "E1", "component": "prompt", "targets_mode": "missing-trait",
                    "predicted_affected": [],
                    "hypothesis": "Repeating the instruction makes the model follow it more reliably.",
                    "retroactive_check": "corrective: the failing world gets the asked form; preservative: "
                                         "passing worlds keep their answers",
                    "addresses": [f"{prompt}.params.extra_blocks"]}
            return _reply({"action": "done", "summary": "repeat the instruction", "edits": [edit]}, request)
        return _reply({"action": "abort"}, request)


def _noop_models(base: ModelFactory) -> ModelFactory:
    proposer = NoopProposer()

    def build(provider: str, model: str, role: str) -> ModelClient:
        return proposer if role == "proposer" else base(provider, model, role)

    return build


def _spec(i: int, seed: int) -> tuple[AgentSpec, list[str]]:
    rng = random.Random(f"rsi-bench-efficacy-noop/{seed}/{i}")
    trait = TRAITS[i % len(TRAITS)]
    language: Language = "ko" if trait == "korean" else "en"
    texts = requests(rng, language, SETUP_TRIES + DROP_TRIES)
    spec = AgentSpec(id=f"noop{i:04d}-{trait}", kind="repeat", language=language, first=(trait,), second=(),
                     live=tuple(texts[:SETUP_TRIES]), heldout=(), offset=rng.randrange(60))
    return spec, texts[SETUP_TRIES:]


def _learn(p: Platform, spec: AgentSpec) -> str | None:
    """Step 1; the correction the harness learned, or ``None``."""
    trait = spec.first[0]
    for n, request in enumerate(spec.live):
        conv = f"learn{n}"
        answer = p.say(spec.id, conv, request).answer
        if has_trait(request, answer, trait):
            continue
        correction = spec.correction((trait,), n)
        p.consolidate(spec.id, p.say(spec.id, conv, correction))
        version = p.version(spec.id)
        if version is not None and duplicate_block(_manifest(p, spec.id, version), "A") is not None:
            return correction
    return None


def _manifest(p: Platform, agent: str, version: str) -> str:
    return json.dumps(p.harness(agent, version).manifest.to_json())


def noop_runs(home: Path, indices: Sequence[int], noise: float, seed: int) -> dict[str, Any]:
    """The no-op consolidations ``indices`` (module docstring) on one platform in ``home``; each run
    depends on its index and ``seed`` only, so any split of the indices gives the same counts.

    Returns:
        ``{runs, adoptions, noise, setup_failed, no_drop, statuses, outcomes}`` (:func:`merge` sums them).
    """
    p = Platform(home, 0.0, seed)
    learning = p.settings
    noisy = learning.model_copy(update={
        "sim": learning.sim.model_copy(update={"noise": noise}),
        "consolidation": learning.consolidation.model_copy(update={"m_draft": 0}),
    })
    noop_models = _noop_models(default_models(noisy))
    out: dict[str, Any] = {"runs": 0, "adoptions": 0, "noise": noise, "setup_failed": 0, "no_drop": 0,
                           "statuses": {}, "outcomes": {}}
    try:
        for i in indices:
            spec, fresh = _spec(i, seed)
            p.configure(learning)
            correction = _learn(p, spec)
            if correction is None:
                out["setup_failed"] += 1
                continue
            p.configure(noisy, noop_models)
            result = _repeat(p, spec, fresh, correction)
            if result is None:
                out["no_drop"] += 1
                continue
            out["runs"] += 1
            out["adoptions"] += int(result["status"] == "adopted")
            out["statuses"][result["status"]] = out["statuses"].get(result["status"], 0) + 1
            for c in result.get("candidates", []):
                key = str(c.get("outcome"))
                out["outcomes"][key] = out["outcomes"].get(key, 0) + 1
    finally:
        p.close()
    return out


def merge(parts: Sequence[Mapping[str, Any]], noise: float) -> dict[str, Any]:
    """The counts of several :func:`noop_runs` parts, and ``adoption_rate`` (``None`` without a run)."""
    out: dict[str, Any] = {"runs": 0, "adoptions": 0, "noise": noise, "setup_failed": 0, "no_drop": 0,
                           "statuses": {}, "outcomes": {}}
    for part in parts:
        for key in ("runs", "adoptions", "setup_failed", "no_drop"):
            out[key] += int(part[key])
        for key in ("statuses", "outcomes"):
            for name, count in part[key].items():
                out[key][name] = out[key].get(name, 0) + int(count)
    out["adoption_rate"] = round(out["adoptions"] / out["runs"], 4) if out["runs"] else None
    return out


def _repeat(p: Platform, spec: AgentSpec, fresh: list[str], correction: str) -> dict[str, Any] | None:
    """Steps 2 and 3; the no-op round's ``{status, candidates}`` or ``None`` when noise never dropped
    the trait."""
    trait = spec.first[0]
    for n, request in enumerate(fresh):
        conv = f"drop{n}"
        answer = p.say(spec.id, conv, request).answer
        if has_trait(request, answer, trait):
            continue
        results = p.consolidate(spec.id, p.say(spec.id, conv, correction))
        if not results:
            return None
        first = results[0]
        return {"status": first.status, "candidates": list(first.round.get("candidates") or [])}
    return None

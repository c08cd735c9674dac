"""Operations on a stored evolve run (docs/algorithm/evolve.md#operations): export, readjudicate,
reevaluate, stop, promote."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rsi_common.boundary import check_id
from rsi_common.coord import Coordinator
from rsi_common.db import Adoption, AgentRow, ensure_agent, final_write, get_agent, start_run
from rsi_common.dispatch import Dispatcher
from rsi_common.errors import AgentConflict, InvalidInput
from rsi_common.handoff import enqueue_lease
from rsi_common.harness import materialize
from rsi_worker.consolidate.context import load_harness
from rsi_worker.consolidate.evaluate import StopContext, assemble
from rsi_worker.consolidate.opening import MAX_KIND_CHARS
from rsi_worker.evolve.engine import EvolveEnv, _Run, with_heldout
from rsi_worker.evolve.judgement import apply_judgement, check_overrides, plain, readjudicate
from rsi_worker.evolve.store import Store
from rsi_worker.gate.imported import import_reasons

__all__ = [
    "PROMOTE_PREFIX",
    "export_run",
    "promote",
    "readjudicate_round",
    "reevaluate_round",
    "request_stop",
]

PROMOTE_PREFIX = "promote:"


def _write(dir_fd: int, name: str, text: str) -> None:
    """Write ``name`` in the directory ``dir_fd`` through a fresh temporary file renamed over the name.

    The temporary file is created with ``O_EXCL | O_NOFOLLOW`` (a symlink planted under any name is never
    written through) and the rename replaces whatever entry has the name — a planted symlink is replaced,
    its target untouched; a planted directory fails the export. Both are relative to ``dir_fd``, so a
    directory swapped for a symlink meanwhile does not move the writes.
    """
    tmp = f".{name}.{os.getpid()}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as f:
            # a lone surrogate (a model's answer may hold one) only occurs inside a JSON string, where its
            # backslash form is the JSON escape of the same value: the file stays valid UTF-8 and JSON
            f.write(text.encode("utf-8", "backslashreplace"))
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def export_run(store: Store, name: str, out: Path) -> list[Path]:
    """Write the files of docs/algorithm/evolve.md#files under ``out``: ``history.jsonl``, ``frontier.json``,
    ``calibration.json``, ``directives.json``, ``decisions.json`` and ``trials.jsonl`` (raw trials).

    ``out`` is created when missing and may be reached through a symlink (the operator's path); other files
    in it are left alone; only the seven names are written, each replaced whole (:func:`_write`: a symlink
    planted inside is never followed).

    Raises:
        InvalidInput: unknown run, a run without a baseline yet, ``out`` not a writable directory (a file
            in its place), or a file that cannot be written (a directory planted under its name).
    """
    _, config, status, _, state = store.run(name)
    if state is None:
        raise InvalidInput(f"evolve run {name!r} has no baseline yet; nothing to export")
    rounds = [r for r in store.rounds(name) if r["t"] >= 0]
    inc = state.get("incumbent")
    files = {
        "history.jsonl": "".join(
            json.dumps(r, ensure_ascii=False) + "\n"
            for r in [*state.get("baseline", []), *state.get("records", [])]
        ),
        "frontier.json": json.dumps(
            {
                "name": name,
                "status": status,
                "incumbent_version": inc.get("version") if inc else "h0",
                "trajectory": state.get("trajectory", []),
                "S_star": state.get("S_star"),
                "S_t": state.get("S_t"),
                "accepted": state.get("accepted", []),
                "heldout": state.get("heldout", []),
                "incumbent": inc,
            },
            indent=2,
            ensure_ascii=False,
        ),
        "calibration.json": json.dumps(
            {
                **(state.get("calibration") or {}),
                "delta_used": state.get("delta"),
                "source": state.get("delta_source"),
            },
            indent=2,
        ),
        "directives.json": json.dumps(
            [{"t": r["t"], **(r["directives"] or {}), "analysis": r["analysis"]} for r in rounds],
            indent=2,
            ensure_ascii=False,
        ),
        "decisions.json": json.dumps(
            [r["decision"] for r in rounds if r["decision"] is not None], indent=2, ensure_ascii=False
        ),
        "trials.jsonl": "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in store.trials(name)),
        "config.json": json.dumps(config.to_json(), indent=2),
    }
    try:  # every text is made before the first file is written
        out.mkdir(parents=True, exist_ok=True)
        dir_fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise InvalidInput(f"export: {str(out)[:200]!r} is not a directory this user can write "
                           f"({type(exc).__name__})") from None
    try:
        for fname, text in files.items():
            _write(dir_fd, fname, text)
    except OSError as exc:
        where = str(out)[:200]
        raise InvalidInput(f"export: cannot write {fname} in {where!r} ({type(exc).__name__})") from None
    finally:
        os.close(dir_fd)
    return [out / fname for fname in files]


def _judged_round(store: Store, name: str, t: int) -> dict[str, Any]:
    rounds = store.rounds(name)
    later = [r["t"] for r in rounds if r["t"] > t and r["decision"] is not None]
    if later:
        raise InvalidInput(
            f"round {t}: later rounds exist ({', '.join(map(str, later))}); only the last "
            "judged round can be re-judged"
        )
    rnd = next((r for r in rounds if r["t"] == t), None)
    if t < 0 or rnd is None or rnd["decision"] is None or not rnd["before"]:
        raise InvalidInput(f"round {t}: not a judged round of {name!r}")
    return rnd


def readjudicate_round(
    env: EvolveEnv,
    name: str,
    t: int,
    *,
    delta: float | None = None,
    weights: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Re-apply Algorithm 2 to round ``t``'s stored inputs (docs/algorithm/evolve.md#readjudicate) and make
    the result the run's state (the original judgement is kept under ``original``).

    Raises:
        InvalidInput: later rounds exist, or ``t`` is not a judged round.
        NeedsReevaluation: a stored early stop no longer holds under the new δ.
    """
    store = env.store
    rnd = _judged_round(store, name, t)
    _, config, _, _, _ = store.run(name)
    payloads = {v: d.get("payload") for v, d in (rnd["drafts"] or {}).items()}
    old = rnd["decision"]
    winner, cands, decisions, new = readjudicate(
        config, old, rnd["before"], payloads, delta=delta, weights=weights
    )
    new["original"] = old.get("original", {k: v for k, v in old.items() if k != "original"})
    new["overrides"] = {"delta": delta, "weights": dict(weights or {})}
    state = apply_judgement(rnd["before"], t, cands, decisions, winner)
    state["infra_streak"] = rnd["before"].get("infra_streak", 0)
    run = _Run(env, name)
    state = with_heldout(state, run.pending_heldout(rnd["before"]))  # owed by round t − 1
    if winner is not None and winner.payload is not None:
        held = run._heldout(t, materialize(winner.payload), (t, winner.variant))
        if held is not None:
            state["heldout"] = [
                *state.get("heldout", []),
                {"t": t, "version": str(winner.payload["version"]), "S": held},
            ]
    store.set_run(name, state=plain(state), round_t=t, round_fields={"decision": new})
    return new


def reevaluate_round(
    env: EvolveEnv,
    name: str,
    t: int,
    *,
    delta: float | None = None,
    weights: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Measure round ``t``'s early-stopped candidates in full, then :func:`readjudicate_round`.

    Raises:
        InvalidInput: a bad δ or weight (before any row is touched), later rounds exist, or ``t`` is not a
            judged round.
    """
    check_overrides(delta, weights)
    store = env.store
    rnd = _judged_round(store, name, t)
    record = dict(rnd["decision"])
    stopped = [c["variant"] for c in record["candidates"] if c.get("early_stop")]
    if stopped:
        run = _Run(env, name)
        p, mode = run.config.params, run.config.mode_config
        before = rnd["before"]
        stop = StopContext(
            float(before["S_star"]),
            float(before["delta"]),
            float(before["S_t"]),
            p.invalid_missing_frac,
            mode.hopeless_rule,
        )
        store.delete_cancelled(name, t, stopped)
        cands = []
        for c in record["candidates"]:
            if c["variant"] in stopped:
                draft = rnd["drafts"][c["variant"]]
                rows = run.evaluate(t, c["variant"], materialize(draft["payload"]), run.evolve_ids, p.k)
                assert rows is not None
                asm = assemble(list(run.evolve_ids), run.checks, rows, p.k, f"r{t}{c['variant']}", stop)
                if asm.ev is None:
                    c = {**c, "ev": None, "early_stop": None, "gate_failure": asm.gate, "detail": asm.detail}
                else:
                    extra = {**asm.ev.extra, "touched_params": list(draft.get("set_addresses") or [])}
                    ev = dataclasses.replace(asm.ev, extra=extra)
                    c = {**c, "ev": plain(ev.to_json()), "early_stop": None}
            cands.append(c)
        record["candidates"] = cands
        store.set_round(name, t, decision=plain(record))
    return readjudicate_round(env, name, t, delta=delta, weights=weights)


def request_stop(store: Store, name: str) -> None:
    """Ask a run to end after its current round (``rsi evolve stop``)."""
    store.run(name)
    store.set_run(name, stop_requested=True)


def promote(
    env: EvolveEnv, coord: Coordinator, name: str, agent: str, *, dispatcher: Dispatcher | None = None
) -> dict[str, Any]:
    """Make the run's frontier harness ``agent``'s current version through the fenced final write of an
    adoption (the agent's lease and fence, a run row of kind ``promote:<name>``, ``final_write`` with the
    lineage parent = the agent's current version), screened first by the gate's import checks against
    the agent's current harness.

    Raises:
        InvalidInput: ``agent`` is no id, unknown run, the frontier is H0 or a payload that does not
            materialize (tampered, an escaping path), the gate refuses the harness, or the write was
            superseded.
        AgentConflict: the agent is busy (a run holds its lease) or frozen; nothing is written.
    """
    check_id(agent, "--agent")  # before the lease: no Redis key or query is made for a hostile id
    store = env.store
    _, _, _, _, state = store.run(name)
    payload = (state or {}).get("incumbent")
    if not payload:
        raise InvalidInput(f"evolve run {name!r}: the frontier is H0; nothing to promote")
    harness = materialize(payload)
    with env.sessions() as s:  # before the lease: the fenced write would keep a frozen agent's version
        known = s.get(AgentRow, agent)
        if known is not None and known.frozen:
            raise AgentConflict("agent-frozen", f"agent {agent!r} is frozen: unfreeze it first")
    lease = coord.try_begin(agent, f"{PROMOTE_PREFIX}{name}"[:200])
    if lease is None:
        raise AgentConflict("agent-busy",
                            f"agent {agent!r} is busy (a consolidation holds its lease); promote again later")
    rerun = None
    try:
        with env.sessions.begin() as s:
            ensure_agent(s, agent)
            current = get_agent(s, agent).current_version
            reasons = import_reasons(
                load_harness(s, agent, current), harness, env.settings.consolidation.ceilings
            )
            if reasons:
                raise InvalidInput("refused by the gate: " + "; ".join(reasons))
            run = start_run(
                s, agent, fence=lease.fence, io_id=None, kind=f"{PROMOTE_PREFIX}{name}"[:MAX_KIND_CHARS]
            )
            summary = {
                "source": "evolve",
                "evolve": name,
                "reason": f"promoted from evolve run {name}",
                "S_star": (state or {}).get("S_star"),
            }
            done = final_write(
                s,
                run.id,
                status="adopted",
                reason=f"promoted from evolve run {name}",
                result={"status": "adopted", "evolve": name, "version": harness.version},
                # the checked harness's own payload, never the stored one: materialize keeps only the
                # files the manifest references, so extra entries (any path, any text) never reach the agent
                adoption=Adoption(harness.version, harness.payload(), summary=summary),
            )
            if done.outcome != "adopted":
                raise InvalidInput(f"promotion not applied ({done.outcome}): the agent moved meanwhile")
            run_id = run.id
    finally:
        rerun = coord.finish(lease)
        if rerun is not None and dispatcher is not None:
            enqueue_lease(coord, dispatcher, rerun)
    return {"agent": agent, "version": harness.version, "parent": current, "run_id": run_id, "evolve": name}

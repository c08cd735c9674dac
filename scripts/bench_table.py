#!/usr/bin/env python3
"""Print issue 15's benchmark table (markdown) from the JSON reports of the commands.

    rsi bench consolidate --json > consolidate.json
    rsi bench ingest --turns 2000 --agents 100 --threads 1,8 --backend both --json > ingest.json
    rsi bench scale --json > scale.json
    RSI_SIM_LATENCY_MS=200 rsi loadtest --embedded --rate 20 --duration 20 --agents 10 --json > loadtest.json
    rsi bench efficacy --json > efficacy.json
    scripts/bench_table.py consolidate.json ingest.json scale.json loadtest.json efficacy.json

Each figure is printed beside its target and whether it is met; a report not given is left out.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any


def _load(path: str) -> Any:
    return json.loads(Path(path).read_text()) if path and Path(path).exists() else None


def _short(text: str) -> str:
    """Numbers with more than three significant digits after the point, shortened (129.981 → 130.0,
    0.1168 → 0.117); integers and commands are left as they are."""

    def one(m: re.Match[str]) -> str:
        x = float(m.group(0))
        return f"{x:.1f}" if abs(x) >= 10 else f"{x:.3g}" if abs(x) < 1 else f"{x:.2f}"

    return text if text.startswith("`") else re.sub(r"\d+\.\d{3,}", one, text)


def _met(ok: bool) -> str:
    return "**met**" if ok else "missed"


def _load_note(m: dict[str, Any] | None) -> str:
    return "" if not m else f" (load {m.get('loadavg_1m')})"


def consolidate_rows(d: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    cmd = "`rsi bench consolidate --json`"
    dist, single, cp = d["distributed"], d["single_process"], d["distributed"]["critical_path"]
    load = _load_note(d.get("machine_before"))
    rows = [
        (
            "correction → adoption wall / critical path (sim 200 ms, W = 8, k = 2, m = 2, 2 × 8 threads)",
            cmd,
            f"{dist['wall_over_cp']}: wall {dist['wall_s']} s, CP {cp['ms'] / 1000:.2f} s "
            f"({cp['calls']} calls); capacity bound {cp['capacity_ms'] / 1000:.2f} s "
            f"({cp['capacity_over_cp']} × CP), wall / capacity "
            f"{dist['wall_over_capacity']}{load}",
            "≤ 1.15",
            _met((dist["wall_over_cp"] or 9) <= 1.15),
        )
    ]
    for key, name in (
        ("early_stop", "hopeless scenario (6 accepted + 2 corrected)"),
        ("early_stop_standard", "standard mix (4 + 4)"),
    ):
        es = d[key]
        rows.append(
            (
                f"early stop, {name}: hopeless candidate's calls saved / ceiling",
                "(same run)",
                f"{es['hopeless_saving_pct']} % of {es['max_saving_pct']} % = "
                f"{es['hopeless_of_ceiling_pct']} % "
                f"(B's calls {es['hopeless_calls_on']}/{es['hopeless_calls_off']}; same decision: "
                f"{es['same_decision']})",
                "≥ 90 % of the ceiling",
                _met((es["hopeless_of_ceiling_pct"] or 0) >= 90),
            )
        )
    th = d.get("threads") or {}
    rows.append(
        (
            "distributed / single-process wall, equal total threads",
            "(same run)",
            f"{d['distributed_over_single']} ({th.get('distributed')} vs {th.get('single_process')} threads; "
            f"single {single['wall_s']} s)",
            "reported with equal threads",
            _met(th.get("distributed") == th.get("single_process")),
        )
    )
    ns = d["no_signal"]
    new, fol = ns["new"], ns["follow_up"]
    rows.append(
        (
            "no-signal consolidation task, new conversation, median",
            "(same run)",
            f"{new['median_ms']} ms (p99 {new['p99_ms']}; "
            f"{new.get('sql_statements_per_run')} SQL statements)",
            "< 3 ms",
            _met(new["median_ms"] < 3.0),
        )
    )
    rows.append(
        (
            "no-signal consolidation task, follow-up turn (with the reader's call, sim latency 0), median",
            "(same run)",
            f"{fol['median_ms']} ms (p99 {fol['p99_ms']}; {fol['signal_calls_per_run']} reader "
            f"calls, {fol.get('sql_statements_per_run')} SQL statements per run)",
            "reported separately",
            _met(True),
        )
    )
    hop = d.get("celery_hop")
    if hop and "error" not in hop:
        rows.append(
            (
                "Celery cost per hop (no-op task round trip through the broker, a worker thread and "
                "the result backend)",
                "(same run)",
                f"median {hop['median_ms']} ms, p90 {hop['p90_ms']} ms ({hop['n']} round trips)",
                "reported (bounds wall / CP)",
                _met(True),
            )
        )
    return rows


def efficacy_rows(d: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    keys = [k for k in d if re.fullmatch(r"\d+(\.\d+)?", k)]
    cfg = d["config"]
    levels = "; ".join(
        f"noise {k}: held-out {100 * (d[k]['heldout_h0'] or 0):.1f} → "
        f"{100 * (d[k]['heldout_final'] or 0):.1f} %, "
        f"false {d[k]['false_adoptions']}, harmful {d[k]['harmful_adoptions']}"
        for k in keys
    )
    gains = {t: ok for t, ok in d["targets"].items() if "noop" not in t}
    rows = [
        (
            f"learning efficacy ({cfg['agents']} simulated agents per noise level, seed {cfg['seed']})",
            "`rsi bench efficacy --json`",
            f"{levels} ({d['seconds']} s)",
            "held-out gain per level, 0 false and 0 harmful adoptions",
            _met(all(gains.values())),
        )
    ]
    if "noop_adoption_rate" in d:
        rate = d["noop_adoption_rate"] or 0.0
        rows.append(
            (
                "no-op candidates adopted",
                "(same run)",
                f"{100 * rate:.1f} % of {d['noop_runs']} runs",
                "≤ 1 %",
                _met(rate <= 0.01),
            )
        )
    return rows


def ingest_rows(reports: list[dict[str, Any]]) -> list[tuple[str, str, str, str, str]]:
    cmd = "`rsi bench ingest --turns 2000 --agents 100 --threads 1,8 --backend both --json`"
    rows = []
    by = {r["backend"]: r for r in reports}
    stm = "; ".join(f"{b} {r['runs'][0]['sql_statements_per_call']}" for b, r in by.items())
    trips = [f"{b} {r['runs'][0]['sql_round_trips_per_call']}" for b, r in by.items()
             if "sql_round_trips_per_call" in r["runs"][0]]
    if trips:  # BEGIN/COMMIT and the pool's ping are counted here, on both backends alike
        stm += " (round trips with BEGIN, COMMIT and the pool's ping: " + "; ".join(trips) + ")"
    rows.append(
        (
            "`record_turn`, SQL statements per call",
            cmd,
            stm,
            "≤ 4",
            _met(all(r["runs"][0]["sql_statements_per_call"] <= 4 for r in reports)),
        )
    )
    if "sqlite" in by:
        one = by["sqlite"]["runs"][0]
        rows.append(
            (
                "`record_turn`, SQLite, 1 thread",
                "(same run)",
                f"{one['turns_per_s']} turns/s, p99 {one['p99_ms']} ms",
                "≥ 600 turns/s, p99 < 5 ms",
                _met(one["turns_per_s"] >= 600 and one["p99_ms"] < 5),
            )
        )
    if "postgresql" in by:
        pg = by["postgresql"]
        runs = {r["threads"]: r for r in pg["runs"]}
        top = max(runs)
        rows.append(
            (
                f"`record_turn`, PostgreSQL, {top} threads",
                "(same run)",
                f"{runs[top]['turns_per_s']} turns/s = {pg['scaling'].get(str(top))} × its 1-thread "
                f"{runs[1]['turns_per_s']} turns/s (p50 {runs[top]['p50_ms']} ms)",
                "≥ 2 × 1 thread",
                _met((pg["scaling"].get(str(top)) or 0) >= 2),
            )
        )
    return rows


def scale_rows(d: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    counts = d["counts"]
    text = "; ".join(
        f"{c['workers']}: {c['runs_per_s']} runs/s (× {c['speedup']}, efficiency {c['efficiency']}, "
        f"peak RSS {max(c['peak_rss_mib'], default=0)} MiB/worker, load {c['machine_before']['loadavg_1m']})"
        for c in counts
    )
    cfg = d["config"]
    return [
        (
            f"cluster throughput 1 → 4 worker processes ({cfg['agents']} agents at once, "
            f"{cfg['concurrency']} threads each, sim {cfg['latency_ms']:g} ms)",
            "`rsi bench scale --json`",
            text,
            "≥ 0.9 × linear",
            _met((d["efficiency_at_max"] or 0) >= 0.9),
        )
    ]


def loadtest_rows(d: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    rt = d["record_turn"]
    cfg = d["config"]
    return [
        (
            f"`rsi loadtest --embedded` at {cfg['rate']:g} turns/s: `record_turn` p99",
            f"`RSI_SIM_LATENCY_MS=200 rsi loadtest --embedded --rate {cfg['rate']:g} --duration "
            f"{cfg['duration_s']:g} --agents {cfg['agents']} --json`",
            f"{rt['p99_ms']} ms (p50 {rt['p50_ms']} ms; "
            f"{d['turns']['recorded']}/{d['turns']['offered']} stored, "
            f"{d['throughput_turns_per_s']} turns/s achieved)",
            "< 50 ms",
            _met(rt["p99_ms"] < 50),
        )
    ]


def main(argv: list[str]) -> int:
    consolidate, ingest, scale, loadtest, efficacy = (_load(a) for a in (argv + [""] * 5)[:5])
    rows: list[tuple[str, str, str, str, str]] = []
    if consolidate:
        rows += consolidate_rows(consolidate)
    if scale:
        rows += scale_rows(scale)
    if ingest:
        rows += ingest_rows(ingest)
    if loadtest:
        rows += loadtest_rows(loadtest)
    if efficacy:
        rows += efficacy_rows(efficacy)
    print("| figure | command | result | target | |")
    print("|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(_short(cell) for cell in row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

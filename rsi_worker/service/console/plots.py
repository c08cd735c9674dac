"""Server-side plots as inline SVG (no JavaScript, no chart library): the agent page's score chart
(incumbent S, each candidate's S, δ, adoptions over rounds) and token chart (tokens per run), and the
evolve run page's chart (S on the evolve and held-out splits, candidates, δ, adoptions over rounds).

Every data point is one SVG element with a class naming its series — ``pt-incumbent``,
``pt-candidate``, ``pt-delta``, ``adoption``, ``bar-tokens``, ``pt-evolve``, ``pt-heldout`` — and a
``<title>`` (the tooltip), so the page is readable as is and countable by tests. Sizes are in SVG user
units (CSS pixels).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

__all__ = ["evolve_chart", "score_chart", "token_chart"]

W, H = 720, 220
PAD_L, PAD_R, PAD_T, PAD_B = 44, 12, 14, 28
_OUTCOME_COLOR = {"ACCEPTED": "#1a7f37", "LOST": "#9a6700", "REJECTED": "#cf222e"}



def _candidates_and_delta(out: list[str], x: float, r: Mapping[str, Any], prefix: str) -> None:
    """Append one round's candidate points (coloured by outcome) and its δ mark at ``x``; ``prefix``
    starts each tooltip (e.g. ``round 2: ``)."""
    for c in r["candidates"]:
        if c.get("S") is None:
            continue
        color = _OUTCOME_COLOR.get(str(c.get("outcome")), "#6e7781")
        out.append(
            f'<circle cx="{x + 4:.1f}" cy="{_y(float(c["S"]), 1.0):.1f}" r="3" fill="{color}" '
            f'class="pt pt-candidate"><title>{escape(prefix)}{escape(str(c["variant"]))}: S {c["S"]} '
            f"({escape(str(c.get('outcome')))})</title></circle>"
        )
    if r.get("delta") is not None:
        y = _y(min(1.0, float(r["delta"])), 1.0)
        out.append(
            f'<rect x="{x - 2.5:.1f}" y="{y - 2.5:.1f}" width="5" height="5" class="pt pt-delta">'
            f"<title>{escape(prefix)}δ {r['delta']}</title></rect>"
        )

def _x(i: int, n: int) -> float:
    span = W - PAD_L - PAD_R
    return PAD_L + (span / 2 if n <= 1 else span * i / (n - 1))


def _y(v: float, top: float) -> float:
    span = H - PAD_T - PAD_B
    return PAD_T + span * (1 - (v / top if top > 0 else 0))


def _frame(title: str, top: float, ticks: Sequence[float], fmt: str, n: int, label: str) -> list[str]:
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" role="img" '
        f'aria-label="{escape(title)}" class="chart">',
        f"<title>{escape(title)}</title>",
        f'<rect x="{PAD_L}" y="{PAD_T}" width="{W - PAD_L - PAD_R}" height="{H - PAD_T - PAD_B}" '
        'class="plot-area"/>',
    ]
    for t in ticks:
        y = _y(t, top)
        out.append(
            f'<line x1="{PAD_L}" x2="{W - PAD_R}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
            f'<text x="{PAD_L - 6}" y="{y + 4:.1f}" class="tick" text-anchor="end">{t:{fmt}}</text>'
        )
    out.append(
        f'<text x="{(W + PAD_L) / 2:.0f}" y="{H - 6}" class="tick" text-anchor="middle">'
        f"{escape(label)} (n = {n})</text>"
    )
    return out


def score_chart(series: Sequence[dict[str, Any]]) -> str:
    """Scores over the runs that judged a round (``series`` from ``views.run_series``).

    One ``pt-incumbent`` circle per round (joined by a line), one ``pt-candidate`` circle per candidate
    (coloured by outcome), one ``pt-delta`` square per round (δ, in the same units as S) and one
    ``adoption`` line per adopting round.
    """
    rounds = [r for r in series if r.get("S") is not None]
    n = len(rounds)
    out = _frame(
        "Scores per round: incumbent S, candidate S, δ", 1.0, (0.0, 0.25, 0.5, 0.75, 1.0), ".2f", n, "rounds"
    )
    inc_path = []
    for i, r in enumerate(rounds):
        x = _x(i, n)
        if r["adopted"]:
            out.append(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{PAD_T}" y2="{H - PAD_B}" class="adoption">'
                f"<title>adopted in {escape(r['run_id'])}</title></line>"
            )
        inc_path.append(f"{x:.1f},{_y(float(r['S']), 1.0):.1f}")
    if len(inc_path) > 1:
        out.append(f'<polyline points="{" ".join(inc_path)}" class="line-incumbent"/>')
    for i, r in enumerate(rounds):
        x = _x(i, n)
        _candidates_and_delta(out, x, r, "")
        out.append(
            f'<circle cx="{x:.1f}" cy="{_y(float(r["S"]), 1.0):.1f}" r="3.5" class="pt pt-incumbent">'
            f"<title>{escape(r['run_id'])}: incumbent S {r['S']}</title></circle>"
        )
    out.append("</svg>")
    return "".join(out)


def token_chart(series: Sequence[dict[str, Any]]) -> str:
    """Tokens per run (every run, oldest first), one ``bar-tokens`` bar each; adopting runs darker."""
    n = len(series)
    top = max([r["tokens"] for r in series] + [1])
    ticks = (0.0, top / 2, float(top))
    out = _frame("Consolidation tokens per run", float(top), ticks, ",.0f", n, "runs")
    slot = (W - PAD_L - PAD_R) / max(n, 1)
    bar = max(1.0, min(slot * 0.7, 40.0))
    for i, r in enumerate(series):
        x = PAD_L + slot * i + (slot - bar) / 2
        y = _y(float(r["tokens"]), float(top))
        cls = "bar-tokens adopted" if r["adopted"] else "bar-tokens"
        out.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{H - PAD_B - y:.1f}" class="{cls}">'
            f"<title>{escape(r['run_id'])}: {r['tokens']:,} tokens ({escape(r['status'])})</title></rect>"
        )
    out.append("</svg>")
    return "".join(out)


def _series(out: list[str], points: Sequence[tuple[float, float, str]], cls: str, r: float) -> None:
    """A line through ``(x, S, tooltip)`` points (S in [0, 1]) and a ``pt-<cls>`` circle at each."""
    path = " ".join(f"{x:.1f},{_y(v, 1.0):.1f}" for x, v, _ in points)
    if len(points) > 1:
        out.append(f'<polyline points="{path}" class="line-{cls}"/>')
    for x, v, tip in points:
        out.append(
            f'<circle cx="{x:.1f}" cy="{_y(v, 1.0):.1f}" r="{r}" class="pt pt-{cls}">'
            f"<title>{escape(tip)}</title></circle>"
        )


def evolve_chart(view: dict[str, Any]) -> str:
    """An evolve run over its rounds (``view`` from ``rsi_worker.service.evolve_view.run_view``): x = the
    baseline then each judged round. One ``pt-evolve`` circle per point of the incumbent's S on the evolve
    split (the baseline and every round), one ``pt-heldout`` circle per point whose held-out S is measured,
    one ``pt-candidate`` circle per measured candidate, one ``pt-delta`` square per round (δ), one
    ``adoption`` line per adopting round."""
    rounds = view["rounds"]
    base = view["baseline"]
    n = len(rounds) + 1
    out = _frame(
        "Evolve run: S on the evolve and held-out splits, candidates, δ",
        1.0, (0.0, 0.25, 0.5, 0.75, 1.0), ".2f", n, "baseline + rounds",
    )
    evolve: list[tuple[float, float, str]] = []
    held: list[tuple[float, float, str]] = []
    if base["S"] is not None:
        evolve.append((_x(0, n), float(base["S"]), f"baseline (H0): S {base['S']}"))
    if base["S_heldout"] is not None:
        held.append((_x(0, n), float(base["S_heldout"]), f"baseline (H0): held-out S {base['S_heldout']}"))
    for i, r in enumerate(rounds, start=1):
        x = _x(i, n)
        if r["adopted"]:
            out.append(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{PAD_T}" y2="{H - PAD_B}" class="adoption">'
                f"<title>round {r['t']}: adopted {escape(str(r['winner']))}</title></line>"
            )
        _candidates_and_delta(out, x, r, f"round {r['t']}: ")
        if r.get("S_evolve") is not None:
            evolve.append((x, float(r["S_evolve"]), f"after round {r['t']}: S {r['S_evolve']}"))
        if r.get("S_heldout") is not None:
            held.append((x, float(r["S_heldout"]), f"after round {r['t']}: held-out S {r['S_heldout']}"))
    _series(out, held, "heldout", 5.5)  # a ring around the evolve point it may sit on
    _series(out, evolve, "evolve", 3.5)
    out.append("</svg>")
    return "".join(out)

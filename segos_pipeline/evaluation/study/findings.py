"""Plain-sentence findings of a study result: a difference counts only when its interval excludes zero."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..metrics import LEAKAGE_BUCKETS, format_ci
from .config import FULL, REFERENCE, cell_name


def _verdict(c: dict[str, Any]) -> str:
    if c["lo"] > 0:
        return "better"
    if c["hi"] < 0:
        return "worse"
    return "no clear difference"


def findings(result: dict[str, Any]) -> list[str]:
    """Plain sentences on where the graph or evolution helps and, above all, where it does not.

    A difference counts only when its bootstrap interval excludes zero; everything else is reported as
    no clear difference, never as a gain.
    """
    out: list[str] = []
    k = result["k"]
    by = {m["method"]: m for m in result["methods"]}
    level = int(result["bootstrap"]["level"] * 100)

    def line(method: str, what: str, sign: int = -1) -> None:
        """`what` is how `method` relates to ppr; sign −1 reports ppr − method (so + means PPR wins)."""
        m = by.get(method)
        if m is None or "vs_ppr" not in m:
            return
        parts = []
        verdicts = set()
        for key in ("hit", "recall", "comp", "mrr"):
            c = m["vs_ppr"][key]
            flipped = {"diff": -c["diff"], "lo": -c["hi"], "hi": -c["lo"]} if sign < 0 else c
            verdicts.add(_verdict(flipped))
            parts.append(f"{key} {format_ci(flipped)}")
        if verdicts == {"no clear difference"}:
            head = f"{what}: no clear difference at k={k} on any metric"
        elif verdicts <= {"better", "no clear difference"}:
            head = f"{what}: PPR is better on some metrics at k={k}" if sign < 0 else f"{what}: better"
        elif verdicts <= {"worse", "no clear difference"}:
            head = f"{what}: PPR is WORSE on some metrics at k={k}" if sign < 0 else f"{what}: WORSE"
        else:
            head = f"{what}: mixed"
        out.append(f"{head} ({level}% CI of the difference: {'; '.join(parts)}).")

    line("bm25", "Graph retrieval (ppr) vs flat BM25")
    line("lexical", "Graph propagation (ppr) vs lexical seeds alone")
    line("forward_ppr", "Reverse-aware (ppr) vs forward-only propagation")
    for m in result["methods"]:
        if m["kind"] == "version":
            c = m["vs_ppr"]["recall"]
            out.append(
                f"{m['method']} vs the cold start: recall@{k} {format_ci(c)} ({_verdict(c)}), "
                f"hit@{k} {format_ci(m['vs_ppr']['hit'])} ({_verdict(m['vs_ppr']['hit'])})."
            )

    for proto in ("deployment", "transfer"):
        cells = [
            m
            for m in result["protocols"][proto]["methods"]
            if m["kind"] == "factorial" and m["method"] != "factorial:static"
        ]
        if not cells:
            continue
        sim = " (evolution source includes SIMULATED traces)" if cells[0].get("simulated") else ""
        helped = [m["method"] for m in cells if _verdict(m["vs_ppr"]["recall"]) == "better"]
        hurt = [m["method"] for m in cells if _verdict(m["vs_ppr"]["recall"]) == "worse"]
        flat = [m["method"] for m in cells if _verdict(m["vs_ppr"]["recall"]) == "no clear difference"]
        msg = f"Evolution, {proto} protocol{sim}: recall@{k} vs the static graph is "
        bits = []
        if helped:
            bits.append(f"better for {', '.join(helped)}")
        if flat:
            bits.append(f"not clearly different for {', '.join(flat)}")
        if hurt:
            bits.append(f"WORSE for {', '.join(hurt)}")
        out.append(msg + "; ".join(bits) + ".")
    dep = {m["method"]: m for m in result["protocols"]["deployment"]["methods"]}
    tr = {m["method"]: m for m in result["protocols"]["transfer"]["methods"]}
    full = f"factorial:{cell_name(FULL)}"
    if full in dep and full in tr:
        gap = dep[full]["recall"] - tr[full]["recall"]
        gain_t = tr[full]["recall"] - by[REFERENCE]["recall"]
        out.append(
            f"The full round's recall@{k} is {dep[full]['recall']:.3f} when re-measuring the traced tasks "
            f"and {tr[full]['recall']:.3f} on unseen tasks (gap {gap:+.3f}); on unseen tasks the gain over "
            f"the static graph is {gain_t:+.3f}."
            + (" The deployment gain does not carry over to unseen tasks." if gap > 0.01 else "")
        )

    for proto, rows in (result.get("rounds") or {}).items():
        if len(rows) < 3:
            continue
        rec = [r["recall"] for r in rows]
        curve = ", ".join(f"{x:.3f}" for x in rec)
        best = int(np.argmax(rec))
        if best == 0 and max(rec[1:]) < rec[0] - 1e-9:
            out.append(
                f"Multi-round ({proto}): no round beats the static graph on recall@{k} "
                f"(rounds 0..{len(rec) - 1}: {curve})."
            )
        elif rec[-1] < max(rec) - 1e-9 and best < len(rec) - 1:
            out.append(
                f"Multi-round ({proto}): recall@{k} peaks at round {best} and then falls "
                f"(rounds 0..{len(rec) - 1}: {curve}): more rounds on the same source REVERSE the gain."
            )
        elif abs(rec[-1] - rec[1]) < 0.01:
            out.append(f"Multi-round ({proto}): recall@{k} plateaus after round 1 (rounds 0..: {curve}).")
        else:
            out.append(f"Multi-round ({proto}): recall@{k} keeps moving (rounds 0..: {curve}).")

    # Identical overlay numbers (e.g. every cell with L1 induces the same edges) are said once.
    groups: dict[tuple[int, int, int, int], list[str]] = {}
    for ov in result.get("overlay", []):
        key = (
            ov["induced_pairs"],
            ov["merged_components"],
            ov["newly_connected_nodes"],
            ov["induced_pairs_within_component"],
        )
        groups.setdefault(key, []).append(ov["graph"])
    for (pairs, merged, newly, within), graphs in groups.items():
        who = ", ".join(graphs)
        if merged == 0 and newly == 0:
            out.append(
                f"Overlay ({who}): {pairs} induced pair(s) merge no component and connect no isolated "
                "skill: the typed layer adds no reach over the semantic backbone (it only re-weights "
                "paths that already exist)."
            )
        else:
            out.append(
                f"Overlay ({who}): {pairs} induced pair(s) merge {merged} component(s) and connect "
                f"{newly} previously isolated skill(s); {within} pair(s) join skills that were already "
                "connected."
            )

    counts = result["leakage"]["counts"]
    ref_b = by[REFERENCE]["buckets"]
    filled = [b for b in LEAKAGE_BUCKETS if counts[b]]
    if len(filled) >= 2:
        lo_b, hi_b = filled[0], filled[-1]
        out.append(
            f"Leakage: ppr recall@{k} is {ref_b[lo_b]['recall']:.3f} on {lo_b}-overlap queries "
            f"(n={counts[lo_b]}) and {ref_b[hi_b]['recall']:.3f} on {hi_b}-overlap queries "
            f"(n={counts[hi_b]})."
        )
        for other in ("bm25", "lexical"):
            ob = by[other]["buckets"]
            out.append(
                f"Leakage: ppr's recall@{k} advantage over {other} by bucket is "
                + ", ".join(
                    f"{b} {ref_b[b]['recall'] - ob[b]['recall']:+.3f} (n={counts[b]})" for b in filled
                )
                + "."
            )
        for proto in ("deployment", "transfer"):
            cell = {m["method"]: m for m in result["protocols"][proto]["methods"]}.get(full)
            if cell is None:
                continue
            gains = {b: cell["buckets"][b]["recall"] - ref_b[b]["recall"] for b in filled}
            out.append(
                f"Leakage, {proto}: the full round's recall gain over static by bucket is "
                + ", ".join(f"{b} {g:+.3f} (n={counts[b]})" for b, g in gains.items())
                + "."
            )
    else:
        out.append(
            "Leakage: every query falls in one overlap bucket "
            f"({', '.join(f'{b}={n}' for b, n in counts.items())}), so the buckets cannot separate echoed "
            "from paraphrased queries on this set."
        )
    return out

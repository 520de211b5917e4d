"""Write an evaluation study (`study/run.py`: `run_study`) as report.md, report.json and PNG charts.

Charts use matplotlib's Agg backend (no display needed; selected before pyplot is imported). Every place
that shows numbers evolved from simulated traces says SIMULATED.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .metrics import LEAKAGE_BUCKETS, format_ci
from .study.config import CORE

Progress = Callable[[str], None]
CHARTS = {"methods": "methods.png", "rounds": "rounds.png", "leakage": "leakage.png"}


def _plain(obj: Any) -> Any:
    """JSON-able copy: numpy scalars to Python numbers, NaN to null."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _f(x: Any, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _core(m: dict[str, Any]) -> str:
    """The core metrics of a method (hit, recall, COMP, MRR) as table cells."""
    return " | ".join(_f(m[key]) for key in CORE)


def _ci(c: dict[str, Any] | None) -> str:
    if not c or c.get("diff") is None:
        return "-"
    star = " *" if c["lo"] > 0 or c["hi"] < 0 else ""
    return format_ci(c) + star


def _sim_note(result: dict[str, Any]) -> str:
    tr = result.get("traces") or {}
    return " (evolution source includes SIMULATED traces)" if tr.get("includes_simulated") else ""


# ------------------------------------------------------------------------------------------ markdown


def _method_table(methods: Sequence[dict[str, Any]], k: int) -> list[str]:
    lines = [
        f"| method | protocol | hit@{k} | recall@{k} | COMP@{k} | MRR | mean best rank | bundle chars | "
        "pair co-recovery | p50 ms | p95 ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in methods:
        sim = " (SIMULATED)" if m.get("simulated") else ""
        lines.append(
            f"| `{m['method']}`{sim} | {m['protocol']} | {_core(m)} | "
            f"{_f(m['mean_best_rank'], 2)} | {m['bundle_chars']:.0f} | "
            f"{_f(m['pair_corecovery'])} | {m['latency_ms']['p50']:.2f} | {m['latency_ms']['p95']:.2f} |"
        )
    return lines


def _diff_table(methods: Sequence[dict[str, Any]], k: int, with_pairs: bool) -> list[str]:
    head = f"| method | Δhit@{k} | Δrecall@{k} | ΔCOMP@{k} | ΔMRR |" + (
        " Δpair co-recovery |" if with_pairs else ""
    )
    lines = [head, "|---|---|---|---|---|" + ("---|" if with_pairs else "")]
    for m in methods:
        vs = m.get("vs_ppr")
        if not vs:
            continue
        row = f"| `{m['method']}` | " + " | ".join(_ci(vs[key]) for key in CORE) + " |"
        if with_pairs:
            row += f" {_ci(vs.get('pair_corecovery'))} |"
        lines.append(row)
    return lines


def _bucket_table(methods: Sequence[dict[str, Any]], counts: dict[str, int], k: int, key: str) -> list[str]:
    cols = " | ".join(f"{b} (n={counts[b]})" for b in LEAKAGE_BUCKETS)
    lines = [f"| method ({key}@{k}) | {cols} |", "|---|" + "---|" * len(LEAKAGE_BUCKETS)]
    for m in methods:
        cells = " | ".join(_f(m["buckets"][b][key]) if m["buckets"][b]["n"] else "-" for b in LEAKAGE_BUCKETS)
        lines.append(f"| `{m['method']}` ({m['protocol']}) | {cells} |")
    return lines


def _graph_section(graph: dict[str, Any] | None, k: int) -> list[str]:
    """Seeds only vs propagation per kNN size, overall, per query length and per number of gold skills."""
    if not graph:
        return []
    methods = graph["methods"]
    out = [
        "",
        "## Does the cold-start graph earn its place? (seeds only vs propagation per kNN k)",
        "",
        f"The base version was built with k = {graph['version_graph']}; each row rebuilds its semantic "
        f"edges for that k. Best propagation: `{graph['best_propagation']}`; "
        + ("it beats seeds alone." if graph["propagation_helps"] else "**it does not beat seeds alone.**"),
        "",
        f"| method | hit@{k} | recall@{k} | COMP@{k} | MRR | Δrecall vs seeds | ΔCOMP vs seeds |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in methods:
        d = m["vs_seeds_only"]
        out.append(f"| {m['method']} | {_core(m)} | {d['recall']:+.3f} | {d['comp']:+.3f} |")
    for key, title in (("by_length", "query length (tokens)"), ("by_gold", "gold skills per query")):
        names = list(methods[0][key])
        spans = graph["buckets"]["length_tokens" if key == "by_length" else "gold"]
        head = " | ".join(
            f"{b} ({spans[b][0]}–{spans[b][1] if spans[b][1] is not None else '∞'}, "
            f"n={methods[0][key][b]['n']})"
            for b in names
        )
        out += [
            "",
            f"Recall@{k} / COMP@{k} by {title}:",
            "",
            f"| method | {head} |",
            "|---|" + "---|" * len(names),
        ]
        for m in methods:
            cells = " | ".join(f"{_f(m[key][b]['recall'])} / {_f(m[key][b]['comp'])}" for b in names)
            out.append(f"| {m['method']} | {cells} |")
    return out


def _learning_section(learning: dict[str, Any] | None, k: int, sim: str) -> list[str]:
    """Transfer results by whether the queries' gold skills had traces: the lift where a round learned,
    and whether the skills without traces kept their ranks."""
    if not learning:
        return []
    counts = learning["counts"]
    out = [
        "",
        f"## What a round learned: skills with traces and without (transfer){sim}",
        "",
        f"Queries by {learning['by']}: "
        + ", ".join(f"{g} {n}" for g, n in counts.items() if n)
        + ". `ppr` is the cold start; a round must lift the traced skills' queries without lowering the "
        "others'.",
        "",
        f"| method | queries | hit@{k} | recall@{k} | COMP@{k} | MRR |",
        "|---|---|---|---|---|---|",
    ]
    for method, by_group in learning["methods"].items():
        for group, m in by_group.items():
            out.append(f"| `{method}` | {group} ({counts[group]}) | {_core(m)} |")
    return out


def to_markdown(result: dict[str, Any], charts: dict[str, str] | None = None) -> str:
    k = result["k"]
    q = result["queries"]
    lib = result.get("library") or {}
    sim = _sim_note(result)
    out = [
        "# segos evaluation report",
        "",
        f"- store `{result['store']}`, base version `{result['base_version']}` "
        f"({result['skills']} skills{', library ' + str(lib.get('root')) if lib.get('root') else ''})",
        f"- queries: {q['n']} from `{q['path']}`"
        + (f", {len(q['skipped'])} line(s) skipped" if q["skipped"] else "")
        + (f", gold names not in the library: {', '.join(q['unknown_gold'])}" if q["unknown_gold"] else "")
        + (f", {q['with_pairs']} with gold dependency pairs" if q["with_pairs"] else ""),
        f"- k = {k}; bootstrap: {result['bootstrap']['n_boot']} paired resamples over queries, seed "
        f"{result['bootstrap']['seed']}, {int(result['bootstrap']['level'] * 100)}% percentile intervals; "
        "`*` marks an interval that excludes 0",
    ]
    tr = result.get("traces")
    if tr:
        out.append(f"- evolution source: **{tr['label']}**")
        for s in tr["sources"]:
            if s.get("format") == "simulated":
                out.append(
                    f"  - SIMULATED: {s['per_evolution']} traces generated per evolution by the simulator"
                )
            else:
                label = f", of which {s['simulated']} SIMULATED" if s.get("simulated") else ""
                out.append(
                    f"  - `{s['source']}` ({s['format']}): {s['accepted']} accepted{label}, "
                    f"{s['rejected']} rejected"
                )
        if tr.get("unmatched_to_query_tasks"):
            out.append(
                f"  - {tr['unmatched_to_query_tasks']} trace(s) belong to no query task and are not used"
            )
    else:
        out.append("- no traces given: the factorial, protocols and rounds are not run")
    if result.get("transfer_split"):
        sp = result["transfer_split"]
        out.append(
            f"- transfer split (hash of {'gold set' if sp.get('by') == 'gold' else 'task id'}, "
            f"seed {sp['seed']}): "
            f"{len(sp['half_a'])} + {len(sp['half_b'])} tasks"
        )

    out += ["", "## Where the graph or evolution does not help (and where it does)", ""]
    out += [f"- {f}" for f in result["findings"]]

    out += _graph_section(result.get("graph"), k)

    protos = result["protocols"]
    level = int(result["bootstrap"]["level"] * 100)
    for proto in ("deployment", "transfer"):
        p = protos[proto]
        out += ["", f"## Methods, {proto} protocol{sim if proto and tr else ''}", "", p["description"] + "."]
        if p.get("note"):
            out += ["", f"_{p['note']}_"]
            if proto == "transfer":
                continue
        out += ["", *_method_table(p["methods"], k)]
        out += [
            "",
            f"Difference from `ppr` (cold-start reverse-aware PPR), mean [{level}% CI]:",
            "",
            *_diff_table(p["methods"], k, bool(q["with_pairs"])),
        ]
    if charts and "methods" in charts:
        out += ["", f"![method comparison]({charts['methods']})"]
    out += _learning_section(result.get("learning"), k, sim)

    rounds = result.get("rounds") or {}
    if rounds.get("deployment"):
        out += [
            "",
            f"## Multi-round curve (full L1+L2+L3 rounds on the same trace source){sim}",
            "",
            "Round 0 is the static cold start; each round evolves the previous round's graph. Real traces "
            "are the same every round; simulated traffic is regenerated against each round's graph.",
            "",
            f"| round | dep. hit@{k} | dep. recall@{k} | dep. COMP@{k} | dep. MRR | transfer hit@{k} | "
            f"transfer recall@{k} | transfer COMP@{k} | transfer MRR | Δrecall dep. | Δrecall transfer |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for d, t in zip(rounds["deployment"], rounds["transfer"], strict=True):
            out.append(
                f"| {d['round']} | {_core(d)} | {_core(t)}"
                + f" | {_ci(d.get('vs_static', {}).get('recall'))}"
                + f" | {_ci(t.get('vs_static', {}).get('recall'))} |"
            )
        if charts and "rounds" in charts:
            out += ["", f"![multi-round curve]({charts['rounds']})"]

    if result.get("overlay"):
        out += [
            "",
            "## Overlay test (induced navigation edges added to the semantic backbone, undirected)",
            "",
            "| graph | induced pairs | components before | after | merged | "
            "newly connected (were isolated) | nodes gaining reach | pairs within a component |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for ov in result["overlay"]:
            out.append(
                f"| {ov['graph']} | {ov['induced_pairs']} | {ov['components_before']} | "
                f"{ov['components_after']} | "
                f"{ov['merged_components']} | {ov['newly_connected_nodes']} | {ov['nodes_gaining_reach']} | "
                f"{ov['induced_pairs_within_component']} |"
            )

    lk = result["leakage"]
    out += [
        "",
        "## Leakage buckets",
        "",
        f"Overlap = {lk['measure']}. Buckets: low < {lk['thresholds'][0]:.3f} ≤ mid < "
        f"{lk['thresholds'][1]:.3f} ≤ high (fixed, not tuned). Overlap over the queries: "
        f"min {lk['overlap']['min']:.3f}, median "
        f"{lk['overlap']['median']:.3f}, max {lk['overlap']['max']:.3f}.",
        "",
    ]
    shown = list(protos["deployment"]["methods"]) + [
        m for m in protos["transfer"]["methods"] if m["kind"] in ("factorial", "probe")
    ]
    out += _bucket_table(shown, lk["counts"], k, "recall")
    out += ["", *_bucket_table(shown, lk["counts"], k, "hit")]
    if charts and "leakage" in charts:
        out += ["", f"![leakage buckets]({charts['leakage']})"]

    cells = [m for m in protos["deployment"]["methods"] if m.get("counters")]
    if cells:
        out += [
            "",
            f"## What each deployment cell changed{sim}",
            "",
            "| cell | traces (real / SIMULATED) | induced edges | L2 | descriptions committed |",
            "|---|---|---|---|---|",
        ]
        for m in cells:
            c, ev = m["counters"], m.get("evolved_from", {})
            out.append(
                f"| `{m['method']}` | {ev.get('real', 0)} / {ev.get('simulated', 0)} | "
                f"{json.dumps(c.get('induced', {}))} | {json.dumps(c.get('l2', {}))} | "
                f"{c.get('descriptions_committed', 0)} |"
            )
    out += ["", f"Timings (s): {json.dumps(result.get('timings_s', {}))}", ""]
    return "\n".join(out)


# -------------------------------------------------------------------------------------------- charts


def _short(name: str) -> str:
    return name.replace("factorial:", "F:").replace("version:", "v:")


def _bars(ax: Any, methods: Sequence[dict[str, Any]], keys: Sequence[str], title: str) -> None:
    x = np.arange(len(methods))
    width = 0.8 / len(keys)
    for j, key in enumerate(keys):
        ax.bar(x + (j - (len(keys) - 1) / 2) * width, [m[key] or 0 for m in methods], width, label=key)
    ax.set_xticks(x, [_short(m["method"]) for m in methods], rotation=45, ha="right", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)


def write_charts(result: dict[str, Any], out: Path) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")  # files only, never a display
    import matplotlib.pyplot as plt

    k = result["k"]
    sim = " — SIMULATED traces in the evolution source" if _sim_note(result) else ""
    written: dict[str, str] = {}

    def save(fig: Any, role: str) -> None:
        fig.tight_layout()
        fig.savefig(out / CHARTS[role], dpi=110)
        plt.close(fig)
        written[role] = CHARTS[role]

    protos = result["protocols"]
    panels = [("deployment", protos["deployment"]["methods"])]
    if any(m["kind"] == "factorial" for m in protos["transfer"]["methods"]):
        panels.append(("transfer", protos["transfer"]["methods"]))
    fig, axes = plt.subplots(len(panels), 1, figsize=(max(8, 0.6 * len(panels[0][1]) + 3), 4.2 * len(panels)))
    axes = np.atleast_1d(axes)
    for ax, (proto, methods) in zip(axes, panels, strict=True):
        _bars(ax, methods, CORE, f"{proto} protocol, k={k}{sim if proto else ''}")
    axes[0].legend(fontsize=8, ncol=4, loc="upper left")
    save(fig, "methods")

    rounds = result.get("rounds") or {}
    if rounds.get("deployment"):
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for proto, style in (("deployment", "-"), ("transfer", "--")):
            rows = rounds.get(proto) or []
            xs = [r["round"] for r in rows]
            for key, color in zip(CORE, ("C0", "C1", "C2", "C3"), strict=True):
                ax.plot(xs, [r[key] for r in rows], style, color=color, marker="o", label=f"{key} ({proto})")
        ax.set_xlabel("round (0 = static cold start)")
        ax.set_ylabel(f"metric @ {k}")
        ax.set_xticks(range(len(rounds["deployment"])))
        ax.set_title(f"multi-round curve{sim}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        save(fig, "rounds")

    counts = result["leakage"]["counts"]
    wanted = ["bm25", "lexical", "ppr"]
    chosen = [m for m in protos["deployment"]["methods"] if m["method"] in wanted]
    full = "factorial:L1+L2+L3"
    for proto in ("deployment", "transfer"):
        for m in protos[proto]["methods"]:
            if m["method"] == full:
                chosen.append({**m, "method": f"{full} ({proto})"})
    chosen += [m for m in protos["deployment"]["methods"] if m["kind"] == "version"]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    x = np.arange(len(LEAKAGE_BUCKETS))
    width = 0.8 / max(len(chosen), 1)
    for j, m in enumerate(chosen):
        vals = [m["buckets"][b]["recall"] or 0 for b in LEAKAGE_BUCKETS]
        ax.bar(x + (j - (len(chosen) - 1) / 2) * width, vals, width, label=_short(m["method"]))
    ax.set_xticks(x, [f"{b}\n(n={counts[b]})" for b in LEAKAGE_BUCKETS])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel(f"recall@{k}")
    ax.set_title(f"recall by query-to-gold token overlap{sim}", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, "leakage")
    return written


def write_report(
    result: dict[str, Any], out: str | Path, charts: bool = True, progress: Progress | None = None
) -> dict[str, str]:
    """Write report.json, report.md and (unless `charts=False`) the PNG charts into `out`; returns the
    written files by role."""
    say = progress or (lambda _msg: None)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {}
    if charts:
        say(f"writing charts into {out}")
        files.update({role: str(out / name) for role, name in write_charts(result, out).items()})
    chart_names = {role: Path(path).name for role, path in files.items()}
    (out / "report.json").write_text(json.dumps(_plain(result), indent=2, default=str), encoding="utf-8")
    (out / "report.md").write_text(to_markdown(result, chart_names), encoding="utf-8")
    files["json"] = str(out / "report.json")
    files["markdown"] = str(out / "report.md")
    say(f"wrote {out / 'report.md'}")
    return files

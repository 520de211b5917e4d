"""`segos eval`: the offline replay study as one command (registered on the `segos` group in `main.py`).

    segos eval --store STORE --queries QUERIES.jsonl [--versions V1,V2,...] [--base V]
               [--traces PATH[:FORMAT] ...] [--window W ...] [--simulate N] [--rounds R]
               [--out DIR] [--k K] [--json]

Traces: `--traces` is repeatable; FORMAT is one of the adapter formats (default native), e.g.
`--traces trials.jsonl:skillsbench-trials` (query text comes from the --queries file). `--window` uses a
window already ingested into the store. `--simulate N` adds N SIMULATED traces per evolution, generated
from the evolution side's tasks (labelled everywhere). Without any of them only the trace-free methods
(bm25, lexical, forward_ppr, ppr, the versions given) are compared.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..config import EvolutionConfig, retrieval_for
from .common import _emit_json, _store, friendly_errors, k_option, reporter, require_extra, store_option


@click.command(name="eval")
@store_option
@click.option(
    "--queries",
    "queries_path",
    type=click.Path(path_type=Path),
    required=True,
    help="JSONL with `query`/`instruction`, `gold`, optional `task` and `pairs` (gold dependency pairs).",
)
@click.option(
    "--versions", default=None, help="Comma-separated evolved versions to compare (ids, prefixes, vN)."
)
@click.option("--base", default=None, help="Version the baselines run on (default: the cold start).")
@click.option(
    "--traces",
    "trace_specs",
    multiple=True,
    help="Evolution source PATH[:FORMAT] (repeatable; FORMAT native|skillsbench-trials|apibank|toolbench).",
)
@click.option("--window", "windows", multiple=True, help="An already-ingested trace window (repeatable).")
@click.option(
    "--simulate",
    "n_simulate",
    type=int,
    default=0,
    show_default=True,
    help="SIMULATED traces added per evolution.",
)
@click.option(
    "--split-by",
    type=click.Choice(["task", "gold"]),
    default="task",
    show_default=True,
    help="Transfer split unit: task ids, or gold sets (templated variants of a task stay on one side).",
)
@click.option("--rounds", type=int, default=3, show_default=True, help="Length of the multi-round curve.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("eval-out"),
    show_default=True,
    help="Folder the report (report.md, report.json, charts) is written to.",
)
@k_option
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap, split and simulator seed.")
@click.option("--bootstrap", "n_boot", type=int, default=2000, show_default=True, help="Bootstrap resamples.")
@click.option("--no-charts", is_flag=True, help="Skip the PNG charts.")
@click.option("--json", "as_json", is_flag=True, help="Print the report JSON on stdout.")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@friendly_errors
def eval_cmd(
    store: Path | None,
    queries_path: Path,
    versions: str | None,
    base: str | None,
    trace_specs: tuple[str, ...],
    windows: tuple[str, ...],
    n_simulate: int,
    split_by: str,
    rounds: int,
    out: Path,
    k: int,
    seed: int,
    n_boot: int,
    no_charts: bool,
    as_json: bool,
    quiet: bool,
) -> None:
    """Compare BM25, lexical, forward-only and reverse-aware PPR, evolved versions and the L1/L2/L3
    factorial (deployment and transfer protocols) on QUERIES; write report.md, report.json and charts.

    \b
    Example:
      segos eval --store data/store --queries queries.jsonl --simulate 500 --out eval-out --json
    """
    if n_simulate < 0 or rounds < 0 or n_boot < 1:
        raise ValueError("--simulate and --rounds must be >= 0 and --bootstrap >= 1")
    require_extra("eval", ["bm25s"] + ([] if no_charts else ["matplotlib"]), "segos eval")
    say = reporter("eval", quiet)  # the study's messages, as every long command shows them
    st = _store(store)
    # the study's modules (matplotlib among them) load only when the command runs: `segos` starts fast
    from ..evaluation.replay import load_queries
    from ..evaluation.report import write_report
    from ..evaluation.study.config import StudyConfig
    from ..evaluation.study.run import resolve_base, run_study
    from ..evaluation.study.traces import load_traces

    qf = load_queries(queries_path)
    for s in qf.skipped:
        click.echo(f"warning: {queries_path}:{s['line']}: skipped, {s['reason']}", err=True)
    if not qf.queries:
        raise ValueError(f"no usable queries in {queries_path} ({len(qf.skipped)} line(s) skipped)")
    version_list = [v.strip() for v in (versions or "").split(",") if v.strip()]
    base_snap = st.load(resolve_base(st, base, version_list))
    traces = None
    if trace_specs or windows or n_simulate:
        traces = load_traces(trace_specs, windows, st, base_snap, queries_path, n_simulate)
        for src in traces.sources:
            if src.get("rejected"):
                click.echo(f"warning: {src['source']}: {src['rejected']} record(s) rejected", err=True)
            if src.get("skipped"):
                click.echo(f"warning: {src['source']}: {src['skipped']} input(s) left unread", err=True)
    config = StudyConfig(
        k=k,
        rounds=rounds,
        n_boot=n_boot,
        seed=seed,
        simulate=n_simulate,
        split_by=split_by,
        retrieval=retrieval_for(base_snap.manifest),  # the base version's preset
        evolution=EvolutionConfig(),
    )
    result = run_study(
        st,
        qf,
        base=base_snap.version,
        versions=version_list,
        traces=traces,
        config=config,
        progress=say,
        queries_path=queries_path,
    )
    files = write_report(result, out, charts=not no_charts, progress=say)
    if as_json:
        _emit_json(
            {key: v for key, v in json.loads(Path(files["json"]).read_text()).items() if key != "per_query"}
        )
        return
    click.echo(f"base {result['base_version']}  k={k}  queries={result['queries']['n']}")
    click.echo(f"{'method':<28} {'protocol':<11} {'hit':>6} {'recall':>7} {'COMP':>6} {'MRR':>6}")
    for proto in ("deployment", "transfer"):
        for m in result["protocols"][proto]["methods"]:
            if proto == "transfer" and m["kind"] not in ("factorial", "probe"):
                continue  # trace-free methods are the same in both protocols
            click.echo(
                f"{m['method']:<28} {m['protocol']:<11} {m['hit']:>6.3f} {m['recall']:>7.3f} "
                f"{m['comp']:>6.3f} {m['mrr']:>6.3f}"
            )
    click.echo(f"report: {files['markdown']}")

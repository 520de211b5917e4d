"""Parse speed A/B (issue 14): this tree's parser against a baseline git ref, in the same run.

    .venv/bin/python benchmarks/bench_parse.py LIBRARY [--baseline main] [--rounds 3] [--sample 10000]

Both parsers run in fresh child processes, alternating round by round (the machine is shared: alternation
spreads load changes over both sides). Two figures per side:
* `frontmatter`: µs per package of `split_frontmatter` over every SKILL.md text of LIBRARY, texts read
  into memory first (the YAML part alone, no I/O);
* `parse_library`: µs per package of a serial `parse_library` (workers=1) of the first --sample packages'
  domain folders (the whole per-package cost: reading, frontmatter, sections, entrypoints, the frame).
The node tables and build reports of both sides are compared on the whole LIBRARY (identical = True).
Results go to benchmarks/results/parse.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import harness

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

CHILD = r"""
import json, sys, time
from pathlib import Path
from segos_pipeline.graph import frontmatter, parsing
mode, lib, arg = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
if mode == "frontmatter":
    texts = [p.read_bytes().decode("utf-8", "replace") for p in sorted(lib.rglob("SKILL.md"))]
    t = time.perf_counter()
    for text in texts:
        frontmatter.split_frontmatter(text)
    print(json.dumps({"us": (time.perf_counter() - t) / len(texts) * 1e6, "n": len(texts)}))
elif mode == "parse":
    t = time.perf_counter()
    parsed = parsing.parse_library(lib, workers=1)
    print(json.dumps({"us": (time.perf_counter() - t) / parsed.nodes.height * 1e6, "n": parsed.nodes.height}))
else:
    parsed = parsing.parse_library(lib)
    parsed.nodes.write_parquet(arg + ".nodes.parquet")
    parsed.report.write_parquet(arg + ".report.parquet")
    print(json.dumps({"n": parsed.nodes.height}))
"""


def _child(src: Path, mode: str, lib: Path, arg: str = "") -> dict:
    done = harness.run_child(
        [sys.executable, "-c", CHILD, mode, str(lib), arg],
        env={"PYTHONPATH": str(src)},
        cwd=src,
        capture_stderr=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _sample_root(lib: Path, sample: int, tmp: Path) -> tuple[Path, int]:
    """Whole top-level folders of `lib` holding about `sample` packages, hard-linked into a new root."""
    out = tmp / "sample"
    out.mkdir()
    n = 0
    for folder in sorted(p for p in lib.iterdir() if p.is_dir()):
        if n >= sample:
            break
        shutil.copytree(folder, out / folder.name, copy_function=os.link)
        n += sum(1 for _ in (out / folder.name).rglob("SKILL.md"))
    return out, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("library", type=Path)
    ap.add_argument("--baseline", default="main")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sample", type=int, default=10_000)
    ap.add_argument("--out", type=Path, default=RESULTS / "parse")
    args = ap.parse_args()
    args.library = args.library.resolve()
    import polars as pl

    command = "python benchmarks/bench_parse.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    with tempfile.TemporaryDirectory(prefix="segos-bench-parse-") as tmp_s:
        tmp = Path(tmp_s)
        baseline = harness.extract_baseline(args.baseline, tmp)
        rev = baseline.commit
        sides = {"baseline": baseline.folder, "this tree": ROOT}
        sample, n_sample = _sample_root(args.library, args.sample, tmp)
        times: dict[str, dict[str, list[float]]] = {s: {"frontmatter": [], "parse": []} for s in sides}
        for r in range(args.rounds):
            for side, src in sides.items():
                times[side]["frontmatter"].append(_child(src, "frontmatter", args.library)["us"])
                times[side]["parse"].append(_child(src, "parse", sample)["us"])
                last = {k: round(v[-1]) for k, v in times[side].items()}
                print(f"round {r + 1} {side}: {json.dumps(last)}")
        frames = {}
        for side, src in sides.items():
            _child(src, "dump", args.library, str(tmp / side.replace(" ", "_")))
            frames[side] = [
                pl.read_parquet(tmp / f"{side.replace(' ', '_')}.{k}.parquet") for k in ("nodes", "report")
            ]
        identical = all(a.equals(b) for a, b in zip(frames["baseline"], frames["this tree"], strict=True))
        n_nodes = frames["this tree"][0].height
    result = {
        "command": command,
        "library": str(args.library),
        "baseline": f"{args.baseline} ({rev})",
        "packages": n_nodes,
        "sample_packages": n_sample,
        "identical_nodes_and_report": identical,
        "rounds": args.rounds,
        "us_per_package": {
            side: {k: {"min": round(min(v)), "median": round(statistics.median(v))} for k, v in t.items()}
            for side, t in times.items()
        },
        "raw_us": times,
    }
    harness.write_results(args.out, result, _markdown(result))
    print(json.dumps({k: v for k, v in result.items() if k != "raw_us"}, indent=2))


def _markdown(r: dict) -> str:
    rows = [
        f"| {side} | {t['frontmatter']['min']} | {t['frontmatter']['median']} | {t['parse']['min']} | "
        f"{t['parse']['median']} |"
        for side, t in r["us_per_package"].items()
    ]
    return "\n".join(
        [
            "# Parse speed: this tree against a baseline (same run)",
            "",
            f"Command: `{r['command']}`; baseline {r['baseline']}; {r['rounds']} alternating rounds on a",
            "shared 2-core machine (figures are noisy; compare the two sides of one run only).",
            "",
            f"Library: {r['packages']} packages; `parse_library` timed on {r['sample_packages']} of them.",
            "Node table and build report identical to the baseline's: "
            f"**{r['identical_nodes_and_report']}**.",
            "",
            "| side | frontmatter µs/pkg (min) | (median) | parse_library µs/pkg (min) | (median) |",
            "|---|---|---|---|---|",
            *rows,
            "",
        ]
    )


if __name__ == "__main__":
    main()

"""The cold-start build's tokenise stage, old string path against the integer path, in the same run.

    .venv/bin/python benchmarks/bench_tokenise.py --store /tmp/b100 [--skills N] [--repeat 1]
                                                  [--out benchmarks/results]

Reads the nodes of a built store (read-only). Times, on the same nodes and in the same process:
1. STRING: the tokenise stage as it was before the integer path (the string table of each 20k-skill
   chunk, now kept as the integer path's test oracle in tests/string_tokens.py: group and sort on token
   strings, then a join of every row's token string against the growing vocabulary);
2. INTEGER: `EncodedTokens.tokenise` now (`EncodedTokens.of_nodes` per 20k-skill chunk, merged);
3. PER CHUNK: `EncodedTokens.of_nodes` on 2,000-skill chunks (the parse workers' chunk), once in a fresh
   spawned process (as a worker: nothing cached) and once after the runs above in this process, and the
   `TokenMerger` merge of all of them.
CPU (process time) and wall for each; checks that both paths give equal rows and signature. The machine is
shared: compare A/B within one run. Writes tokenise.json and tokenise.md.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path
from typing import Any

import harness
import numpy as np
import polars as pl

from segos_pipeline import SnapshotStore
from segos_pipeline.text import lexicon
from segos_pipeline.text.lexicon import CODED_FIELDS, FIELD_CODE, TOKEN_SCHEMA
from segos_pipeline.text.token_rows import EncodedTokens, TokenMerger

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.string_tokens import string_token_table  # noqa: E402


def _encode(chunk: pl.DataFrame, vocab: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The string path's encoding of one sorted string chunk (verbatim from before the integer path)."""
    unseen = chunk.select("token").unique(maintain_order=True).join(vocab, on="token", how="anti")
    if unseen.height:
        start = vocab.height
        unseen = unseen.with_columns(id=pl.int_range(start, start + unseen.height, dtype=pl.UInt32))
        vocab = pl.concat([vocab, unseen], how="vertical")
    tf_max = chunk["tf"].max()
    tf_type = pl.UInt16 if tf_max is None or int(tf_max) <= 65535 else pl.UInt32  # type: ignore[arg-type]
    encoded = chunk.join(vocab, on="token", how="left", maintain_order="left").select(
        "node",
        field=pl.col("field").replace_strict(FIELD_CODE, return_dtype=pl.UInt8),
        token=pl.col("id"),
        tf=pl.col("tf").cast(tf_type),
    )
    return encoded, vocab


def string_path(nodes: pl.DataFrame) -> tuple[pl.DataFrame, pl.Series]:
    """(rows node, field code, token id, tf; the token of each id), as the string path made them."""
    vocab = pl.DataFrame(schema={"token": pl.String, "id": pl.UInt32})
    parts = []
    for start in range(0, nodes.height, lexicon.TOKEN_CHUNK):
        chunk = string_token_table(nodes.slice(start, lexicon.TOKEN_CHUNK))
        chunk = chunk.with_columns(node=pl.col("node") + start)
        encoded, vocab = _encode(chunk, vocab)
        parts.append(encoded)
    return pl.concat(parts, how="vertical_relaxed", rechunk=True), vocab["token"]


def _decoded(old: tuple[pl.DataFrame, pl.Series]) -> pl.DataFrame:
    frame, vocab = old
    return pl.DataFrame(
        {
            "node": frame["node"],
            "field": pl.Series(CODED_FIELDS).gather(frame["field"]),
            "token": vocab.gather(frame["token"]),
            "tf": frame["tf"].cast(pl.UInt32),
        },
        schema=TOKEN_SCHEMA,
    )


def _merged(chunks: list[EncodedTokens]) -> EncodedTokens:
    merger = TokenMerger()
    for chunk in chunks:
        merger.add(chunk)
    return merger.result()


def _cold_chunks(store: str, skills: int | None, chunk: int) -> tuple[float, float]:
    """(CPU s, wall s) of `EncodedTokens.of_nodes` over every chunk in this process (run in a fresh one)."""
    snap = SnapshotStore(store)
    nodes = snap.load(snap.latest()).nodes
    nodes = nodes.slice(0, skills) if skills else nodes
    slices = [nodes.slice(s, chunk) for s in range(0, nodes.height, chunk)]
    _, wall, cpu = harness.timed(lambda: [EncodedTokens.of_nodes(s) for s in slices])
    return cpu, wall


def cold_per_chunk(store: Path, skills: int | None, chunk: int) -> tuple[float, float]:
    """As a parse worker sees it: a spawned process, no word stemmed yet, no cache warm."""
    return harness.in_fresh_process(_cold_chunks, str(store), skills, chunk)


def run(nodes: pl.DataFrame, repeat: int, chunk: int) -> dict[str, Any]:
    out: dict[str, Any] = {"skills": nodes.height, "polars_threads": pl.thread_pool_size()}
    for r in range(repeat):
        # the integer path first on even runs: it meets the stemmer's per-process cache cold
        if r % 2 == 0:
            new, new_wall, new_cpu = harness.timed(lambda: EncodedTokens.tokenise(nodes))
        old, old_wall, old_cpu = harness.timed(lambda: string_path(nodes))
        if r % 2 == 1:
            new, new_wall, new_cpu = harness.timed(lambda: EncodedTokens.tokenise(nodes))
        out.setdefault("runs", []).append(
            {
                "string_cpu_s": old_cpu,
                "string_wall_s": old_wall,
                "int_cpu_s": new_cpu,
                "int_wall_s": new_wall,
            }
        )
        if r == 0:
            out["equal"] = _decoded(old).equals(new.rows())
            out["rows"] = new.height
            out["vocab"] = len(new.vocab)
            size = sum(a.nbytes for c in new.chunks for a in (c.node, c.field, c.col, c.tf))
            out["frame_bytes_per_row"] = size / max(1, new.height)
    slices = [nodes.slice(s, chunk) for s in range(0, nodes.height, chunk)]
    chunks, chunk_wall, chunk_cpu = harness.timed(lambda: [EncodedTokens.of_nodes(s) for s in slices])
    merged, merge_wall, merge_cpu = harness.timed(lambda: _merged(chunks))
    out["per_chunk"] = {
        "chunk_skills": chunk,
        "chunks": len(chunks),
        "cpu_us_per_skill": 1e6 * chunk_cpu / nodes.height,
        "wall_us_per_skill": 1e6 * chunk_wall / nodes.height,
        "mean_chunk_vocab": float(np.mean([len(c.vocab) for c in chunks])),
        "pickled_bytes_per_skill": float(
            sum(len(pickle.dumps(c)) for c in chunks[:5]) / sum(c.n_nodes for c in chunks[:5])
        ),
        "merge_cpu_s": merge_cpu,
        "merge_wall_s": merge_wall,
        "equal": merged.rows().equals(new.rows()),
    }
    return out


def _markdown(res: dict[str, Any]) -> str:
    lines = [
        f"# Tokenise stage: string path vs integer path ({res['skills']:,} skills)",
        "",
        f"Same process, same nodes; polars threads {res['polars_threads']}; shared 2-core machine (noisy).",
        f"Rows {res['rows']:,}, vocabulary {res['vocab']:,}, frame {res['frame_bytes_per_row']:.1f} B/row; "
        f"equal rows: {res['equal']}.",
        "",
        "| run | string CPU s | string wall s | integer CPU s | integer wall s | CPU × | wall × |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(res["runs"]):
        lines.append(
            f"| {i} | {r['string_cpu_s']:.2f} | {r['string_wall_s']:.2f} | {r['int_cpu_s']:.2f} | "
            f"{r['int_wall_s']:.2f} | {r['string_cpu_s'] / r['int_cpu_s']:.2f} | "
            f"{r['string_wall_s'] / r['int_wall_s']:.2f} |"
        )
    pc = res["per_chunk"]
    lines += [
        "",
        f"EncodedTokens.of_nodes on {pc['chunks']} chunks of {pc['chunk_skills']:,} skills, "
        "in a fresh process: "
        f"{pc['cold_process_cpu_us_per_skill']:.0f} µs CPU / {pc['cold_process_wall_us_per_skill']:.0f} µs "
        f"wall per skill; after the runs above in this process: "
        f"{pc['cpu_us_per_skill']:.0f} µs CPU / {pc['wall_us_per_skill']:.0f} µs wall per skill; mean chunk "
        f"vocabulary {pc['mean_chunk_vocab']:,.0f}; pickled {pc['pickled_bytes_per_skill']:.0f} B per skill.",
        f"TokenMerger of them: {pc['merge_cpu_s']:.2f} s CPU / "
        f"{pc['merge_wall_s']:.2f} s wall; equal to EncodedTokens.tokenise: {pc['equal']}.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True, help="a built store; its latest version's nodes")
    ap.add_argument("--skills", type=int, default=None, help="only the first N skills")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=2_000, help="skills per EncodedTokens.of_nodes chunk")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    store = SnapshotStore(args.store)
    nodes = store.load(store.latest()).nodes
    if args.skills:
        nodes = nodes.slice(0, args.skills)
    cold_cpu, cold_wall = cold_per_chunk(args.store, args.skills, args.chunk)
    res = run(nodes, args.repeat, args.chunk)
    res["per_chunk"]["cold_process_cpu_us_per_skill"] = 1e6 * cold_cpu / nodes.height
    res["per_chunk"]["cold_process_wall_us_per_skill"] = 1e6 * cold_wall / nodes.height
    harness.write_results(args.out / "tokenise", res, _markdown(res))
    print(_markdown(res))


if __name__ == "__main__":
    main()

"""CPU per skill of `EncodedTokens.of_nodes` and of its steps, as a parse worker meets 2,000-skill chunks.

    .venv/bin/python benchmarks/bench_chunk_tokens.py --library LIB --cache DIR \
        [--chunks 9] [--chunk 2000] [--save DIR]

Parses the first `chunks` × `chunk` packages of LIB (read-only) once into parquet files under `--cache`
(reused on later runs). Then, in each of two fresh processes (as a worker: nothing memoised), it tokenises
chunk 0 to warm up and times chunks 1.. : one process times `EncodedTokens.of_nodes` whole, the other its
steps one after the other (field texts, word rows, word codes, vocabulary), each step meeting the chunk's
unseen words for the first time. Process CPU time (polars threads included), µs per skill.

`--save DIR` writes each chunk's frame and vocab, so two trees' outputs can be compared file by file.
To compare two trees A/B, run this same script with each tree's interpreter in one shell command: the
machine is shared and timings drift between runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import harness
import polars as pl

from segos_pipeline.config import ParseConfig
from segos_pipeline.graph import discovery, parsing
from segos_pipeline.text import chunk_tokens
from segos_pipeline.text.lexicon import field_texts
from segos_pipeline.text.token_rows import EncodedTokens


def prepare(library: Path, cache: Path, chunks: int, chunk: int) -> list[Path]:
    """Node frames of the first chunks of the library, parsed once and kept as parquet."""
    files = [cache / f"chunk-{chunk}-{i:03d}.parquet" for i in range(chunks)]
    if all(f.exists() for f in files):
        return files
    cache.mkdir(parents=True, exist_ok=True)
    packages: list[tuple[str, discovery.Listed]] = []  # as the build's walk hands them to the workers
    for domain in sorted(p for p in library.iterdir() if p.is_dir()):
        packages.extend(discovery.listed_packages(str(domain)))
        if len(packages) >= chunks * chunk:
            break
    for i, f in enumerate(files):
        part = parsing._Chunk(tuple(packages[i * chunk : (i + 1) * chunk]))
        parsing._parse_chunk((part, str(library), ParseConfig(), None))[0].write_parquet(f)
    return files


def _whole(files: list[str], save: str | None) -> dict[str, float]:
    frames = [pl.read_parquet(f) for f in files]
    EncodedTokens.of_nodes(frames[0])
    total, skills = 0.0, 0
    for i, nodes in enumerate(frames[1:], 1):
        got, _, cpu = harness.timed(lambda n=nodes: EncodedTokens.of_nodes(n))
        total, skills = total + cpu, skills + nodes.height
        if save:
            got.rows().write_parquet(Path(save) / f"rows-{i:03d}.parquet")
            got.vocab.to_frame().write_parquet(Path(save) / f"vocab-{i:03d}.parquet")
    return {"of total": 1e6 * total / skills}


def _steps(files: list[str]) -> dict[str, float]:
    frames = [pl.read_parquet(f) for f in files]
    EncodedTokens.of_nodes(frames[0])
    spent: dict[str, float] = {}
    skills, distinct = 0, 0
    for nodes in frames[1:]:
        skills += nodes.height
        for name, fn in (("field_texts", lambda n=nodes: field_texts(n)),):
            spent[name] = spent.get(name, 0.0) + harness.timed(fn)[2]
        rows, _, cpu = harness.timed(lambda n=nodes: chunk_tokens._word_rows(n))
        spent["word_rows"] = spent.get("word_rows", 0.0) + cpu
        # a frame with a word column before this branch, (slots, words) since
        words = rows[1] if isinstance(rows, tuple) else rows["word"]
        codes, _, cpu = harness.timed(lambda w=words: chunk_tokens.word_codes(w, w.hash()))
        spent["word_codes (with hash)"] = spent.get("word_codes (with hash)", 0.0) + cpu
        distinct += len(codes[0])
        _, _, cpu = harness.timed(lambda d=codes[0]: chunk_tokens._vocabulary(d))
        spent["vocabulary"] = spent.get("vocabulary", 0.0) + cpu
    out = {k: 1e6 * v / skills for k, v in spent.items()}
    out["distinct words per chunk"] = distinct / (len(frames) - 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--library", type=Path, required=True)
    ap.add_argument("--cache", type=Path, required=True, help="where the parsed node chunks are kept")
    ap.add_argument("--chunks", type=int, default=9)
    ap.add_argument("--chunk", type=int, default=2_000)
    ap.add_argument("--save", type=Path, default=None, help="write each chunk's frame and vocab here")
    args = ap.parse_args()
    files = [str(f) for f in prepare(args.library, args.cache, args.chunks, args.chunk)]
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
    res = harness.in_fresh_process(_steps, files) | harness.in_fresh_process(
        _whole, files, str(args.save) if args.save else None
    )
    print(json.dumps({"module": chunk_tokens.__file__, **{k: round(v, 1) for k, v in res.items()}}, indent=1))


if __name__ == "__main__":
    main()

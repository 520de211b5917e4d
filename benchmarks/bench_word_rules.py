"""CPU of the byte-level stemmer against the Python one, on a library's 2,000-skill chunks.

    .venv/bin/python benchmarks/bench_word_rules.py --library LIB [--chunks 5] [--chunk 2000]

Per chunk (the parse workers' unit) it times, in this one process, the index's word rules: cutting the
words with the polars regex (`tokenize_column`, exploded), then stemming the chunk's distinct words with
`tokens.word_tokens` (numpy on the UTF-8 bytes) and with `_token_of` per word in Python (the query path's
statement), its cache cleared before each chunk as a fresh worker's is. The two stemmers must give the
same tokens (checked). Process CPU time (polars threads included), µs per skill. A real library smaller
than one chunk is one chunk, timed `--repeat` times.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import harness
import polars as pl

from segos_pipeline.graph.parsing import parse_library
from segos_pipeline.text import tokens
from segos_pipeline.text.lexicon import field_texts


def regex_words(texts: pl.Series) -> pl.Series:
    """The words of every text, exploded: the index's cut."""
    return texts.to_frame("text").select(word=tokens.tokenize_column(pl.col("text"))).explode("word")["word"]


def python_tokens(words: pl.Series) -> pl.Series:
    tokens._token_of.cache_clear()
    tokens.stem.cache_clear()
    return pl.Series("token", [tokens._token_of(w) for w in words.to_list()], dtype=pl.String)


def measure(frames: list[pl.DataFrame], repeat: int) -> dict[str, float]:
    cpu = {"cut regex": 0.0, "stem bytes": 0.0, "stem python": 0.0}
    skills = words_n = distinct_n = 0
    for _ in range(repeat):
        for nodes in frames:
            texts = field_texts(nodes)["text"]
            words, _, c = harness.timed(lambda t=texts: regex_words(t).drop_nulls())
            cpu["cut regex"] += c
            distinct = words.unique()
            stems, _, c = harness.timed(lambda d=distinct: tokens.word_tokens(d))
            cpu["stem bytes"] += c
            ref_stems, _, c = harness.timed(lambda d=distinct: python_tokens(d))
            cpu["stem python"] += c
            assert stems.equals(ref_stems, check_names=False), "the two stemmers differ"
            skills, words_n, distinct_n = (
                skills + nodes.height,
                words_n + len(words),
                distinct_n + len(distinct),
            )
    out = {k: round(1e6 * v / skills, 1) for k, v in cpu.items()}
    per_chunk = distinct_n // (repeat * len(frames))
    return {**out, "words per skill": round(words_n / skills, 1), "distinct words per chunk": per_chunk}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--library", type=Path, required=True)
    ap.add_argument("--chunks", type=int, default=5)
    ap.add_argument("--chunk", type=int, default=2_000)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    nodes = parse_library(args.library, workers=1).nodes
    frames = [
        nodes.slice(i * args.chunk, args.chunk) for i in range(args.chunks) if i * args.chunk < nodes.height
    ]
    measure(frames[:1], 1)  # warm up: imports, regex compilation
    res = measure(frames, args.repeat)
    print(json.dumps({"library": str(args.library), "skills": nodes.height, "us_per_skill": res}, indent=1))


if __name__ == "__main__":
    main()

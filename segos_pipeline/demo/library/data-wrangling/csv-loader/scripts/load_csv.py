#!/usr/bin/env python3
"""Load a delimited file and print its inferred schema."""
import argparse
import csv
import json

import polars as pl
from charset_normalizer import from_path


def load(path: str, delimiter: str | None = None) -> pl.DataFrame:
    best = from_path(path).best()
    text = str(best) if best else open(path, encoding="utf-8", errors="replace").read()
    if delimiter is None:
        delimiter = csv.Sniffer().sniff(text[:65536]).delimiter
    return pl.read_csv(text.encode("utf-8"), separator=delimiter, infer_schema_length=10000)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("csv_path")
    ap.add_argument("--delimiter")
    ap.add_argument("--preview", type=int, default=5)
    args = ap.parse_args()
    df = load(args.csv_path, args.delimiter)
    schema = {name: str(dtype) for name, dtype in df.schema.items()}
    print(json.dumps({"rows": df.height, "schema": schema}, indent=2))
    print(df.head(args.preview))

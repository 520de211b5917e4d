#!/usr/bin/env python3
import argparse
import json

import pandas as pd


def read_records(path):
    with open(path, encoding="utf-8") as fh:
        if path.endswith(".jsonl"):
            return [json.loads(line) for line in fh if line.strip()]
        data = json.load(fh)
        return data if isinstance(data, list) else [data]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json_records")
    ap.add_argument("--record-path", nargs="*")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    recs = read_records(a.json_records)
    df = pd.json_normalize(recs, record_path=a.record_path or None, sep=".")
    for col in df.columns:
        if df[col].map(lambda v: isinstance(v, (list, dict))).any():
            df[col] = df[col].map(json.dumps)
    df.to_csv(a.out, index=False)
    print(f"{len(df)} rows x {len(df.columns)} columns -> {a.out}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
import argparse
import re

import pandas as pd
from rapidfuzz import fuzz


def norm(v) -> str:
    tokens = re.sub(r"[^\w\s@.]", " ", str(v).lower()).split()
    return " ".join(sorted(tokens))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--cols", nargs="+", required=True)
    ap.add_argument("--threshold", type=float, default=88)
    a = ap.parse_args()
    df = pd.read_csv(a.path)
    key = df[a.cols].astype(str).agg(" ".join, axis=1).map(norm)
    parent = list(range(len(df)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for _, idx in key.groupby(key.str[:3]).groups.items():
        idx = list(idx)
        for i, x in enumerate(idx):
            for y in idx[i + 1:]:
                if fuzz.token_sort_ratio(key[x], key[y]) >= a.threshold:
                    parent[find(y)] = find(x)
    df["_cluster"] = [find(i) for i in range(len(df))]
    out = df.groupby("_cluster").first().reset_index(drop=True)
    print(f"{len(df)} -> {len(out)} rows")
    out.to_csv(a.path.replace(".csv", ".dedup.csv"), index=False)


if __name__ == "__main__":
    main()

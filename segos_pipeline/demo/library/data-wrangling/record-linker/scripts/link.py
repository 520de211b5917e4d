#!/usr/bin/env python3
import sys

import pandas as pd
import recordlinkage as rl


def main(left_path, right_path, *cols):
    left = pd.read_csv(left_path).add_prefix("")
    right = pd.read_csv(right_path)
    for df in (left, right):
        for c in cols:
            df[c] = df[c].astype(str).str.lower().str.strip()
    idx = rl.Index()
    idx.block(cols[-1])
    pairs = idx.index(left, right)
    cmp = rl.Compare()
    for c in cols:
        cmp.string(c, c, method="jarowinkler", label=c)
    features = cmp.compute(pairs, left, right)
    features["score"] = features.mean(axis=1)
    features.to_csv("match_scores.csv")
    features[features["score"] >= 0.9].to_csv("linked_pairs.csv")
    print(f"{len(pairs)} candidates, {(features['score'] >= 0.9).sum()} links")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *[c for c in sys.argv[3:] if c != "--cols"])

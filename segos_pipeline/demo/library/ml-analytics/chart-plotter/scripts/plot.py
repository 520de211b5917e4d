#!/usr/bin/env python3
import argparse

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("history")
ap.add_argument("--forecast")
ap.add_argument("--title", default="")
ap.add_argument("--out", default="chart.png")
a = ap.parse_args()

hist = pd.read_parquet(a.history)
fig, ax = plt.subplots(figsize=(10, 4.5))
for col in hist.columns[:6]:
    ax.plot(hist.index, hist[col], label=str(col), linewidth=1.4)
if a.forecast:
    fc = pd.read_parquet(a.forecast)
    for uid, g in fc.groupby("unique_id"):
        ax.plot(g["ds"], g.filter(like="Auto").iloc[:, 0], linestyle="--", label=f"{uid} forecast")
        lo, hi = g.filter(like="lo-95").iloc[:, 0], g.filter(like="hi-95").iloc[:, 0]
        ax.fill_between(g["ds"], lo, hi, alpha=0.2)
    ax.axvline(fc["ds"].min(), color="grey", linewidth=0.8)
ax.set_title(a.title)
ax.legend(frameon=False)
ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v/1000:.0f}k" if v >= 1000 else f"{v:.0f}"))
fig.savefig(a.out, dpi=150, bbox_inches="tight")
print(a.out)

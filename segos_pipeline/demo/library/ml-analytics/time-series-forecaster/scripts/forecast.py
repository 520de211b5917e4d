#!/usr/bin/env python3
import argparse

import pandas as pd
from statsforecast import StatsForecast
from statsforecast.models import AutoARIMA, AutoETS, SeasonalNaive

ap = argparse.ArgumentParser()
ap.add_argument("timeseries")
ap.add_argument("--horizon", type=int, required=True)
ap.add_argument("--season", type=int, default=7)
ap.add_argument("--out", default="forecast_table.parquet")
a = ap.parse_args()

wide = pd.read_parquet(a.timeseries)
long = (wide.interpolate(limit=2).reset_index()
        .melt(id_vars=wide.index.name or "index", var_name="unique_id", value_name="y")
        .rename(columns={wide.index.name or "index": "ds"}).dropna())
sf = StatsForecast(models=[AutoETS(season_length=a.season), AutoARIMA(season_length=a.season),
                           SeasonalNaive(season_length=a.season)], freq=pd.infer_freq(wide.index))
cv = sf.cross_validation(df=long, h=a.horizon, n_windows=3)
print(cv.groupby("unique_id").apply(lambda g: (g.filter(like="Auto").sub(g.y, axis=0)).abs().mean()))
fc = sf.forecast(df=long, h=a.horizon, level=[80, 95])
fc.to_parquet(a.out)
print(f"forecast written to {a.out}")

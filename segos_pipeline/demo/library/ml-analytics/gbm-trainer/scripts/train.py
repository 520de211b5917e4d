#!/usr/bin/env python3
import argparse
import json
import pathlib

import lightgbm as lgb
import pandas as pd
from sklearn.model_selection import train_test_split

ap = argparse.ArgumentParser()
ap.add_argument("--train", required=True)
ap.add_argument("--target", required=True)
ap.add_argument("--params", help="JSON file with best_params")
ap.add_argument("--out", required=True)
a = ap.parse_args()

df = pd.read_parquet(a.train)
X, y = df.drop(columns=[a.target]), df[a.target]
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.15, random_state=7)
params = {"objective": "binary" if y.nunique() == 2 else "regression",
          "num_leaves": 31, "learning_rate": 0.05, "min_child_samples": 50,
          "feature_fraction": 0.8, "verbose": -1}
if a.params:
    params.update(json.load(open(a.params)))
booster = lgb.train(params, lgb.Dataset(X_tr, y_tr), num_boost_round=5000,
                    valid_sets=[lgb.Dataset(X_va, y_va)],
                    callbacks=[lgb.early_stopping(100), lgb.log_evaluation(100)])
out = pathlib.Path(a.out)
out.mkdir(parents=True, exist_ok=True)
booster.save_model(str(out / "model.txt"))
(out / "features.json").write_text(json.dumps(list(X.columns)))
print("best iteration", booster.best_iteration)

#!/usr/bin/env python3
import argparse
import json

import lightgbm as lgb
import numpy as np
import pandas as pd
from sklearn import metrics

ap = argparse.ArgumentParser()
ap.add_argument("--model", required=True)
ap.add_argument("--test", required=True)
ap.add_argument("--target", required=True)
a = ap.parse_args()

test = pd.read_parquet(a.test)
X, y = test.drop(columns=[a.target]), test[a.target]
booster = lgb.Booster(model_file=a.model)
score = booster.predict(X)
report = {
    "roc_auc": metrics.roc_auc_score(y, score),
    "pr_auc": metrics.average_precision_score(y, score),
    "brier": metrics.brier_score_loss(y, score),
    "baseline_pr_auc": float(np.mean(y)),
    "n_test": int(len(y)),
}
pd.DataFrame({"y_true": y, "y_score": score, "y_pred": (score >= 0.5).astype(int)}) \
    .to_parquet("predictions.parquet")
json.dump(report, open("metrics_report.json", "w"), indent=2)
print(json.dumps(report, indent=2))

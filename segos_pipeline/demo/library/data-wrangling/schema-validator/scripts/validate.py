#!/usr/bin/env python3
import argparse
import sys

import pandas as pd
import pandera as pa
from pandera.errors import SchemaErrors


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--contract", required=True)
    ap.add_argument("--violations-out", default="violations.csv")
    a = ap.parse_args()
    df = pd.read_parquet(a.data) if a.data.endswith(".parquet") else pd.read_csv(a.data)
    schema = pa.DataFrameSchema.from_yaml(a.contract)
    try:
        valid = schema.validate(df, lazy=True)
        print(f"all {len(valid)} rows valid")
        return 0
    except SchemaErrors as err:
        cases = err.failure_cases
        cases.to_csv(a.violations_out, index=False)
        bad = set(cases["index"].dropna().astype(int))
        print(f"{len(df) - len(bad)} valid / {len(bad)} invalid rows")
        print(cases["check"].value_counts().head(5))
        return 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
import argparse
import hashlib
import json
import pathlib

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.feather as feather

ap = argparse.ArgumentParser()
ap.add_argument("validated_table")
ap.add_argument("output_dir")
ap.add_argument("--partition-by", nargs="*", default=[])
a = ap.parse_args()

table: pa.Table = feather.read_table(a.validated_table)
ds.write_dataset(
    table, a.output_dir, format="parquet",
    partitioning=a.partition_by or None, partitioning_flavor="hive",
    file_options=ds.ParquetFileFormat().make_write_options(compression="zstd"),
    existing_data_behavior="overwrite_or_ignore",
)
manifest = {
    "rows": table.num_rows,
    "schema_sha1": hashlib.sha1(str(table.schema).encode()).hexdigest(),
}
out = pathlib.Path(a.output_dir)
if not str(out).startswith("s3://"):
    (out / "_manifest.json").write_text(json.dumps(manifest, indent=2))
print(json.dumps(manifest))

"""IO manager for what the assets pass each other: small JSON records, stored inside the snapshot store.

    STORE/dagster/<asset>/<partition or __all__>.json      a version record, a window's record, counts

The store owns every table: a version's tables are written once, in the version (STORE/versions/<id>/),
and a window's traces in its files (STORE/traces/<window>/). The assets pass ids, counts and file names
between them, never a table, so nothing here copies what the store holds; a table handed to this IO
manager is refused (a bug in an asset, not something to store). For a store at a URI, STORE is its local
cache folder (the one `segos --store URI` uses): versions go to the URI, the records stay on this machine,
so every step of a run must see that folder (Dagster's default multiprocess executor on one machine does;
executors that start each step on another machine need the cache folder shared, or another IO manager).
Writes are atomic (write aside, then rename) so a crashed run never leaves a half-written file that a
later run would load.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import scipy.sparse as sp
from dagster import ConfigurableIOManager, InputContext, MetadataValue, OutputContext

from segos_pipeline.store.durable import write_atomically

from .locations import local_root, store_location

ALL = "__all__"  # file stem of an unpartitioned asset
# what earlier releases stored next to a record (tables and matrices): removed when the record is written
_COPIES = (".parquet", ".npz")


def _with(stem: Path, ext: str) -> Path:
    """`stem` plus an extension (not `with_suffix`: a partition key may itself contain dots)."""
    return stem.with_name(stem.name + ext)


def _table_in(obj: Any) -> str | None:
    """The type of the first table or matrix found in `obj` (through dicts and lists), else None."""
    if isinstance(obj, pl.DataFrame | pl.LazyFrame | pl.Series | np.ndarray) or sp.issparse(obj):
        return type(obj).__name__
    values = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, list | tuple) else ()
    return next((found for v in values if (found := _table_in(v)) is not None), None)


class SegosIOManager(ConfigurableIOManager):
    """JSON records under `STORE/dagster/` (STORE: as the `segos` resource resolves it)."""

    store_root: str | None = None  # a folder or a URI; None: $SEGOS_STORE, else data/store
    cache_dir: str | None = None  # local cache of a URI store; None: $SEGOS_CACHE, else ~/.cache/segos

    def base(self) -> Path:
        return local_root(self.store_root, self.cache_dir) / "dagster"

    def _stem(self, asset_key_path: list[str], partition: str | None) -> Path:
        return self.base().joinpath(*asset_key_path) / (partition or ALL)

    def handle_output(self, context: OutputContext, obj: Any) -> None:
        if obj is None:
            return
        table = _table_in(obj)
        if table is not None:
            raise TypeError(
                f"{'/'.join(context.asset_key.path)} passed a {table}: assets pass JSON records (ids, "
                "counts, file names); the tables belong in the snapshot store"
            )
        partition = context.asset_partition_key if context.has_asset_partitions else None
        stem = self._stem(list(context.asset_key.path), partition)
        target = _with(stem, ".json")
        write_atomically(target, json.dumps(obj, indent=2, default=str).encode())
        for copy in [stem, *(_with(stem, ext) for ext in _COPIES)]:
            if copy.is_dir():
                shutil.rmtree(copy)
            elif copy.exists():
                copy.unlink()
        context.add_output_metadata({"storage_path": MetadataValue.path(str(target))})

    def load_input(self, context: InputContext) -> Any:
        key_path = list(context.asset_key.path)
        if context.has_asset_partitions:
            keys = list(context.asset_partition_keys)
            if not keys:
                # e.g. the first window's self-dependency on the previous window: there is none
                return None
            if len(keys) > 1:
                return {k: self._read(key_path, k) for k in keys}
            return self._read(key_path, keys[0])
        return self._read(key_path, None)

    def _read(self, key_path: list[str], partition: str | None) -> Any:
        stem = self._stem(key_path, partition)
        if _with(stem, ".json").is_file():
            return json.loads(_with(stem, ".json").read_text())
        what = "/".join(key_path) + (f" [{partition}]" if partition else "")
        where = store_location(self.store_root)
        remote = (
            f"; the store {where} is a URI, whose records stay in this machine's cache: run the steps of "
            "a run on one machine, or share the cache folder (cache_dir) between them"
            if isinstance(where, str)
            else ""
        )
        raise FileNotFoundError(
            f"{what} has not been materialized into {self.base().parent} (no file under {stem.parent}); "
            f"materialize it first (the cold start with `cold_start_job`, earlier windows in order){remote}"
        )

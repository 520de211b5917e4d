"""IO manager for the intermediate outputs of the assets, stored inside the snapshot store.

    STORE/dagster/<asset>/<partition or __all__>.parquet   polars DataFrame
    STORE/dagster/<asset>/<partition or __all__>.npz       scipy sparse matrix (CSR)
    STORE/dagster/<asset>/<partition or __all__>.json      JSON-able dict/list (version records, diffs)
    STORE/dagster/<asset>/<partition or __all__>/          a dict of DataFrames, one <name>.parquet each

Keeping these next to `versions/` and `traces/` puts every file of the pipeline in one folder. For a store
at a URI, STORE is its local cache folder (the one `segos --store URI` uses): versions go to the URI, the
intermediate files stay on this machine, so every step of a run must see that folder (Dagster's default
multiprocess executor on one machine does; executors that start each step on another machine need the
cache folder shared, or another IO manager). Graph
versions themselves are committed by the library (atomic, immutable); assets pass version ids.
Own code rather than dagster-polars, whose 0.27 line breaks on polars 2.x (SPEC §13). Writes are
atomic (write aside, then rename) so a crashed run never leaves a half-written file that a later run
would load. The format is chosen from the value on write and from what is on disk on load.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import polars as pl
import scipy.sparse as sp
from dagster import ConfigurableIOManager, InputContext, MetadataValue, OutputContext

from .locations import local_root, store_location

ALL = "__all__"  # file stem of an unpartitioned asset
_EXTS = (".parquet", ".npz", ".json")


def _with(stem: Path, ext: str) -> Path:
    """`stem` plus an extension (not `with_suffix`: a partition key may itself contain dots)."""
    return stem.with_name(stem.name + ext)


def _is_tables(obj: Any) -> bool:
    return isinstance(obj, dict) and bool(obj) and all(isinstance(v, pl.DataFrame) for v in obj.values())


def _replace_file(write: Any, target: Path) -> None:
    # keep the real suffix last: save_npz appends ".npz" to any name that does not end with it
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.stem}.", suffix=f".tmp{target.suffix}")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class SegosIOManager(ConfigurableIOManager):
    """Parquet / CSR .npz / JSON under `STORE/dagster/` (STORE: as the `segos` resource resolves it)."""

    store_root: str | None = None  # a folder or a URI; None: $SEGOS_STORE, else data/store
    cache_dir: str | None = None  # local cache of a URI store; None: $SEGOS_CACHE, else ~/.cache/segos

    def base(self) -> Path:
        return local_root(self.store_root, self.cache_dir) / "dagster"

    def _stem(self, asset_key_path: list[str], partition: str | None) -> Path:
        return self.base().joinpath(*asset_key_path) / (partition or ALL)

    # ------------------------------------------------------------------------------------------- write

    def handle_output(self, context: OutputContext, obj: Any) -> None:
        if obj is None:
            return
        partition = context.asset_partition_key if context.has_asset_partitions else None
        stem = self._stem(list(context.asset_key.path), partition)
        stem.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(obj, pl.DataFrame):
            target = _with(stem, ".parquet")
            _replace_file(lambda p: obj.write_parquet(p), target)
        elif sp.issparse(obj):
            target = _with(stem, ".npz")
            _replace_file(lambda p: sp.save_npz(p, sp.csr_matrix(obj), compressed=True), target)
        elif _is_tables(obj):
            target = stem
            self._write_tables(stem, obj)
        else:
            target = _with(stem, ".json")
            _replace_file(lambda p: p.write_text(json.dumps(obj, indent=2, default=str)), target)
        self._remove_other_formats(stem, keep=target)
        context.add_output_metadata({"storage_path": MetadataValue.path(str(target))})

    def _write_tables(self, folder: Path, tables: dict[str, pl.DataFrame]) -> None:
        staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
        try:
            for name, table in tables.items():
                table.write_parquet(staging / f"{name}.parquet")
            old = folder.with_name(f".{folder.name}.old")
            if folder.exists():
                shutil.rmtree(old, ignore_errors=True)
                folder.rename(old)
            staging.rename(folder)
            shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _remove_other_formats(self, stem: Path, keep: Path) -> None:
        for candidate in [stem, *(_with(stem, ext) for ext in _EXTS)]:
            if candidate == keep or not candidate.exists():
                continue
            if candidate.is_dir():
                shutil.rmtree(candidate)
            else:
                candidate.unlink()

    # -------------------------------------------------------------------------------------------- read

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
        if stem.is_dir():
            return {p.stem: pl.read_parquet(p) for p in sorted(stem.glob("*.parquet"))}
        if _with(stem, ".parquet").is_file():
            return pl.read_parquet(_with(stem, ".parquet"))
        if _with(stem, ".npz").is_file():
            return sp.load_npz(_with(stem, ".npz")).tocsr()
        if _with(stem, ".json").is_file():
            return json.loads(_with(stem, ".json").read_text())
        what = "/".join(key_path) + (f" [{partition}]" if partition else "")
        where = store_location(self.store_root)
        remote = (
            f"; the store {where} is a URI, whose intermediate outputs stay in this machine's cache: run "
            "the steps of a run on one machine, or share the cache folder (cache_dir) between them"
            if isinstance(where, str)
            else ""
        )
        raise FileNotFoundError(
            f"{what} has not been materialized into {self.base().parent} (no file under {stem.parent}); "
            f"materialize it first (the cold start with `cold_start_job`, earlier windows in order){remote}"
        )

"""Where the code location's files are: configured paths made absolute, with the CLI's defaults.

Shared by the resources and the IO manager (which resolves the store the same way as the `segos` resource),
so neither imports the other for it. The code location runs from a checkout (`workspace.yaml`), so relative
paths are taken from the checkout's root, whatever the process's working directory.

A store may be a URI (`file:///...`, `s3://...`; configured, or in `$SEGOS_STORE`), kept as text: its
versions live there, and the folders Dagster needs on this machine (the IO manager's intermediate files,
the trace landing folder) are in its local cache, the same folder `segos --store URI` uses.
"""

from __future__ import annotations

import os
import re
from datetime import date
from pathlib import Path

from segos_pipeline.paths import DEFAULT_LIBRARY, DEFAULT_QUERIES, default_landing, default_store
from segos_pipeline.store.remote import cache_folder
from segos_pipeline.store.uri import is_uri

PROJECT_ROOT = Path(__file__).resolve().parent.parent  # the checkout that holds `assets/`
DEMO_START_DATE = "2026-11-27"  # the demo traces' first window


def resolve(path: str | Path) -> Path:
    """`path` as an absolute path; relative ones are taken from the project root."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else (PROJECT_ROOT / p).resolve()


def store_location(store_root: str | None) -> str | Path:
    """The configured store, else `$SEGOS_STORE` (read at run time, not import time), else data/store: a
    URI as given, a folder made absolute."""
    given = store_root or os.environ.get("SEGOS_STORE") or ""
    if is_uri(given):
        return given
    return resolve(given) if given else resolve(default_store())


def cache_base(cache_dir: str | None) -> Path | None:
    """The configured cache of URI stores made absolute; None: `$SEGOS_CACHE`, else ~/.cache/segos (read
    when the store is opened, as the CLI does)."""
    return resolve(cache_dir) if cache_dir else None


def local_root(store_root: str | None, cache_dir: str | None = None) -> Path:
    """The store's folder on this machine: the store itself, or the local cache of a store at a URI."""
    where = store_location(store_root)
    return cache_folder(where, cache_base(cache_dir)) if isinstance(where, str) else where


def resolve_landing(
    landing_dir: str | None, store_root: str | None = None, cache_dir: str | None = None
) -> Path:
    """The configured landing folder, else `$SEGOS_LANDING` (as `segos mcp`), else STORE/landing (a URI
    store's in its local cache, where `segos mcp --store URI` lands traces too)."""
    if landing_dir:
        return resolve(landing_dir)
    return resolve(default_landing(local_root(store_root, cache_dir)))


def library_location(library_root: str | None) -> Path:
    """The configured library, else `$SEGOS_LIBRARY` (read at run time), else the demo library."""
    return resolve(library_root or os.environ.get("SEGOS_LIBRARY") or DEFAULT_LIBRARY)


def queries_location(queries: str | None) -> Path:
    """The configured query set, else `$SEGOS_QUERIES` (read at run time), else the demo's queries."""
    return resolve(queries or os.environ.get("SEGOS_QUERIES") or DEFAULT_QUERIES)


def start_date() -> str:
    """The first daily window: `$SEGOS_START_DATE` (YYYY-MM-DD), else the demo's. Read once, when the code
    location loads: Dagster builds partition definitions at import, so a change needs a reload."""
    given = os.environ.get("SEGOS_START_DATE", "").strip() or DEMO_START_DATE
    try:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", given):
            raise ValueError
        date.fromisoformat(given)
    except ValueError:
        raise ValueError(
            f"SEGOS_START_DATE={given!r} is not a date: give the first window of traces as YYYY-MM-DD"
        ) from None
    return given

"""Default locations: the project's embedded demo data, used when the user names nothing else."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = PROJECT_ROOT / "data"
DEFAULT_LIBRARY = DATA_DIR / "library"
DEFAULT_QUERIES = DATA_DIR / "queries" / "demo.jsonl"


def default_store() -> Path:
    """`$SEGOS_STORE`, else `data/store` in the project (git-ignored)."""
    return Path(os.environ.get("SEGOS_STORE", DATA_DIR / "store"))


def default_landing() -> Path:
    """`$SEGOS_LANDING`, else `data/traces` in the project: the folder agents' traces land in (one
    `<YYYY-MM-DD>.jsonl` per window) and the next evolution window ingests."""
    return Path(os.environ.get("SEGOS_LANDING", DATA_DIR / "traces"))

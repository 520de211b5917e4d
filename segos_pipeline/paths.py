"""Default locations. The demo data ships inside the package (read only); everything segos writes goes
under the current directory or where the environment says, never into the installed package."""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path


def demo_dir() -> Path:
    """The package's embedded demo data (`library/`, `traces/`, `queries/`) as a real folder.

    The package is installed as plain files (a wheel or a checkout), so the resource root is a directory.
    """
    root = files("segos_pipeline") / "demo"
    path = Path(str(root))
    if not path.is_dir():  # e.g. a zipped install: the demo data must be a real folder to be read
        raise FileNotFoundError(f"segos demo data not found as a folder: {root}")
    return path


DEMO_DIR = demo_dir()
DEFAULT_LIBRARY = DEMO_DIR / "library"
DEMO_TRACES = DEMO_DIR / "traces"
DEFAULT_QUERIES = DEMO_DIR / "queries" / "demo.jsonl"


def default_store() -> Path:
    """`$SEGOS_STORE`, else `data/store` under the current directory (in a checkout: the git-ignored
    `data/store` when run from its root). A relative path resolves against the current directory."""
    return Path(os.environ.get("SEGOS_STORE") or Path("data") / "store")


def default_landing(store: str | Path | None = None) -> Path:
    """`$SEGOS_LANDING`, else `landing/` inside the store (`store`, or `default_store()`): the folder
    agents' traces land in (one `<YYYY-MM-DD>.jsonl` per window) and the next evolution window ingests."""
    env = os.environ.get("SEGOS_LANDING")
    if env:
        return Path(env)
    return Path(store if store is not None else default_store()) / "landing"

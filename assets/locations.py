"""Where the code location's files are: configured paths made absolute, with the CLI's defaults.

Shared by the resources and the IO manager (which resolves the store the same way as the `segos` resource),
so neither imports the other for it. The code location runs from a checkout (`workspace.yaml`), so relative
paths are taken from the checkout's root, whatever the process's working directory.
"""

from __future__ import annotations

from pathlib import Path

from segos_pipeline.paths import default_landing, default_store

PROJECT_ROOT = Path(__file__).resolve().parent.parent  # the checkout that holds `assets/`


def resolve(path: str | Path) -> Path:
    """`path` as an absolute path; relative ones are taken from the project root."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else (PROJECT_ROOT / p).resolve()


def resolve_store(store_root: str | None) -> Path:
    """The configured store, else `$SEGOS_STORE` (read at run time, not import time), else data/store."""
    return resolve(store_root) if store_root else resolve(default_store())


def resolve_landing(landing_dir: str | None, store_root: str | None = None) -> Path:
    """The configured landing folder, else `$SEGOS_LANDING` (as `segos mcp`), else STORE/landing."""
    return resolve(landing_dir) if landing_dir else resolve(default_landing(resolve_store(store_root)))

"""Where the code location's files are: configured paths made absolute, with the CLI's defaults.

Shared by the resources and the IO manager (which resolves the store the same way as the `segos` resource),
so neither imports the other for it.
"""

from __future__ import annotations

from pathlib import Path

from segos_pipeline.paths import PROJECT_ROOT, default_landing, default_store


def resolve(path: str | Path) -> Path:
    """`path` as an absolute path; relative ones are taken from the project root."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else (PROJECT_ROOT / p).resolve()


def resolve_store(store_root: str | None) -> Path:
    """The configured store, else `$SEGOS_STORE` (read at run time, not import time), else data/store."""
    return resolve(store_root) if store_root else resolve(default_store())


def resolve_landing(landing_dir: str | None) -> Path:
    """The configured landing folder, else `$SEGOS_LANDING` (as `segos mcp`), else data/traces."""
    return resolve(landing_dir) if landing_dir else resolve(default_landing())

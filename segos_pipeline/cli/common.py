"""Helpers shared by the `segos` command modules (errors, JSON output, store and version options)."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..config import retrieval_for
from ..paths import default_store

if TYPE_CHECKING:
    from ..retrieval.ranker import Retriever
    from ..store.snapshot import SnapshotStore


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


def friendly_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the library's expected failures into one actionable stderr line and a non-zero exit."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            # imported here, not at start: `segos mcp` answers its client before loading polars and scipy
            # (the store module is loaded already whenever one of its errors was raised)
            from ..store.snapshot import SnapshotError

            if isinstance(exc, SnapshotError):
                _fail(str(exc))
            if isinstance(exc, FileNotFoundError):
                _fail(str(exc) if exc.filename is None else f"{exc.strerror or 'not found'}: {exc.filename}")
            if isinstance(exc, ValueError | KeyError):
                _fail(str(exc))
            raise

    return wrapper


def require_extra(extra: str, modules: list[str], what: str) -> None:
    """Stop with the install command when `what` needs an optional extra that is not installed."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        names = ", ".join(missing)
        _fail(f"{what} needs the '{extra}' extra ({names} missing): pip install 'segos[{extra}]'")


def _emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, default=str))


def _progress(quiet: bool) -> Callable[[str], None] | None:
    return None if quiet else (lambda msg: click.echo(f"[segos] {msg}", err=True))


store_option = click.option(
    "--store",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Snapshot store folder (default: $SEGOS_STORE, else ./data/store).",
)
version_option = click.option(
    "--version", "version", default=None, help="Version id, prefix or vN (default: latest)."
)


def _store(path: Path | None) -> SnapshotStore:
    from ..store.snapshot import SnapshotStore

    return SnapshotStore(path or default_store())


def _load_retriever(store: Path | None, version: str | None, **overrides: Any) -> Retriever:
    from ..retrieval.ranker import Retriever  # scipy's graph routines load only for commands that retrieve

    snapshot = _store(store).load(version)
    config = retrieval_for(snapshot.manifest).with_overrides(
        **{k: v for k, v in overrides.items() if v is not None}
    )
    return Retriever(snapshot, config)

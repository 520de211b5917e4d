"""Helpers shared by the `segos` command modules (errors, JSON output, store and version options)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..config import WRITER_WAIT_S, retrieval_for
from ..paths import default_store
from ..store.oserrors import explain, os_errno  # standard library only
from ..store.uri import is_uri  # standard library only

if TYPE_CHECKING:
    from ..retrieval.ranker import Retriever
    from ..store.snapshot import SnapshotStore
    from .progress import Reporter


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


def _paths_given(kwargs: dict[str, Any]) -> str:
    """The files and folders a command was given, for a failure that does not name its file."""
    return ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in kwargs.items() if isinstance(v, Path))


def _polars_message(exc: BaseException, kwargs: dict[str, Any]) -> str:
    given = _paths_given(kwargs)
    if os_errno(exc) is not None:  # an OS error inside polars (it does not name the file)
        return f"{explain(exc)} (while working on {given or 'the store'})"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"could not read or process the data ({type(exc).__name__}: {first})" + (
        f"; check the input given ({given}): is it the format the command expects?" if given else ""
    )


def friendly_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """One error path for every command: the library's expected failures, operating-system errors (disk
    full, read-only store, permissions, missing files) and polars' errors become one actionable stderr
    line naming the file, and exit 2. Writes are staged, so a failed command leaves no half version."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            # imported here, not at start: `segos mcp` answers its client before loading polars and scipy
            # (the store module, and polars, are loaded already whenever one of their errors was raised)
            from ..store.snapshot import SnapshotError

            polars = sys.modules.get("polars")
            if isinstance(exc, SnapshotError):
                _fail(str(exc))
            if isinstance(exc, OSError):  # FileNotFoundError, PermissionError, ENOSPC, EROFS, ...
                _fail(explain(exc))
            if polars is not None and isinstance(exc, polars.exceptions.PolarsError):
                _fail(_polars_message(exc, kwargs))
            if isinstance(exc, ValueError | KeyError):  # adapters' TraceError, bad JSON and settings
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


def reporter(command: str, quiet: bool) -> Reporter:
    """Progress bars, messages and the closing time-by-stage summary of a long command, on stderr (stdout
    stays clean for --json); `--quiet` silences them."""
    from .progress import Reporter

    return Reporter(command, quiet)


class StoreLocation(click.ParamType):
    """A store folder (a `Path`) or a store URI (kept as text: a `Path` would fold `s3://` to `s3:/`)."""

    name = "store"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, Path) or not is_uri(str(value)):
            path = Path(value)
            if path.exists() and not path.is_dir():
                self.fail(f"{value} is a file; --store takes a folder or a URI", param, ctx)
            return path
        return str(value)


_CACHE_KEY = "segos.cache"


def _remember_cache(ctx: click.Context, _param: click.Parameter, value: Path | None) -> None:
    ctx.meta[_CACHE_KEY] = value


def store_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`--store` (a folder or a URI) and `--cache` (where a URI store is cached; read by `_store`, so the
    commands' signatures stay as they are)."""
    fn = click.option(
        "--cache",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        envvar="SEGOS_CACHE",
        expose_value=False,
        callback=_remember_cache,
        help="Local cache of a store given as a URI, one folder per URI inside it (default: $SEGOS_CACHE, "
        "else ~/.cache/segos). Unused for a store folder.",
    )(fn)
    return click.option(
        "--store",
        type=StoreLocation(),
        default=None,
        help="Snapshot store: a folder, or a URI any fsspec filesystem opens (file://, s3://, gs://, ...; "
        "see docs/storage.md). Default: $SEGOS_STORE, else ./data/store.",
    )(fn)


wait_option = click.option(
    "--wait",
    "wait",
    type=click.FloatRange(min=0),
    default=WRITER_WAIT_S,
    show_default=True,
    help="Seconds to wait for another writer of the same store to finish before giving up (0: do not "
    "wait). Writers of one store take turns; readers never wait.",
)
version_option = click.option(
    "--version", "version", default=None, help="Version id, prefix, vN, latest or served (default: latest)."
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
k_option = click.option(
    "--k", type=click.IntRange(min=1), default=5, show_default=True, help="Measure the top K skills."
)
top_n_option = click.option(
    "--top-n", type=click.IntRange(1, 100), default=None, help="Bundle size, 1-100 (default 5)."
)


def min_score_option(what: str) -> Callable[[Any], Any]:
    """`--min-score`, the relevance floor; `what` says what it does to this command's answer."""
    return click.option(
        "--min-score",
        type=click.FloatRange(min=0),
        default=None,
        help=f"Relevance floor: {what} (default 0.3; 0 turns it off).",
    )


def store_root(given: str | Path | None) -> str | Path:
    """`--store` as given, else `$SEGOS_STORE` (a URI kept as text), else the default folder."""
    if given is not None:
        return given
    env = os.environ.get("SEGOS_STORE", "")
    return env if is_uri(env) else default_store()


def given_cache() -> Path | None:
    """The command's `--cache` (or `$SEGOS_CACHE`); None outside a command, or on another thread (click's
    context is per thread: read it before handing work to one)."""
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get(_CACHE_KEY) if ctx is not None else None


def open_cli_store(root: str | Path, cache: Path | None) -> SnapshotStore:
    """The store at `root` (a folder, or a URI cached under `cache`)."""
    from ..store.remote import open_store

    return open_store(root, cache)


def _store(path: str | Path | None, create: bool = False) -> SnapshotStore:
    """The command's store; a folder that does not exist is an error (a mistyped `--store` would otherwise
    read as an empty store) unless the command `create`s it."""
    root = store_root(path)
    if not create and not is_uri(str(root)) and not Path(root).exists():
        raise ValueError(
            f"no store at {root}: no such folder (give the store's folder with --store or $SEGOS_STORE; "
            f"`segos build --store {root}` creates one)"
        )
    return open_cli_store(root, given_cache())


def in_store(st: SnapshotStore, path: Path) -> str:
    """A path inside the store, relative to it (as `verify` and `repair` name trace parts)."""
    return str(path.relative_to(st.root)) if path.is_relative_to(st.root) else str(path)


@contextlib.contextmanager
def _writing(store: Path | None, wait: float, create: bool = False) -> Iterator[SnapshotStore]:
    """The store, with its writer lock held for the whole command (read parent, compute, commit): a
    concurrent writer waits up to its --wait, and so does this one, saying so on stderr."""
    st = _store(store, create)
    st.lock_timeout = wait
    with st.writer(notify=lambda msg: click.echo(f"segos: {msg}", err=True)):
        yield st


def _load_retriever(store: Path | None, version: str | None, **overrides: Any) -> Retriever:
    from ..retrieval.ranker import Retriever  # scipy's graph routines load only for commands that retrieve

    snapshot = _store(store).load(version)
    config = retrieval_for(snapshot.manifest).with_overrides(
        **{k: v for k, v in overrides.items() if v is not None}
    )
    return Retriever(snapshot, config)

"""A window of a store on a URI as its list of Parquet files at the URI: listed, not downloaded.

`segos evolve` on a `RemoteStore` hands this to the engine. An engine that reads URIs itself (Spark, on
executors that share no filesystem with the driver) reads the files where they are, and the version
references them by path, size and the sha256 the executors computed while reading. An engine that reads
local files (the local engine, the Pipes launch) downloads them into the store's cache first
(`local_files`), as `segos evolve` always did.

The files are those `TraceStore.files` reads, in its order (the whole-window table first, then the parts
by name): a version references the same list whichever engine ran its round.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...store.remote import RemoteStore
from ..ingest import TraceStore, check_window, window_reading_order


@dataclass(frozen=True)
class StoreWindow:
    store: RemoteStore
    window: str
    files: tuple[tuple[str, int], ...]  # (path relative to the store, bytes), in reading order

    @property
    def uri(self) -> str:
        return self.store.uri

    def local_files(self) -> list[Path]:
        """The files in the store's cache, downloaded if missing (for engines that read local files)."""
        return self.store.download(dict(self.files))[0]


def store_window(store: RemoteStore, window: str) -> StoreWindow:
    """The Parquet files of `window` at the store's URI, as they are now (a later ingest into the window
    adds parts this list, the round and its version do not see)."""
    folder = f"traces/{check_window(window)}"
    listed = store.files_in(folder, ".parquet")
    names = window_reading_order(p.removeprefix(f"{folder}/") for p in listed)
    if not names:
        TraceStore(store).scan(window)  # raises the store's own "no traces ingested for window" error
    return StoreWindow(store, window, tuple((f"{folder}/{n}", listed[f"{folder}/{n}"]) for n in names))

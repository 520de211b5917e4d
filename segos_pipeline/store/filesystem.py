"""The filesystem behind a store URI (fsspec): opening a URI, moving whole files, failures as one sentence.

A store root is a URI when it starts with `scheme://` (`file://`, `memory://`, `s3://`, `gs://`, `az://`,
...): fsspec resolves the scheme to a filesystem (`s3fs`, `gcsfs`, `adlfs` are the providers' own
packages, installed beside segos when needed). Everything else is a local path.

Object stores have no rename and no append, so a file is always written whole under its final name (one
PUT: readers see all of it or nothing); on a filesystem whose rename is atomic (a local disk behind
`file://`) it is written under a temporary name and moved into place, which gives readers the same.
"""

from __future__ import annotations

import contextlib
import posixpath
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .oserrors import explain
from .snapshot import SnapshotError
from .uri import scheme

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

# The package that brings each common scheme (fsspec's own error says it too; this adds the command).
PROVIDERS = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs"}


class RemoteStoreError(SnapshotError):
    """A store URI that cannot be opened, listed, read or written (unreachable, unknown scheme, denied)."""


@contextlib.contextmanager
def remote_io(what: str, where: str) -> Iterator[None]:
    """Any failure of a filesystem call becomes one `RemoteStoreError` naming what was done where.

    Providers raise their own types (botocore, aiohttp, google-auth, ...), so everything but the store's
    own errors is caught here, and only around calls into the filesystem."""
    try:
        yield
    except SnapshotError:
        raise
    except Exception as exc:
        raise RemoteStoreError(
            f"could not {what} {where}: {explain(exc)}. Check the URI, the credentials the filesystem "
            "reads (environment, config files) and the network, then rerun"
        ) from exc


@dataclass(frozen=True)
class Location:
    """A folder on a filesystem: the URI a user gave, the filesystem, and the folder's path inside it."""

    uri: str
    fs: AbstractFileSystem
    path: str

    def join(self, *parts: str) -> str:
        """The filesystem path of `parts` under this folder."""
        return posixpath.join(self.path, *parts) if parts else self.path

    def url(self, *parts: str) -> str:
        """The URI of `parts` under this folder (what a message names)."""
        return "/".join([self.uri.rstrip("/"), *parts])

    @property
    def renames_atomically(self) -> bool:
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        return "file" in protocols or "local" in protocols


def open_location(uri: str) -> Location:
    """The filesystem of `uri`; a scheme without its package installed says which one to install."""
    try:
        from fsspec.core import url_to_fs
    except ImportError as exc:  # a core dependency: only a broken install lands here
        raise RemoteStoreError(f"a store URI needs fsspec: pip install fsspec ({exc})") from exc
    name = scheme(uri)
    try:
        fs, path = url_to_fs(uri)
    except ImportError as exc:
        package = PROVIDERS.get(name, f"the fsspec implementation of {name}://")
        raise RemoteStoreError(
            f"store {uri}: the {name}:// filesystem is not installed ({exc}); pip install {package}"
        ) from exc
    except ValueError as exc:
        raise RemoteStoreError(
            f"store {uri}: {exc} (a store is a folder path or a URI such as "
            "s3://bucket/store, gs://bucket/store, file:///srv/store)"
        ) from exc
    return Location(uri=uri.rstrip("/"), fs=fs, path=str(path).rstrip("/") or "/")


def make_parent(loc: Location, target: str) -> None:
    """A local filesystem needs the folder before a file is put in it; object stores have no folders."""
    if loc.renames_atomically:
        loc.fs.makedirs(posixpath.dirname(target), exist_ok=True)


def put_whole(loc: Location, local: Path, target: str) -> None:
    """Upload `local` to `target` so that a reader sees the whole file or none of it."""
    make_parent(loc, target)
    if loc.renames_atomically:
        tmp = f"{target}.{uuid.uuid4().hex}.tmp"
        loc.fs.put_file(str(local), tmp)
        try:
            loc.fs.mv(tmp, target)
        finally:
            with contextlib.suppress(FileNotFoundError, OSError):
                if loc.fs.exists(tmp):
                    loc.fs.rm_file(tmp)
    else:
        loc.fs.put_file(str(local), target)  # one PUT: an object appears whole or not at all


def get_whole(loc: Location, source: str, local: Path) -> None:
    """Download `source` to `local`, written under a temporary name and renamed (readers of the cache see
    a whole file or none)."""
    tmp = local.with_name(f".{local.name}.{uuid.uuid4().hex}.tmp")
    try:
        loc.fs.get_file(source, str(tmp))
        tmp.replace(local)
    finally:
        tmp.unlink(missing_ok=True)


def children(loc: Location, rel: str) -> list[dict[str, Any]]:
    """The entries (fsspec `ls` details) directly under `rel`; none when the folder does not exist."""
    path = loc.join(rel)
    loc.fs.invalidate_cache(path)  # s3fs, gcsfs, ... keep listings: another writer may have added since
    try:
        return list(loc.fs.ls(path, detail=True))
    except FileNotFoundError:
        return []


def basename(path: str) -> str:
    return posixpath.basename(path.rstrip("/"))

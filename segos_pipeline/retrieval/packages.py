"""A skill's package on disk: its folder, and its files read or copied without leaving it.

A version records the absolute root of the library it was built from (`manifest["library"]["root"]`, written
by `segos build`, `add`, `update` and `remove`, inherited by evolution rounds), and each skill its
`SKILL.md` path relative to that root (`source_path`). The package folder is the root joined with the
folder of that path. It is reported only when it exists on this machine as a folder holding that `SKILL.md`:
a version read from another machine's store, or a library moved or deleted since the build, gives no folder
and a one-line reason instead, never a path that does not hold the package.

Files are read only inside the package folder: a relative path with no `..`, no NUL, not absolute, whose
resolved location (symlinks followed) stays inside the folder's real path, opened without following a
symlink in its last component, a regular file of at most `MAX_FILE_BYTES`. A link inside the package that
points inside it is read; one that leaves it is refused.
"""

from __future__ import annotations

import mimetypes
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..graph.reads import LeavesRoot, NotARegularFile, read_limited

MAX_FILE_BYTES = 1024 * 1024  # one package file read or exported (scripts and notes are far smaller)
MAX_LISTED = 200  # files listed for one package (the listing says when there are more)
SKILL_FILE = "SKILL.md"
FOLDER_TTL_S = 1.0  # how long a bundle trusts that a package folder is (or is not) there
MAX_REMEMBERED = 4096  # package folders remembered per version


class PackageError(ValueError):
    """A package file that cannot be given: refused (outside the package, too large) or missing."""


class PathRefused(PackageError):
    """A path a client gave that names nothing inside the package (`..`, absolute, NUL, a link out)."""


@dataclass(frozen=True)
class PackageFolder:
    """Where a skill's package is: `path` (absolute) when it is on this machine, else None and `problem`."""

    path: str | None
    problem: str | None


@dataclass(frozen=True)
class PackageFile:
    """One file read from a package: text when it is UTF-8, else its bytes."""

    path: str  # relative to the package folder, `/`-separated
    size: int
    mime_type: str
    text: str | None
    data: bytes | None

    @property
    def content(self) -> str | bytes:
        return self.text if self.text is not None else (self.data or b"")


def library_root(manifest: dict[str, Any]) -> str | None:
    """The absolute library root a version records (None for a version that records none)."""
    root = (manifest.get("library") or {}).get("root")
    return str(root) if root else None


def package_folder(manifest: dict[str, Any], source_path: str | None) -> PackageFolder:
    """The package folder of a skill whose `SKILL.md` is at `source_path` (relative to the library root).

    One `stat` when the package is there (every bundle member pays it, per request: a library may move while
    a server runs); the reason it is not is worked out only then."""
    root = library_root(manifest)
    if root is None:
        return PackageFolder(None, "the version records no library root (rebuild it with `segos build`)")
    parts = (source_path or "").split("/")
    if not source_path or source_path.startswith("/") or "\\" in source_path or ".." in parts:
        return PackageFolder(None, f"the skill's source path {source_path!r} is not inside the library")
    folder = os.path.join(root, *parts[:-1])
    if os.path.isfile(os.path.join(folder, parts[-1])):
        return PackageFolder(folder, None)
    if not os.path.isdir(root):
        return PackageFolder(
            None, f"the library root {root} is not on this machine (moved, deleted, or built elsewhere)"
        )
    return PackageFolder(None, f"{source_path} is no longer in the library at {root} (moved or deleted)")


class Folders:
    """`package_folder` of a version's skills, each looked at again once its answer is `ttl_s` old: a
    bundle member costs a `stat` at most every `ttl_s` seconds rather than on every request (a stat per
    member on every request is a visible share of it), and a moved library shows within `ttl_s`."""

    def __init__(self, manifest: dict[str, Any], ttl_s: float = FOLDER_TTL_S):
        self.manifest, self.ttl_s = manifest, ttl_s
        self._seen: dict[int, tuple[float, PackageFolder]] = {}

    def of(self, node: int, source_path: str | None) -> PackageFolder:
        now = time.monotonic()
        seen = self._seen.get(node)
        if seen is not None and now - seen[0] < self.ttl_s:
            return seen[1]
        found = package_folder(self.manifest, source_path)
        if len(self._seen) >= MAX_REMEMBERED:
            self._seen.clear()  # bounded, refilled by use
        self._seen[node] = (now, found)
        return found


def relative_parts(path: Any) -> tuple[str, ...]:
    """The components of a client-given path inside a package, or PathRefused."""
    if not isinstance(path, str) or not path.strip():
        raise PathRefused("give a file path inside the package (e.g. scripts/run.py)")
    if "\0" in path:
        raise PathRefused("a file path may not contain NUL")
    if path.startswith(("/", "\\")) or (len(path) > 1 and path[1] == ":"):
        raise PathRefused(f"{path!r} is absolute; give a path relative to the package folder")
    if "\\" in path:
        raise PathRefused(f"{path!r}: separate folders with '/'")
    parts = tuple(p for p in path.split("/") if p not in ("", "."))
    if ".." in parts:
        raise PathRefused(f"{path!r} leaves the package ('..'); give a path inside it")
    if not parts:
        raise PathRefused(f"{path!r} names the package folder itself; give a file inside it")
    return parts


def read_package_file(folder: Path, path: str, max_bytes: int = MAX_FILE_BYTES) -> PackageFile:
    """The file at `path` inside the package `folder`: text if it decodes as UTF-8, else its bytes. Read as
    the parse reads a SKILL.md (`read_limited`): a regular file, and the file actually opened must lie
    inside the folder's real path (asked of the kernel through the open descriptor, so a link or folder
    swapped in between cannot lead the read outside)."""
    parts = relative_parts(path)
    shown = "/".join(parts)
    try:
        data, more = read_limited(os.path.join(folder, *parts), max_bytes, root=str(folder))
    except LeavesRoot:
        raise PathRefused(f"{shown} leads outside the package (a symbolic link); it is not read") from None
    except NotARegularFile:
        raise PathRefused(f"{shown} is not a regular file") from None
    except FileNotFoundError:
        raise PathRefused(f"no file {shown} in the package") from None
    except OSError as exc:
        raise PathRefused(f"{shown} cannot be read: {exc.strerror or exc}") from None
    if more:
        raise PathRefused(f"{shown} is larger than {max_bytes:,} bytes; it is not read")
    mime = mimetypes.guess_type(shown)[0]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return PackageFile(shown, len(data), mime or "application/octet-stream", None, data)
    return PackageFile(shown, len(data), mime or "text/plain", text, None)


def package_entries(folder: Path) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under a package folder but hidden ones (`.git`, ...), folders first sorted by name, as
    (relative `/` path, its lstat): links are reported as links, never followed."""
    for here, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith("."):
                continue
            full = os.path.join(here, name)
            yield os.path.relpath(full, folder).replace(os.sep, "/"), os.lstat(full)
        for name in dirs:  # a link to a folder: os.walk lists it among the folders and does not enter it
            full = os.path.join(here, name)
            info = os.lstat(full)
            if stat.S_ISLNK(info.st_mode):
                yield os.path.relpath(full, folder).replace(os.sep, "/"), info


def list_package_files(folder: Path, limit: int = MAX_LISTED) -> tuple[list[dict[str, Any]], bool]:
    """The regular files of a package (relative paths, sorted, with sizes; links and hidden files left
    out) and whether there were more than `limit`."""
    found: list[dict[str, Any]] = []
    for rel, info in package_entries(folder):
        if not stat.S_ISREG(info.st_mode):
            continue
        if len(found) >= limit:
            return sorted(found, key=lambda f: f["path"]), True
        found.append({"path": rel, "bytes": info.st_size})
    return sorted(found, key=lambda f: f["path"]), False


MAX_EXPORTED = 1000  # files copied from one package (the rest are reported skipped)


def copy_package(
    folder: Path, dest: Path, limit: int = MAX_EXPORTED
) -> tuple[list[str], list[dict[str, str]]]:
    """Copy a package's regular files into the new folder `dest` (created), each read as `read_package_file`
    reads it (inside the package, at most `MAX_FILE_BYTES`): (copied paths, [{path, reason}] skipped).
    Links are never followed (skipped, named), nor are hidden files copied."""
    dest.mkdir(parents=True)
    copied: list[str] = []
    skipped: list[dict[str, str]] = []
    for rel, info in package_entries(folder):
        if stat.S_ISLNK(info.st_mode):
            skipped.append({"path": rel, "reason": "a symbolic link (links are not followed)"})
            continue
        if not stat.S_ISREG(info.st_mode):
            skipped.append({"path": rel, "reason": "not a regular file"})
            continue
        if len(copied) >= limit:
            skipped.append({"path": rel, "reason": f"over {limit} files in one package"})
            continue
        try:
            found = read_package_file(folder, rel)
        except PathRefused as exc:
            skipped.append({"path": rel, "reason": str(exc)})
            continue
        target = dest.joinpath(*rel.split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(found.data if found.data is not None else (found.text or "").encode("utf-8"))
        if info.st_mode & stat.S_IXUSR:  # scripts stay runnable
            target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        copied.append(rel)
    return copied, skipped

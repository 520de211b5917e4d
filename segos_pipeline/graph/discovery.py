"""Finding a library's packages (SPEC §3): the folders under the root that hold a SKILL.md, listed once, never
following a link out of the root; what the walk cannot list is reported, never silently dropped."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .reads import relative_path, shown_path
from .report import Problem

SKILL_FILE = "SKILL.md"


SKIP_DIRS = {"node_modules", "__pycache__"}


@dataclass(frozen=True, slots=True)
class Listed:
    """What a walk's listing of a package folder already tells its parse, which then need not ask the
    filesystem again (two system calls of about sixteen a package)."""

    skill_is_file: bool  # SKILL.md is a regular file, not a symlink
    scripts_is_dir: bool  # scripts/ is a folder, not a symlink
    skill_ino: int = 0  # SKILL.md's inode as listed (free: the directory entry carries it); 0 unknown


def listing(folder: str, dropped: list[Problem] | None = None) -> tuple[Listed | None, list[str]]:
    """What `folder`'s own SKILL.md and scripts/ are (None when it holds no SKILL.md: a non-directory entry
    of that name, as os.walk classifies it), and the subfolders discovery descends into (not hidden, not
    vendored, not symlinks), sorted. What the walk passes over that may hold packages (a symlinked folder,
    a folder it cannot list) is added to `dropped`, the path absolute (`walk_problems` makes it relative)."""
    try:
        entries = list(os.scandir(folder))
    except OSError as exc:  # unreadable (or deeper than PATH_MAX): nothing found below it, and said so
        if dropped is not None:
            dropped.append(_unlisted(folder, exc))
        return None, []
    has_skill = skill_is_file = scripts_is_dir = False
    skill_ino = 0
    subs: list[str] = []
    for entry in entries:
        name = entry.name
        try:
            is_dir = entry.is_dir()
        except OSError:
            is_dir = False
        if not is_dir:
            if name == SKILL_FILE:
                has_skill = True
                try:  # the entry's type and inode: no system call where the filesystem reports them
                    skill_is_file = entry.is_file(follow_symlinks=False)
                    skill_ino = entry.inode()
                except OSError:
                    skill_is_file = False
        elif not name.startswith(".") and name not in SKIP_DIRS:
            try:
                link = entry.is_symlink()
            except OSError:
                link = False  # as os.path.islink answers on an error
            if not link:
                subs.append(name)
                scripts_is_dir = scripts_is_dir or name == "scripts"
            elif dropped is not None:
                dropped.append(_linked_folder(entry.path))
    return (Listed(skill_is_file, scripts_is_dir, skill_ino) if has_skill else None), sorted(subs)


def package_folders(root: str) -> Iterator[str]:
    """Folders under `root` that hold a SKILL.md, in the order of os.walk(root) with sorted folder names;
    hidden and vendored dirs skipped, symlinked directories not descended (a link can neither leave the
    root nor loop). Without os.walk's per-folder lstat and path objects (a million packages are two million
    folders to list)."""
    return (folder for folder, _ in listed_packages(root))


def listed_packages(root: str, dropped: list[Problem] | None = None) -> Iterator[tuple[str, Listed]]:
    """`package_folders` with what the listing of each package folder showed (see `Listed`); what the walk
    passes over is added to `dropped` (see `listing`)."""
    stack = [root]
    while stack:
        folder = stack.pop()
        listed, subs = listing(folder, dropped)
        if listed is not None:
            yield folder, listed
        stack.extend(os.path.join(folder, name) for name in reversed(subs))


def _linked_folder(path: str) -> Problem:
    # a stat through the link, never a read: whether a package is lost or only a folder passed over
    package = os.path.isfile(os.path.join(path, SKILL_FILE))
    return Problem(
        path,
        f"{'package ' if package else ''}folder is a symbolic link, not followed (a link can leave the "
        "library root or loop)",
        "skipped with every package under it; put the folder itself in the library",
        "error" if package else "warning",
        "symlinked_folder",
    )


def _unlisted(path: str, exc: OSError) -> Problem:
    if exc.errno == errno.ENAMETOOLONG:
        why = f"its path is longer than the system allows (PATH_MAX, {_path_max()} bytes)"
        action = "skipped with every package under it; move the packages closer to the library root"
    else:
        code = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
        why = f"it cannot be listed ({code}: {exc.strerror})"
        action = "skipped with every package under it; make the folder readable"
    return Problem(path, f"folder not searched for packages: {why}", action, "error", "folder_not_listed")


def _path_max() -> int:
    try:
        return os.pathconf("/", "PC_PATH_MAX")
    except (OSError, ValueError):
        return 4096


WALK_CODES = ("symlinked_folder", "folder_not_listed")  # the problems of the walk, not of a package


MAX_REPORTED_PATH = 300  # characters of a path in a walk problem's row (a PATH_MAX-deep one is 4,096)


def walk_problems(dropped: Iterable[Problem], root: str | Path) -> list[Problem]:
    """The walk's problems (`listing`) with their paths relative to the library `root`, in the report's
    form (undecodable bytes escaped, a path past `MAX_REPORTED_PATH` characters cut in the middle)."""
    out = []
    for p in dropped:
        rel = shown_path(relative_path(p.file, root))
        if len(rel) > MAX_REPORTED_PATH:
            half = MAX_REPORTED_PATH // 2
            rel = f"{rel[:half]}…{rel[-half:]} ({len(rel):,} characters)"
        out.append(Problem(rel, p.problem, p.action, p.severity, p.code))
    return out


def inside_root(path: str | Path, root: str | Path) -> bool:
    """Whether `path` provably resolves inside `root`. os.path.realpath, unlike Path.resolve on Python 3.11,
    does not raise on a symlink loop; the loop then fails to open and is reported as unreadable. It does
    raise when a link is swapped for a file while it is being resolved (readlink on what lstat saw as a
    link: EINVAL): a path that cannot be resolved is not inside, so a race skips the file, never the build."""
    try:
        real, real_root = os.path.realpath(path), os.path.realpath(root)
    except OSError:
        return False
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)

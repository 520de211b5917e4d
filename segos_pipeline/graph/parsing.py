"""SKILL.md packages → the node table and its build report (SPEC §3).

Every problem becomes a row of the build report (file, problem, action, severity). A bad package is read
as far as possible and recorded; it never aborts the build and is never dropped without a report row.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import multiprocessing
import os
import re
import reprlib
import stat
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import yaml

from ..config import ParseConfig
from ..text.tokens import normalize_names
from .frontmatter import FrontmatterRefused, YamlLimits, load_yaml

SKILL_FILE = "SKILL.md"
ENTRYPOINT_SUFFIXES = (".py", ".sh", ".js", ".ts")
# Entrypoints a skill lists (the first, sorted): a bundle and a detail carry them, so a package with 100,000
# scripts would make every reply about it megabytes. The rest are reported, not listed.
MAX_ENTRYPOINTS = 256
# Packages a duplicate-name warning names besides its own: the report stays linear in the packages however
# many share one name (8,000 packages under one name made a 769 MB report when each named all the others).
MAX_NAMED_DUPLICATES = 5
_SKIP_DIRS = {"node_modules", "__pycache__"}

NODE_SCHEMA: dict[str, pl.DataType] = {
    "id": pl.String,  # package folder relative to the library root (POSIX)
    "name": pl.String,  # frontmatter `name`, else the folder name
    "folder": pl.String,  # last component of id; also matched when a skill is named
    "description": pl.String,
    "capability": pl.String,
    "domain_tags": pl.List(pl.String),
    "tooling": pl.List(pl.String),
    "inputs": pl.List(pl.String),
    "outputs": pl.List(pl.String),
    "example_tasks": pl.List(pl.String),
    "entrypoints": pl.List(pl.String),  # files under scripts/ ending .py .sh .js .ts, package-relative
    "compatibility": pl.String,
    "allowed_tools": pl.List(pl.String),
    "license": pl.String,
    "source_path": pl.String,  # SKILL.md path relative to the library root
    "content_hash": pl.String,  # sha256 of the SKILL.md bytes and the entrypoint names
    "body": pl.String,
    "body_chars": pl.Int64,
    "problems": pl.List(pl.String),  # short codes; the build report has the full rows
}

REPORT_SCHEMA: dict[str, pl.DataType] = {
    "file": pl.String,
    "problem": pl.String,
    "action": pl.String,
    "severity": pl.String,  # "error": content lost or replaced; "warning": derived a missing field
}


@dataclass
class Problem:
    file: str
    problem: str
    action: str
    severity: str = "warning"
    code: str = ""


@dataclass
class ParsedLibrary:
    nodes: pl.DataFrame
    report: pl.DataFrame
    root: Path
    # what `parse_library(per_chunk=f)` computed in the workers: f of each chunk's node frame, in order;
    # chunk i's skills follow chunk i-1's in `nodes` only when `in_order` (found in id order, as usual)
    per_chunk: list[Any] | None = None
    in_order: bool = True

    @property
    def n_problems(self) -> int:
        return self.report.height


@dataclass
class _Frontmatter:
    data: dict[str, Any] = field(default_factory=dict)
    body: str = ""
    problems: list[tuple[str, str, str, str]] = field(default_factory=list)  # code, problem, action, sev


# ---------------------------------------------------------------------------------------------- discovery


def discover_packages(root: Path) -> Iterator[Path]:
    """Folders under `root` that hold a SKILL.md, in sorted order; hidden and vendored dirs skipped.

    Symlinked directories are not descended, so a link can neither leave the root nor loop.
    """
    return map(Path, package_folders(str(root)))


@dataclass(frozen=True, slots=True)
class Listed:
    """What a walk's listing of a package folder already tells its parse, which then need not ask the
    filesystem again (two system calls of about sixteen a package)."""

    skill_is_file: bool  # SKILL.md is a regular file, not a symlink
    scripts_is_dir: bool  # scripts/ is a folder, not a symlink
    skill_ino: int = 0  # SKILL.md's inode as listed (free: the directory entry carries it); 0 unknown


def _listing(folder: str, dropped: list[Problem] | None = None) -> tuple[Listed | None, list[str]]:
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
        elif not name.startswith(".") and name not in _SKIP_DIRS:
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
    """`discover_packages` as path strings: the order of os.walk(root) with sorted folder names, without
    its per-folder lstat and path objects (a million packages are two million folders to list)."""
    return (folder for folder, _ in listed_packages(root))


def listed_packages(root: str, dropped: list[Problem] | None = None) -> Iterator[tuple[str, Listed]]:
    """`package_folders` with what the listing of each package folder showed (see `Listed`); what the walk
    passes over is added to `dropped` (see `_listing`)."""
    stack = [root]
    while stack:
        folder = stack.pop()
        listed, subs = _listing(folder, dropped)
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
    """The walk's problems (`_listing`) with their paths relative to the library `root`, in the report's
    form (undecodable bytes escaped, a path past `MAX_REPORTED_PATH` characters cut in the middle)."""
    out = []
    for p in dropped:
        rel = shown_path(_relative(p.file, root))
        if len(rel) > MAX_REPORTED_PATH:
            half = MAX_REPORTED_PATH // 2
            rel = f"{rel[:half]}…{rel[-half:]} ({len(rel):,} characters)"
        out.append(Problem(rel, p.problem, p.action, p.severity, p.code))
    return out


def _inside(path: str | Path, root: str | Path) -> bool:
    """Whether `path` provably resolves inside `root`. os.path.realpath, unlike Path.resolve on Python 3.11,
    does not raise on a symlink loop; the loop then fails to open and is reported as unreadable. It does
    raise when a link is swapped for a file while it is being resolved (readlink on what lstat saw as a
    link: EINVAL): a path that cannot be resolved is not inside, so a race skips the file, never the build."""
    try:
        real, real_root = os.path.realpath(path), os.path.realpath(root)
    except OSError:
        return False
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


# -------------------------------------------------------------------------------------------- frontmatter

_FENCE = re.compile(r"^(?:---|\.\.\.)\s*$", re.MULTILINE)
# `[^\n]*` takes the rest of the line without backtracking (a lazy `.+?\s*$` is quadratic on long blanks).
_SALVAGE = re.compile(r"^(name|description)[^\S\n]*:\s*([^\n]*)", re.MULTILINE)


@lru_cache(maxsize=64)
def yaml_limits(config: ParseConfig) -> YamlLimits:
    return YamlLimits(config.max_frontmatter_chars, config.max_yaml_depth, config.max_yaml_nodes)


def split_frontmatter(text: str, limits: YamlLimits | None = None) -> _Frontmatter:
    """Split YAML frontmatter from the Markdown body, loading it with a bounded safe loader only."""
    limits = limits or yaml_limits(ParseConfig())
    out = _Frontmatter()
    stripped = text.lstrip("\ufeff").lstrip()
    if not stripped.startswith("---"):
        out.body = text.strip()
        if text.strip():
            out.problems.append(
                (
                    "no_frontmatter",
                    "no YAML frontmatter",
                    "fields derived from folder name and body",
                    "warning",
                )
            )
        return out
    first_nl = stripped.find("\n")
    if first_nl < 0:
        out.problems.append(
            ("unterminated_frontmatter", "frontmatter fence never closed", "read as body", "error")
        )
        return out
    close = _FENCE.search(stripped, first_nl + 1)
    if close is None:
        out.body = stripped[first_nl + 1 :].strip()
        out.problems.append(
            ("unterminated_frontmatter", "frontmatter fence never closed", "whole file read as body", "error")
        )
        return out
    raw = stripped[first_nl + 1 : close.start()]
    out.body = stripped[close.end() :].strip()
    try:
        data = load_yaml(raw, limits)
    except FrontmatterRefused as exc:
        out.data = _salvage(raw[: limits.max_chars])
        salvaged = ", ".join(sorted(out.data)) or "nothing"
        out.problems.append((exc.code, exc.problem, f"frontmatter ignored; salvaged {salvaged}", "error"))
        return out
    except yaml.YAMLError as exc:
        reason = " ".join(str(getattr(exc, "problem", None) or exc).split())[:160]
        out.data = _salvage(raw)
        salvaged = ", ".join(sorted(out.data)) or "nothing"
        out.problems.append(
            (
                "invalid_yaml",
                f"frontmatter is not valid (safe) YAML: {reason}",
                f"salvaged {salvaged}",
                "error",
            )
        )
        return out
    if data is None:
        data = {}
    if not isinstance(data, dict):
        out.problems.append(
            (
                "frontmatter_not_mapping",
                f"frontmatter is a YAML {type(data).__name__}, not a mapping",
                "frontmatter ignored; fields derived from folder name and body",
                "error",
            )
        )
        data = {}
    out.data = {str(k): v for k, v in data.items()}
    return out


def _salvage(raw: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for key, value in _SALVAGE.findall(raw):
        if value.strip():
            found.setdefault(key, value.strip().strip("'\""))
    return found


# ------------------------------------------------------------------------------------------ field helpers

# Linear-time patterns: a SKILL.md line of 100k blanks must not cost minutes (the former heading pattern
# `(.+?)\s*#*\s*$` was cubic on it). Closing `#`s and blanks are trimmed in Python, see _heading_title.
_HEADING = re.compile(r"^#{1,6}[^\S\n]+[^\n]*", re.MULTILINE)
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(\S.*)$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9`\"'(])")
# Markdown emphasis and code marks; underscores inside words (snake_case field names) are kept.
_MARKUP = re.compile(r"`|\*{1,3}|(?<!\w)_{1,2}|_{1,2}(?!\w)")


def markdown_sections(body: str) -> dict[str, str]:
    """Heading title (lowercased) → the text under it, up to the next heading of any level."""
    sections: dict[str, str] = {}
    matches = list(_HEADING.finditer(body))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(body)
        sections.setdefault(_heading_title(m.group()), body[m.end() : end].strip())
    return sections


def _heading_title(line: str) -> str:
    """`## Title ##` → "title": the text after the hashes without a closing run of `#` (ATX style)."""
    rest = line.lstrip("#").strip()
    title = rest.rstrip("#").rstrip()
    return (title or rest[:1]).strip().lower()


def section_items(text: str) -> list[str]:
    """Bullet items of a section, or its non-empty lines when it has no bullets."""
    bullets = [m.group(1).rstrip() for line in text.splitlines() if (m := _BULLET.match(line))]
    lines = bullets or [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("```")]
    return [_MARKUP.sub("", item).strip() for item in lines if item.strip()]


def as_str_list(value: Any, split_words: bool = False) -> list[str]:
    """Normalise a frontmatter value (string, list, mapping, list of mappings) to a list of strings."""
    if value is None:
        return []
    if isinstance(value, str):
        # splitting on bare `,` and newlines and stripping is linear; `\s*,\s*` was quadratic on long blanks
        parts = re.split(r"[,\s]+" if split_words else r"[,\n]", value)
        return [p.strip() for p in parts if p.strip()]
    if isinstance(value, dict):
        return [f"{k}: {_scalar(v)}" if v not in (None, "") else str(k) for k, v in value.items()]
    if type(value) is list and all(type(item) is str for item in value):  # the common shape, quickly
        return [s for item in value if (s := item.strip())]
    if isinstance(value, Iterable):
        items: list[str] = []
        for item in value:
            if isinstance(item, dict):
                items.append(_mapping_item(item))
            elif item is not None:
                items.append(_scalar(item))
        return [i for i in items if i]
    return [_scalar(value)]


def _scalar(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(_scalar(v) for v in value)
    if isinstance(value, dict):
        return _mapping_item(value)
    return str(value).strip()


def _mapping_item(item: dict[Any, Any]) -> str:
    """An I/O-style mapping such as {name: df, type: DataFrame, description: ...} as "df: DataFrame"."""
    name = item.get("name") or item.get("id") or item.get("field")
    if name is None and len(item) == 1:
        key, value = next(iter(item.items()))
        return f"{key}: {_scalar(value)}" if value not in (None, "") else str(key)
    if name is None:
        return "; ".join(f"{k}: {_scalar(v)}" for k, v in item.items())
    kind = item.get("type") or item.get("format")
    return f"{name}: {_scalar(kind)}" if kind else str(name)


def first_sentence(text: str) -> str:
    text = " ".join(text.split())
    return _SENTENCE_END.split(text, maxsplit=1)[0] if text else ""


def first_paragraph(body: str, limit: int = 500) -> str:
    for block in re.split(r"\n\s*\n", body):
        block = block.strip()
        if block and not block.startswith(("#", "```", "|", "---")):
            return " ".join(_MARKUP.sub("", block).split())[:limit]
    return ""


def _first(data: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if data.get(key) not in (None, "", [], {}):
            return data[key]
    return None


class _Sections:
    """A body's sections, split only when a field falls back to them and the body can hold the title
    (most synthetic and many real frontmatters declare every list field, and splitting is a tenth of a
    package's parse)."""

    def __init__(self, body: str):
        self.body = body
        self._split: dict[str, str] | None = None
        self._lower: str | None = None

    def __contains__(self, title: str) -> bool:
        if self._split is None and title.isascii():
            # A heading's title is a stretch of the body, lowercased. `str.lower` maps each character on
            # its own except Σ (by context, and never to ASCII), so an ASCII title is a substring of the
            # lowered body wherever a heading has it: absent from it, no need to split.
            if self._lower is None:
                self._lower = self.body.lower()
            if title not in self._lower:
                return False
        return title in self.split

    def __getitem__(self, title: str) -> str:
        return self.split[title]

    @property
    def split(self) -> dict[str, str]:
        if self._split is None:
            self._split = markdown_sections(self.body)
        return self._split


def _from_keys_or_section(
    data: dict[str, Any], sections: _Sections, keys: tuple[str, ...], titles: tuple[str, ...]
) -> list[str]:
    value = _first(data, *keys)
    if value is not None:
        return as_str_list(value)
    for title in titles:
        if title in sections:
            return section_items(sections[title])
    return []


def domain_tags(data: dict[str, Any]) -> list[str]:
    tags: list[str] = []
    for key in ("domain", "domains", "tags", "category", "categories"):
        tags.extend(as_str_list(data.get(key)))
    metadata = data.get("metadata")
    if isinstance(metadata, dict):
        tags.extend(as_str_list(metadata.get("tags")))
        for value in metadata.values():
            if isinstance(value, dict):
                tags.extend(as_str_list(value.get("tags")))
    return list(dict.fromkeys(tags))  # de-duplicated, first-seen order


# ----------------------------------------------------------------------------------------------- packages


class NotARegularFile(OSError):
    """SKILL.md is a FIFO, device, socket or directory: reading it could block forever or never end."""


class LeavesRoot(OSError):
    """The file SKILL.md opened lies outside the library root (a link, or a folder swapped for one)."""


@lru_cache(maxsize=16)
def _real_root(root: str) -> str:
    return os.path.realpath(root).rstrip(os.sep) + os.sep


@lru_cache(maxsize=16)
def _root_device(root: str) -> int:
    return os.stat(root).st_dev


def _opened_path(fd: int) -> str | None:
    """The real path of the file open on `fd`, as the kernel knows it (Linux: /proc/self/fd); None where
    it cannot say."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


_FILE_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def _file_kind(mode: int) -> str:
    return next((kind for test, kind in _FILE_KINDS if test(mode)), "not a regular file")


def _relative(pkg: str | Path, root: str | Path) -> str:
    """`pkg` relative to `root` in POSIX form ("." for the root itself), by string prefix: pathlib's
    relative_to costs more than reading a small SKILL.md."""
    pkg_s, root_s = os.fspath(pkg), os.fspath(root).rstrip(os.sep) or os.sep
    if pkg_s == root_s:
        return "."
    prefix = root_s if root_s.endswith(os.sep) else root_s + os.sep
    if pkg_s.startswith(prefix):
        return pkg_s[len(prefix) :].replace(os.sep, "/")
    return Path(pkg).relative_to(root).as_posix()  # not a plain prefix: pathlib decides (or raises)


def read_limited(
    path: str | Path, limit: int, mode: int | None = None, root: str | None = None, ino: int = 0
) -> tuple[bytes, bool]:
    """The first `limit` bytes of a regular file and whether there were more; NotARegularFile otherwise.

    The kind is checked before opening (opening some devices has effects; `mode` is the caller's own
    lstat of a file that is not a symlink) and again on the open file: O_NONBLOCK keeps the open itself
    from waiting on a FIFO swapped in between the two checks.

    A file the caller saw as no symlink (`mode` given) is opened with O_NOFOLLOW: swapped for a link since,
    it fails to open. With `root`, the file actually opened must lie under it (its path asked of the kernel
    through the open descriptor, so the check and the read concern the same file, whatever link or
    swapped folder led there); LeavesRoot otherwise, before a byte is read. That question costs about 5 µs,
    a few percent of a package's parse, so it is skipped when the opened file is the very inode the walk
    listed inside the root (`ino`, on the root's device: no link or swapped folder can have led elsewhere).
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if mode is None:
        mode = os.stat(path).st_mode
    else:
        flags |= os.O_NOFOLLOW
    if not stat.S_ISREG(mode):
        raise NotARegularFile(f"SKILL.md is {_file_kind(mode)}")
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and flags & os.O_NOFOLLOW:
            raise NotARegularFile("SKILL.md became a symlink while the library was read") from None
        raise
    try:
        st = os.fstat(fd)
        if root is not None and not (ino and st.st_ino == ino and st.st_dev == _root_device(root)):
            where = _opened_path(fd)
            if where is None:  # no kernel answer (not Linux): the path's own resolution, checked now
                where = os.path.realpath(path)
            if not where.startswith(_real_root(root)):
                raise LeavesRoot(errno.EXDEV, "SKILL.md leaves the library root")
        if not stat.S_ISREG(st.st_mode):
            raise NotARegularFile(f"SKILL.md is {_file_kind(st.st_mode)}")
        # Plain os.read calls sized by fstat: a buffered file object, or read(limit + 1), would allocate the
        # whole limit (1 MB) for every small file, most of a package's read time. One byte more than the
        # size notices a file that grew since the fstat; it is then read on up to the limit.
        parts: list[bytes] = []
        got, goal = 0, min(st.st_size, limit) + 1
        while got < goal:
            part = os.read(fd, goal - got)
            if not part:
                break
            parts.append(part)
            got += len(part)
            if got == goal <= limit:
                goal = limit + 1
        data = b"".join(parts)
    finally:
        os.close(fd)
    return data[:limit], len(data) > limit


def _decodable(text: str) -> bool:
    """False for a path holding bytes that were not UTF-8 (os functions return them as lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown_path(text: str) -> str:
    """A path for the report: undecodable bytes as backslash escapes (b'\\xff' → "\\xff")."""
    return os.fsencode(text).decode("utf-8", errors="backslashreplace")


def _entrypoints(
    pkg: str | Path, root: str | Path, scripts_is_dir: bool | None = None
) -> tuple[list[str], list[str]]:
    """Entrypoint paths (package-relative) and the paths skipped because their names are not UTF-8;
    `scripts_is_dir`, when the caller's listing already knows it, spares an lstat.

    Walked with `os.scandir`: a directory entry knows whether it is a symlink or a directory without a
    further system call, which matters at a million packages (one scripts folder each)."""
    scripts = os.path.join(pkg, "scripts")
    if scripts_is_dir is None:
        try:
            scripts_is_dir = stat.S_ISDIR(os.lstat(scripts).st_mode)
        except OSError:
            scripts_is_dir = False
    if not scripts_is_dir:  # missing, a file, or a symlink: no entrypoints
        return [], []
    found: list[str] = []
    undecodable: list[str] = []
    pending = [("scripts", scripts)]
    while pending:
        rel_dir, folder = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            name = entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    if not name.startswith("."):
                        pending.append((f"{rel_dir}/{name}", entry.path))
                    continue
                link = entry.is_symlink()
                if link and entry.is_dir():  # a linked folder is listed, never entered (as os.walk does)
                    continue
            except OSError:
                continue
            if name.endswith(ENTRYPOINT_SUFFIXES) and (not link or _inside(entry.path, root)):
                rel = f"{rel_dir}/{name}"
                (found if _decodable(rel) else undecodable).append(rel)
    return sorted(found), sorted(undecodable)


# Problems after which the frontmatter's own fields are not trusted, so a missing name is not news.
_FRONTMATTER_LOST = frozenset(
    {"invalid_yaml", "frontmatter_too_large", "yaml_alias", "yaml_too_deep", "yaml_too_many_nodes"}
)
# Frontmatter keys read as lists of strings (SPEC §3); string and mapping items are their documented shapes.
_LIST_KEYS = (
    "domain",
    "domains",
    "tags",
    "category",
    "categories",
    "tooling",
    "libraries",
    "dependencies",
    "inputs",
    "input",
    "outputs",
    "output",
    "examples",
    "example_tasks",
    "allowed-tools",
    "allowed_tools",
)
_KINDS = {
    "bool": "boolean",
    "int": "integer",
    "float": "number",
    "list": "list",
    "dict": "mapping",
    "NoneType": "null",
    "date": "date",
    "datetime": "timestamp",
    "bytes": "binary",
    "set": "set",
}
_SHOW = reprlib.Repr()
_SHOW.maxstring = _SHOW.maxother = 40
_SHOW.maxlevel = 2


def _kind(value: Any) -> str:
    return _KINDS.get(type(value).__name__, type(value).__name__)


def _typed(value: Any) -> str:
    """`integer 42`: a value's YAML kind and a short, bounded rendering for the report."""
    return f"{_kind(value)} {_SHOW.repr(value)}"


def _is_text_like(item: Any) -> bool:
    return isinstance(item, str | dict)


def _check_list_fields(data: dict[str, Any], report: Any) -> None:
    """Report list fields holding values other than strings and mappings (they are still read as text)."""
    for key in _LIST_KEYS:
        value = data.get(key)
        if value is None or _is_text_like(value):
            continue
        if type(value) is list and all(type(item) is str for item in value):
            continue
        if not isinstance(value, list):
            report(
                "field_not_text",
                f"`{key}` is a YAML {_typed(value)}, not a string or a list",
                "used its text",
            )
            continue
        odd = [item for item in value if not _is_text_like(item)]
        if odd:
            shown = ", ".join(_typed(item) for item in odd[:3]) + (", ..." if len(odd) > 3 else "")
            report(
                "list_items_not_text",
                f"`{key}` has {len(odd)} item(s) that are not strings: {shown}",
                "used their text; null items dropped",
            )


def parse_package(
    pkg: str | Path, root: str | Path, config: ParseConfig | None = None, listed: Listed | None = None
) -> tuple[dict[str, Any] | None, list[Problem]]:
    """Parse one package folder into a node row (None when it cannot be read at all) and its problems;
    `listed`, what a walk's listing of the folder showed, spares asking the filesystem again."""
    config = config or ParseConfig()
    pkg, root = os.fspath(pkg), os.fspath(root)  # strings: path objects cost more than a small SKILL.md
    rel = _relative(pkg, root)
    skill_path = os.path.join(pkg, SKILL_FILE)
    source = SKILL_FILE if rel == "." else f"{rel}/{SKILL_FILE}"
    problems: list[Problem] = []

    def report(code: str, problem: str, action: str, severity: str = "warning") -> None:
        problems.append(Problem(source, problem, action, severity, code))

    if not _decodable(source):
        # the id would not survive a Parquet string column, and no escaped id could name the folder back
        source = shown_path(source)
        report(
            "undecodable_path",
            "the package path is not valid UTF-8 (shown with \\x escapes)",
            "package skipped; rename the folder to UTF-8",
            "error",
        )
        return None, problems
    link_mode: int | None = None  # unknown: an unreadable SKILL.md is reported by the read below
    listed_ino = 0
    if listed is not None and listed.skill_is_file:
        link_mode = stat.S_IFREG  # the read checks the opened file again
        listed_ino = listed.skill_ino
    else:
        with contextlib.suppress(OSError):
            link_mode = os.lstat(skill_path).st_mode
    linked = link_mode is not None and stat.S_ISLNK(link_mode)

    def leaves_root() -> tuple[None, list[Problem]]:
        report(
            "symlink_outside_root",
            "SKILL.md is a symlink that leaves the library root",
            "package skipped; nothing outside the root is read",
            "error",
        )
        return None, problems

    if linked and not _inside(skill_path, root):
        return leaves_root()
    try:
        raw, truncated = read_limited(
            skill_path, config.max_skill_md_bytes, None if linked else link_mode, root, listed_ino
        )
    except LeavesRoot:  # a link swapped in, or a folder on the way swapped for one, after the check above
        return leaves_root()
    except NotARegularFile as exc:
        report("not_regular_file", str(exc), "package skipped; only regular files are read", "error")
        return None, problems
    except OSError as exc:
        report("unreadable", f"cannot read SKILL.md: {exc.strerror or exc}", "package skipped", "error")
        return None, problems
    if truncated:
        report(
            "too_large",
            f"SKILL.md exceeds {config.max_skill_md_bytes} bytes",
            f"read the first {config.max_skill_md_bytes} bytes",
            "error",
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", errors="replace")
        report(
            "invalid_utf8", "SKILL.md is not valid UTF-8", "undecodable bytes replaced with U+FFFD", "error"
        )
    if not text.strip():
        report("empty", "SKILL.md is empty", "node built from the folder name only", "error")

    fm = split_frontmatter(text, yaml_limits(config))
    for code, problem, action, severity in fm.problems:
        report(code, problem, action, severity)
    data, body = fm.data, fm.body[: config.max_body_chars]
    sections = _Sections(body)
    folder = os.path.basename(pkg) if rel != "." else Path(root).name
    frontmatter_lost = any(p.code in _FRONTMATTER_LOST for p in problems)

    name = _first(data, "name")
    if name is not None and not isinstance(name, str):
        report(
            "name_not_string",
            f"`name` is a YAML {_typed(name)}, not a string",
            "used the folder name; quote the name in the frontmatter to keep it",
            "error",
        )
    elif (name is None or not name.strip()) and text.strip() and not frontmatter_lost:
        report("missing_name", "frontmatter has no `name`", "used the folder name")
    name = name.strip() if isinstance(name, str) and name.strip() else folder

    description = _first(data, "description")
    if description is not None and not isinstance(description, str):
        report(
            "description_not_string",
            f"`description` is a YAML {_typed(description)}, not a string",
            "ignored; used the first paragraph of the body",
            "error",
        )
        description = first_paragraph(body)
    elif description is None:
        description = first_paragraph(body)
        if text.strip():
            action = (
                "used the first paragraph of the body" if description else "left empty (body has no text)"
            )
            report("missing_description", "no `description`", action)
    description = " ".join(description.split())

    capability = _first(data, "one_line_capability", "capability", "summary")
    if capability is not None and not isinstance(capability, str):
        report(
            "capability_not_string",
            f"the one-line capability is a YAML {_typed(capability)}, not a string",
            "ignored; used the first sentence of the description",
        )
        capability = None
    capability = " ".join(capability.split()) if capability is not None else first_sentence(description)
    _check_list_fields(data, report)

    entrypoints, undecodable = _entrypoints(pkg, root, None if listed is None else listed.scripts_is_dir)
    for path in undecodable:
        report(
            "undecodable_path",
            f"script {shown_path(path)} has a name that is not valid UTF-8",
            "left out of the entrypoints",
        )
    if len(entrypoints) > MAX_ENTRYPOINTS:
        report(
            "too_many_entrypoints",
            f"scripts/ holds {len(entrypoints):,} entrypoints",
            f"the first {MAX_ENTRYPOINTS} (sorted) are listed; the package's files are all still there",
        )
        entrypoints = entrypoints[:MAX_ENTRYPOINTS]
    digest = hashlib.sha256(raw)
    digest.update("\0".join(entrypoints).encode())
    row = {
        "id": rel,
        "name": name,
        "folder": folder,
        "description": description,
        "capability": capability,
        "domain_tags": domain_tags(data),
        "tooling": _from_keys_or_section(
            data, sections, ("tooling", "libraries", "dependencies"), ("tooling", "dependencies", "libraries")
        ),
        "inputs": _from_keys_or_section(data, sections, ("inputs", "input"), ("inputs", "input")),
        "outputs": _from_keys_or_section(data, sections, ("outputs", "output"), ("outputs", "output")),
        "example_tasks": _from_keys_or_section(
            data, sections, ("examples", "example_tasks"), ("examples", "example tasks", "example")
        ),
        "entrypoints": entrypoints,
        "compatibility": _opt_str(data.get("compatibility"), "compatibility", report),
        "allowed_tools": as_str_list(data.get("allowed-tools", data.get("allowed_tools")), split_words=True),
        "license": _opt_str(data.get("license"), "license", report),
        "source_path": source,
        "content_hash": digest.hexdigest(),
        "body": body,
        "body_chars": len(body),
        "problems": [p.code for p in problems],
    }
    return row, problems


def _opt_str(value: Any, key: str, report: Any) -> str | None:
    """A free-text field; lists and mappings are joined (documented shapes), other scalars reported."""
    if value in (None, ""):
        return None
    if not isinstance(value, str | list | dict):
        report("field_not_text", f"`{key}` is a YAML {_typed(value)}, not a string", "used its text")
    return _scalar(value)


# -------------------------------------------------------------------------------------------------- library


# A unit of discovery: a package folder with its listing, or (None) a folder whose every package is parsed.
_Unit = tuple[str, Listed | None]


@dataclass(frozen=True)
class _Chunk:
    """A worker's unit of work: units in discovery order."""

    items: tuple[_Unit, ...]

    def listed(self, dropped: list[Problem] | None = None) -> Iterator[tuple[str, Listed]]:
        for path, listed in self.items:
            if listed is None:
                yield from listed_packages(path, dropped)
            else:
                yield path, listed


_ChunkResult = tuple[pl.DataFrame, list[Problem], int, Any]
ChunkWork = Callable[[pl.DataFrame], Any]  # a module-level function: it is pickled to the workers


def _parse_chunk(args: tuple[_Chunk, str, ParseConfig, ChunkWork | None]) -> _ChunkResult:
    """Parse a chunk of packages into a node frame (must stay picklable); with the packages' problems, how
    many packages it held, and `per_chunk` of the frame (None without one).

    The frame is built in the worker: converting Python rows to columns is a large share of parsing, and
    a frame crosses the process boundary as Arrow buffers rather than millions of Python objects.
    """
    chunk, root, config, per_chunk = args
    columns: dict[str, list[Any]] = {name: [] for name in NODE_SCHEMA}
    problems: list[Problem] = []
    dropped: list[Problem] = []
    count = 0
    for pkg, listed in chunk.listed(dropped):
        count += 1
        row, found = parse_package(pkg, root, config, listed)
        problems.extend(found)
        if row is not None:
            for name in NODE_SCHEMA:
                columns[name].append(row[name])
    problems.extend(walk_problems(dropped, root))
    frame = _frame(columns)
    return frame, problems, count, per_chunk(frame) if per_chunk is not None else None


def _frame(columns: dict[str, list[Any]]) -> pl.DataFrame:
    """Python columns → node frame through Arrow, which converts list-of-string columns ~30x faster than
    polars' Python-object path."""
    arrays = {
        name: pa.array(
            columns[name],
            type=pa.list_(pa.string())
            if isinstance(dtype, pl.List)
            else pa.int64()
            if dtype == pl.Int64
            else pa.string(),
        )
        for name, dtype in NODE_SCHEMA.items()
    }
    return pl.from_arrow(pa.table(arrays)).cast(NODE_SCHEMA)  # type: ignore[return-value]


def _parse_in_pool(
    chunks: list[tuple[_Chunk, str, ParseConfig, ChunkWork | None]],
    workers: int,
    take: Callable[[_ChunkResult], None],
) -> None:
    """Parse chunks in spawned worker processes, handing each result to `take` in order. Stops quietly
    when a pool cannot run here or breaks: the caller parses the chunks `take` has not had serially.
    Spawned, not forked: polars and Arrow keep thread pools, and a forked child can deadlock on their
    locks. Spawning needs an importable __main__ (not a script piped on stdin), hence the fallback.
    """
    try:
        with ProcessPoolExecutor(
            max_workers=workers, mp_context=multiprocessing.get_context("spawn")
        ) as pool:
            for part in pool.map(_parse_chunk, chunks):  # in order
                take(part)
    except (BrokenProcessPool, OSError):
        return


# Below this many packages a worker pool costs more than it saves.
_PARALLEL_MIN = 4_000
_CHUNK = 2_000
# Top-level folders are split further (a level at a time, this many levels at most) until there are this
# many per worker, so that one huge folder does not leave a worker idle.
_UNITS_PER_WORKER = 16
_SPLIT_LEVELS = 3


def _units(root: Path, wanted: int, dropped: list[Problem] | None = None) -> list[_Unit]:
    """`root` cut into units in discovery order (see `_Unit`); what the listings pass over is added to
    `dropped` (see `_listing`).

    Walking the units in order finds exactly the packages of `discover_packages(root)`, in its order."""
    units: list[_Unit] = [(str(root), None)]
    for _ in range(_SPLIT_LEVELS):
        if sum(listed is None for _, listed in units) >= wanted:
            break
        split: list[_Unit] = []
        for path, listed in units:
            if listed is not None:
                split.append((path, listed))
                continue
            own, subs = _listing(path, dropped)
            split.extend([(path, own)] if own is not None else [])
            split.extend((os.path.join(path, name), None) for name in subs)
        units = split
    return units


def _plan(root: Path, workers: int, dropped: list[Problem] | None = None) -> tuple[list[_Chunk], bool]:
    """Chunks of about `_CHUNK` packages in discovery order, and whether they are worth a pool; what the
    main process's walk passes over is added to `dropped` (see `_listing`; the chunks' walks report theirs).

    The main process finds packages itself only until it has `_PARALLEL_MIN` of them: past that the
    remaining folders are walked by the workers (discovery costs a sixth of parsing, and would be serial).
    """
    found: list[_Unit] = []
    pending: list[_Unit] = []
    walked = 0
    pooled = False  # enough packages for a pool: the rest is left to its workers
    for path, listed in _units(root, workers * _UNITS_PER_WORKER, dropped):
        if pooled:
            pending.append((path, listed))
            continue
        if listed is None:
            walked += 1
            found.extend(listed_packages(path, dropped))
        else:
            found.append((path, listed))
        pooled = len(found) >= _PARALLEL_MIN and workers > 1
    chunks = [_Chunk(tuple(found[i : i + _CHUNK])) for i in range(0, len(found), _CHUNK)]
    per_unit = max(1, round(_CHUNK * walked / max(1, len(found))))  # folders of the size seen so far
    chunks.extend(_Chunk(tuple(pending[i : i + per_unit])) for i in range(0, len(pending), per_unit))
    return chunks, pooled


def parse_library(
    root: str | Path,
    config: ParseConfig | None = None,
    progress: Callable[[int, int | None], None] | None = None,
    workers: int | None = None,
    per_chunk: ChunkWork | None = None,
    on_chunk: Callable[[Any], None] | None = None,
) -> ParsedLibrary:
    """Parse every package under `root` into the node table (sorted by id) and the build report;
    `progress(done, total)` hears how many packages are parsed so far (total None while workers are still
    finding packages). `per_chunk` is more work on each chunk's node frame done where it was parsed (the
    build tokenises there, on every core). `on_chunk`, if given, is handed each chunk's `per_chunk` result
    in this process, in order, as soon as it is done (the build merges them while later chunks are still
    parsed); the results are then not kept in `ParsedLibrary.per_chunk`.

    Large libraries are parsed by a process pool (`workers`, default: the CPUs this process may use);
    the result does not depend on the number of workers.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"skill library folder not found: {root}")
    config = config or ParseConfig()
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    dropped: list[Problem] = []
    plan, pooled = _plan(root, workers, dropped)
    chunks = [(chunk, str(root), config, per_chunk) for chunk in plan]
    items = [item for chunk in plan for item in chunk.items]
    # None: some folders are left for the workers to walk, so how many packages there are is not known yet
    known = None if any(listed is None for _, listed in items) else len(items)
    frames: list[pl.DataFrame] = []
    problems: list[Problem] = walk_problems(dropped, root)
    results: list[Any] = []
    parsed = 0

    def take(part: _ChunkResult) -> None:
        nonlocal parsed
        frame, found, count, result = part
        frames.append(frame)
        problems.extend(found)
        parsed += count
        if on_chunk is not None:
            on_chunk(result)
        else:
            results.append(result)
        if progress is not None:
            progress(parsed, known)

    if pooled:
        _parse_in_pool(chunks, workers, take)
    for chunk in chunks[len(frames) :]:  # no pool, or what a pool that broke left: parsed here
        take(_parse_chunk(chunk))
    nodes = pl.concat(frames) if frames else pl.DataFrame(schema=NODE_SCHEMA)
    in_order = nodes["id"].is_sorted()  # ids are unique: the sort below is then the identity
    # one chunk either way: the stored bytes must not depend on how the work was cut (nor on the workers)
    nodes = nodes.rechunk() if in_order else nodes.sort("id")
    # the walk's rows by path, after the packages': which process's walk found one depends on the workers
    walked = sorted((p for p in problems if p.code in WALK_CODES), key=lambda p: p.file)
    problems = [p for p in problems if p.code not in WALK_CODES] + walked
    problems.extend(_duplicate_names(nodes))
    return ParsedLibrary(
        nodes=nodes,
        report=report_frame(problems),
        root=root,
        per_chunk=results if per_chunk is not None and on_chunk is None else None,
        in_order=in_order,
    )


def report_frame(problems: list[Problem]) -> pl.DataFrame:
    """Problems as build-report rows (REPORT_SCHEMA)."""
    return pl.DataFrame(
        [(p.file, p.problem, p.action, p.severity) for p in problems], schema=REPORT_SCHEMA, orient="row"
    )


def _duplicate_names(nodes: pl.DataFrame) -> list[Problem]:
    if nodes.is_empty():
        return []
    keyed = nodes.select("id", "source_path", key=normalize_names(nodes["name"]))
    dup = keyed.filter(pl.col("key").is_duplicated()).sort("id")
    out = []
    for key, group in dup.group_by("key", maintain_order=True):
        ids = group["id"].to_list()
        for source, skill_id in zip(group["source_path"], ids, strict=True):
            named = [i for i in ids[: MAX_NAMED_DUPLICATES + 1] if i != skill_id][:MAX_NAMED_DUPLICATES]
            more = len(ids) - 1 - len(named)
            others = ", ".join(named) + (f" and {more:,} other package(s)" if more else "")
            out.append(
                Problem(
                    source,
                    f"name '{key[0]}' is also used by {others}",
                    "kept; naming this skill matches every package with the name",
                    "warning",
                    "duplicate_name",
                )
            )
    return out

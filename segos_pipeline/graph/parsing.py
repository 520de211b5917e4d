"""SKILL.md packages → the node table and its build report (SPEC §3).

Every problem becomes a row of the build report (file, problem, action, severity). A bad package is read
as far as possible and recorded; it never aborts the build and is never dropped without a report row.
"""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing
import os
import stat
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

from ..config import ParseConfig
from ..text.tokens import normalize_names
from .discovery import SKILL_FILE, WALK_CODES, Listed, inside_root, listed_packages, listing, walk_problems
from .fields import (
    as_str_list,
    check_list_fields,
    domain_tags,
    first_paragraph,
    first_sentence,
    first_value,
    from_keys_or_section,
    markdown_sections,
    scalar_text,
    typed,
)
from .frontmatter import split_frontmatter, yaml_limits
from .reads import LeavesRoot, NotARegularFile, decodable, read_limited, relative_path, shown_path
from .report import Problem, report_frame

ENTRYPOINT_SUFFIXES = (".py", ".sh", ".js", ".ts")
# Entrypoints a skill lists (the first, sorted): a bundle and a detail carry them, so a package with 100,000
# scripts would make every reply about it megabytes. The rest are reported, not listed.
MAX_ENTRYPOINTS = 256
# Packages a duplicate-name warning names besides its own: the report stays linear in the packages however
# many share one name (a report in which each named all the others grew with the square of their number).
MAX_NAMED_DUPLICATES = 5

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


@dataclass
class ParsedLibrary:
    nodes: pl.DataFrame
    report: pl.DataFrame
    root: Path
    # the chunks' skills were found in id order (as usual): chunk i's skills follow chunk i-1's in `nodes`,
    # so what `parse_library(per_chunk=...)` handed on numbers them right
    in_order: bool = True


# ----------------------------------------------------------------------------------------------- packages


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
            if name.endswith(ENTRYPOINT_SUFFIXES) and (not link or inside_root(entry.path, root)):
                rel = f"{rel_dir}/{name}"
                (found if decodable(rel) else undecodable).append(rel)
    return sorted(found), sorted(undecodable)


# Problems after which the frontmatter's own fields are not trusted, so a missing name is not news.
_FRONTMATTER_LOST = frozenset(
    {"invalid_yaml", "frontmatter_too_large", "yaml_alias", "yaml_too_deep", "yaml_too_many_nodes"}
)


def parse_package(
    pkg: str | Path, root: str | Path, config: ParseConfig | None = None, listed: Listed | None = None
) -> tuple[dict[str, Any] | None, list[Problem]]:
    """Parse one package folder into a node row (None when it cannot be read at all) and its problems;
    `listed`, what a walk's listing of the folder showed, spares asking the filesystem again."""
    config = config or ParseConfig()
    pkg, root = os.fspath(pkg), os.fspath(root)  # strings: path objects cost more than a small SKILL.md
    rel = relative_path(pkg, root)
    skill_path = os.path.join(pkg, SKILL_FILE)
    source = SKILL_FILE if rel == "." else f"{rel}/{SKILL_FILE}"
    problems: list[Problem] = []

    def report(code: str, problem: str, action: str, severity: str = "warning") -> None:
        problems.append(Problem(source, problem, action, severity, code))

    if not decodable(source):
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

    if linked and not inside_root(skill_path, root):
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
        limit = config.max_skill_md_bytes
        report("too_large", f"SKILL.md exceeds {limit} bytes", f"read the first {limit} bytes", "error")
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
    sections = markdown_sections(body)
    folder = os.path.basename(pkg) if rel != "." else Path(root).name
    frontmatter_lost = any(p.code in _FRONTMATTER_LOST for p in problems)

    name = first_value(data, "name")
    if name is not None and not isinstance(name, str):
        report(
            "name_not_string",
            f"`name` is a YAML {typed(name)}, not a string",
            "used the folder name; quote the name in the frontmatter to keep it",
            "error",
        )
    elif (name is None or not name.strip()) and text.strip() and not frontmatter_lost:
        report("missing_name", "frontmatter has no `name`", "used the folder name")
    name = name.strip() if isinstance(name, str) and name.strip() else folder

    description = first_value(data, "description")
    if description is not None and not isinstance(description, str):
        report(
            "description_not_string",
            f"`description` is a YAML {typed(description)}, not a string",
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

    capability = first_value(data, "one_line_capability", "capability", "summary")
    if capability is not None and not isinstance(capability, str):
        report(
            "capability_not_string",
            f"the one-line capability is a YAML {typed(capability)}, not a string",
            "ignored; used the first sentence of the description",
        )
        capability = None
    capability = " ".join(capability.split()) if capability is not None else first_sentence(description)
    check_list_fields(data, report)

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
        "tooling": from_keys_or_section(
            data, sections, ("tooling", "libraries", "dependencies"), ("tooling", "dependencies", "libraries")
        ),
        "inputs": from_keys_or_section(data, sections, ("inputs", "input"), ("inputs", "input")),
        "outputs": from_keys_or_section(data, sections, ("outputs", "output"), ("outputs", "output")),
        "example_tasks": from_keys_or_section(
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
        report("field_not_text", f"`{key}` is a YAML {typed(value)}, not a string", "used its text")
    return scalar_text(value)


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
    """Python columns → node frame through Arrow, which converts list-of-string columns far faster than
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
    `dropped` (see `listing`).

    Walking the units in order finds exactly the packages of `package_folders(root)`, in its order."""
    units: list[_Unit] = [(str(root), None)]
    for _ in range(_SPLIT_LEVELS):
        if sum(listed is None for _, listed in units) >= wanted:
            break
        split: list[_Unit] = []
        for path, listed in units:
            if listed is not None:
                split.append((path, listed))
                continue
            own, subs = listing(path, dropped)
            split.extend([(path, own)] if own is not None else [])
            split.extend((os.path.join(path, name), None) for name in subs)
        units = split
    return units


def _plan(root: Path, workers: int, dropped: list[Problem] | None = None) -> tuple[list[_Chunk], bool]:
    """Chunks of about `_CHUNK` packages in discovery order, and whether they are worth a pool; what the
    main process's walk passes over is added to `dropped` (see `listing`; the chunks' walks report theirs).

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
    build tokenises there, on every core); `on_chunk` is handed each chunk's result in this process, in
    order, as soon as it is done (the build merges them while later chunks are still parsed).

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
    parsed = 0

    def take(part: _ChunkResult) -> None:
        nonlocal parsed
        frame, found, count, result = part
        frames.append(frame)
        problems.extend(found)
        parsed += count
        if on_chunk is not None:
            on_chunk(result)
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
        in_order=in_order,
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

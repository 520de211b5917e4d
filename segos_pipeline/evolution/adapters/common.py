"""Helpers shared by the adapters: the rejection record, file walking, slugs and SKILL.md writing."""

from __future__ import annotations

import errno
import fnmatch
import json
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from ..landing import is_torn
from ..traces import (
    MAX_LINE_BYTES,
    TraceError,
    TraceRecord,
    check_line,
    native_row,
    record_of_row,
    validate_line,
)

RAW_LIMIT = 2000
# What a malformed record can make adapter code raise (a wrong type, a huge or non-finite number, deep
# nesting); each becomes a rejection of that record with the reason, never an abort of the rest.
DATA_ERRORS = (
    TraceError,
    TypeError,
    ValueError,
    OverflowError,
    AttributeError,
    KeyError,
    IndexError,
    RecursionError,
)


def data_error_reason(exc: BaseException) -> str:
    """The quarantine reason for an exception raised while reading one record."""
    if isinstance(exc, TraceError):
        return str(exc)
    if isinstance(exc, RecursionError):
        return "the record nests too deeply to read"
    return f"the record has a value of the wrong shape ({type(exc).__name__}: {str(exc)[:200]})"


@dataclass
class Rejected:
    source: str  # "file:line" or "file#index"
    reason: str  # one sentence a user can act on
    raw: str  # the offending text (truncated to 2,000 chars)
    raw_bytes: int = 0  # UTF-8 length of the whole offending text, of which `raw` is a bounded prefix


def rejected(source: str, reason: str, raw: Any) -> Rejected:
    if isinstance(raw, str):
        text = raw
    else:
        try:
            text = json.dumps(raw, ensure_ascii=False, default=str)
        except (ValueError, TypeError, RecursionError):
            text = f"<a {type(raw).__name__} that cannot be shown as JSON>"
    size = len(text.encode("utf-8", "surrogatepass"))
    return Rejected(source=source, reason=reason, raw=text[:RAW_LIMIT], raw_bytes=size)


@dataclass
class Skipped:
    """An input left unread and reported by name, never quarantined: a file that is not ours to read (a
    symbolic link, anything but a regular file) or a torn last line (`landing.is_torn`)."""

    source: str  # the file, or "file:line" for a torn last line
    reason: str


class InputRefused(OSError):
    """An input path that is a symbolic link or not a regular file: refused, never read."""


def open_input(path: Path) -> BinaryIO:
    """`path` opened for reading without following a symbolic link (O_NOFOLLOW) and only when it is a
    regular file (checked on the open descriptor, so the check and the read concern the same file; a
    FIFO does not block the open: O_NONBLOCK). InputRefused otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputRefused(errno.ELOOP, "a symbolic link: not followed, never read") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InputRefused(errno.EINVAL, "not a regular file: never read")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def files_under(path: Path, pattern: str) -> list[Path]:
    """`path` itself when it is not a folder, else every entry under it matching `pattern` that is not a
    folder, sorted. Symbolic links are listed but never followed (nor walked into): `open_input` refuses
    them, so each is reported by name."""
    if path.is_dir():
        found: list[Path] = []
        for folder, dirs, files in os.walk(path):  # followlinks=False: a linked folder is not walked
            linked = [d for d in dirs if os.path.islink(os.path.join(folder, d))]
            found += [Path(folder, n) for n in files + linked if fnmatch.fnmatchcase(n, pattern)]
        return sorted(found)
    if os.path.lexists(path):
        return [path]
    raise FileNotFoundError(f"trace source not found: {path}")


def read_lines(path: Path) -> Iterator[tuple[int, bytes] | Skipped]:
    """(line number, bytes) for every non-blank line of a file. A line longer than MAX_LINE_BYTES is cut
    there (its rest is skipped unread into memory), so the length check rejects it without holding it.

    A file that is not ours to read (`open_input`) is one Skipped and nothing else; so is a torn last line
    (no newline, not complete JSON: a write cut short, or an append still in progress), which the next
    run reads once it is whole."""
    try:
        fh = open_input(path)
    except InputRefused as exc:
        yield Skipped(str(path), exc.strerror)
        return
    with fh:
        lineno = 0
        while True:
            line = fh.readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            lineno += 1
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                while (rest := fh.readline(1 << 20)) and not rest.endswith(b"\n"):
                    pass
            elif not line.strip():
                continue  # blank lines (e.g. a trailing newline) carry no record
            elif not line.endswith(b"\n") and is_torn(line):
                yield Skipped(
                    f"{path}:{lineno}",
                    f"torn last line ({len(line):,} bytes, no newline, not complete JSON): a write cut "
                    "short or still in progress; skipped, not quarantined",
                )
                return
            yield lineno, line


def json_lines(path: Path) -> Iterator[tuple[str, str, Any | Rejected | Skipped]]:
    """(source, raw line, parsed object or Rejected) for every non-blank line of a JSONL file; a line over
    the length or nesting bound, not UTF-8 or not JSON is a Rejected with the reason. A file or torn last
    line `read_lines` skips is a Skipped."""
    for item in read_lines(path):
        if isinstance(item, Skipped):
            yield item.source, "", item
            continue
        lineno, data = item
        source = f"{path}:{lineno}"
        line = data.decode("utf-8", errors="replace")
        try:
            check_line(data)
            text = data.decode("utf-8")
        except TraceError as exc:
            yield source, line, rejected(source, str(exc), line)
            continue
        except UnicodeDecodeError:
            yield source, line, rejected(source, "line is not valid UTF-8; fix or drop it", line)
            continue
        try:
            yield source, line, json.loads(text)
        except json.JSONDecodeError as exc:
            yield source, line, rejected(source, f"line is not valid JSON ({exc.msg}); fix or drop it", line)
        except RecursionError:
            yield source, line, rejected(source, "line nests too deeply to parse", line)


def jsonl_records(
    path: Path, parse: Callable[[Any, str], TraceRecord]
) -> Iterator[TraceRecord | Rejected | Skipped]:
    """Every JSONL line under `path` through `parse(obj, source)`; bad JSON and any data error become
    Rejected with the reason, so one bad line never stops the rest."""
    for file in files_under(path, "*.jsonl"):
        for source, line, obj in json_lines(file):
            if isinstance(obj, Rejected | Skipped):
                yield obj
                continue
            try:
                yield parse(obj, source)
            except DATA_ERRORS as exc:
                yield rejected(source, data_error_reason(exc), line)


def native_records(path: Path) -> Iterator[TraceRecord | Rejected | Skipped]:
    """Every native JSONL line under `path` as a record, validated from its bytes by the same function as
    the streaming ingest (`traces.validate_line`), so both paths accept and reject exactly the same lines
    and skip the same inputs."""
    for file in files_under(path, "*.jsonl"):
        for item in read_lines(file):
            if isinstance(item, Skipped):
                yield item
                continue
            lineno, data = item
            source = f"{file}:{lineno}"
            try:
                yield record_of_row(native_row(validate_line(data), source))
            except TraceError as exc:
                yield rejected(source, str(exc), data.decode("utf-8", errors="replace"))


def load_json_file(path: Path, max_bytes: int) -> Any:
    """A whole JSON file (API-Bank task lists, ToolBench answer trees); TraceError with the reason when it
    is too large, not UTF-8, not JSON or nested too deeply."""
    try:
        fh = open_input(path)
    except InputRefused as exc:
        raise TraceError(f"file is {exc.strerror}") from None
    with fh:
        size = os.fstat(fh.fileno()).st_size
        if size > max_bytes:
            raise TraceError(f"file is {size:,} bytes, over the {max_bytes:,}-byte limit")
        data = fh.read()
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise TraceError("file is not valid UTF-8") from None
    except json.JSONDecodeError as exc:
        raise TraceError(f"file is not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise TraceError("file nests too deeply to parse") from None


_NON_SLUG = re.compile(r"[^a-z0-9]+")


def slugify(text: str) -> str:
    return _NON_SLUG.sub("-", text.casefold()).strip("-")


def io_fields(params: Any) -> list[dict[str, str]]:
    """Parameters as `{name, type, description}` mappings (the I/O shape `parsing` reads)."""
    out: list[dict[str, str]] = []
    if isinstance(params, dict):
        items = [{"name": k, **(v if isinstance(v, dict) else {"type": v})} for k, v in params.items()]
    elif isinstance(params, list):
        items = [p for p in params if isinstance(p, dict)]
    else:
        return out
    for p in items:
        name = str(p.get("name", "")).strip()
        if not name:
            continue
        field = {"name": name, "type": type_name(p.get("type"))}
        desc = " ".join(str(p.get("description") or "").split())
        if desc:
            field["description"] = desc
        out.append(field)
    return out


def type_name(value: Any) -> str:
    """A short type label for a declared type or a sample value (template responses give samples)."""
    if isinstance(value, str) and value.strip():
        return value.strip().lower()
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return type(value).__name__
    return "any"


def write_skill_md(out_dir: Path, folder: str, frontmatter: dict[str, Any], body: str) -> Path:
    pkg = out_dir / folder
    pkg.mkdir(parents=True, exist_ok=True)
    # safe_dump: quoting of odd characters in API descriptions is YAML's job, never hand-rolled
    fm = yaml.safe_dump(frontmatter, sort_keys=False, allow_unicode=True, width=10_000).strip()
    path = pkg / "SKILL.md"
    path.write_text(f"---\n{fm}\n---\n\n{body.strip()}\n", encoding="utf-8")
    return path


def io_section(title: str, fields: list[dict[str, str]], empty: str) -> str:
    """A body section listing fields. Callers use titles the parser does not read as I/O ("Parameters",
    "Returns"): the frontmatter is the I/O source, and an `## Inputs` section saying "none" would be
    parsed as an input named "none" whenever the frontmatter list is empty."""
    lines = [f"## {title}", ""]
    if not fields:
        return "\n".join([*lines, empty, ""])
    for f in fields:
        desc = f": {f['description']}" if f.get("description") else ""
        lines.append(f"- `{f['name']}` ({f['type']}){desc}")
    return "\n".join([*lines, ""])

"""Helpers shared by the adapters: the rejection record, file walking, slugs and SKILL.md writing."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..traces import TraceError, TraceRecord

RAW_LIMIT = 2000


@dataclass
class Rejected:
    source: str  # "file:line" or "file#index"
    reason: str  # one sentence a user can act on
    raw: str  # the offending text (truncated to 2,000 chars)


def rejected(source: str, reason: str, raw: Any) -> Rejected:
    text = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False, default=str)
    return Rejected(source=source, reason=reason, raw=text[:RAW_LIMIT])


def files_under(path: Path, pattern: str) -> list[Path]:
    """`path` itself when it is a file, else every file matching `pattern` under it, sorted."""
    if path.is_file():
        return [path]
    if path.is_dir():
        return sorted(p for p in path.rglob(pattern) if p.is_file())
    raise FileNotFoundError(f"trace source not found: {path}")


def json_lines(path: Path) -> Iterator[tuple[str, str, Any | Rejected]]:
    """(source, raw line, parsed object or Rejected) for every non-blank line of a JSONL file."""
    with path.open(encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue  # blank lines (e.g. a trailing newline) carry no record
            source = f"{path}:{lineno}"
            try:
                yield source, line, json.loads(line)
            except json.JSONDecodeError as exc:
                yield (
                    source,
                    line,
                    rejected(source, f"line is not valid JSON ({exc.msg}); fix or drop it", line),
                )


def jsonl_records(path: Path, parse: Callable[[Any, str], TraceRecord]) -> Iterator[TraceRecord | Rejected]:
    """Every JSONL line under `path` through `parse(obj, source)`; bad JSON and `TraceError`s become
    Rejected with the reason, so one bad line never stops the rest."""
    for file in files_under(path, "*.jsonl"):
        for source, line, obj in json_lines(file):
            if isinstance(obj, Rejected):
                yield obj
                continue
            try:
                yield parse(obj, source)
            except TraceError as exc:
                yield rejected(source, str(exc), line)


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

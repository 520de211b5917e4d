"""A package's fields (SPEC §3): frontmatter values and Markdown sections read as strings and lists, and the
frontmatter keys whose values have the wrong type reported."""

from __future__ import annotations

import re
import reprlib
from collections.abc import Iterable
from typing import Any

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
        return [f"{k}: {scalar_text(v)}" if v not in (None, "") else str(k) for k, v in value.items()]
    if type(value) is list and all(type(item) is str for item in value):  # the common shape, quickly
        return [s for item in value if (s := item.strip())]
    if isinstance(value, Iterable):
        items: list[str] = []
        for item in value:
            if isinstance(item, dict):
                items.append(_mapping_item(item))
            elif item is not None:
                items.append(scalar_text(item))
        return [i for i in items if i]
    return [scalar_text(value)]


def scalar_text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(scalar_text(v) for v in value)
    if isinstance(value, dict):
        return _mapping_item(value)
    return str(value).strip()


def _mapping_item(item: dict[Any, Any]) -> str:
    """An I/O-style mapping such as {name: df, type: DataFrame, description: ...} as "df: DataFrame"."""
    name = item.get("name") or item.get("id") or item.get("field")
    if name is None and len(item) == 1:
        key, value = next(iter(item.items()))
        return f"{key}: {scalar_text(value)}" if value not in (None, "") else str(key)
    if name is None:
        return "; ".join(f"{k}: {scalar_text(v)}" for k, v in item.items())
    kind = item.get("type") or item.get("format")
    return f"{name}: {scalar_text(kind)}" if kind else str(name)


def first_sentence(text: str) -> str:
    text = " ".join(text.split())
    return _SENTENCE_END.split(text, maxsplit=1)[0] if text else ""


def first_paragraph(body: str, limit: int = 500) -> str:
    for block in re.split(r"\n\s*\n", body):
        block = block.strip()
        if block and not block.startswith(("#", "```", "|", "---")):
            return " ".join(_MARKUP.sub("", block).split())[:limit]
    return ""


def first_value(data: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if data.get(key) not in (None, "", [], {}):
            return data[key]
    return None


def from_keys_or_section(
    data: dict[str, Any], sections: dict[str, str], keys: tuple[str, ...], titles: tuple[str, ...]
) -> list[str]:
    value = first_value(data, *keys)
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


def typed(value: Any) -> str:
    """`integer 42`: a value's YAML kind and a short, bounded rendering for the report."""
    return f"{_kind(value)} {_SHOW.repr(value)}"


def _is_text_like(item: Any) -> bool:
    return isinstance(item, str | dict)


def check_list_fields(data: dict[str, Any], report: Any) -> None:
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
                f"`{key}` is a YAML {typed(value)}, not a string or a list",
                "used its text",
            )
            continue
        odd = [item for item in value if not _is_text_like(item)]
        if odd:
            shown = ", ".join(typed(item) for item in odd[:3]) + (", ..." if len(odd) > 3 else "")
            report(
                "list_items_not_text",
                f"`{key}` has {len(odd)} item(s) that are not strings: {shown}",
                "used their text; null items dropped",
            )

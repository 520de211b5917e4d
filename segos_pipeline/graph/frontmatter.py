"""YAML frontmatter of a SKILL.md → Python data, bounded against hostile input and fast on common input.

Two readers give the same result as `yaml.load(raw, yaml.CSafeLoader)` wherever both accept the text:

* `simple_yaml` reads the common shape (block mappings and block sequences of unquoted, single- or
  double-quoted one-line scalars and one-line flow lists) in pure Python. Building a libyaml loader costs
  more per call than parsing a common frontmatter, which dominated a build's parse stage; this one does not.
  Anything outside that shape (comments, anchors, tags, block scalars, continuation lines, escapes,
  scalars that resolve to numbers, booleans, null or dates, tabs, CR, unusual characters) is not guessed
  at: it returns FALLBACK and the safe loader reads the text.
* `safe_yaml` composes the text with libyaml, checks the node graph against the limits (size, depth,
  node count; aliases refused, so a recursive alias or a "billion laughs" expansion never reaches the
  constructor), then constructs it with PyYAML's SafeConstructor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import yaml
from yaml.nodes import MappingNode, SequenceNode
from yaml.resolver import Resolver

from ..config import ParseConfig

try:  # libyaml's parser; both are safe loaders (no arbitrary object construction)
    _SafeLoader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _SafeLoader = yaml.SafeLoader


@dataclass(frozen=True)
class YamlLimits:
    max_chars: int = 100_000
    max_depth: int = 32
    max_nodes: int = 20_000


class FrontmatterRefused(ValueError):
    """The frontmatter exceeds a limit or uses a refused construct; `code` is the report's problem code."""

    def __init__(self, code: str, problem: str):
        super().__init__(problem)
        self.code = code
        self.problem = problem


FALLBACK: Any = object()  # simple_yaml's answer for text it does not read


def load_yaml(raw: str, limits: YamlLimits) -> Any:
    """Frontmatter text → data. Raises yaml.YAMLError (not valid safe YAML) or FrontmatterRefused."""
    if len(raw) > limits.max_chars:
        raise FrontmatterRefused(
            "frontmatter_too_large", f"frontmatter has {len(raw)} characters, over {limits.max_chars}"
        )
    data = simple_yaml(raw, limits)
    return safe_yaml(raw, limits) if data is FALLBACK else data


# ------------------------------------------------------------------------------------------ safe loader


def safe_yaml(raw: str, limits: YamlLimits) -> Any:
    """libyaml compose → limit check on the node graph → SafeConstructor (PyYAML's own, unchanged)."""
    loader = _SafeLoader(raw)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        check_nodes(node, limits)
        try:
            return loader.construct_document(node)
        except (ValueError, KeyError, TypeError, OverflowError, IndexError) as exc:
            # SafeConstructor lets these escape for well-formed but impossible values (`2024-13-45`,
            # `!!int abc`, `!!bool maybe`); they are bad YAML like any other, not a reason to stop a build
            problem = f"a value cannot be constructed ({type(exc).__name__}: {exc})"
            raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark) from exc
    finally:
        loader.dispose()


def check_nodes(root: yaml.Node, limits: YamlLimits) -> None:
    """Refuse aliases, nesting deeper than max_depth and more than max_nodes nodes.

    libyaml composes an alias as a second reference to the anchored node, so a node met twice is an alias
    (a recursive alias is a cycle, a "billion laughs" a DAG): both stop here after one linear walk.
    """
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if id(node) in seen:
            raise FrontmatterRefused(
                "yaml_alias", "frontmatter uses a YAML alias (*name); aliases are not accepted"
            )
        seen.add(id(node))
        if len(seen) > limits.max_nodes:
            raise FrontmatterRefused(
                "yaml_too_many_nodes", f"frontmatter has more than {limits.max_nodes} YAML nodes"
            )
        if depth > limits.max_depth:
            raise FrontmatterRefused(
                "yaml_too_deep", f"frontmatter nests deeper than {limits.max_depth} levels"
            )
        if isinstance(node, SequenceNode):
            stack.extend((child, depth + 1) for child in node.value)
        elif isinstance(node, MappingNode):
            for key, value in node.value:
                stack.append((key, depth + 1))
                stack.append((value, depth + 1))


# ------------------------------------------------------------------------------------------ fast reader


class _Unsupported(Exception):
    """Text outside the shape simple_yaml reads (internal: turns into FALLBACK)."""


# Characters YAML treats as printable and not as line breaks or BOM; anything else goes to libyaml. Tabs
# and CR are left out on purpose (indentation and line-folding rules simple_yaml does not model).
_ODD_CHAR = re.compile(
    "[^\n\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]"
)
_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_-]{0,127}):(?: +(.*))?$")
# A plain scalar may not start with an indicator (quotes and `[` are handled before this check).
_INDICATORS = frozenset("-?:,[]{}#&*!|>'\"%@`")
_FLOW_FORBIDDEN = re.compile(r"[\[\]{},:#'\"]")
_RESOLVERS: dict[Any, list[tuple[str, re.Pattern[str]]]] = Resolver.yaml_implicit_resolvers


def _is_plain_str(value: str) -> bool:
    """True when libyaml's resolver would give this unquoted scalar the str tag (not int, bool, null…)."""
    resolvers = _RESOLVERS.get(value[:1])
    return resolvers is None or all(not regexp.match(value) for _tag, regexp in resolvers)


_KEY_IS_STR: dict[str, bool] = {}  # keys repeat across a library (name, description, …)


def _key_is_str(key: str) -> bool:
    known = _KEY_IS_STR.get(key)
    if known is None:
        known = _is_plain_str(key)
        if len(_KEY_IS_STR) < 4_096:
            _KEY_IS_STR[key] = known
    return known


def _quoted(text: str) -> str:
    """A one-line quoted scalar without escapes; anything else is unsupported."""
    quote = text[0]
    if len(text) < 2 or text[-1] != quote:
        raise _Unsupported
    inner = text[1:-1]
    if quote == "'":
        if "'" in inner.replace("''", ""):
            raise _Unsupported
        return inner.replace("''", "'")
    if '"' in inner or "\\" in inner:
        raise _Unsupported
    return inner


def _plain(text: str) -> str:
    if text[0] in _INDICATORS or ": " in text or " #" in text or text.endswith(":"):
        raise _Unsupported
    if not _is_plain_str(text):
        raise _Unsupported
    return text


def _flow_item(text: str) -> str:
    if not text:
        raise _Unsupported  # `[a, , b]` or a trailing comma
    if text[0] in "'\"":
        return _quoted(text)
    if _FLOW_FORBIDDEN.search(text) or text[0] in _INDICATORS:
        raise _Unsupported
    return _plain(text)


class _Reader:
    """Recursive descent over (indent, text) lines; depth bounded by the limits (node count: simple_yaml)."""

    def __init__(self, lines: list[tuple[int, str]], limits: YamlLimits):
        self.lines = lines
        self.limits = limits

    def value(self, text: str) -> Any:
        """A one-line value: quoted or plain scalar, or a flow list of such scalars."""
        if text[0] in "'\"":
            return _quoted(text)
        if text[0] == "[":
            if text[-1] != "]":
                raise _Unsupported
            inner = text[1:-1].strip(" ")
            return [] if not inner else [_flow_item(part.strip(" ")) for part in inner.split(",")]
        return _plain(text)

    def block(self, i: int, depth: int) -> tuple[Any, int]:
        if depth > self.limits.max_depth:
            raise _Unsupported
        indent, text = self.lines[i]
        if text.startswith("- "):
            return self.sequence(i, indent, depth)
        return self.mapping(i, indent, depth)

    def mapping(self, i: int, indent: int, depth: int) -> tuple[dict[str, Any], int]:
        out: dict[str, Any] = {}
        n = len(self.lines)
        while i < n:
            ind, text = self.lines[i]
            if ind < indent:
                break
            m = _KEY.match(text)
            if ind > indent or m is None:
                raise _Unsupported
            key, rest = m.group(1), m.group(2)
            if not _key_is_str(key):
                raise _Unsupported
            i += 1
            nxt = self.lines[i] if i < n else None
            if rest:
                out[key] = self.value(rest)
                if nxt is not None and nxt[0] > indent:
                    raise _Unsupported  # a continuation line of the scalar
            elif nxt is not None and nxt[0] > indent:
                out[key], i = self.block(i, depth + 1)
            elif nxt is not None and nxt[0] == indent and nxt[1].startswith("- "):
                out[key], i = self.sequence(i, indent, depth + 1)  # YAML's indentless sequence
            else:
                out[key] = None
        return out, i

    def sequence(self, i: int, indent: int, depth: int) -> tuple[list[Any], int]:
        out: list[Any] = []
        n = len(self.lines)
        while i < n:
            ind, text = self.lines[i]
            if ind < indent or not text.startswith("- "):
                break
            if ind > indent:
                raise _Unsupported
            item = text[2:].lstrip(" ")
            column = ind + len(text) - len(item)
            if _KEY.match(item):  # `- key: value` opens a mapping at the item's column
                self.lines[i] = (column, item)
                if depth + 1 > self.limits.max_depth:
                    raise _Unsupported
                value, i = self.mapping(i, column, depth + 1)
                out.append(value)
                continue
            out.append(self.value(item))
            i += 1
            if i < n and self.lines[i][0] > indent:
                raise _Unsupported
        return out, i


def simple_yaml(raw: str, limits: YamlLimits) -> Any:
    """Read the common frontmatter shape exactly as the safe loader would, else return FALLBACK."""
    if _ODD_CHAR.search(raw):
        return FALLBACK
    lines: list[tuple[int, str]] = []
    for line in raw.split("\n"):
        text = line.strip(" ")
        if not text:
            continue
        if text[0] == "#":
            return FALLBACK
        lines.append((len(line) - len(line.lstrip(" ")), text))
    if not lines:
        return None
    # An upper bound of the nodes read: per line a key, a value and a container, plus one per flow item.
    if 3 * len(lines) + raw.count(",") + 1 > limits.max_nodes:
        return FALLBACK
    reader = _Reader(lines, limits)
    try:
        if lines[0][1].startswith("- "):
            return FALLBACK  # a top-level list is rare and reported by the caller; libyaml reads it
        data, end = reader.mapping(0, lines[0][0], 1)
    except _Unsupported:
        return FALLBACK
    return data if end == len(lines) else FALLBACK


@dataclass
class _Frontmatter:
    data: dict[str, Any] = field(default_factory=dict)
    body: str = ""
    problems: list[tuple[str, str, str, str]] = field(default_factory=list)  # code, problem, action, sev

    def report(self, code: str, problem: str, action: str, severity: str = "error") -> _Frontmatter:
        self.problems.append((code, problem, action, severity))
        return self


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
            derived = "fields derived from folder name and body"
            out.report("no_frontmatter", "no YAML frontmatter", derived, "warning")
        return out
    first_nl = stripped.find("\n")
    if first_nl < 0:
        return out.report("unterminated_frontmatter", "frontmatter fence never closed", "read as body")
    close = _FENCE.search(stripped, first_nl + 1)
    if close is None:
        out.body = stripped[first_nl + 1 :].strip()
        unclosed = "frontmatter fence never closed"
        return out.report("unterminated_frontmatter", unclosed, "whole file read as body")
    raw = stripped[first_nl + 1 : close.start()]
    out.body = stripped[close.end() :].strip()
    try:
        data = load_yaml(raw, limits)
    except FrontmatterRefused as exc:
        out.data = _salvage(raw[: limits.max_chars])
        salvaged = ", ".join(sorted(out.data)) or "nothing"
        return out.report(exc.code, exc.problem, f"frontmatter ignored; salvaged {salvaged}")
    except yaml.YAMLError as exc:
        reason = " ".join(str(getattr(exc, "problem", None) or exc).split())[:160]
        out.data = _salvage(raw)
        salvaged = ", ".join(sorted(out.data)) or "nothing"
        return out.report(
            "invalid_yaml", f"frontmatter is not valid (safe) YAML: {reason}", f"salvaged {salvaged}"
        )
    if data is None:
        data = {}
    if not isinstance(data, dict):
        kind = type(data).__name__
        ignored = "frontmatter ignored; fields derived from folder name and body"
        out.report("frontmatter_not_mapping", f"frontmatter is a YAML {kind}, not a mapping", ignored)
        data = {}
    out.data = {str(k): v for k, v in data.items()}
    return out


def _salvage(raw: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for key, value in _SALVAGE.findall(raw):
        if value.strip():
            found.setdefault(key, value.strip().strip("'\""))
    return found

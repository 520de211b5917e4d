"""The frontmatter readers: the fast reader agrees exactly with the safe loader, and the limits hold."""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from segos_pipeline.graph.frontmatter import (
    _FENCE,
    FALLBACK,
    FrontmatterRefused,
    YamlLimits,
    load_yaml,
    safe_yaml,
    simple_yaml,
)
from segos_pipeline.paths import DEFAULT_LIBRARY

from ..conftest import MALFORMED, SHARED_DATA

LIMITS = YamlLimits()


def _same(a: Any, b: Any) -> bool:
    """Equal values of equal types all the way down (True == 1 in Python, but not here)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _reference(raw: str) -> Any:
    return yaml.load(raw, Loader=yaml.CSafeLoader)


KEYS = [
    "name",
    "description",
    "tags",
    "a_b",
    "x-y",
    "yes",
    "null",
    "on",
    "True",
    "<<",
    "a b",
    "k.v",
    "~",
    "-k",
]
SEPARATORS = [": ", ":", ":  ", " : ", ":\t"]
VALUES = [
    "plain words",
    "C# and F#",
    "a: b",
    "a:b",
    "http://x.org/a?b=c",
    "x #comment",
    "x#y",
    "ends:",
    "1",
    "1.5",
    "0x1F",
    "1_000",
    "0755",
    "2024-01-02",
    "2001-12-14t21:59:43.10-05:00",
    "~",
    "null",
    "Null",
    "yes",
    "No",
    "off",
    "y",
    ".inf",
    "-",
    "- a",
    "-a",
    "?q",
    "'single'",
    "'it''s'",
    "'bad'quote'",
    "'unterminated",
    '"double"',
    '"with \\" escape"',
    '"tab\\t"',
    '"a: b # c"',
    "[a, b]",
    "[a,b]",
    "[ a , 'b c' ]",
    "[]",
    "[ ]",
    "[a, , b]",
    "[a, b,]",
    "[a: b]",
    "[[a]]",
    "[1, true, x]",
    '["q", "r, s"]',
    "{a: b}",
    "&anchor v",
    "*alias",
    "!!str 5",
    "!custom x",
    "|",
    ">-",
    "%x",
    "@x",
    "`x`",
    "emoji \U0001f600 ok",
    "nbsp\u00a0in",
    "line\u2028sep",
    "nel\x85x",
    "bom\ufeffx",
    "cr\rx",
    "",
    "   ",
    "value   ",
]
# Half the draws come from the shapes the fast reader accepts, so both of its answers are exercised.
COMMON = ["name", "description", "tags", "inputs"]
COMMON_VALUES = ["plain words", "'quoted'", '"double"', "[a, 'b c']", "", "x:y", "émoji \U0001f600"]
KEY = st.one_of(st.sampled_from(COMMON), st.sampled_from(KEYS))
SEP = st.one_of(st.just(": "), st.sampled_from(SEPARATORS))
VALUE = st.one_of(st.sampled_from(COMMON_VALUES), st.sampled_from(VALUES))
LINE = st.one_of(
    st.builds(lambda k, s, v: f"{k}{s}{v}", KEY, SEP, VALUE),
    st.builds(lambda v: f"- {v}", VALUE),
    st.builds(lambda k, v: f"- {k}: {v}", KEY, VALUE),
    st.sampled_from(["", "# comment", "-", "---x", "\t- tab", "key:", "  "]),
)
TEXT = st.lists(st.tuples(st.sampled_from([0, 0, 0, 1, 2, 2, 4, 6]), LINE), max_size=8).map(
    lambda lines: "\n".join(" " * indent + line for indent, line in lines) + "\n"
)


@settings(max_examples=1500, deadline=None)
@given(TEXT)
def test_fast_reader_agrees_with_the_safe_loader_or_declines(raw):
    fast = simple_yaml(raw, LIMITS)
    if fast is FALLBACK:
        return
    assert _same(fast, _reference(raw)), raw


def _frontmatters(paths: list[str]) -> list[str]:
    out = []
    for path in paths:
        text = Path(path).read_text(encoding="utf-8", errors="replace").lstrip("\ufeff").lstrip()
        first = text.find("\n")
        close = _FENCE.search(text, first + 1) if text.startswith("---") and first >= 0 else None
        if close:
            out.append(text[first + 1 : close.start()])
    return out


def test_fast_reader_covers_and_matches_the_demo_and_real_frontmatter():
    paths = glob.glob(f"{DEFAULT_LIBRARY}/**/SKILL.md", recursive=True)
    paths += glob.glob(f"{MALFORMED}/**/SKILL.md", recursive=True)  # the broken shapes, as before
    paths += glob.glob(f"{SHARED_DATA}/skills/**/SKILL.md", recursive=True)
    raws = _frontmatters(paths)
    read = [(raw, simple_yaml(raw, LIMITS)) for raw in raws]
    fast = [(raw, data) for raw, data in read if data is not FALLBACK]
    assert all(_same(data, _reference(raw)) for raw, data in fast)
    assert len(fast) >= 0.9 * len(raws)  # the common shape really is common


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("tags: &t [*t]", "yaml_alias"),
        ("a: &a x\nb: *a", "yaml_alias"),
        ("base: &b {k: 1}\nother:\n  <<: *b", "yaml_alias"),
        ("tags: " + "[" * 40 + "]" * 40, "yaml_too_deep"),
        ("tags: [" + ", ".join(["x"] * 25_000) + "]", "yaml_too_many_nodes"),
        ("name: x\nnotes: " + "y" * 100_001, "frontmatter_too_large"),
    ],
)
def test_limits_refuse_with_a_code(raw, code):
    with pytest.raises(FrontmatterRefused) as err:
        load_yaml(raw, LIMITS)
    assert err.value.code == code


def test_safe_loader_is_the_safe_constructor_when_within_limits():
    raw = "name: x\nwhen: 2024-01-02\nn: 3\nflag: yes\nitems: !!set {a: null}\ntext: |\n  two\n  lines\n"
    assert simple_yaml(raw, LIMITS) is FALLBACK
    assert _same(safe_yaml(raw, LIMITS), _reference(raw))
    with pytest.raises(yaml.YAMLError):
        load_yaml("run: !!python/object/apply:os.system ['true']", LIMITS)


def test_fast_reader_reads_the_generated_library_shape():
    raw = (
        'name: "csv-loader"\ndescription: "Loads CSV: quoted."\ntags: [data, "two words"]\n'
        "inputs:\n  - name: 'path'\n    type: file\noutputs:\n- table\n"
        "metadata:\n  skill-author: K-Dense Inc.\n"
    )
    data = simple_yaml(raw, LIMITS)
    assert data is not FALLBACK and _same(data, _reference(raw))

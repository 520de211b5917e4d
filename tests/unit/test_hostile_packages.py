"""Hostile SKILL.md packages never take a build down: each case found by a user is a named test.

Every hostile package sits in a library with good ones; the good skills must be parsed as usual and the
bad one must become a report row (a node or a skipped package), within a time bound.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from segos_pipeline.graph.parsing import parse_library

from ..conftest import write_skill

GOOD = {"pdf-to-text": "Convert PDF files to plain text.", "image-resizer": "Resize images in bulk."}

# A 451-byte "billion laughs": nine levels of nine aliases, 9^9 strings once expanded.
LAUGHS = "\n".join(
    ["name: laughs", "description: lol", 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{c}: &{c} [{','.join(['*' + p] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi", strict=True)]
    + ["tags: *i"]
)


def _library(root: Path) -> Path:
    for name, description in GOOD.items():
        write_skill(root, name, f"name: {name}\ndescription: {description}", f"# {name}\n\n{description}\n")
    return root


def _write_raw(root: Path, rel: str | bytes, text: str) -> None:
    pkg = os.path.join(os.fsencode(root), os.fsencode(rel))
    os.makedirs(pkg, exist_ok=True)
    with open(os.path.join(pkg, b"SKILL.md"), "w", encoding="utf-8") as fh:
        fh.write(text)


def _check_good(parsed) -> None:
    nodes = parsed.nodes.filter(pl.col("id").is_in(list(GOOD)))
    assert dict(zip(nodes["name"], nodes["description"], strict=True)) == GOOD
    good_rows = parsed.report.filter(pl.col("file").is_in([f"{n}/SKILL.md" for n in GOOD]))
    assert good_rows.is_empty()


def _rows(parsed, file: str) -> pl.DataFrame:
    return parsed.report.filter(pl.col("file") == file)


def _parse_timed(root: Path, seconds: float = 20.0):
    t = time.perf_counter()
    parsed = parse_library(root, workers=1)
    assert time.perf_counter() - t < seconds
    _check_good(parsed)
    return parsed


def _node(parsed, skill_id: str) -> dict:
    return parsed.nodes.filter(pl.col("id") == skill_id).row(0, named=True)


def test_recursive_alias_is_a_report_row_not_a_recursion_error(tmp_path):
    write_skill(_library(tmp_path), "recursive", "name: recursive\ndescription: x\ntags: &t [*t]", "b")
    parsed = _parse_timed(tmp_path)
    rows = _rows(parsed, "recursive/SKILL.md")
    assert rows["problem"].str.contains("alias").any() and (rows["severity"] == "error").all()
    node = _node(parsed, "recursive")
    assert node["name"] == "recursive" and node["domain_tags"] == []  # name salvaged, alias not followed
    assert "yaml_alias" in node["problems"]


def test_nesting_500_deep_is_a_report_row(tmp_path):
    root = _library(tmp_path)
    write_skill(root, "deep-flow", "name: deep-flow\ndescription: x\ntags: " + "[" * 500 + "]" * 500, "b")
    block = "\n".join("  " * i + f"k{i}:" for i in range(60)) + " leaf"
    write_skill(root, "deep-block", "name: deep-block\ndescription: x\n" + block, "b")
    parsed = _parse_timed(tmp_path)
    for skill_id in ("deep-flow", "deep-block"):
        assert "yaml_too_deep" in _node(parsed, skill_id)["problems"]
        assert _rows(parsed, f"{skill_id}/SKILL.md")["problem"].str.contains("deeper than").any()


def test_billion_laughs_is_refused_in_bounded_time(tmp_path):
    assert len(("---\n" + LAUGHS + "\n---\n").encode()) < 460
    write_skill(_library(tmp_path), "laughs", LAUGHS, "body")
    parsed = _parse_timed(tmp_path, seconds=10)
    node = _node(parsed, "laughs")
    assert "yaml_alias" in node["problems"] and node["name"] == "laughs"


def test_fifo_named_skill_md_is_skipped_not_waited_on(tmp_path):
    root = _library(tmp_path)
    (root / "pipe").mkdir()
    os.mkfifo(root / "pipe" / "SKILL.md")
    parsed = _parse_timed(root, seconds=10)
    assert "pipe" not in parsed.nodes["id"].to_list()
    rows = _rows(parsed, "pipe/SKILL.md")
    assert rows.height == 1 and "FIFO" in rows["problem"][0] and "skipped" in rows["action"][0]


def test_undecodable_folder_name_is_reported_by_its_bytes(tmp_path):
    root = _library(tmp_path)
    _write_raw(root, b"bad\xffname", "---\nname: bad-name\ndescription: x\n---\nbody")
    parsed = _parse_timed(root)
    rows = _rows(parsed, "bad\\xffname/SKILL.md")
    assert rows.height == 1 and "UTF-8" in rows["problem"][0] and rows["severity"][0] == "error"
    assert parsed.nodes.height == len(GOOD)


def test_undecodable_script_name_is_left_out_and_reported(tmp_path):
    pkg = write_skill(_library(tmp_path), "scripted", "name: scripted\ndescription: x", "b", {"ok.py": "1"})
    (Path(os.fsdecode(os.path.join(os.fsencode(pkg / "scripts"), b"x\xfe.py")))).write_text("2")
    parsed = _parse_timed(tmp_path)
    assert _node(parsed, "scripted")["entrypoints"] == ["scripts/ok.py"]
    assert _rows(parsed, "scripted/SKILL.md")["problem"].str.contains("x\\\\xfe.py").any()


@pytest.mark.parametrize(
    ("value", "kind"),
    [("42", "integer 42"), ("yes", "boolean True"), ("[a, b]", "list"), ("{x: 1}", "mapping")],
)
def test_non_string_name_is_a_report_row_not_stringified(tmp_path, value, kind):
    write_skill(_library(tmp_path), "typed", f"name: {value}\ndescription: fine", "b")
    parsed = _parse_timed(tmp_path)
    node = _node(parsed, "typed")
    assert node["name"] == "typed"  # the folder name, never str(42) or "True"
    assert "name_not_string" in node["problems"]
    rows = _rows(parsed, "typed/SKILL.md")
    assert rows.height == 1 and kind in rows["problem"][0] and rows["severity"][0] == "error"


def test_wrong_field_types_are_reported(tmp_path):
    fm = "name: typed\ndescription: [one, two]\ntags: [1, true, null, ok]\nlicense: 2.0\nsummary: 7"
    write_skill(_library(tmp_path), "typed", fm, "First paragraph.")
    parsed = _parse_timed(tmp_path)
    node = _node(parsed, "typed")
    assert node["description"] == "First paragraph." and node["capability"] == "First paragraph."
    assert node["domain_tags"] == ["1", "True", "ok"] and node["license"] == "2.0"
    codes = set(node["problems"])
    assert {
        "description_not_string",
        "list_items_not_text",
        "field_not_text",
        "capability_not_string",
    } <= codes
    assert _rows(parsed, "typed/SKILL.md")["problem"].str.contains("3 item").any()


@pytest.mark.parametrize("line", ["created: 2024-13-45", "n: !!int abc", "flag: !!bool maybe"])
def test_impossible_yaml_values_are_invalid_yaml_not_a_crash(tmp_path, line):
    write_skill(_library(tmp_path), "impossible", f"name: impossible\ndescription: x\n{line}", "b")
    parsed = _parse_timed(tmp_path)
    node = _node(parsed, "impossible")
    assert "invalid_yaml" in node["problems"] and node["name"] == "impossible"
    assert _rows(parsed, "impossible/SKILL.md")["problem"].str.contains("cannot be constructed").any()


def test_oversized_frontmatter_is_refused_and_name_salvaged(tmp_path):
    fm = "name: big\ndescription: x\nnotes: " + "y" * 150_000
    write_skill(_library(tmp_path), "big", fm, "b")
    parsed = _parse_timed(tmp_path)
    node = _node(parsed, "big")
    assert "frontmatter_too_large" in node["problems"] and node["name"] == "big"


def test_pathological_markdown_lines_take_linear_time(tmp_path):
    body = "# a" + " " * 100_000 + "x\n- " + " " * 100_000 + "\n"
    write_skill(
        _library(tmp_path), "blanks", "name: blanks\ndescription: x\ntags: 'a" + " " * 50_000 + "b'", body
    )
    parsed = _parse_timed(tmp_path, seconds=10)
    assert _node(parsed, "blanks")["name"] == "blanks"


def _hostile_library(root: Path) -> Path:
    root = _library(root)
    write_skill(root, "recursive", "name: recursive\ndescription: x\ntags: &t [*t]", "b")
    write_skill(root, "deep", "name: deep\ndescription: x\ntags: " + "[" * 500 + "]" * 500, "b")
    write_skill(root, "laughs", LAUGHS, "b")
    (root / "pipe").mkdir()
    os.mkfifo(root / "pipe" / "SKILL.md")
    _write_raw(root, b"bad\xffname", "---\nname: bad-name\ndescription: x\n---\nbody")
    write_skill(root, "typed", "name: 42\ndescription: x", "b")
    return root


def test_segos_build_of_a_hostile_library_exits_0_with_report_rows(tmp_path):
    """The bar: the real CLI in a fresh process within 60 s; good skills in the version, bad ones reported."""
    lib = _hostile_library(tmp_path / "lib")
    store = tmp_path / "store"
    segos = [sys.executable, "-m", "segos_pipeline.cli"]
    t = time.perf_counter()
    done = subprocess.run(
        [*segos, "build", "--store", str(store), "--json", str(lib)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert time.perf_counter() - t < 60
    manifest = json.loads(done.stdout)
    report = subprocess.run(
        [*segos, "report", manifest["version"], "--store", str(store), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert report.returncode == 0, report.stderr
    files = {row["file"] for row in json.loads(report.stdout)["problems"]}
    bad = ["recursive", "deep", "laughs", "pipe", "bad\\xffname", "typed"]
    assert {f"{b}/SKILL.md" for b in bad} <= files
    nodes = pl.concat(
        pl.read_parquet(path) for path in (store / "versions" / manifest["version"]).glob("nodes-*.parquet")
    )
    assert set(GOOD) <= set(nodes["id"])
    assert {"pipe", "bad\\xffname"}.isdisjoint(nodes["id"])

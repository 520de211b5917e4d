import polars as pl

from segos_pipeline.config import ParseConfig
from segos_pipeline.graph.frontmatter import split_frontmatter
from segos_pipeline.graph.parsing import NODE_SCHEMA, parse_library
from segos_pipeline.graph.report import REPORT_SCHEMA

from ..conftest import demo_library_with_malformed, write_skill

FULL = """
name: csv-loader
description: Load delimited text files into a typed table. Handles quoting and encodings.
one_line_capability: Read CSV into a DataFrame
tags: [data, ingestion]
domain: data-wrangling
metadata:
  segos:
    tags: [tabular]
tooling: [polars, pyarrow]
inputs:
  - name: csv_path
    type: path
outputs:
  - dataframe: polars DataFrame
  - schema
examples:
  - load the sales export
compatibility: python>=3.11
allowed-tools: Bash Read
license: MIT
"""


def _node(nodes: pl.DataFrame, skill_id: str) -> dict:
    return nodes.filter(pl.col("id") == skill_id).row(0, named=True)


def test_every_field_from_frontmatter(tmp_path):
    write_skill(
        tmp_path, "data/csv-loader", FULL, "# CSV\n\nBody text.\n", {"load.py": "print(1)", "notes.txt": "x"}
    )
    parsed = parse_library(tmp_path)
    assert parsed.report.is_empty()
    assert parsed.nodes.schema == pl.Schema(NODE_SCHEMA)
    row = _node(parsed.nodes, "data/csv-loader")
    assert row["name"] == "csv-loader" and row["folder"] == "csv-loader"
    assert row["capability"] == "Read CSV into a DataFrame"
    assert row["domain_tags"] == ["data-wrangling", "data", "ingestion", "tabular"]
    assert row["tooling"] == ["polars", "pyarrow"]
    assert row["inputs"] == ["csv_path: path"]
    assert row["outputs"] == ["dataframe: polars DataFrame", "schema"]
    assert row["example_tasks"] == ["load the sales export"]
    assert row["entrypoints"] == ["scripts/load.py"]  # .txt is not an entrypoint
    assert row["compatibility"] == "python>=3.11"
    assert row["allowed_tools"] == ["Bash", "Read"]
    assert row["license"] == "MIT"
    assert row["source_path"] == "data/csv-loader/SKILL.md"
    assert row["body"] == "# CSV\n\nBody text." and row["body_chars"] == len(row["body"])
    assert len(row["content_hash"]) == 64


def test_sections_fill_missing_frontmatter_fields(tmp_path):
    body = """# Transcriber

Turns speech into text.

## Inputs
- `audio_wav`: 16 kHz mono audio

## Outputs
- transcript_segments

## Tooling
* whisper
* ffmpeg

## Examples
1. transcribe the interview recording
"""
    write_skill(tmp_path, "speech", "name: speech\ndescription: Transcribe audio. Uses whisper.", body)
    row = _node(parse_library(tmp_path).nodes, "speech")
    assert row["inputs"] == ["audio_wav: 16 kHz mono audio"]
    assert row["outputs"] == ["transcript_segments"]
    assert row["tooling"] == ["whisper", "ffmpeg"]
    assert row["example_tasks"] == ["transcribe the interview recording"]
    assert row["capability"] == "Transcribe audio."  # first sentence of the description


def _problems(parsed, skill_id):
    return _node(parsed.nodes, skill_id)["problems"]


def test_malformed_packages_are_read_and_reported_never_dropped(tmp_path):
    write_skill(tmp_path, "no-fm", None, "# Title\n\nExtracts tables from scanned PDFs.\n\nMore.")
    write_skill(tmp_path, "broken", 'name: broken-one\ndescription: "unclosed\n  bad: [indent', "body")
    write_skill(tmp_path, "no-name", "description: Something useful.", "body")
    write_skill(tmp_path, "no-desc", "name: no-desc", "First paragraph here.\n\nSecond.")
    write_skill(tmp_path, "listy", "- a\n- b", "Body paragraph.")
    write_skill(tmp_path, "empty", None, "")
    (tmp_path / "bad-utf8").mkdir()
    (tmp_path / "bad-utf8" / "SKILL.md").write_bytes(
        b"---\nname: bad-utf8\ndescription: ok\n---\nbody \xff\xfe end"
    )
    parsed = parse_library(tmp_path)
    assert parsed.nodes.height == 7  # nothing dropped
    assert _node(parsed.nodes, "no-fm")["description"] == "Extracts tables from scanned PDFs."
    assert _node(parsed.nodes, "no-fm")["name"] == "no-fm"
    assert "invalid_yaml" in _problems(parsed, "broken")
    assert _node(parsed.nodes, "broken")["name"] == "broken-one"  # salvaged from the broken block
    assert _node(parsed.nodes, "no-name")["name"] == "no-name"
    assert _node(parsed.nodes, "no-desc")["description"] == "First paragraph here."
    assert "frontmatter_not_mapping" in _problems(parsed, "listy")
    assert "empty" in _problems(parsed, "empty")
    assert "invalid_utf8" in _problems(parsed, "bad-utf8")
    assert "\ufffd" in _node(parsed.nodes, "bad-utf8")["body"]
    files = set(parsed.report["file"])
    for skill_id in ("no-fm", "broken", "no-name", "no-desc", "listy", "empty", "bad-utf8"):
        assert f"{skill_id}/SKILL.md" in files
    assert parsed.report.schema == pl.Schema(REPORT_SCHEMA)
    assert set(parsed.report["severity"]) <= {"error", "warning"}


def test_unsafe_yaml_is_never_executed(tmp_path):
    marker = tmp_path / "pwned"
    fm = f'name: evil\ndescription: x\nrun: !!python/object/apply:os.system ["touch {marker}"]'
    write_skill(tmp_path / "lib", "evil", fm, "body")
    parsed = parse_library(tmp_path / "lib")
    assert not marker.exists()
    assert "invalid_yaml" in _problems(parsed, "evil")
    assert _node(parsed.nodes, "evil")["name"] == "evil"


def test_symlink_leaving_root_is_not_followed(tmp_path):
    outside = write_skill(tmp_path / "outside", "secret", "name: secret\ndescription: private", "s")
    lib = tmp_path / "lib"
    write_skill(lib, "ok", "name: ok\ndescription: fine", "b")
    (lib / "linked-dir").symlink_to(outside, target_is_directory=True)
    (lib / "linked-file").mkdir()
    (lib / "linked-file" / "SKILL.md").symlink_to(outside / "SKILL.md")
    parsed = parse_library(lib)
    assert parsed.nodes["id"].to_list() == ["ok"]
    report = parsed.report.filter(pl.col("file") == "linked-file/SKILL.md")
    assert report.height == 1 and "skipped" in report["action"][0]


def test_oversized_file_is_truncated_and_reported(tmp_path):
    write_skill(tmp_path, "big", "name: big\ndescription: large", "x" * 5000)
    parsed = parse_library(tmp_path, ParseConfig(max_skill_md_bytes=1000))
    assert "too_large" in _problems(parsed, "big")
    assert _node(parsed.nodes, "big")["body_chars"] < 1000


def test_duplicate_names_reported_on_both(tmp_path):
    write_skill(tmp_path, "a/pdf", "name: pdf\ndescription: one", "b")
    write_skill(tmp_path, "b/pdf-tools", "name: PDF\ndescription: two", "b")
    parsed = parse_library(tmp_path)
    assert set(parsed.report.filter(pl.col("problem").str.contains("also used"))["file"]) == {
        "a/pdf/SKILL.md",
        "b/pdf-tools/SKILL.md",
    }


def test_hidden_dirs_skipped_and_ids_sorted(tmp_path):
    write_skill(tmp_path, "z", "name: z\ndescription: z", "b")
    write_skill(tmp_path, "a/b", "name: ab\ndescription: ab", "b")
    write_skill(tmp_path, ".git/x", "name: x\ndescription: x", "b")
    assert parse_library(tmp_path).nodes["id"].to_list() == ["a/b", "z"]


def test_split_frontmatter_handles_bom_and_dots_fence():
    fm = split_frontmatter("\ufeff---\nname: a\ndescription: b\n...\nbody")
    assert fm.data == {"name": "a", "description": "b"} and fm.body == "body" and not fm.problems


def test_demo_library_is_clean():
    """The shipped demo is what a newcomer's first `segos build` reads: 60 skills and no problem."""
    from segos_pipeline.paths import DEFAULT_LIBRARY

    parsed = parse_library(DEFAULT_LIBRARY)
    assert parsed.nodes.height == 60
    assert parsed.report.height == 0, parsed.report
    assert not any(i.startswith("_") for i in parsed.nodes["id"])


# The problem codes each package of tests/fixtures/malformed must get (its README.md says why).
MALFORMED_PROBLEMS = {
    "bad-encoding": {"invalid_utf8"},
    "broken-yaml": {"invalid_yaml"},
    "duplicate-name": set(),  # a valid package: the clash is reported in the file report, below
    "empty": {"empty"},
    "frontmatter-not-mapping": {"frontmatter_not_mapping", "missing_name", "missing_description"},
    "missing-description": {"missing_description"},
    "missing-name": {"missing_name"},
    "no-frontmatter": {"no_frontmatter", "missing_name", "missing_description"},
    "unsafe-yaml": {"invalid_yaml"},
}


def test_malformed_fixture_packages_are_each_reported_never_dropped(tmp_path):
    lib = demo_library_with_malformed(tmp_path / "lib")
    parsed = parse_library(lib)
    on_disk = {p.parent.relative_to(lib).as_posix() for p in lib.rglob("SKILL.md")}
    assert on_disk == set(parsed.nodes["id"])  # nothing dropped
    assert parsed.nodes.height == 69
    for name, codes in MALFORMED_PROBLEMS.items():
        assert set(_problems(parsed, f"_malformed/{name}")) == codes, name
    assert _node(parsed.nodes, "_malformed/broken-yaml")["name"] == "yaml-config-merger"  # salvaged
    assert _node(parsed.nodes, "_malformed/missing-name")["name"] == "missing-name"  # the folder's name
    clash = set(parsed.report.filter(pl.col("problem").str.contains("also used"))["file"])
    assert clash == {"data-wrangling/csv-loader/SKILL.md", "_malformed/duplicate-name/SKILL.md"}
    assert parsed.report.height == 14
    assert set(parsed.report["severity"]) == {"error", "warning"}


def test_parallel_parse_equals_serial(tmp_path, monkeypatch):
    import segos_pipeline.graph.parsing as parsing

    for i in range(30):
        write_skill(tmp_path, f"d{i % 3}/s{i}", f"name: s{i}\ndescription: skill {i}", "body")
    write_skill(tmp_path, "broken", "name: [unclosed", "body")
    monkeypatch.setattr(parsing, "_PARALLEL_MIN", 1)
    monkeypatch.setattr(parsing, "_CHUNK", 4)
    parallel = parse_library(tmp_path, workers=2)
    serial = parse_library(tmp_path, workers=1)
    assert parallel.nodes.equals(serial.nodes) and parallel.report.equals(serial.report)
    assert parallel.nodes.height == 31


def test_chunked_tokenisation_equals_one_pass(monkeypatch):
    import segos_pipeline.text.lexicon as lexicon
    from segos_pipeline.paths import DEFAULT_LIBRARY
    from segos_pipeline.text.token_rows import token_table

    nodes = parse_library(DEFAULT_LIBRARY).nodes
    whole = token_table(nodes)
    monkeypatch.setattr(lexicon, "TOKEN_CHUNK", 7)
    assert token_table(nodes).equals(whole)
    assert whole["node"].max() == nodes.height - 1


def test_pool_that_cannot_start_falls_back_to_serial(tmp_path, monkeypatch):
    import segos_pipeline.graph.parsing as parsing

    for i in range(6):
        write_skill(tmp_path, f"s{i}", f"name: s{i}\ndescription: skill {i}", "body")
    monkeypatch.setattr(parsing, "_PARALLEL_MIN", 1)
    monkeypatch.setattr(parsing, "_parse_in_pool", lambda chunks, workers, done=None: [])
    assert parse_library(tmp_path, workers=2).nodes.height == 6


def test_a_pool_that_breaks_midway_leaves_the_rest_to_this_process(tmp_path, monkeypatch):
    """Chunks a broken pool did not return are parsed here, each handed on exactly once and in order."""
    import segos_pipeline.graph.parsing as parsing

    for i in range(9):
        write_skill(tmp_path, f"s{i}", f"name: s{i}\ndescription: skill {i}", "body")
    monkeypatch.setattr(parsing, "_PARALLEL_MIN", 9)  # a pool, for chunks of the packages found here
    monkeypatch.setattr(parsing, "_CHUNK", 2)

    def breaks_after_two(chunks, workers, take):
        for chunk in chunks[:2]:
            take(parsing._parse_chunk(chunk))

    monkeypatch.setattr(parsing, "_parse_in_pool", breaks_after_two)
    handed: list[int] = []
    heard: list[int] = []
    parsed = parse_library(
        tmp_path, workers=2, per_chunk=len, on_chunk=handed.append, progress=lambda n, _: heard.append(n)
    )
    assert parsed.nodes["id"].to_list() == [f"s{i}" for i in range(9)]
    assert handed == [2, 2, 2, 2, 1]
    assert heard == [2, 4, 6, 8, 9]


def test_markdown_headings_and_bullets_read_as_before():
    from segos_pipeline.graph.fields import markdown_sections, section_items

    body = "# Title ##\ntext\n## C# basics\nc\n###   Spaced   \n- one  \n*   two\n1) three\n"
    body += "####### not a heading"
    sections = markdown_sections(body)
    assert list(sections) == ["title", "c# basics", "spaced"]
    assert sections["spaced"].endswith("####### not a heading")  # seven hashes is text, not a heading
    assert section_items(sections["spaced"]) == ["one", "two", "three"]


def test_split_frontmatter_reports_a_refused_frontmatter_and_salvages():
    fm = split_frontmatter("---\nname: a\ndescription: b\ntags: &t [*t]\n---\nbody")
    assert fm.data == {"name": "a", "description": "b"} and fm.body == "body"
    assert [p[0] for p in fm.problems] == ["yaml_alias"]


def _tricky_tree(root):
    """Folders whose walk order and id order differ, nested and root packages, hidden, vendored and
    symlinked folders, a folder named like SKILL.md, a folder without permissions (readable as root)."""
    for rel in ["a/s1", "a-b/s2", "a/s1/nested", "a/s1-x", "z/y/x/w/deep", "b/.hidden/s", "b/node_modules/s"]:
        write_skill(root, rel, f"name: {rel.replace('/', '-')}\ndescription: skill at {rel}", "body")
    for i in range(12):
        write_skill(root, f"wide/s{i:02d}", f"name: wide-{i}\ndescription: wide skill {i}", "body")
    write_skill(root, ".", "name: root-skill\ndescription: the root itself", "body")
    (root / "c" / "SKILL.md").mkdir(parents=True)  # a folder, not a file: not a package
    (root / "link").symlink_to(root / "a", target_is_directory=True)  # never descended
    locked = root / "locked"
    locked.mkdir()
    write_skill(locked, "s", "name: locked\ndescription: unreadable", "body")
    locked.chmod(0)
    return locked


def test_planned_chunks_find_exactly_the_walk_of_the_library(tmp_path, monkeypatch):
    """The workers' share of discovery (folders split a level at a time and walked in chunks) finds the
    same packages, in the same order, as one walk of the root, for any split and threshold."""
    import os

    import segos_pipeline.graph.discovery as discovery
    import segos_pipeline.graph.parsing as parsing

    locked = _tricky_tree(tmp_path)
    try:
        walk = []
        for dirpath, dirnames, filenames in os.walk(tmp_path):  # the reference: os.walk, sorted, pruned
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "node_modules")
            if "SKILL.md" in filenames:
                walk.append(dirpath)
        assert list(discovery.package_folders(str(tmp_path))) == walk
        for minimum, per_worker, levels in [(1, 1, 1), (1, 16, 3), (3, 4, 2), (10_000, 16, 3), (5, 2, 0)]:
            monkeypatch.setattr(parsing, "_PARALLEL_MIN", minimum)
            monkeypatch.setattr(parsing, "_UNITS_PER_WORKER", per_worker)
            monkeypatch.setattr(parsing, "_SPLIT_LEVELS", levels)
            monkeypatch.setattr(parsing, "_CHUNK", 3)
            chunks, pooled = parsing._plan(tmp_path, workers=2)
            assert [p for c in chunks for p, _ in c.listed()] == walk
            assert pooled == (minimum <= len(walk))
        monkeypatch.setattr(parsing, "_PARALLEL_MIN", 1)
        handed: list[int] = []
        parallel = parse_library(tmp_path, workers=2, per_chunk=len, on_chunk=handed.append)
        serial = parse_library(tmp_path, workers=1, per_chunk=len)
        assert parallel.nodes.equals(serial.nodes) and parallel.report.equals(serial.report)
        assert "." in set(parallel.nodes["id"]) and "a/s1/nested" in set(parallel.nodes["id"])
        # per-chunk work done by the workers: one result per chunk, covering every skill; the walk found
        # "a/s1" before "a-b/s2", so the chunks are not in id order and the node table was sorted
        assert sum(handed) == parallel.nodes.height
        assert not parallel.in_order and parallel.nodes["id"].is_sorted()
        assert parse_library(tmp_path / "wide", workers=2).in_order
    finally:
        locked.chmod(0o755)


def test_a_name_shared_by_many_packages_keeps_the_report_linear(tmp_path):
    """Each package keeps its own duplicate-name row, naming a few of the others and counting the rest."""
    from segos_pipeline.graph.parsing import MAX_NAMED_DUPLICATES

    for i in range(40):
        write_skill(tmp_path, f"p{i:02d}", f"name: same\ndescription: Package {i}.", "body")
    parsed = parse_library(tmp_path)
    dup = parsed.report.filter(pl.col("problem").str.contains("is also used by"))
    assert dup.height == 40  # one row a package
    first = dup.row(0, named=True)["problem"]
    assert "and 34 other package(s)" in first and first.count(", ") == MAX_NAMED_DUPLICATES - 1
    assert max(len(p) for p in dup["problem"]) < 200  # not 39 names in every row


def test_entrypoints_are_capped_and_the_rest_reported(tmp_path):
    from segos_pipeline.graph.parsing import MAX_ENTRYPOINTS

    scripts = {f"s{i:04d}.py": "print(1)\n" for i in range(MAX_ENTRYPOINTS + 7)}
    write_skill(tmp_path, "many", "name: many\ndescription: Many scripts.", "body", scripts)
    parsed = parse_library(tmp_path)
    listed = parsed.nodes["entrypoints"][0].to_list()
    assert listed == [f"scripts/s{i:04d}.py" for i in range(MAX_ENTRYPOINTS)]
    row = parsed.report.filter(pl.col("problem").str.contains("entrypoints")).row(0, named=True)
    assert f"{MAX_ENTRYPOINTS + 7:,} entrypoints" in row["problem"] and row["severity"] == "warning"

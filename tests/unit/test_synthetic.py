"""The synthetic library generator: deterministic, valid, chained, and usable end to end (n = 200)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from segos_pipeline import Retriever, SnapshotStore, build_cold_start
from segos_pipeline.evaluation.synthetic import PARAMS_FILE, generate_library, generate_queries, main
from segos_pipeline.text.tokens import normalize_name

N = 200


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("synthetic") / "lib"
    return out, generate_library(out, N, seed=7)


def file_hashes(root: Path) -> dict[str, str]:
    """Every generated file's sha256, except the summary (it records the path and the elapsed time)."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != PARAMS_FILE
    }


def frontmatters(root: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(root.rglob("SKILL.md")):
        text = path.read_text(encoding="utf-8")
        assert text.startswith("---\n")
        raw = text.split("\n---\n", 1)[0].removeprefix("---\n")
        data = yaml.safe_load(raw)
        assert isinstance(data, dict), path
        out[path.parent.relative_to(root).as_posix()] = data
    return out


def io_names(value: Any) -> set[str]:
    """Artifact names of an inputs/outputs value in any of the shapes the generator writes."""
    items = value if isinstance(value, list) else [part for part in str(value or "").split(", ") if part]
    names = set()
    for item in items:
        names.add(item["name"] if isinstance(item, dict) else str(item).split(":", 1)[0].strip())
    return names


def test_same_seed_same_bytes(library: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    root, summary = library
    again = generate_library(tmp_path / "again", N, seed=7)
    assert file_hashes(root) == file_hashes(tmp_path / "again")
    assert summary["params"] == again["params"]
    other = generate_library(tmp_path / "other", N, seed=8)
    assert file_hashes(tmp_path / "other") != file_hashes(root)
    assert other["n_skills"] == N


def test_summary_and_layout(library: tuple[Path, dict[str, Any]]) -> None:
    root, summary = library
    skill_files = list(root.rglob("SKILL.md"))
    assert summary["n_skills"] == len(skill_files) == N
    assert summary["n_domains"] == 4  # n/400 rounds to 0; the minimum is 4
    assert {p.parent.parent.parent for p in skill_files} == {root}  # <domain>/<skill>/SKILL.md
    assert 300 <= summary["vocabulary"]["domain_min"] <= summary["vocabulary"]["domain_max"] <= 4000
    assert any((p.parent / "scripts").is_dir() for p in skill_files)
    assert json.loads((root / PARAMS_FILE).read_text())["params"] == summary["params"]


def test_frontmatter_is_valid_yaml_and_names_unique(library: tuple[Path, dict[str, Any]]) -> None:
    root, _ = library
    fms = frontmatters(root)
    assert len(fms) == N
    names = [fm["name"] for fm in fms.values()]
    assert len({normalize_name(n) for n in names}) == N
    for rel, fm in fms.items():
        assert rel.rsplit("/", 1)[1] == fm["name"]  # folder name is the skill name
        assert 2 <= len(fm["name"].split("-")) <= 3
        assert isinstance(fm["description"], str) and fm["description"].endswith(".")
        assert 1 <= fm["description"].count(". ") + 1 <= 3


def test_io_chains_link_producers_to_consumers(library: tuple[Path, dict[str, Any]]) -> None:
    root, _ = library
    fms = frontmatters(root)
    produced = {rel: io_names(fm.get("outputs", fm.get("output"))) for rel, fm in fms.items()}
    consumed = {rel: io_names(fm.get("inputs", fm.get("input"))) for rel, fm in fms.items()}
    links = [(a, b) for a, outs in produced.items() for b, ins in consumed.items() if a != b and outs & ins]
    assert len(links) >= N // 4
    assert all(a.split("/")[0] == b.split("/")[0] for a, b in links)  # chains stay inside a domain


def test_queries_have_existing_gold_and_are_not_copies(library: tuple[Path, dict[str, Any]]) -> None:
    root, summary = library
    queries = generate_queries(summary, 30, seed=1)
    assert queries == generate_queries(root, 30, seed=1)  # from the folder as from the summary
    names = {fm["name"] for fm in frontmatters(root).values()}
    descriptions = [fm["description"] for fm in frontmatters(root).values()]
    assert len(queries) == 30
    assert len({q["query"] for q in queries}) == 30
    for q in queries:
        assert set(q) == {"task", "query", "gold"}
        assert 1 <= len(q["gold"]) <= 3 and set(q["gold"]) <= names
        assert not any(g in q["query"] for g in q["gold"])
        assert not any(d in q["query"] for d in descriptions)


def test_build_and_retrieve_gold(library: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    root, summary = library
    manifest = build_cold_start(root, tmp_path / "store")
    assert manifest["counts"]["skills"] == N
    assert manifest["counts"]["problems"] == 0  # every generated package parses cleanly
    snap = SnapshotStore(tmp_path / "store").load(manifest["version"])
    assert snap.nodes["body_chars"].min() >= 400 and snap.nodes["body_chars"].max() <= 1500
    retriever = Retriever(snap)
    queries = generate_queries(summary, 40, seed=3)
    hits = 0
    for q in queries:
        top = {skill_id.rsplit("/", 1)[1] for skill_id in retriever.ranked_ids(q["query"], 5)}
        hits += bool(top & set(q["gold"]))
    # Real but robust: the noise makes queries imperfect, yet most must find a gold skill.
    assert hits / len(queries) >= 0.5


def test_cli_writes_library_and_queries(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "cli"), "--skills", "20", "--seed", "2", "--queries", "5"]) == 0
    assert len(list((tmp_path / "cli").rglob("SKILL.md"))) == 20
    lines = (tmp_path / "cli" / "queries.jsonl").read_text().splitlines()
    assert [set(json.loads(line)) for line in lines] == [{"task", "query", "gold"}] * 5
    assert json.loads(capsys.readouterr().out)["n_skills"] == 20


def test_cli_usage_errors_and_help(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "x")]) == 2  # --skills is required
    assert "--skills" in capsys.readouterr().err
    assert main([str(tmp_path / "x"), "--skills", "0"]) == 2
    assert "0 is not in the range x>=1" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "python -m segos_pipeline.evaluation.synthetic" in out and "--queries" in out

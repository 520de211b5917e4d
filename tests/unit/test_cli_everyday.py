"""The everyday CLI: `segos skills`, `show`, `explain`, and every command's `--help`
offering `--json` and an example."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
from click.testing import CliRunner

from segos_pipeline.cli import main
from segos_pipeline.retrieval.explain import NO_EVIDENCE
from segos_pipeline.service.api import SegosService

PROJECT_ROOT = Path(__file__).resolve().parents[2]
LOADER = "data-wrangling/csv-loader"
QUERY = "parse a csv file and plot a chart"


def run(*args: Any, code: int = 0) -> Any:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == code, result.output + str(result.exception)
    return result


def test_every_command_help_lists_json_and_an_example():
    missing = []
    for name, command in sorted(main.commands.items()):
        text = run(name, "--help").output
        options = {o for p in command.params if isinstance(p, click.Option) for o in p.opts}
        if "--json" not in options or "--json" not in text or "Example:" not in text or "segos " not in text:
            missing.append(name)
    assert not missing, f"commands without --json or an Example in --help: {missing}"
    assert {"skills", "show", "explain", "export"} <= set(main.commands)


def test_skills_lists_and_filters(demo_store: Path):
    listed = json.loads(run("skills", "--store", demo_store, "--json").stdout)
    assert listed["count"] == len(listed["skills"]) >= 40
    assert [s["id"] for s in listed["skills"]] == sorted(s["id"] for s in listed["skills"])
    assert set(listed["skills"][0]) == {"id", "name", "capability"}
    csv = json.loads(run("skills", "--store", demo_store, "--filter", "CSV", "--json").stdout)
    assert LOADER in [s["id"] for s in csv["skills"]] and csv["count"] < listed["count"]
    assert all("csv" in " ".join(s.values()).lower() for s in csv["skills"])
    plain = run("skills", "--store", demo_store, "--filter", "csv").output.splitlines()  # not a terminal
    assert len(plain) == csv["count"] and plain[0].split("\t")[0] == csv["skills"][0]["id"]


def test_show_is_the_mcp_skill_detail(demo_store: Path):
    shown = json.loads(run("show", LOADER, "--store", demo_store, "--json").stdout)
    assert shown == json.loads(json.dumps(SegosService(demo_store).skill_detail(LOADER), default=str))
    assert Path(shown["folder"], "SKILL.md").is_file()
    text = run("show", "csv-loader", "--store", demo_store).output
    assert f"folder: {shown['folder']}" in text and "scripts/load_csv.py" in text
    unknown = run("show", "no-such-skill", "--store", demo_store, code=2)
    assert "unknown skill" in unknown.output


def test_explain_gives_the_evidence_behind_a_rank(demo_store: Path):
    bundle = json.loads(run("retrieve", QUERY, "--store", demo_store, "--json").stdout)
    member = next(s for s in bundle["skills"] if s["id"] == LOADER)
    out = json.loads(run("explain", QUERY, LOADER, "--store", demo_store, "--json").stdout)
    assert out["in_bundle"] and out["evidence"] and out["rank"] >= 1
    assert out["bundle"] == [s["id"] for s in bundle["skills"]]
    for key in ("score", "lexical", "graph", "semantic", "relevance", "words", "seed", "why", "reasons"):
        expected = member[key]
        assert out[key] == (round(expected, 6) if isinstance(expected, float) else expected), key
    text = run("explain", QUERY, "csv-loader", "--store", demo_store).output
    assert "rank " in text and "score ρ" in text and "why:" in text

    outside = json.loads(run("explain", QUERY, "media/exif-stripper", "--store", demo_store, "--json").stdout)
    assert outside["rank"] is None and not outside["evidence"] and not outside["in_bundle"]
    assert outside["why"] == NO_EVIDENCE and outside["reasons"] == []
    assert NO_EVIDENCE in run("explain", QUERY, "exif-stripper", "--store", demo_store).output
    assert "unknown skill" in run("explain", QUERY, "no-such-skill", "--store", demo_store, code=2).output


def _segos(*args: Any) -> list[str]:
    # this checkout's code (python -m from the checkout), as the tests of `segos mcp` start it
    return [sys.executable, "-m", "segos_pipeline.cli", *map(str, args)]


def test_skills_is_a_rich_table_on_a_terminal(demo_store: Path):
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "200", "TERM": "xterm"}
    command = _segos("skills", "--store", demo_store, "--filter", "csv")
    proc = subprocess.Popen(command, stdout=slave, stderr=subprocess.PIPE, cwd=PROJECT_ROOT, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the terminal is gone: the command ended
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    shown = b"".join(chunks).decode()
    assert LOADER in shown and "capability" in shown
    assert "━" in shown or "─" in shown  # a table's rules, not the tab-separated lines of a pipe
    assert "\t" not in shown


def test_json_of_trace_schema_simulate_and_mcp(demo_store: Path, tmp_path: Path):
    assert json.loads(run("trace-schema", "--json").stdout)["type"] == "object"
    out = tmp_path / "sim.jsonl"
    simulated = json.loads(
        run("simulate", "--store", demo_store, "--traces", 5, "--out", out, "--json").stdout
    )
    assert simulated["traces"] == 5 == len(out.read_text().splitlines()) and simulated["out"] == str(out)
    # the server's start-up line on stderr as JSON (stdout is the MCP wire); the client leaves at once
    proc = subprocess.run(
        _segos("mcp", "--store", demo_store, "--json"),
        input=b"",
        capture_output=True,
        cwd=PROJECT_ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    lines = [json.loads(line) for line in proc.stderr.decode().splitlines() if line.startswith("{")]
    assert lines and lines[0]["mode"] == "served" and lines[0]["serving"].startswith("v0001-")
    assert lines[0]["on"] == "stdio"

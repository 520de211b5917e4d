"""The CLI contract of issue 2, end to end on the project's demo data (data/)."""

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from segos_pipeline.cli import main
from segos_pipeline.paths import DATA_DIR


def run(*args, ok=True):
    result = CliRunner().invoke(main, [str(a) for a in args])
    if ok:
        assert result.exit_code == 0, result.output + str(result.exception)
    return result


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    store = tmp_path_factory.mktemp("cli") / "store"
    result = run("build", "--store", store, "--quiet")
    return store, result.output.strip().splitlines()[-1]


def test_build_prints_version_id_last_and_json_manifest(built, tmp_path):
    store, vid = built
    assert vid.startswith("v0001-")
    manifest = json.loads(run("build", DATA_DIR / "library", "--store", store, "--json").output)
    assert manifest["version"].startswith("v0002-") and manifest["kind"] == "cold_start"
    assert manifest["counts"]["skills"] >= 40


def test_versions_json(built):
    store, vid = built
    versions = json.loads(run("versions", "--store", store, "--json").output)
    assert versions[0]["version"] == vid
    assert vid in run("versions", "--store", store).output


def test_retrieve_json_shape(built):
    store, vid = built
    out = json.loads(
        run(
            "retrieve",
            "turn the interview video into subtitles",
            "--store",
            store,
            "--version",
            vid,
            "--top-n",
            "3",
            "--json",
        ).output
    )
    assert out["version"] == vid and out["query"] == "turn the interview video into subtitles"
    assert 1 <= len(out["skills"]) <= 3
    for key in ("id", "name", "rank", "score", "chars"):
        assert key in out["skills"][0]
    assert out["chars"] == sum(s["chars"] for s in out["skills"]) <= 9000


def test_replay_json_shape(built):
    store, _ = built
    out = json.loads(
        run("replay", DATA_DIR / "queries" / "demo.jsonl", "--store", store, "--k", "5", "--json").output
    )
    for key in ("version", "k", "n", "hit", "recall", "comp", "mrr", "mean_best_rank", "latency_ms"):
        assert key in out
    assert set(out["latency_ms"]) == {"p50", "p95"} and out["k"] == 5 and out["n"] >= 20
    assert 0 <= out["comp"] <= out["recall"] <= out["hit"] <= 1


@pytest.mark.parametrize(
    "args, message",
    [
        (["retrieve", "x", "--version", "v9999"], "no such version"),
        (["replay", "missing.jsonl"], "not found"),
        (["build", "no/such/dir"], "not found"),
        (["retrieve", "  "], "query is empty"),
    ],
)
def test_errors_are_one_actionable_line_and_nonzero(built, args, message):
    store, _ = built
    result = subprocess.run(
        [sys.executable, "-m", "segos_pipeline.cli", *args, "--store", str(store)],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_empty_store_error(tmp_path):
    result = run("retrieve", "anything", "--store", tmp_path / "nothing", ok=False)
    assert result.exit_code != 0 and "segos build" in result.output

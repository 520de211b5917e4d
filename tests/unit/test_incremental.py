"""Incremental add / update / remove equal a full rebuild of the changed library (ties and df-cap flips
included); traced edges of existing skills are kept, edges of a removed skill are dropped."""

import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from segos_pipeline import SnapshotStore, build_cold_start
from segos_pipeline.cli import main as service_cli
from segos_pipeline.config import BuildConfig, GraphConfig, ParseConfig
from segos_pipeline.graph.build import commit_derived
from segos_pipeline.graph.incremental import IncrementalError, apply_change
from segos_pipeline.store import parts as parts_mod
from segos_pipeline.store.snapshot import DamagedSnapshot, Snapshot

from ..conftest import damage, write_format1, write_skill

# Words repeat across skills on purpose: equal Jaccard scores (ties) and, with a small df cap, tokens that
# cross the cap when one skill is added or removed.
SKILLS = {
    "alpha/csv-loader": "Load csv tables into frames.",
    "alpha/csv-reader": "Load csv tables into frames.",  # an exact twin: ties everywhere
    "alpha/json-loader": "Load json documents into frames.",
    "beta/chart-plotter": "Plot frames as charts.",
    "beta/chart-exporter": "Export charts as png images.",
    "beta/pdf-writer": "Write reports as pdf documents.",
    "gamma/mailer": "Email reports to recipients.",
    "gamma/zipper": "Compress archives quickly.",
}


def _library(root: Path) -> Path:
    for rel, desc in SKILLS.items():
        write_skill(root, rel, f"name: {rel.split('/')[-1]}\ndescription: {desc}", f"# {rel}\n\n{desc}\n")
    return root


def assert_same_graph(inc: Snapshot, full: Snapshot) -> None:
    assert inc.nodes.equals(full.nodes)
    assert inc.tokens.equals(full.tokens)
    sem = [
        s.edges.filter(pl.col("relation") == "semantic")
        .sort("src", "dst")
        .select("src", "dst", "weight", "w0")
        for s in (inc, full)
    ]
    assert sem[0].equals(sem[1])
    assert inc.transition.shape == full.transition.shape
    assert np.allclose(inc.transition.toarray(), full.transition.toarray(), rtol=0, atol=1e-12)
    assert inc.manifest["counts"]["semantic"] == full.manifest["counts"]["semantic"]
    # the stored signature holds the same (skill, token) pairs (its vocabulary order may differ)
    pairs = []
    for s in (inc, full):
        sig = s.signature()
        coo = sig.matrix.tocoo()
        pairs.append(
            pl.DataFrame({"node": coo.row, "token": sig.vocab.gather(coo.col)}).sort("node", "token")
        )
    assert pairs[0].equals(pairs[1])


def _full(lib: Path, tmp: Path, config: BuildConfig) -> Snapshot:
    st = SnapshotStore(tmp / f"full-{len(list(tmp.glob('full-*')))}")
    build_cold_start(lib, st, config)
    return st.load()


@pytest.mark.parametrize("part_rows", [4096, 1], ids=["one-part", "one-skill-parts"])
@pytest.mark.parametrize(
    "graph",
    [
        GraphConfig(),
        GraphConfig(knn_k=3, df_cap_min=3, df_cap_fraction=0.0),
        # a cap that grows with the library (as SPEC's max(1,000, 1% N)): n itself moves it
        GraphConfig(knn_k=2, df_cap_min=1, df_cap_fraction=0.4),
    ],
    ids=["defaults", "k3-small-df-cap", "k2-growing-df-cap"],
)
def test_add_update_remove_equal_a_full_rebuild(tmp_path: Path, graph: GraphConfig, part_rows, monkeypatch):
    # with one skill per part, adding twice into one part splits it and a removal drops a part
    monkeypatch.setattr(parts_mod, "PART_ROWS", part_rows)
    config = BuildConfig(graph=graph)
    lib = _library(tmp_path / "lib")
    store = SnapshotStore(tmp_path / "store")
    build_cold_start(lib, store, config)
    flips = 0

    # add a third twin (more ties), then a skill sharing words with several others
    new = {
        "alpha/csv-parser": "name: csv-parser\ndescription: Load csv tables into frames.",
        "delta/report-mailer": "name: report-mailer\ndescription: Email pdf reports.",
    }
    for rel, fm in new.items():
        pkg = write_skill(lib, rel, fm, "x\n")
        result = apply_change(store, "add", pkg)
        assert result.manifest["kind"] == "incremental" and result.parent != result.version
        flips += result.counters["flipped_tokens"]
        assert_same_graph(store.load(), _full(lib, tmp_path, config))

    # update: the twin changes its words, then back to a tie
    (lib / "alpha/csv-reader/SKILL.md").write_text(
        "---\nname: csv-reader\ndescription: Read csv tables and plot charts.\n---\nz\n"
    )
    result = apply_change(store, "update", lib / "alpha/csv-reader")
    flips += result.counters["flipped_tokens"]
    assert_same_graph(store.load(), _full(lib, tmp_path, config))

    # remove a skill others point to (its in-neighbours are recomputed exactly)
    shutil.rmtree(lib / "alpha/csv-loader")
    result = apply_change(store, "remove", lib / "alpha/csv-loader")
    flips += result.counters["flipped_tokens"]
    assert_same_graph(store.load(), _full(lib, tmp_path, config))
    if graph.df_cap_min < 1_000:
        assert flips > 0, "the small df cap should make some join token cross it"

    if part_rows == 1:
        # both additions landed in an existing part; the removal emptied its part, which is dropped
        assert [p["rows"] for p in store.manifest()["parts"]] == [2, 1, 1, 1, 1, 2, 1]
        assert store.manifest()["counters"]["parts"] == {"total": 7, "written": 0}
        # a third skill in a two-skill part splits it (parts stay at most twice PART_ROWS)
        fm = "name: csv-printer\ndescription: Print csv tables."
        pkg = write_skill(lib, "alpha/csv-printer", fm, "x\n")
        apply_change(store, "add", pkg)
        assert [p["rows"] for p in store.manifest()["parts"]] == [1, 1, 1, 1, 1, 1, 1, 2, 1]
        assert store.manifest()["counters"]["parts"] == {"total": 9, "written": 3}
        assert_same_graph(store.load(), _full(lib, tmp_path, config))

    # an unchanged package makes no version
    before = store.latest()
    result = apply_change(store, "update", lib / "gamma/zipper")
    assert not result.changed and store.latest() == before


def test_traced_edges_are_kept_and_a_removed_skills_edges_dropped(tmp_path: Path):
    lib = _library(tmp_path / "lib")
    store = SnapshotStore(tmp_path / "store")
    build_cold_start(lib, store)
    parent = store.load()
    traced = pl.DataFrame(
        {
            "src": ["gamma/mailer", "beta/pdf-writer", "gamma/zipper"],
            "dst": ["beta/pdf-writer", "beta/chart-plotter", "gamma/mailer"],
            "relation": ["workflow", "dependency", "workflow"],
            "weight": [2.0, 1.0, 1.0],
            "w0": [0.0, 0.0, 0.0],
            "n_e": [2, 1, 1],
            "round_created": [1, 1, 1],
            "round_updated": [1, 1, 1],
            "w_raw": [2.0, 1.0, 1.0],
        },
        schema=parent.edges.schema,
    )
    commit_derived(store, parent, pl.concat([parent.edges, traced]), kind="evolved")

    (lib / "gamma/mailer/SKILL.md").write_text("---\nname: mailer\ndescription: Email pdf digests.\n---\nq\n")
    apply_change(store, "update", lib / "gamma/mailer")
    kept = store.load().edges.filter(pl.col("relation") != "semantic")
    assert kept.sort("src", "dst").equals(traced.sort("src", "dst"))

    shutil.rmtree(lib / "gamma/mailer")
    apply_change(store, "remove", lib / "gamma/mailer")
    snap = store.load()
    assert not snap.edges.filter((pl.col("src") == "gamma/mailer") | (pl.col("dst") == "gamma/mailer")).height
    assert snap.edges.filter(pl.col("relation") == "dependency").height == 1
    assert "gamma/mailer" not in snap.nodes["id"].to_list()


def test_refusals_say_what_to_do(tmp_path: Path):
    lib = _library(tmp_path / "lib")
    store = SnapshotStore(tmp_path / "store")
    build_cold_start(lib, store)
    with pytest.raises(IncrementalError, match="segos update"):
        apply_change(store, "add", lib / "gamma/zipper")
    with pytest.raises(IncrementalError, match="delete the package folder first"):
        apply_change(store, "remove", lib / "gamma/zipper")
    with pytest.raises(IncrementalError, match=r"has no SKILL\.md"):
        apply_change(store, "update", lib / "gamma/nothing-here")
    fresh = write_skill(lib, "gamma/fresh", "name: fresh\ndescription: Fresh.", "")
    with pytest.raises(IncrementalError, match="segos add"):
        apply_change(store, "update", fresh)
    outside = write_skill(tmp_path / "elsewhere", "stray", "name: stray\ndescription: Stray.", "")
    with pytest.raises(IncrementalError, match="not inside the library root"):
        apply_change(store, "add", outside)


def test_cli_add_prints_the_new_version(tmp_path: Path):
    lib = _library(tmp_path / "lib")
    store = SnapshotStore(tmp_path / "store")
    build_cold_start(lib, store)
    write_skill(lib, "delta/new-skill", "name: new-skill\ndescription: Plot pdf charts.", "")
    result = CliRunner().invoke(
        service_cli, ["add", str(lib / "delta/new-skill"), "--store", str(store.root)]
    )
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1] == store.latest()
    again = CliRunner().invoke(service_cli, ["add", str(lib / "delta/new-skill"), "--store", str(store.root)])
    assert again.exit_code == 2 and "segos update" in again.output


def test_a_format_1_parent_is_updated_into_parts(tmp_path: Path):
    lib = _library(tmp_path / "lib")
    store = SnapshotStore(tmp_path / "store")
    build_cold_start(lib, store)
    old = write_format1(store, store.load())  # the whole-table layout of earlier versions
    (lib / "beta/pdf-writer/SKILL.md").write_text(
        "---\nname: pdf-writer\ndescription: Write csv reports as pdf documents.\n---\nx\n"
    )
    result = apply_change(store, "update", lib / "beta/pdf-writer", from_version=old)
    assert result.parent == old and result.manifest["format"] == 2 and len(result.manifest["parts"]) == 1
    assert_same_graph(store.load(), _full(lib, tmp_path, BuildConfig()))


def test_a_damaged_parent_is_refused(tmp_path: Path):
    lib = _library(tmp_path / "lib")
    store = SnapshotStore(tmp_path / "store")
    build_cold_start(lib, store)
    damage(store.versions_dir / store.latest() / "signature.npz", 40, b"\xff\xff")
    write_skill(lib, "delta/new-skill", "name: new-skill\ndescription: Plot pdf charts.", "")
    with pytest.raises(DamagedSnapshot, match=r"signature\.npz"):
        apply_change(store, "add", lib / "delta/new-skill")
    assert len(store.list_versions()) == 1


def test_a_damaged_token_part_is_refused_not_copied_into_the_child(tmp_path: Path):
    lib = _library(tmp_path / "lib")
    store = SnapshotStore(tmp_path / "store")
    build_cold_start(lib, store)
    damage(store.versions_dir / store.latest() / "tokens-00000.parquet", 60, b"\xff\xff")
    (lib / "gamma/zipper/SKILL.md").write_text("---\nname: zipper\ndescription: Zip archives.\n---\nz\n")
    with pytest.raises(DamagedSnapshot, match=r"tokens-00000\.parquet"):
        apply_change(store, "update", lib / "gamma/zipper")
    assert len(store.list_versions()) == 1


def test_a_manifest_with_the_removed_symlink_setting_still_gives_its_build_settings():
    """Cold-start manifests recorded `parse.follow_symlinks_inside_root`, a setting nothing read (links
    that leave the library root are never followed): such a version's build settings still load, so an
    incremental update of it runs with the limits it was built with."""
    built = BuildConfig(parse=ParseConfig(max_body_chars=1_000))
    recorded = built.to_dict()
    recorded["parse"]["follow_symlinks_inside_root"] = True
    assert BuildConfig.of_manifest({"config": recorded}) == built

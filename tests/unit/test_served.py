"""The served pointer: which version followers serve, moved only forward along the
lineage or by `segos promote` / `segos rollback`, on the demo data through the real CLI, a real
`SegosService` and a real `segos mcp` (the MCP SDK's client)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from segos_pipeline import Retriever, SnapshotStore, build_cold_start
from segos_pipeline.cli import main
from segos_pipeline.graph.incremental import apply_change
from segos_pipeline.paths import DEFAULT_LIBRARY, DEMO_DIR
from segos_pipeline.service.api import SegosService
from segos_pipeline.store.remote import RemoteStore
from segos_pipeline.store.served import SERVED, ServedError, pointer, promote, rollback, served
from segos_pipeline.store.snapshot import DamagedSnapshot

from ..conftest import commit_copy, damage, simple_library

PROJECT_ROOT = Path(__file__).resolve().parents[2]
FIRST, SECOND = "2026-11-27", "2026-11-28"  # the demo's trace windows


def cli(*args: Any, ok: bool = True) -> Any:
    result = CliRunner().invoke(main, [str(a) for a in args])
    if ok:
        assert result.exit_code == 0, result.output + str(result.exception)
    return result


def last_line(result: Any) -> str:
    return result.stdout.strip().splitlines()[-1]


def quick_start(store: Path) -> tuple[str, str]:
    """`build`, `ingest`, `evolve` on the demo data, as the README's quick start runs them: (v1, v2)."""
    v1 = last_line(cli("build", "--store", store, "--quiet"))
    cli("ingest", DEMO_DIR / "traces", "--store", store, "--quiet")
    v2 = last_line(cli("evolve", "--window", FIRST, "--store", store, "--quiet"))
    return v1, v2


def listed(store: Path) -> dict[str, bool]:
    return {v["version"]: v["served"] for v in json.loads(cli("versions", "--store", store, "--json").stdout)}


def test_the_served_version_moves_only_forward_or_when_told(tmp_path: Path):
    store = tmp_path / "store"
    v1 = last_line(cli("build", "--store", store, "--quiet"))
    follower = SegosService(store, landing=tmp_path / "landing", reload="sync")
    assert follower.status()["version"] == v1 and follower.status()["mode"] == "served"
    assert json.loads((store / SERVED).read_text())["version"] == v1  # a first build serves its version

    cli("ingest", DEMO_DIR / "traces", "--store", store, "--quiet")
    v2 = last_line(cli("evolve", "--window", FIRST, "--store", store, "--quiet"))
    status = follower.status()
    assert served(SnapshotStore(store)) == v2 and status["version"] == v2 and status["served"] == v2

    # a second build: v2 stays served, and the command says so and how to serve the new one
    again = cli("build", "--store", store, "--quiet")
    v3 = last_line(again)
    assert f"{v2} stays served" in again.stderr and f"segos promote {v3}" in again.stderr
    status = follower.status()
    assert status["version"] == v2 and status["latest"] == v3 and status["served"] == v2

    # re-evolving the first window (parent v1, older than the served v2) never moves the pointer back
    redo = cli("evolve", "--window", FIRST, "--from", v1, "--store", store, "--quiet")
    v4 = last_line(redo)
    assert f"{v2} stays served" in redo.stderr and f"parent {v1} is not the served version" in redo.stderr
    assert follower.status()["version"] == v2
    assert listed(store) == {v1: False, v2: True, v3: False, v4: False}
    assert f"{v2}" in next(x for x in cli("versions", "--store", store).stdout.splitlines() if "served" in x)

    # promote and roll back, the follower switching each time
    moved = json.loads(cli("promote", "v1", "--store", store, "--json").stdout)
    assert moved["version"] == v1 and moved["previous"][-1] == v2 and moved["was"] == v2
    assert follower.status()["version"] == v1 and listed(store)[v1]
    back = cli("rollback", "--store", store)
    assert last_line(back) == v2 and f"{v1} -> {v2}" in back.stdout
    assert follower.status()["version"] == v2

    # "served" is a version name everywhere one is taken; "latest" keeps its meaning
    st = SnapshotStore(store)
    assert st.resolve("served") == v2 and st.resolve("latest") == v4
    assert Retriever(st.load("served")).retrieve("convert a csv to json").version == v2
    out = json.loads(
        cli("retrieve", "convert a csv to json", "--version", "served", "--store", store, "--json").stdout
    )
    assert out["version"] == v2

    # build --promote serves the new cold start at once
    v5 = last_line(cli("build", "--store", store, "--quiet", "--promote"))
    assert follower.status()["version"] == v5
    assert last_line(cli("rollback", "--store", store)) == v2


def test_a_following_mcp_server_answers_from_the_served_version(tmp_path: Path):
    store = tmp_path / "store"
    v1, v2 = quick_start(store)
    args = ["-m", "segos_pipeline.cli", "mcp", "--store", str(store), "--landing", str(tmp_path / "landing")]
    params = StdioServerParameters(command=sys.executable, args=args, cwd=str(PROJECT_ROOT))

    async def status_once(client: Client) -> dict[str, Any]:
        result = await client.call_tool("get_status", {})
        assert not result.is_error, result.content
        return json.loads(result.content[0].text)  # type: ignore[union-attr]

    async def serving(client: Client, vid: str) -> dict[str, Any]:
        """get_status until the server answers from `vid` (it loads a new one in the background)."""
        deadline = time.monotonic() + 60
        while (status := await status_once(client))["version"] != vid or status["loading"]:
            assert time.monotonic() < deadline, status
            await anyio.sleep(0.05)
        return status

    async def scenario() -> None:
        async with Client(params) as client:
            status = await serving(client, v2)
            assert status["mode"] == "served" and status["served"] == v2

            v3 = last_line(cli("build", "--store", store, "--quiet"))
            v4 = last_line(cli("evolve", "--window", FIRST, "--from", v1, "--store", store, "--quiet"))
            await anyio.sleep(0.3)
            status = await serving(client, v2)  # neither the new cold start nor the old window's round
            assert status["latest"] == v4 and status["served"] == v2 and status["switches"] == 0
            assert v3 != v2

            cli("promote", v1, "--store", store)
            status = await serving(client, v1)
            assert status["served"] == v1 and status["switches"] == 1
            cli("rollback", "--store", store)
            status = await serving(client, v2)
            assert status["served"] == v2 and status["switches"] == 2

    anyio.run(scenario)


def test_a_store_without_a_pointer_serves_its_latest_until_a_commit_records_it(tmp_path: Path):
    """Stores written before the pointer: served = latest, and the first commit keeps it served."""
    st = SnapshotStore(tmp_path / "store")
    v1 = build_cold_start(DEFAULT_LIBRARY, st)["version"]
    assert not (st.root / SERVED).exists()
    now = pointer(st)
    assert now.version == v1 and not now.recorded and st.resolve("served") == v1

    v2 = commit_copy(st, serve=False)
    assert st.latest() == v2 and served(st) == v1  # recorded before v2 became the latest
    assert json.loads((st.root / SERVED).read_text())["version"] == v1
    svc = SegosService(st, reload="sync", landing=tmp_path / "landing")
    assert svc.version == v1 and svc.status()["version"] == v1


def test_a_damaged_version_is_not_promoted_and_nothing_to_roll_back_is_one_line(tmp_path: Path):
    store = tmp_path / "store"
    v1 = last_line(cli("build", "--store", store, "--quiet"))
    st = SnapshotStore(store)
    v2 = commit_copy(st, serve=False)
    damage(next((st.versions_dir / v2).glob("nodes*.parquet")), 100, b"\x00" * 16)

    with pytest.raises(DamagedSnapshot, match="not served"):
        promote(st, v2, "test")
    refused = cli("promote", v2, "--store", store, ok=False)
    assert refused.exit_code == 2 and f"version {v2} is damaged" in refused.stderr
    assert f"still served: {v1}" in refused.stderr and served(st) == v1

    with pytest.raises(ServedError, match="nothing to roll back to"):
        rollback(st)
    nothing = cli("rollback", "--store", store, ok=False)
    assert nothing.exit_code == 2 and len(nothing.stderr.strip().splitlines()) == 1
    unknown = cli("promote", "v0099", "--store", store, ok=False)
    assert unknown.exit_code == 2 and "no such version" in unknown.stderr and served(st) == v1

    # an unreadable pointer is one clear line wherever it is read, `versions` still lists, and
    # `segos promote` repairs it
    (store / SERVED).write_text("{not json")
    broken = cli("retrieve", "csv", "--version", "served", "--store", store, ok=False)
    assert broken.exit_code == 2 and "served.json is unreadable" in broken.stderr
    assert "served.json is unreadable" in cli("versions", "--store", store).stderr
    rebuilt = cli("build", "--store", store, "--quiet")  # commits, and says what to do about the pointer
    assert "served.json is unreadable" in rebuilt.stderr and "segos promote" in rebuilt.stderr
    cli("promote", v1, "--store", store)
    assert pointer(st).version == v1 and pointer(st).previous == ()


def test_auto_promote_off_leaves_a_round_unserved(tmp_path: Path):
    store = tmp_path / "store"
    v1 = last_line(cli("build", "--store", store, "--quiet"))
    cli("ingest", DEMO_DIR / "traces", "--store", store, "--quiet")
    off = cli("evolve", "--window", FIRST, "--store", store, "--quiet", "--set", "auto_promote=false")
    assert "auto_promote is off" in off.stderr and served(SnapshotStore(store)) == v1
    # the next round builds on the latest (v2), whose parent is not served: it stays unserved too
    later = cli("evolve", "--window", SECOND, "--store", store, "--quiet")
    assert served(SnapshotStore(store)) == v1 and "`--from served` evolves the served one" in later.stderr
    # built on the served version instead, the round is served again
    v4 = last_line(cli("evolve", "--window", SECOND, "--from", "served", "--store", store, "--quiet"))
    st = SnapshotStore(store)
    assert st.manifest(v4)["parent"] == v1 and served(st) == v4


def test_an_incremental_change_is_served_when_its_parent_was(tmp_path: Path):
    library = simple_library(
        tmp_path / "lib",
        {"csv-loader": "load csv files into tables", "chart-maker": "draw line charts of a table"},
    )
    st = SnapshotStore(tmp_path / "store")
    v1 = build_cold_start(library, st)["version"]
    (library / "csv-loader" / "SKILL.md").write_text(
        "---\nname: csv-loader\ndescription: load csv and tsv files into tables\n---\n# csv-loader\n"
    )
    changed = apply_change(st, "update", library / "csv-loader")
    assert changed.served and served(st) == changed.version and changed.to_dict()["served"] is True
    (library / "chart-maker" / "SKILL.md").write_text(
        "---\nname: chart-maker\ndescription: draw bar charts of a table\n---\n# chart-maker\n"
    )
    older = apply_change(st, "update", library / "chart-maker", from_version=v1)
    assert not older.served and served(st) == changed.version
    # the CLI changes the latest version (`older`'s child here): not served, and it says so
    (library / "chart-maker" / "SKILL.md").write_text(
        "---\nname: chart-maker\ndescription: draw pie charts of a table\n---\n# chart-maker\n"
    )
    out = cli("update", library / "chart-maker", "--store", st.root)
    assert f"{changed.version} stays served" in out.stderr and f"segos promote {last_line(out)}" in out.stderr
    assert served(st) == changed.version


def test_the_pointer_lives_at_the_uri_of_a_remote_store(uri: str, tmp_path: Path):
    writer = RemoteStore(uri, tmp_path / "writer-cache")
    v1 = build_cold_start(DEFAULT_LIBRARY, writer)["version"]
    v2 = commit_copy(writer, serve=False)  # records v1 as served, at the URI
    reader = RemoteStore(uri, tmp_path / "reader-cache")
    assert served(reader) == v1 and reader.resolve("served") == v1 and reader.latest() == v2
    assert json.loads(writer.location.fs.cat_file(writer.location.join(SERVED)))["version"] == v1

    svc = SegosService(RemoteStore(uri, tmp_path / "server-cache"), landing=tmp_path / "l", poll_s=0)
    assert svc.version == v1
    promote(writer, v2, "test")
    assert svc.refresh(wait=True) and svc.version == v2 and svc.status()["served"] == v2
    cli("rollback", "--store", uri, "--cache", tmp_path / "cli-cache")
    assert svc.refresh(wait=True) and svc.version == v1

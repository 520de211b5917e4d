"""Skills agents can run: every skill's absolute package folder in bundles and details,
its files as MCP resources read only inside the package, and `segos export` writing a bundle as a skills
folder."""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from segos_pipeline import SnapshotStore, build_cold_start
from segos_pipeline.cli import main
from segos_pipeline.paths import DEFAULT_LIBRARY
from segos_pipeline.retrieval.packages import (
    FOLDER_TTL_S,
    MAX_FILE_BYTES,
    PathRefused,
    read_package_file,
    relative_parts,
)
from segos_pipeline.retrieval.ranker import Retriever
from segos_pipeline.service.api import SegosService
from segos_pipeline.service.errors import FileRefused, PackageMissing
from segos_pipeline.service.mcp_server import skill_card

from ..conftest import write_skill

PROJECT_ROOT = Path(__file__).resolve().parents[2]
LOADER = "data-wrangling/csv-loader"
CHART_QUERY = "parse a csv file and plot a chart"


def run(*args: Any, code: int = 0) -> Any:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == code, result.output + str(result.exception)
    return result


@pytest.fixture
def library(tmp_path: Path) -> Path:
    """A small library whose packages hold scripts, a binary, a large file and links in and out."""
    root = tmp_path / "library"
    secret = tmp_path / "secret.txt"
    secret.write_text("not a skill's business\n")
    pkg = write_skill(
        root,
        "tools/csv-reader",
        "name: csv-reader\ndescription: read a csv file into rows and columns",
        "# csv-reader\n\nRun scripts/read.py on the csv file.\n",
        scripts={"read.py": "print('rows')\n"},
    )
    (pkg / "scripts" / "read.py").chmod(0o755)
    (pkg / "data.bin").write_bytes(b"\x00\xff\xfe binary")
    (pkg / "big.txt").write_text("x" * (MAX_FILE_BYTES + 1))
    (pkg / "leak.txt").symlink_to(secret)
    (pkg / "scripts" / "alias.py").symlink_to(pkg / "scripts" / "read.py")
    (pkg / "up").symlink_to(tmp_path)
    write_skill(
        root,
        "tools/chart-maker",
        "name: chart-maker\ndescription: plot a chart of columns from rows",
        "# chart-maker\n\nPlot the chart.\n",
    )
    return root


@pytest.fixture
def lib_store(library: Path, tmp_path: Path) -> Path:
    st = SnapshotStore(tmp_path / "store")
    build_cold_start(library, st)
    return st.root


def test_package_folder_is_absolute_and_a_moved_library_gives_none_with_the_reason(
    library: Path, lib_store: Path, tmp_path: Path
):
    service = SegosService(lib_store, reload="sync")
    detail = service.skill_detail("csv-reader")
    assert detail["folder"] == str((library / "tools" / "csv-reader").resolve())
    assert detail["folder_error"] is None and Path(detail["folder"], "SKILL.md").is_file()
    listed = {f["path"] for f in detail["files"]}
    assert {"SKILL.md", "scripts/read.py", "data.bin", "big.txt"} <= listed
    assert not listed & {"leak.txt", "scripts/alias.py", "up"}  # links are not listed
    assert all(f["uri"] == f"skill://tools/csv-reader/files/{f['path']}" for f in detail["files"])
    bundle = service.retrieve_bundle("read a csv file")
    assert all(Path(s["folder"]).is_dir() for s in bundle["skills"]) and bundle["skills"]

    library.rename(tmp_path / "moved")  # the library is no longer where the version says it was
    time.sleep(FOLDER_TTL_S)  # a bundle looks at its members' folders again once a second
    moved = service.skill_detail("csv-reader")
    assert moved["folder"] is None and "not on this machine" in moved["folder_error"]
    assert moved["files"] == []
    assert "\nFolder: none on this machine (the library root" in skill_card(moved)  # the skill:// card
    skills = service.retrieve_bundle("read a csv file")["skills"]
    assert skills and all(s["folder"] is None and s["folder_error"] for s in skills)
    retrieved = Retriever(SnapshotStore(lib_store).load()).retrieve("read a csv file").to_dict()
    assert all(
        s["folder"] is None and "not on this machine" in s["folder_error"] for s in retrieved["skills"]
    )
    with pytest.raises(PackageMissing, match="not on this machine"):
        service.skill_file("csv-reader", "scripts/read.py")


def test_package_files_are_read_only_inside_the_package(library: Path, lib_store: Path):
    service = SegosService(lib_store, reload="sync")
    read = service.skill_file("csv-reader", "scripts/read.py")
    assert read.text == "print('rows')\n" and read.mime_type == "text/x-python"
    assert service.skill_file("csv-reader", "scripts/alias.py").text == read.text  # a link inside: read
    binary = service.skill_file("csv-reader", "data.bin")
    assert binary.text is None and binary.data == b"\x00\xff\xfe binary"
    refused = {
        "../../secret.txt": "leaves the package",
        "scripts/../../../secret.txt": "leaves the package",
        "/etc/passwd": "absolute",
        "\\etc\\passwd": "absolute",
        "C:/Windows/win.ini": "absolute",
        "scripts/read.py\0.md": "NUL",
        "leak.txt": "outside the package",
        "up/secret.txt": "outside the package",
        "big.txt": "larger than",
        "scripts": "not a regular file",
        "nope.py": "no file",
        "": "give a file path",
    }
    for path, why in refused.items():
        with pytest.raises(FileRefused, match=why):
            service.skill_file("csv-reader", path)
    assert relative_parts("./scripts//read.py") == ("scripts", "read.py")
    with pytest.raises(PathRefused):
        read_package_file(library / "tools" / "csv-reader", "..")


def test_a_file_ref_splits_at_the_skill_it_names(lib_store: Path):
    service = SegosService(lib_store, reload="sync")
    assert service.file_ref("tools/csv-reader/files/scripts/read.py") == (
        "tools/csv-reader",
        "scripts/read.py",
    )
    assert service.file_ref("tools/csv-reader") is None  # the skill itself: its card
    assert service.file_ref("tools/no-such/files/x.py") is None  # unknown: the card's error answers


def _server(store: Path) -> StdioServerParameters:
    args = ["-m", "segos_pipeline.cli", "mcp", "--store", str(store)]
    return StdioServerParameters(command=sys.executable, args=args, cwd=str(PROJECT_ROOT))


async def _call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)  # type: ignore[union-attr]


def test_mcp_gives_existing_folders_and_reads_package_files_only_inside(demo_store: Path):
    script = DEFAULT_LIBRARY / LOADER / "scripts" / "load_csv.py"

    async def scenario() -> None:
        async with Client(_server(demo_store)) as client:
            detail = await _call(client, "get_skill_detail", name=LOADER)
            assert detail["folder"] == str((DEFAULT_LIBRARY / LOADER).resolve())
            assert Path(detail["folder"]).is_dir() and detail["folder_error"] is None
            assert f"skill://{LOADER}/files/scripts/load_csv.py" in [f["uri"] for f in detail["files"]]
            bundle = await _call(client, "retrieve_skill_bundle", query=CHART_QUERY)
            assert bundle["skills"] and all(Path(s["folder"], "SKILL.md").is_file() for s in bundle["skills"])
            compact = await client.call_tool(
                "retrieve_skill_bundle", {"query": CHART_QUERY, "format": "text"}
            )
            text = compact.content[0].text  # type: ignore[union-attr]
            assert all(f"\nFolder: {s['folder']}\n" in text for s in bundle["skills"])

            read = await client.read_resource(f"skill://{LOADER}/files/scripts/load_csv.py")
            [content] = read.contents
            assert content.text == script.read_text() and content.mime_type == "text/x-python"
            card = (await client.read_resource(f"skill://{LOADER}")).contents[0].text
            assert card.startswith(f"### csv-loader (`{LOADER}`)")
            assert f"\nFolder: {detail['folder']}\n" in card and "scripts/load_csv.py" in card

            hostile = {
                f"skill://{LOADER}/files/../../etc/passwd": "leaves the package",
                f"skill://{LOADER}/files/%2E%2E/%2E%2E/%2E%2E/%2E%2E/etc/passwd": "leaves the package",
                f"skill://{LOADER}/files//etc/passwd": "is absolute",
                f"skill://{LOADER}/files/%2Fetc%2Fpasswd": "is absolute",
                f"skill://{LOADER}/files/scripts/load_csv.py%00.md": "NUL",
                f"skill://{LOADER}/files/no-such-file.py": "no file no-such-file.py",
                "skill:///etc/passwd": "Unknown resource",
            }
            for uri, why in hostile.items():
                with pytest.raises(MCPError, match=why) as refused:
                    await client.read_resource(uri)
                assert refused.value.code == -32602, uri  # the client's argument, like an unknown skill
                assert "root:" not in str(refused.value)

    anyio.run(scenario)


def test_export_writes_one_folder_per_bundle_skill_each_with_its_skill_md(demo_store: Path, tmp_path: Path):
    bundle = json.loads(run("retrieve", CHART_QUERY, "--store", demo_store, "--json").stdout)
    dest = tmp_path / ".claude" / "skills"
    out = json.loads(run("export", CHART_QUERY, "--to", dest, "--store", demo_store, "--json").stdout)
    assert [s["id"] for s in out["skills"]] == [s["id"] for s in bundle["skills"]]
    assert sorted(p.name for p in dest.iterdir()) == sorted(Path(s["folder"]).name for s in out["skills"])
    for s in out["skills"]:
        folder = Path(s["folder"])
        assert folder.parent == dest and (folder / "SKILL.md").is_file()
        source = Path(s["source"])
        assert (folder / "SKILL.md").read_bytes() == (source / "SKILL.md").read_bytes()
        for rel in s["files"]:
            assert (folder / rel).read_bytes() == (source / rel).read_bytes()
    loader = next(s for s in out["skills"] if s["id"] == LOADER)
    assert "scripts/load_csv.py" in loader["files"]

    before = sorted(str(p) for p in dest.rglob("*"))
    refused = run("export", CHART_QUERY, "--to", dest, "--store", demo_store, code=2)
    assert "not empty" in refused.output and sorted(str(p) for p in dest.rglob("*")) == before
    first = Path(out["skills"][0]["folder"])
    (first / "stale.txt").write_text("left from before")
    (dest / "mine").mkdir()
    run("export", CHART_QUERY, "--to", dest, "--store", demo_store, "--force")
    assert (first / "SKILL.md").is_file() and not (first / "stale.txt").exists()  # replaced whole
    assert (dest / "mine").is_dir()  # what is not a skill of the bundle is left alone

    nothing = run("export", "xyzzy quux", "--to", tmp_path / "none", "--store", demo_store, "--json", code=1)
    assert json.loads(nothing.stdout)["no_match"] is True and json.loads(nothing.stdout)["skills"] == []
    assert not (tmp_path / "none").exists()
    said = run("export", "xyzzy quux", "--to", tmp_path / "none", "--store", demo_store, code=1)
    assert "nothing was exported" in said.output


def test_export_never_follows_links_and_refuses_a_missing_package(
    library: Path, lib_store: Path, tmp_path: Path
):
    dest = tmp_path / "out"
    out = json.loads(
        run("export", "read a csv file", "--to", dest, "--store", lib_store, "--json", "--top-n", "1").stdout
    )
    [skill] = out["skills"]
    folder = Path(skill["folder"])
    assert folder == dest / "csv-reader"
    assert sorted(skill["files"]) == ["SKILL.md", "data.bin", "scripts/read.py"]
    assert os.access(folder / "scripts" / "read.py", os.X_OK)  # scripts stay runnable
    skipped = {s["path"]: s["reason"] for s in skill["skipped"]}
    assert set(skipped) == {"big.txt", "leak.txt", "scripts/alias.py", "up"}
    assert "larger than" in skipped["big.txt"] and "link" in skipped["leak.txt"]
    assert not any(p.is_symlink() for p in folder.rglob("*"))

    shutil.move(library, tmp_path / "elsewhere")
    failed = run("export", "read a csv file", "--to", tmp_path / "again", "--store", lib_store, code=2)
    assert "not on this machine" in failed.output and not (tmp_path / "again").exists()


def test_mcp_sends_binary_files_as_base64_refuses_links_out_and_names_a_missing_package(
    library: Path, lib_store: Path, tmp_path: Path
):
    async def scenario() -> None:
        async with Client(_server(lib_store)) as client:
            [blob] = (await client.read_resource("skill://csv-reader/files/data.bin")).contents
            assert base64.b64decode(blob.blob) == b"\x00\xff\xfe binary"  # type: ignore[union-attr]
            assert blob.mime_type == "application/octet-stream"
            for path, why in (("leak.txt", "outside the package"), ("big.txt", "larger than")):
                with pytest.raises(MCPError, match=why) as refused:
                    await client.read_resource(f"skill://tools/csv-reader/files/{path}")
                assert refused.value.code == -32602
            library.rename(tmp_path / "moved")
            with pytest.raises(MCPError, match="not on this machine") as missing:
                await client.read_resource("skill://tools/csv-reader/files/scripts/read.py")
            assert missing.value.code == -32603  # the server's state, not the client's argument

    anyio.run(scenario)

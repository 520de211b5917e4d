"""Shared fixtures: hand-built libraries in tmp folders, the project's demo data, and ../shared/data."""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp

from segos_pipeline.paths import DEFAULT_LIBRARY, DEMO_DIR
from segos_pipeline.retrieval.ranker import Ranking
from segos_pipeline.retrieval.semantic import SemanticIndex, head_of
from segos_pipeline.retrieval.sets import scattered
from segos_pipeline.store.layout import MANIFEST, sha256_file
from segos_pipeline.store.snapshot import Snapshot, SnapshotStore

PROJECT_ROOT = ROOT = Path(__file__).resolve().parents[1]  # the checkout
SHARED_DATA = ROOT.parent / "shared" / "data"
# The deliberately broken packages (one per parser error case; see its README.md). Kept out of the shipped
# demo library so that a newcomer's first build is clean; tests add them to a copy of it.
MALFORMED = Path(__file__).resolve().parent / "fixtures" / "malformed"


def run_segos(*args: str, ok: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """A real `segos` process running this checkout's code; asserts it succeeded (or, `ok=False`, failed)."""
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "segos_pipeline.cli", *args],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert (proc.returncode == 0) is ok, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    return proc


def copy_checkout(dest: Path) -> Path:
    """Copy the repository's tracked files (as a fresh clone has them) to `dest`; no build artefacts, no
    store, no venv."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        if (ROOT / rel).is_file():
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes((ROOT / rel).read_bytes())
            target.chmod((ROOT / rel).stat().st_mode)
    return dest


def readme_bash_blocks() -> list[str]:
    """The README's ```bash blocks, in order (tests run them as a reader would)."""
    return re.findall(r"^```bash\n(.*?)^```", (ROOT / "README.md").read_text(), re.S | re.M)


def run_bash(script: str, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """`script` under `bash -euo pipefail`, as a README block runs when pasted: the first failure stops it."""
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def demo_library_with_malformed(dest: Path) -> Path:
    """A copy of the demo library at `dest` with the malformed packages under `dest/_malformed/`."""
    shutil.copytree(DEFAULT_LIBRARY, dest)
    shutil.copytree(MALFORMED, dest / "_malformed")
    return dest


def write_skill(
    root: Path, rel: str, frontmatter: str | None, body: str = "", scripts: dict | None = None
) -> Path:
    """Write one package; `frontmatter` is YAML text without fences (None: no frontmatter at all)."""
    pkg = root / rel
    pkg.mkdir(parents=True, exist_ok=True)
    text = body if frontmatter is None else f"---\n{textwrap.dedent(frontmatter).strip()}\n---\n{body}"
    (pkg / "SKILL.md").write_text(text, encoding="utf-8")
    for name, content in (scripts or {}).items():
        path = pkg / "scripts" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return pkg


def simple_library(root: Path, skills: dict[str, str]) -> Path:
    """A library of `name: description` skills, one folder each."""
    for name, description in skills.items():
        write_skill(root, name, f"name: {name}\ndescription: {description}", f"# {name}\n\n{description}\n")
    return root


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(
            f"real data not available: {SHARED_DATA} is absent (it ships beside the project, not in it)"
        )
    return SHARED_DATA


@pytest.fixture(scope="session")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding the cold-start version of the project's own demo library (built once)."""
    from segos_pipeline import build_cold_start

    store = tmp_path_factory.mktemp("demo-store")
    build_cold_start(DEFAULT_LIBRARY, store)
    return store


@pytest.fixture
def demo_store_copy(demo_store: Path, tmp_path: Path) -> Path:
    """A fresh copy of `demo_store` that a test may write into (traces, landing files, new versions)."""
    copy = tmp_path / "store"
    shutil.copytree(demo_store, copy, symlinks=True)
    return copy


@pytest.fixture(scope="session")
def demo_queries() -> Path:
    return DEMO_DIR / "queries" / "demo.jsonl"


def write_format1(store: SnapshotStore, snap: Snapshot) -> str:
    """A version in the first storage format (whole-table files, no parts, no signature)."""
    folder = store.versions_dir / "v0900-00000001"
    folder.mkdir(parents=True)
    snap.nodes.write_parquet(folder / "nodes.parquet")
    snap.tokens.write_parquet(folder / "tokens.parquet")
    snap.edges.write_parquet(folder / "edges.parquet")
    snap.read_extra("report.parquet").write_parquet(folder / "report.parquet")
    sp.save_npz(folder / "transition.npz", snap.transition, compressed=True)
    files = {f.name: {"sha256": sha256_file(f), "bytes": f.stat().st_size} for f in folder.iterdir()}
    manifest = {
        k: v for k, v in snap.manifest.items() if k not in ("parts", "files", "format", "version", "seq")
    }
    manifest.update(format=1, version=folder.name, seq=900, files=files)
    (folder / MANIFEST).write_text(json.dumps(manifest))
    return folder.name


def damage(path: Path, offset: int, data: bytes) -> None:
    """Overwrite bytes of a (read-only) snapshot file in place, as disk damage or a stray edit would."""
    path.chmod(0o644)
    with path.open("r+b") as fh:
        fh.seek(offset)
        fh.write(data)


def commit_copy(
    store: SnapshotStore, extra_tables: dict[str, pl.DataFrame] | None = None, serve: bool = True
) -> str:
    """Commit a new version with the newest one's content (a version to switch to), plus any extra tables
    (e.g. round traces); its id. `serve`: promote it, so that following services switch to it."""
    from segos_pipeline.store.served import promote

    parent = store.latest()
    snap = store.load(parent)
    vid = store.write(
        nodes=snap.nodes,
        tokens=snap.tokens,
        edges=snap.edges,
        transition=snap.transition,
        manifest={"kind": "copy", "parent": parent},
        extra_tables=extra_tables,
    )["version"]
    if serve:
        promote(store, vid, "test: commit_copy", verify=False)
    return vid


@pytest.fixture(params=["memory", "file"])
def uri(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store URI: a bucket of its own in fsspec's in-process memory filesystem, or a folder
    behind `file://`."""
    import fsspec

    if request.param == "memory":
        bucket = f"segos-test-{uuid.uuid4().hex[:8]}"
        yield f"memory://{bucket}/store"
        fs = fsspec.filesystem("memory")
        if fs.exists(f"/{bucket}"):
            fs.rm(f"/{bucket}", recursive=True)
    else:
        yield (tmp_path / "remote" / "store").as_uri()


def mcp_http_command(store: Path, port: int) -> list[str]:
    """The `segos mcp --http` command line on `port`."""
    cli = [sys.executable, "-m", "segos_pipeline.cli"]
    return [*cli, "mcp", "--store", str(store), "--http", "--port", str(port)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def mcp_http_server(
    store: Path, nofile: int | None = None, **env: str
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """`segos mcp --http` (this checkout's code) on a free port with `env` added, from the moment it listens
    until the block ends; with `nofile`, under that descriptor limit (soft and hard)."""

    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    port = free_port()
    proc = subprocess.Popen(
        mcp_http_command(store, port),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=PROJECT_ROOT,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT), **env},
        preexec_fn=limit,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "segos mcp --http did not listen within 60 s"
                time.sleep(0.2)
        yield port, proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)  # a clean stop, even after descriptors ran out


def dense_ppr(t: sp.spmatrix | np.ndarray, p: np.ndarray, alpha: float) -> np.ndarray:
    """The PPR oracle (SPEC §6.2), independent of every solver in the package: the linear system
    s = α·p + (1−α)·(Tᵀs + (Σ_{u dangling} s_u)·p) solved densely, for small row-stochastic T."""
    t = t.toarray() if sp.issparse(t) else np.asarray(t)
    dangling = (t.sum(axis=1) == 0).astype(float)
    m = t.T + np.outer(p, dangling)  # column-stochastic: a dangling column teleports to p
    return np.linalg.solve(np.eye(len(p)) - (1 - alpha) * m, alpha * p)


def semantic_evidence(
    sem: SemanticIndex, query: str | np.ndarray, patch: dict[int, np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(sorted nodes, z > 0) of a query (a string is embedded first), as the ranker asks for it."""
    q = sem.query_vector(query) if isinstance(query, str) else query
    nodes, z, _, _ = sem.evidence_and_nearest(q, patch, 0)
    return nodes, z


def dense_semantic_evidence(
    sem: SemanticIndex, query: str | np.ndarray, patch: dict[int, np.ndarray] | None = None
) -> np.ndarray:
    """`semantic_evidence` over every skill: z for the head, zero elsewhere."""
    return scattered(sem.matrix.shape[0], *semantic_evidence(sem, query, patch))


def head_scores(sims: np.ndarray, m: int, floor: float) -> np.ndarray:
    """`head_of` as a dense vector: z for the head, zero elsewhere (the oracle of a search's head)."""
    out = np.zeros(len(sims))
    pos, z = head_of(sims, m, floor)
    out[pos] = z
    return out


def dense_rho(ranking: Ranking) -> np.ndarray:
    """ρ of a ranking over every skill (zero where it has no candidate)."""
    return scattered(ranking.n, ranking.candidates, ranking.scores)


def dense_graph(ranking: Ranking) -> np.ndarray:
    """s* of a ranking over every skill."""
    return scattered(ranking.n, ranking.graph_nodes, ranking.graph_mass)


def dense_semantic(ranking: Ranking) -> np.ndarray | None:
    """z of a ranking over every skill, None when the query was not embedded."""
    if ranking.semantic_nodes is None or ranking.semantic_z is None:
        return None
    return scattered(ranking.n, ranking.semantic_nodes, ranking.semantic_z)

"""End to end through the real UI server: `dagster-webserver -w workspace.yaml` on 127.0.0.1 with a tmp
DAGSTER_HOME and store; launch the cold start through GraphQL, wait for success, load the version with
the CLI; then render the asset graph page in headless Chromium and find the assets in the DOM."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the checkout


pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
CHROMIUM = Path("/usr/bin/chromium")
ASSET_NAMES = ("skill_nodes", "semantic_edges", "transition_matrix", "cold_start_snapshot", "graph_snapshot")

# Without a daemon, a queued run would wait forever: launch runs directly (in a subprocess, the default
# run launcher), which is what the UI does with this coordinator.
DAGSTER_YAML = """\
run_coordinator:
  module: dagster._core.run_coordinator
  class: DefaultRunCoordinator
telemetry:
  enabled: false
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def graphql(url: str, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(
        f"{url}/graphql", body, {"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        reply = json.loads(response.read())
    assert "errors" not in reply, reply
    return reply["data"]


@pytest.fixture(scope="module")
def webserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    home = tmp_path_factory.mktemp("dagster-home")
    store = tmp_path_factory.mktemp("ui-store")
    (home / "dagster.yaml").write_text(DAGSTER_YAML)
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "SEGOS_STORE": str(store)}
    log = (home / "webserver.log").open("w")
    proc = subprocess.Popen(
        [str(BIN / "dagster-webserver"), "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the code server child goes down with it
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                pytest.fail(f"webserver exited: {(home / 'webserver.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/server_info", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"webserver not up in 90 s: {(home / 'webserver.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield {"url": url, "store": store, "home": home}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def repository(url: str) -> tuple[str, str]:
    """(location, repository) of the code location, once it has loaded."""
    query = """
    { repositoriesOrError { __typename
        ... on RepositoryConnection { nodes { name location { name } jobs { name } } }
        ... on PythonError { message } } }
    """
    deadline = time.monotonic() + 60
    while True:
        data = graphql(url, query)["repositoriesOrError"]
        nodes = data.get("nodes") or []
        for node in nodes:
            if "cold_start_job" in {j["name"] for j in node["jobs"]}:
                return node["location"]["name"], node["name"]
        if time.monotonic() > deadline:
            pytest.fail(f"code location did not load: {data}")
        time.sleep(1)


LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId status } }
    ... on PythonError { message stack }
    ... on InvalidStepError { invalidStepKey }
    ... on InvalidOutputError { invalidOutputName }
    ... on RunConfigValidationInvalid { errors { message } }
    ... on PipelineNotFoundError { message }
    ... on UnauthorizedError { message }
  }
}
"""

STATUS = """
query Status($runId: ID!) {
  runOrError(runId: $runId) { __typename ... on Run { status } ... on PythonError { message } }
}
"""


def test_launch_cold_start_through_graphql(webserver: dict[str, Any]) -> None:
    url = webserver["url"]
    location, repo = repository(url)
    params = {
        "selector": {"repositoryLocationName": location, "repositoryName": repo, "jobName": "cold_start_job"},
        "runConfigData": {},
        "mode": "default",
    }
    launched = graphql(url, LAUNCH, {"params": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]

    deadline = time.monotonic() + 120
    status = None
    while time.monotonic() < deadline:
        status = graphql(url, STATUS, {"runId": run_id})["runOrError"]["status"]
        if status in ("SUCCESS", "FAILURE", "CANCELED"):
            break
        time.sleep(1)
    assert status == "SUCCESS", f"run {run_id} ended {status}"

    # the version is in the store the CLI reads, without Dagster running
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "segos_pipeline.cli",
            "versions",
            "--store",
            str(webserver["store"]),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    [version] = json.loads(proc.stdout)
    assert version["kind"] == "cold_start" and version["orchestrator"]["run_id"] == run_id
    verify = subprocess.run(
        [
            sys.executable,
            "-m",
            "segos_pipeline.cli",
            "verify",
            version["version"],
            "--store",
            str(webserver["store"]),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert verify.returncode == 0, verify.stderr


def test_asset_graph_page_in_chromium(webserver: dict[str, Any], tmp_path: Path) -> None:
    if not CHROMIUM.is_file():
        pytest.skip(f"{CHROMIUM} is absent (Debian: apt-get install -y chromium); CI installs it")
    repository(webserver["url"])  # the page lists assets only once the code location has loaded
    profile = tmp_path / "profile"
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--no-first-run",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=15000",
        "--dump-dom",
        f"{webserver['url']}/assets",
    ]
    dom = ""
    for _attempt in range(3):  # the React app fetches asynchronously; a slow first render can miss them
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
        dom = proc.stdout
        if all(name in dom for name in ASSET_NAMES):
            break
    missing = [name for name in ASSET_NAMES if name not in dom]
    assert not missing, f"not in the rendered page: {missing}; DOM starts {dom[:500]!r}"
    shutil.rmtree(profile, ignore_errors=True)

"""The README's Python examples run as written (in a scratch copy of the project's data/ folder)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from segos_pipeline.paths import DEFAULT_LIBRARY

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def test_readme_python_examples_run(tmp_path: Path):
    blocks = BLOCK.findall((ROOT / "README.md").read_text())
    assert len(blocks) >= 2, "the README's Python API examples are gone"
    data = tmp_path / "data"
    shutil.copytree(DEFAULT_LIBRARY, data / "library")
    shutil.copytree(ROOT / "data" / "traces", data / "traces")
    # One interpreter runs the blocks in order, as a reader pasting them would (the service example reads
    # the store the first one built). Paths in them are relative to the project root, here the scratch copy.
    script = "\n".join(blocks) + "\nprint('README-OK', manifest['version'], bundle['version'])\n"
    env = {**os.environ, "SEGOS_LANDING": str(data / "traces")}  # record_trace must not write into the repo
    env.pop("SEGOS_STORE", None)
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "README-OK" in proc.stdout
    # the service example follows the newest version: the round the first example committed
    served = proc.stdout.split("README-OK", 1)[1].split()
    assert served[0] == served[1]
    # the recorded trace landed in the scratch landing folder, in the native format ingestion reads
    # (the shipped windows hold deliberately malformed lines, so only the new one is parsed)
    landed = [x for f in (data / "traces").glob("*.jsonl") for x in f.read_text().splitlines()]
    lines = [x for x in landed if "csv-report" in x]
    assert [json.loads(x)["reward"] for x in lines] == [1.0]

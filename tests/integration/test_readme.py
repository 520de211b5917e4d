"""The README's Python examples run as written, from a scratch directory (the demo data ships with segos)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from segos_pipeline.paths import DEMO_DIR

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def test_readme_python_examples_run(tmp_path: Path):
    blocks = BLOCK.findall((ROOT / "README.md").read_text())
    assert len(blocks) >= 2, "the README's Python API examples are gone"
    demo_before = sorted((p.as_posix(), p.stat().st_mtime_ns) for p in DEMO_DIR.rglob("*"))
    # One interpreter runs the blocks in order, as a reader pasting them would (the service example reads
    # the store the first one built). Relative paths in them are taken from the scratch working directory.
    script = "\n".join(blocks) + "\nprint('README-OK', manifest['version'], bundle['version'])\n"
    env = {k: v for k, v in os.environ.items() if k not in ("SEGOS_STORE", "SEGOS_LANDING")}
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "README-OK" in proc.stdout
    # the service example follows the newest version: the round the first example committed
    served = proc.stdout.split("README-OK", 1)[1].split()
    assert served[0] == served[1]
    # the recorded trace landed in the store's landing folder under the working directory (not in the
    # package), in the native format ingestion reads
    landing = tmp_path / "data" / "store" / "landing"
    lines = [x for f in landing.glob("*.jsonl") for x in f.read_text().splitlines()]
    assert [json.loads(x)["reward"] for x in lines] == [1.0] and "csv-report" in lines[0]
    assert sorted((p.as_posix(), p.stat().st_mtime_ns) for p in DEMO_DIR.rglob("*")) == demo_before

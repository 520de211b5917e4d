"""The benchmark harness (`benchmarks/harness.py`): percentiles, the measured child runner, baseline code
extracted from git, and result files."""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import harness  # noqa: E402

MIB = 2**20


def test_percentile_interpolates_between_ranks_like_numpy() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert harness.percentile(values, 0) == 1.0
    assert harness.percentile(values, 100) == 4.0
    assert harness.percentile(values, 50) == statistics.median(values) == 2.5
    assert harness.percentile(values, 95) == pytest.approx(3.85)  # numpy.percentile([1, 2, 3, 4], 95)
    assert harness.percentile([7.0], 99) == 7.0


def test_percentile_of_nothing_or_out_of_range_is_an_error() -> None:
    with pytest.raises(ValueError, match="no values"):
        harness.percentile([], 50)
    with pytest.raises(ValueError, match="outside"):
        harness.percentile([1.0], 101)


def test_percentiles_summarise_timings() -> None:
    summary = harness.percentiles([float(i) for i in range(1, 101)], ndigits=2)
    assert summary == {"p50": 50.5, "p95": 95.05, "p99": 99.01, "max": 100.0, "mean": 50.5, "samples": 100}


def test_interleaved_timings_take_turns_and_keep_each_text_s_fastest_pass() -> None:
    calls: list[tuple[str, str]] = []

    class Ranker:
        def __init__(self, name: str, sleep_s: float):
            self.name, self.sleep_s = name, sleep_s

        def ranked_ids(self, text: str, k: int) -> list[str]:
            calls.append((self.name, text))
            time.sleep(self.sleep_s)
            return []

    ms = harness.interleaved_ms([Ranker("a", 0.0), Ranker("b", 0.005)], ["x", "y"], passes=2)
    warm = [("a", "x"), ("b", "x"), ("a", "y"), ("b", "y")]
    timed = [("a", "x"), ("b", "x")] * 2 + [("a", "y"), ("b", "y")] * 2
    assert calls == warm + timed  # one untimed pass, then the rankers in turn, text by text
    assert len(ms) == 2 and all(len(row) == 2 for row in ms)
    assert all(b >= 5.0 > a for a, b in ms)  # milliseconds, one per ranker


def test_baseline_of_head_is_the_committed_package(tmp_path: Path) -> None:
    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout (a copied tree): no baseline to extract")
    baseline = harness.extract_baseline("HEAD", tmp_path)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    assert baseline.commit == head.stdout.strip()
    assert baseline.folder == tmp_path / f"baseline-{baseline.commit}"
    committed = subprocess.run(
        ["git", "show", "HEAD:segos_pipeline/__init__.py"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    assert (baseline.folder / "segos_pipeline" / "__init__.py").read_bytes() == committed
    assert baseline.env() == {"PYTHONPATH": str(baseline.folder)}
    # extracted once: a second call reuses the folder as it is
    marker = baseline.folder / "segos_pipeline" / "marker"
    marker.write_text("kept")
    assert harness.extract_baseline("HEAD", tmp_path) == baseline
    assert marker.read_text() == "kept"
    assert not list(tmp_path.glob("*.partial"))


def test_baseline_of_an_unknown_ref_says_so(tmp_path: Path) -> None:
    with pytest.raises(harness.BaselineError, match="no-such-ref-anywhere"):
        harness.extract_baseline("no-such-ref-anywhere", tmp_path)
    assert not list(tmp_path.iterdir())
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "harness.py"), "baseline", "no-such-ref-anywhere"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: baseline 'no-such-ref-anywhere' is not a commit of {ROOT}"
    ]


def test_results_are_written_as_json_and_markdown(tmp_path: Path) -> None:
    data = {"p50": 1.5, "path": tmp_path, "rows": [1, 2]}
    written = harness.write_results(tmp_path / "deep" / "speed", data, "# Speed\n\n| a |")
    json_file, md_file = tmp_path / "deep" / "speed.json", tmp_path / "deep" / "speed.md"
    assert written == [json_file, md_file]
    assert json.loads(json_file.read_text()) == {"p50": 1.5, "path": str(tmp_path), "rows": [1, 2]}
    assert json_file.read_text().endswith("}\n")
    assert md_file.read_text() == "# Speed\n\n| a |\n"
    # a stem given with a suffix writes the pair beside it, as `--out results/parse.json` did
    assert harness.write_results(tmp_path / "parse.json", [1]) == [tmp_path / "parse.json"]


def test_child_runner_reports_peak_rss_of_the_child_and_its_tree() -> None:
    grow = "b = bytearray({n} * 2**20); b[::4096] = b'x' * len(b[::4096]); import time; time.sleep(0.6)"
    code = textwrap.dedent(
        f"""
        import subprocess, sys
        worker = subprocess.Popen([sys.executable, "-c", {grow.format(n=120)!r}])
        {grow.format(n=60)}
        worker.wait()
        print("done")
        """
    )
    run = harness.run_child([sys.executable, "-c", code], tree=True)
    assert run.returncode == 0
    assert run.stdout.strip() == "done"
    # the largest single process holds its 120 MiB; the sampled tree both processes' 180 MiB
    assert 120 * MIB <= run.peak_rss_bytes < 400 * MIB
    assert run.tree_peak_rss_bytes is not None and run.tree_peak_rss_bytes >= 180 * MIB
    assert run.wall_s >= 0.6 and run.cpu_s > 0 and run.read_bytes >= 0


def test_child_peak_rss_is_its_own_not_the_benchmark_process_high_water_mark() -> None:
    held = bytearray(300 * MIB)
    held[::4096] = b"x" * len(held[::4096])
    del held
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 >= 300 * MIB
    # Linux carries the exec-ing process's peak into the new program's ru_maxrss: started directly, the
    # child would report this process's 300 MiB
    run = harness.run_child([sys.executable, "-c", "pass"])
    assert run.peak_rss_bytes < 100 * MIB


def test_child_runner_failure_names_the_exit_code_and_stderr() -> None:
    cmd = [sys.executable, "-c", "import sys; sys.exit('the child gave up')"]
    with pytest.raises(harness.ChildFailed, match="exited with 1: the child gave up"):
        harness.run_child(cmd, capture_stderr=True)
    run = harness.run_child(cmd, capture_stderr=True, check=False)
    assert (run.returncode, run.stderr.strip(), run.tree_peak_rss_bytes) == (1, "the child gave up", None)


def test_child_runner_kills_a_command_past_its_timeout(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    sleeper = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(30)"
    with pytest.raises(subprocess.TimeoutExpired):
        harness.run_child([sys.executable, "-c", sleeper], timeout=1.0)
    pid = int(pid_file.read_text())
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def test_child_runner_says_when_a_command_cannot_start() -> None:
    with pytest.raises(harness.ChildFailed, match="exited with 127: cannot run no-such-program-here"):
        harness.run_child(["no-such-program-here"], capture_stderr=True)


def test_peak_sampler_keeps_the_largest_value_per_key() -> None:
    feed = iter([{"rss": 3, "jvm": 1}, {"rss": 9, "jvm": 0}, {"rss": 4, "jvm": 2}])
    with harness.PeakSampler(lambda: next(feed, {"rss": 0, "jvm": 0}), interval=0.01) as sampler:
        time.sleep(0.3)  # well past the three samples
    assert sampler.peaks == {"rss": 9, "jvm": 2}
    # a block shorter than one interval still gets its figure, from the sample taken at its end
    with harness.PeakSampler(lambda: {"rss": 7}, interval=60) as short:
        pass
    assert short.peaks == {"rss": 7}


def test_timed_counts_this_process_finely_and_the_children_it_waited_for() -> None:
    def spin(seconds: float) -> int:
        end, n = time.process_time() + seconds, 0
        while time.process_time() < end:
            n += 1
        return n

    out, wall, cpu = harness.timed(lambda: spin(0.003))
    assert out > 0 and 0.002 < cpu < 0.5 and wall >= cpu * 0.5  # finer than the 10 ms clock tick
    loop = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
    _, _, cpu = harness.timed(lambda: subprocess.run([sys.executable, "-c", loop], check=True))
    assert cpu >= 0.3

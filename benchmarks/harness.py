#!/usr/bin/env python
"""What every benchmark script shares: percentiles, a measured child process, baseline code from git, the
machine's context, and result files.

    .venv/bin/python benchmarks/harness.py baseline REF [--into benchmarks/out]

extracts the `segos_pipeline` package at the git ref REF (`git archive`, read-only) into
`INTO/baseline-<commit>/` and prints that folder: the `--baseline-src` / `--baseline DIR` the A/B scripts
take. Scripts import this module (`import harness`: a script's own folder is first on `sys.path`). It
imports the standard library only (`built_synthetic` loads segos_pipeline when called), so an orchestrating
process stays free of numpy and polars.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")

# The variables that keep numpy's BLAS and polars to one thread, for a process timed on one core.
ONE_CORE_ENV = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "POLARS_MAX_THREADS": "1",
}


def say(msg: str, tag: str = "bench") -> None:
    print(f"[{tag} {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ====================================================================================== percentiles


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), interpolated linearly between the closest ranks: numpy's default, and
    `statistics.median` at 50."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0-100")
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def percentiles(values: Sequence[float], ndigits: int = 4) -> dict[str, float]:
    """p50, p95, p99, max, mean and the number of samples of a list of timings."""
    return {
        "p50": round(percentile(values, 50), ndigits),
        "p95": round(percentile(values, 95), ndigits),
        "p99": round(percentile(values, 99), ndigits),
        "max": round(max(values), ndigits),
        "mean": round(math.fsum(values) / len(values), ndigits),
        "samples": len(values),
    }


# =========================================================================================== timing


def _cpu_s() -> float:
    # process_time, not os.times(): its clock ticks (10 ms) are too coarse for a chunk of skills
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def timed(fn: Callable[[], T]) -> tuple[T, float, float]:
    """(result, wall seconds, CPU seconds) of one call; the CPU of this process's threads and of the
    child processes it waited for meanwhile (a pool's workers)."""
    cpu, wall = _cpu_s(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - wall, _cpu_s() - cpu


def interleaved_ms(
    rankers: Sequence[Any], texts: Sequence[str], passes: int, k: int = 5
) -> list[list[float]]:
    """Per text, the minimum over `passes` of each ranker's `ranked_ids(text, k)` in milliseconds, the
    rankers taking turns text by text after one untimed pass over every text: a shared, loaded machine
    then slows them alike, so compare their ratio, not the milliseconds."""
    for text in texts:
        for ranker in rankers:
            ranker.ranked_ids(text, k)
    out = []
    for text in texts:
        best = [math.inf] * len(rankers)
        for _ in range(passes):
            for i, ranker in enumerate(rankers):
                t = time.perf_counter()
                ranker.ranked_ids(text, k)
                best[i] = min(best[i], time.perf_counter() - t)
        out.append([b * 1e3 for b in best])
    return out


def in_fresh_process(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a newly spawned interpreter, as a pool worker meets it: nothing imported, memoised or
    warm. `fn` must be importable (a module-level function)."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args)


def pin_to_core(core: int = 0) -> None:
    """Run this process on one CPU with one thread per library. Call it before numpy or polars is
    imported: their thread pools are sized when they load."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})
    os.environ.update(ONE_CORE_ENV)


def core_from_argv(argv: Sequence[str] | None = None) -> int:
    """`--core N` (default 0) read before argparse runs, so that pinning can precede numpy's import."""
    args = list(sys.argv[1:] if argv is None else argv)
    return int(args[args.index("--core") + 1]) if "--core" in args[:-1] else 0


# ========================================================================================== memory


def rss_bytes(pid: int) -> int:
    """Resident memory of a process from /proc/<pid>/statm; 0 when it is gone or off Linux."""
    with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{pid}/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return 0


def descendants(pid: int) -> list[int]:
    """Process ids below `pid` (psutil); none when psutil is missing or the tree changes meanwhile."""
    try:
        import psutil

        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except Exception:  # psutil missing, or the process already gone
        return []


class PeakSampler:
    """The peak of each value `measure()` returns, sampled on a thread every `interval` seconds while the
    block runs. One sampler for every memory figure: a stage's RSS, a process tree's, a JVM's."""

    def __init__(self, measure: Callable[[], dict[str, float]], interval: float = 0.1):
        self.measure, self.interval = measure, interval
        self.peaks: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        for key, value in self.measure().items():
            if value > self.peaks.get(key, 0):
                self.peaks[key] = value

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()  # a block shorter than one interval still gets a figure


def tree_rss(pid: int, relist_s: float = 0.5, own: bool = True) -> Callable[[], dict[str, float]]:
    """A `PeakSampler` measure: the summed RSS of `pid` (unless not `own`) and its descendants, under the
    key "tree". Forked workers share pages copy-on-write with their parent, so the sum is an upper bound.
    The descendants are listed again every `relist_s` only: listing costs about 2 ms."""
    pids, listed = [pid] if own else [], [0.0]

    def measure() -> dict[str, float]:
        if time.monotonic() - listed[0] > relist_s:
            pids[:] = [*([pid] if own else []), *descendants(pid)]
            listed[0] = time.monotonic()
        return {"tree": sum(rss_bytes(p) for p in pids)}

    return measure


# ===================================================================================== child runner


@dataclass(frozen=True)
class ChildRun:
    """One finished child process as `run_child` measured it."""

    returncode: int
    wall_s: float
    cpu_user_s: float
    cpu_sys_s: float
    # the kernel's ru_maxrss: the largest single process of the tree (waited-for descendants fold in as a
    # max, not a sum)
    peak_rss_bytes: int
    # the sampled peak of the summed RSS of the child and its descendants (None: not sampled)
    tree_peak_rss_bytes: int | None
    # what came from the disk rather than the page cache, over the reaped tree (ru_inblock, 512-byte blocks)
    read_bytes: int
    stdout: str
    stderr: str

    @property
    def cpu_s(self) -> float:
        return self.cpu_user_s + self.cpu_sys_s


class ChildFailed(RuntimeError):
    """A child process ended with a non-zero exit code."""


def reap(proc: subprocess.Popen[Any], timeout: float | None = None) -> Any:
    """Wait for a child this process drives itself and return its rusage (`os.wait4`: its own, where
    RUSAGE_CHILDREN would be the max over every child so far). For its CPU and reads only: Linux carries
    a process's peak RSS over `exec`, so a child started directly reports at least this process's peak
    (`run_child` measures memory through a launcher). Past `timeout` seconds the child is killed and
    `subprocess.TimeoutExpired` raised."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, 0 if deadline is None else os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return usage
        if deadline is not None and time.monotonic() > deadline:
            proc.kill()
            os.wait4(proc.pid, 0)
            proc.returncode = -9
            raise subprocess.TimeoutExpired(proc.args, timeout or 0.0)
        time.sleep(0.01)


# Linux carries the peak RSS of the process that calls `exec` into the new program's ru_maxrss, and a
# child forked (or vforked) from this process starts with this process's peak: a command started
# directly would report at least the benchmark's own high-water mark (a parent that built a store first
# made every child "use" its 300 MiB). So the command runs as the grandchild of a small launcher
# (`python -I -S`, about 10 MiB): it forks, execs the command, times it, waits for it and writes the
# command's own exit code, wall time and rusage to a file. SIGTERM to the launcher kills the command.
_LAUNCHER = r"""
import os, signal, sys, time
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    except OSError as e:
        os.write(2, f"cannot run {sys.argv[2]}: {e}\n".encode())
    os._exit(127)
signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the command itself
signal.signal(signal.SIGTERM, lambda *_: os.kill(pid, signal.SIGKILL))
_, status, u = os.wait4(pid, 0)
wall = time.perf_counter() - t0
with open(sys.argv[1], "w") as fh:
    code = os.waitstatus_to_exitcode(status)
    fh.write(f"{code} {wall} {u.ru_utime} {u.ru_stime} {u.ru_maxrss} {u.ru_inblock}")
"""


def run_child(
    cmd: Sequence[str | Path],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | str | None = None,
    tree: bool = False,
    capture_stderr: bool = False,
    check: bool = True,
    timeout: float | None = None,
) -> ChildRun:
    """Run `cmd` to its end and measure it: wall time, CPU, peak RSS, disk reads; `tree` also samples the
    summed RSS of its process tree every 100 ms (it costs some CPU). `env` is added to this process's
    environment. stdout is captured (through a file, so a chatty child never blocks on a pipe); stderr
    is passed through unless `capture_stderr`. With `check`, a non-zero exit raises `ChildFailed` with
    the end of the captured stderr; past `timeout` seconds the command is killed and
    `subprocess.TimeoutExpired` raised."""
    argv = [str(c) for c in cmd]
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="segos-child-")))
        out = stack.enter_context(open(folder / "stdout", "w+b"))
        err = stack.enter_context(open(folder / "stderr", "w+b")) if capture_stderr else None
        launcher = [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(folder / "usage")]
        proc = subprocess.Popen(
            [*launcher, *argv], env={**os.environ, **(env or {})}, cwd=cwd, stdout=out, stderr=err
        )
        sampler = PeakSampler(tree_rss(proc.pid, own=False)) if tree else None
        with sampler or contextlib.nullcontext():
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.terminate()
                proc.wait()
                raise
        out.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = ""
        if err is not None:
            err.seek(0)
            stderr = err.read().decode(errors="replace")
        usage = (folder / "usage").read_text().split() if (folder / "usage").is_file() else None
    if usage is None:
        raise ChildFailed(f"the launcher of {' '.join(argv[:4])} ... ended with {proc.returncode}: {stderr}")
    returncode = int(usage[0])
    wall, user, system = map(float, usage[1:4])
    if check and returncode != 0:
        tail = " | ".join(stderr.strip().splitlines()[-3:])
        raise ChildFailed(f"{' '.join(argv[:4])} ... exited with {returncode}: {tail}")
    return ChildRun(
        returncode=returncode,
        wall_s=wall,
        cpu_user_s=user,
        cpu_sys_s=system,
        peak_rss_bytes=int(usage[4]) * 1024,  # Linux reports KiB
        tree_peak_rss_bytes=int(sampler.peaks["tree"]) if sampler and sampler.peaks.get("tree") else None,
        read_bytes=int(usage[5]) * 512,
        stdout=stdout,
        stderr=stderr,
    )


# ==================================================================================== baseline code


class BaselineError(ValueError):
    """The baseline ref cannot be extracted (unknown ref, no git)."""


@dataclass(frozen=True)
class Baseline:
    """The `segos_pipeline` package of a git ref, extracted into `folder` (put it first on PYTHONPATH)."""

    ref: str
    commit: str
    folder: Path

    def env(self) -> dict[str, str]:
        return {"PYTHONPATH": str(self.folder)}


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, check=False)


def extract_baseline(ref: str, into: Path) -> Baseline:
    """The package at `ref` as `into/baseline-<commit>/segos_pipeline/` (read-only git: `git archive`).
    Reused when already extracted; an interrupted extraction never counts as done."""
    try:
        parsed = _git("rev-parse", "--short", "--verify", f"{ref}^{{commit}}")
    except OSError as e:
        raise BaselineError(f"cannot run git for baseline {ref!r}: {e}") from None
    if parsed.returncode != 0:
        raise BaselineError(f"baseline {ref!r} is not a commit of {ROOT}")
    commit = parsed.stdout.decode().strip()
    folder = Path(into) / f"baseline-{commit}"
    if (folder / "segos_pipeline" / "__init__.py").is_file():
        return Baseline(ref, commit, folder)
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    archive = _git("archive", commit, "segos_pipeline")
    if archive.returncode != 0:
        raise BaselineError(f"git archive {commit} failed: {archive.stderr.decode().strip()[-300:]}")
    subprocess.run(["tar", "-x", "-C", str(partial)], input=archive.stdout, check=True)
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    return Baseline(ref, commit, folder)


# ========================================================================================= context


def shown(arg: str) -> str:
    """A command-line argument as a report shows it: paths relative to the repository, and a folder
    outside it (a scratch folder) as a placeholder, never a machine's absolute path."""
    path = Path(arg)
    if not path.is_absolute():
        return arg
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return "<scratch folder>"


def code_state() -> dict[str, Any]:
    """Commit and uncommitted library files: the library changes often, numbers belong to a state."""

    def git(*args: str) -> str:  # read-only git queries
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout

    state: dict[str, Any] = {}
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        state["commit"] = git("rev-parse", "--short", "HEAD").strip()
        state["dirty"] = [line[3:] for line in git("status", "--porcelain", "segos_pipeline").splitlines()]
    return state


def cpu_model() -> str | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return None


def platform_line() -> str:
    return f"{platform.system()} {platform.machine()}, Python {platform.python_version()}"


def machine_speed_s() -> float:
    """Seconds for a fixed pure-Python loop (best of 3): the same code measures up to 2x apart on a shared
    VM from one hour to the next, so every run records how fast the machine was when it ran."""
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        sum(i * i for i in range(10**7))
        best = min(best, time.perf_counter() - t)
    return round(best, 3)


def _proc_stat_cpu() -> tuple[float, float] | None:
    """(busy, total) CPU-seconds of the whole machine since boot, from /proc/stat; None off Linux."""
    try:
        with open("/proc/stat") as fh:
            values = [int(v) for v in fh.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values) - idle) / tick, sum(values) / tick


def busy_cpu_seconds() -> float | None:
    stat = _proc_stat_cpu()
    return stat[0] if stat else None


def busy_cpus(window: float = 1.0) -> float | None:
    """CPUs kept busy by other processes over `window` seconds (this process sleeps meanwhile). Unlike
    the load average it does not remember this benchmark's own previous step."""
    a = _proc_stat_cpu()
    time.sleep(window)
    b = _proc_stat_cpu()
    if a is None or b is None or b[1] <= a[1]:
        return None
    return round((b[0] - a[0]) / (b[1] - a[1]) * (os.cpu_count() or 1), 2)


# ======================================================================================== libraries


def _generator_version() -> int:
    # Read the constant from the source: importing segos_pipeline here would pull polars into the parent.
    text = (ROOT / "segos_pipeline" / "evaluation" / "synthetic.py").read_text()
    for line in text.splitlines():
        if line.startswith("GENERATOR_VERSION"):
            return int(line.split("=")[1].split("#")[0])
    raise RuntimeError("GENERATOR_VERSION not found in segos_pipeline/evaluation/synthetic.py")


def synthetic_library(work: Path, n: int, seed: int, n_queries: int) -> Path:
    """`work/synthetic-<n>-s<seed>/`: a generated library of n skills and its queries, made in a
    subprocess, or reused while its size, seed, query count and generator version are unchanged."""
    lib = work / f"synthetic-{n}-s{seed}"
    params_file, queries = lib / "synthetic.json", lib / "queries.jsonl"
    expected = _generator_version()
    if params_file.is_file() and queries.is_file():
        params = json.loads(params_file.read_text())["params"]
        n_lines = sum(1 for line in queries.read_text().splitlines() if line.strip())
        if (
            params.get("generator_version") == expected
            and params.get("n_skills") == n
            and params.get("seed") == seed
            and n_lines == n_queries
        ):
            say(f"reusing synthetic library {lib} (same parameters, generator v{expected})")
            return lib
    shutil.rmtree(lib, ignore_errors=True)
    say(f"generating {n} synthetic skills + {n_queries} queries into {lib}")
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "segos_pipeline.evaluation.synthetic", str(lib), "--skills", str(n)]
    cmd += ["--seed", str(seed), "--queries", str(n_queries)]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    say(f"generated in {time.perf_counter() - t0:.1f}s")
    return lib


def built_synthetic(work: Path, skills: int) -> tuple[Any, dict[str, Any], float]:
    """A fresh `work` folder holding a generated library of `skills` skills (`work/library`) and its
    cold-start version in a local store (`work/local`): (the store, its manifest, build seconds)."""
    from segos_pipeline.evaluation.synthetic import generate_library
    from segos_pipeline.graph.build import build_cold_start
    from segos_pipeline.store.snapshot import SnapshotStore

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    generate_library(work / "library", skills)
    store = SnapshotStore(work / "local")
    manifest, build_s, _ = timed(lambda: build_cold_start(work / "library", store))
    return store, manifest, build_s


# ========================================================================================== results


def write_json(path: Path, data: Any) -> Path:
    """`data` as indented JSON at `path` (folders made as needed); values JSON lacks are written as text."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    return path


def write_results(stem: Path, data: Any, markdown: str | None = None) -> list[Path]:
    """A benchmark's results: `<stem>.json` (everything measured) and, given, `<stem>.md` (the report); a
    suffix of `stem` is replaced (`--out results/parse.json` writes parse.json and parse.md)."""
    written = [write_json(stem.with_suffix(".json"), data)]
    if markdown is not None:
        md = stem.with_suffix(".md")
        md.write_text(markdown if markdown.endswith("\n") else markdown + "\n")
        written.append(md)
    return written


# ============================================================================================== CLI


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("baseline", help="extract segos_pipeline at a git ref; prints the folder")
    b.add_argument("ref")
    b.add_argument("--into", type=Path, default=ROOT / "benchmarks" / "out")
    args = ap.parse_args(argv)
    try:
        print(extract_baseline(args.ref, args.into).folder)
    except BaselineError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

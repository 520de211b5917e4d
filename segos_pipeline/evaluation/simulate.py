"""A trace simulator for volume (benchmarks, multi-round studies). Everything it writes is SIMULATED.

Given tasks with gold skills and a version, each simulated trace is an attempt at an instance of one of
the tasks (many users ask for the same kind of task; instance ids are `task@n`); a failed attempt is
retried once by the same agent with probability `retry` (attempt 2 of the same instance). An attempt
retrieves the task's bundle from the version, then:
- uses the gold skills found in the bundle, in gold order (the gold list is taken as the chain order);
- finds a gold skill missing from the bundle on its own with probability `explore` (this is the signal
  that lets evolution add reach: a seed → used-skill pair the graph did not have);
- with probability `noise` also uses one non-gold skill of the bundle;
- reward = share of gold skills used (coverage), so success needs (almost) the whole bundle;
- on a failure, with probability `misleading`, co-uses the task's fixed misleading pair (two non-gold
  skills of the bundle), which is what avoid induction should pick up.
Records carry `simulated: true` and `source_format: simulated`; reports must never present them as real.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np

from ..evolution.traces import QueryRecord, TraceRecord, native_dict
from ..retrieval.ranker import Retriever
from .replay import EvalQuery


@dataclass(frozen=True)
class SimulationConfig:
    traces: int = 1000
    seed: int = 0
    agents: tuple[str, ...] = ("sim-agent-a", "sim-agent-b")
    explore: float = 0.35
    noise: float = 0.1
    misleading: float = 0.6
    retry: float = 0.3  # a failed attempt is retried by the same agent on the same task instance
    window: str = "2026-11-29"


def simulate(
    retriever: Retriever, tasks: list[EvalQuery], config: SimulationConfig | None = None
) -> list[TraceRecord]:
    config = config or SimulationConfig()
    if not tasks:
        raise ValueError("the simulator needs at least one task with gold skills")
    rng = np.random.default_rng(config.seed)
    ids = retriever.ids
    start = datetime.fromisoformat(config.window).replace(tzinfo=UTC)
    bundles: dict[int, tuple[list[str], list[str], list[str], tuple[str, str] | None]] = {}
    out: list[TraceRecord] = []
    retry_of: tuple[int, str, str] | None = None  # (task, agent, instance id) of a failed first attempt
    for n in range(config.traces):
        if retry_of is not None:
            t, agent, instance = retry_of
            attempt, retry_of = 2, None
        else:
            t = int(rng.integers(len(tasks)))
            agent = config.agents[int(rng.integers(len(config.agents)))]
            instance, attempt = f"{tasks[t].task or f'task-{t}'}@{n}", 1
        task = tasks[t]
        if t not in bundles:
            ranking = retriever.rank(task.query, depth=retriever.config.top_n)
            chosen, _ = retriever.select(ranking, retriever.config.top_n)
            retrieved = [str(ids[i]) for i in chosen]
            seeds = [str(ids[i]) for i in ranking.seeds]
            gold = [str(ids[g[0]]) for name in task.gold if (g := retriever.names.resolve(name))]
            others = [s for s in retrieved if s not in gold]
            pair = (others[0], others[1]) if len(others) >= 2 else None
            bundles[t] = (retrieved, seeds, gold, pair)
        retrieved, seeds, gold, pair = bundles[t]
        used = [g for g in gold if g in retrieved or rng.random() < config.explore]
        if rng.random() < config.noise:
            extra = [s for s in retrieved if s not in gold and s not in used]
            if extra:
                used.insert(int(rng.integers(len(used) + 1)), extra[int(rng.integers(len(extra)))])
        reward = sum(g in used for g in gold) / len(gold) if gold else 0.0
        if reward < 0.9:
            if pair is not None and rng.random() < config.misleading:
                used += [s for s in pair if s not in used]
            if attempt == 1 and rng.random() < config.retry:
                retry_of = (t, agent, instance)
        out.append(
            TraceRecord(
                trace_id=f"sim-{config.seed}-{n:07d}",
                task_id=instance,
                used=used,
                reward=round(reward, 4),
                queries=[QueryRecord(task.query, list(retrieved), list(seeds))],
                agent=agent,
                attempt=attempt,
                timestamp=(start + timedelta(seconds=int(n * 86_399 / max(config.traces, 1))))
                .isoformat()
                .replace("+00:00", "Z"),
                window=config.window,
                reward_source="simulated: gold coverage",
                source=f"simulator seed={config.seed}",
                source_format="simulated",
                simulated=True,
            )
        )
    return out


def to_native(record: TraceRecord) -> dict:
    """The native JSON form of a simulated record (with `simulated: true`, kept through ingestion)."""
    return {**native_dict(record), "simulated": True}

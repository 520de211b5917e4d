"""The study's settings and fixed vocabulary: the reference method, the core metrics, the 2³ cells."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...config import EvolutionConfig, RetrievalConfig

REFERENCE = "ppr"
CORE = ("hit", "recall", "comp", "mrr")
# Per-query values that the bootstrap compares (mrr's per-query value is the reciprocal rank).
PER_QUERY = {"hit": "hit", "recall": "recall", "comp": "comp", "mrr": "rr"}
# The 2³ factorial, static first and the full round last (the order tables and charts use).
CELLS: tuple[tuple[bool, bool, bool], ...] = (
    (False, False, False),
    (True, False, False),
    (False, True, False),
    (False, False, True),
    (True, True, False),
    (True, False, True),
    (False, True, True),
    (True, True, True),
)
FULL = (True, True, True)


def cell_name(cell: tuple[bool, bool, bool]) -> str:
    parts = [layer for layer, on in zip(("L1", "L2", "L3"), cell, strict=True) if on]
    return "+".join(parts) or "static"


@dataclass(frozen=True)
class StudyConfig:
    k: int = 5
    rounds: int = 3  # multi-round curve length (0 disables it)
    n_boot: int = 2000
    level: float = 0.95
    seed: int = 0  # bootstrap resamples, the task split's tie-break and the simulator all derive from it
    simulate: int = 0  # simulated traces added to the evolution source per evolution (0: none)
    factorial: bool = True
    graph_ablation: bool = True  # seeds only vs propagation over k ∈ GRAPH_KS (SPEC §6.9)
    # Unit of the transfer split: "task" (task ids) or "gold" (tasks with the same gold set stay together).
    split_by: str = "task"
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    evolution: EvolutionConfig = field(default_factory=EvolutionConfig)

"""The offline replay study (SPEC §10): does the graph help, does evolution help, and by how much.

One run measures, on the same library, queries, k and budgets:

- baselines: flat BM25 (`bm25s` over name + description + body), lexical seeds without propagation,
  forward-only PPR, and reverse-aware PPR on the cold start (`ppr`, the reference of every comparison);
- every evolved version given (`version:<id>`), as committed (protocol "as given": we do not know which
  tasks their traces covered);
- when traces are given, the 2³ factorial over L1/L2/L3 (`factorial:static` … `factorial:L1+L2+L3`), each
  cell evolved in memory from the same traces with `evolve_round` and replayed from a draft snapshot, under
  two protocols, always both:
  * deployment: evolve on the traces of the query tasks T, re-measure T;
  * transfer: split the tasks deterministically into halves A and B, evolve on A's traces and measure B,
    then the other way round (2-fold cross-fitting), so every query is measured by a graph that never saw
    its task and the comparison with the baselines stays paired over all queries;
- a multi-round curve (rounds 1..R of the full L1+L2+L3 round on the same trace source, both protocols);
- the overlay test: the induced navigation edges added to the cold start's semantic backbone, counting
  merged components and newly connected nodes (zero on both: the typed layer adds no reach);
- leakage buckets: every metric by how much of the gold skills' signature text the query repeats;
- paired bootstrap intervals (over queries, fixed seed) for each method's difference from `ppr`.

Simulated traces (`simulate=N`) are regenerated against each round's parent from the tasks of the
evolution side only (never the measured half in transfer) and are labelled SIMULATED everywhere.

Modules: `config` (settings, cells), `queries` (gold resolution, leakage, task split), `rankers` (BM25 and
the trace probe), `measuring`, `ablation` (SPEC §6.9), `overlay`, `traces`, `evolving` (factorial cells),
`run` (`run_study`, the whole study), `findings`, `headline` (Dagster metadata).
"""

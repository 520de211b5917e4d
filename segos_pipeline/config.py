"""Typed configuration with the published defaults in one place.

Numbers marked *(paper)* in SPEC.md are the SE-GoS / GoS defaults; they stay the defaults here and every
one is overridable. Values that are segos' own choices (not from a paper) say so next to them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Self

# Relation names of the typed skill graph (SPEC §1). `avoid` is stored but never traversed.
SEMANTIC = "semantic"
WORKFLOW = "workflow"
DEPENDENCY = "dependency"
ALTERNATIVE = "alternative"
AVOID = "avoid"
RELATIONS = (SEMANTIC, WORKFLOW, DEPENDENCY, ALTERNATIVE, AVOID)
TRAVERSABLE = (SEMANTIC, WORKFLOW, DEPENDENCY, ALTERNATIVE)

# Skill fields that feed lexical seeding, in SPEC §6 order; `body` is a segos addition (see FIELD_WEIGHTS).
FIELDS = ("name", "domain", "tooling", "capability", "description", "examples", "io", "entrypoints", "body")

# Bounds of top_k / top_n a caller of the service may ask for (segos' own choice). Here rather than in the
# service so that the MCP tools' input schemas and the CLI can name them without loading the service.
MAX_TOP = 100

# The trace contract's bounds (evolution/traces.py validates them; `record_trace` advertises them in its MCP
# input schema): in one place, so ingest and the MCP server cannot disagree.
MAX_LINE_BYTES = 1 << 20  # one trace line, UTF-8 bytes (checked before parsing)
MAX_DEPTH = 32  # JSON nesting of one line (checked before parsing)
MAX_ID_CHARS = 256  # trace_id, task_id
MAX_NAME_CHARS = 256  # agent, each skill name
MAX_TEXT_CHARS = 32_768  # one query text (SkillsBench instructions reach about 5,100)
MAX_QUERIES = 64
MAX_SKILLS = 512  # used, and each query's retrieved and seeds
MAX_ATTEMPT = 1_000_000


# Trace formats the adapters read (`segos ingest --format`); here so that the CLI offers them without
# importing the adapters (and polars) at start.
TRACE_FORMATS = ("native", "skillsbench-trials", "apibank", "toolbench")


class _Overridable:
    """`with_overrides(**kw)`: a copy with some settings changed; unknown names are an error."""

    def with_overrides(self, **overrides: Any) -> Self:
        known = {f.name for f in fields(self)}  # type: ignore[arg-type]
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(
                f"unknown setting(s) for {type(self).__name__}: {', '.join(sorted(unknown))} "
                f"(known: {', '.join(sorted(known))})"
            )
        return replace(self, **overrides)  # type: ignore[type-var]


@dataclass(frozen=True)
class ParseConfig:
    """Limits that protect a build from hostile or accidental input."""

    max_skill_md_bytes: int = 1_000_000  # larger files are read up to this size and reported
    max_body_chars: int = 200_000  # body kept in the node table (hydration clips far below this)
    # YAML frontmatter bounds (the largest real frontmatter is under 3 kB, 5 levels, 100 nodes). Every
    # scalar lies inside the frontmatter, so max_frontmatter_chars also bounds a scalar; aliases are
    # refused outright, so nothing expands beyond the text that was read.
    max_frontmatter_chars: int = 100_000
    max_yaml_depth: int = 32  # nesting of sequences and mappings
    max_yaml_nodes: int = 20_000  # scalars, sequences and mappings together


@dataclass(frozen=True)
class GraphConfig:
    """Cold-start semantic graph (SPEC §4)."""

    # (paper). On the dev sets k = 2 adds a little more (docs/algorithms.md, "the graph"), but on a 100k
    # synthetic library it joins most skills into one component that power-iteration PPR ran over then
    # (about three times the query time of k = 1). PPR is local push now, whose cost does not follow
    # component size; k = 1 stays the default until k = 2 is measured again.
    knn_k: int = 1
    # Tokens above this document frequency are skipped in the similarity join only (they still count in
    # set sizes); the effective cap is max(df_cap_min, df_cap_fraction * n_skills). A fixed cap of 1,000
    # (fraction 0) bounds the candidate pairs per skill whatever the library size; up to 100k skills it is
    # the cap SPEC §4's max(1,000, 1% N) gave (docs/algorithms.md, "bounded join"). 0.01 restores the
    # growing cap, whose join grows as N² past 100k.
    df_cap_min: int = 1_000
    df_cap_fraction: float = 0.0
    join_block_rows: int = 4_096  # rows per sparse-product block: bounds peak memory of the join


@dataclass(frozen=True)
class TransitionConfig:
    """Reverse coefficients γ_r of the reverse-aware operator (SPEC §5, GoS defaults)."""

    gamma: dict[str, float] = field(
        default_factory=lambda: {DEPENDENCY: 1.0, WORKFLOW: 0.5, SEMANTIC: 0.2, ALTERNATIVE: 0.1}
    )


# GoS field weights (SPEC §6). `body` is not a GoS field: real libraries carry most of their text in the
# body (344 real skills: 3 declare inputs, 9 outputs), and plain BM25 over name+description+body beats
# GoS on real data (SPEC §12), so segos scores it too, below every structured field.
FIELD_WEIGHTS: dict[str, float] = {
    "name": 1.25,
    "domain": 1.15,
    "tooling": 0.95,
    "capability": 0.90,
    "description": 0.90,
    "examples": 0.80,
    "io": 0.75,
    "entrypoints": 0.60,
    "body": 0.50,
}


@dataclass(frozen=True)
class RetrievalConfig(_Overridable):
    """Retrieval defaults (SPEC §6)."""

    seed_k: int = 4  # (paper)
    top_n: int = 5  # (paper)
    alpha: float = 0.2  # PPR restart (GoS)
    # PPR runs by local push (retrieval/push.py, segos' choice, SPEC §11) with residual threshold ε > 0: at
    # most 1/(α·ε) edges read per query however large the seeds' component, and an L1 distance to the
    # exact vector of at most the residual it reports. Chosen by measurement (docs/algorithms.md).
    ppr_epsilon: float = 3e-5
    per_skill_chars: int = 1_800  # (paper)
    total_chars: int = 9_000  # (paper)
    # The relevance floor (segos' choice): a bundle none of whose members reaches `min_score` is empty,
    # with `no_match`, instead of the per-query best of nothing. A member's relevance is absolute
    # (retrieval/ranker.py `Relevance`): the share of the query's word weight its text or closest witness
    # holds, or `relevance_cosine_weight` × the cosine to the query of a text (its own, a witness's) that
    # shares a word with it (the plain cosine when it shares none: an embedding finds some similarity in
    # nonsense). On the dev sets it empties few bundles and loses few hits@5, and it empties most off-topic
    # requests to the demo library ("xyzzy quux", "bake a chocolate cake", ..., evolved versions too;
    # figures: docs/benchmarks.md). Without the query's
    # embedding (semantic "none", or a long task text) it asks only for a word in common (a per-request
    # `min_score` applies to the words share as given). 0 turns it off.
    min_score: float = 0.3
    relevance_cosine_weight: float = 3.0
    field_weights: dict[str, float] = field(default_factory=lambda: dict(FIELD_WEIGHTS))
    # BM25F parameters (segos' scoring of the GoS fields; standard Robertson values).
    bm25_k1: float = 1.2
    bm25_b: float = 0.75
    name_bonus: float = 0.5  # added to the normalised lexical evidence when the whole name is in the query
    # Query tokens held by more than this share of the skills carry no lexical evidence (SPEC §6.7); all are
    # kept when none pass. segos' choice: "use", "file" or "data" seed half of a library otherwise.
    seed_df_max: float = 0.25
    seed_df_min: int = 3  # ... and by at least this many skills
    # ρ = s* + μ·m, m the fused evidence normalised to [0, 1] per query. 1.0 (was 0.5): on each of the
    # four dev sets recall or COMP is higher or equal (docs/algorithms.md); the paper preset keeps 0.5.
    rerank_mu: float = 1.0
    # A query whose tokens reach more postings than this, in a ranking cut at a depth (a bundle, a top-k),
    # reads its frequent tokens' highest-valued postings first and scores only the best skills of that
    # first phase exactly (retrieval/lexical.py): approximate, and about a twentieth of the postings. A
    # task text on a million skills reaches ~800k postings; on 100k, ~80k (exact).
    lexical_postings_budget: int = 262_144
    # Semantic evidence (SPEC §6.8; segos' own, see retrieval/semantic.py): the embedding backend
    # ("wordllama", "model2vec:<folder>", "sentence-transformers:<folder>" or "none"), and its fusion
    # m = (1 − λ)·lexical + λ·semantic with λ = min(1, w / (1 + (query tokens / L)²))·(1 − coverage),
    # coverage being the share of the idf mass of the query's known tokens that the best-matching skill
    # holds. Long task texts (λ ≈ 0.05 at 140 tokens) and queries that name a skill's rare words lean on
    # lexical evidence; short paraphrases on the embedding. Chosen on the dev sets (docs/algorithms.md).
    semantic: str = "wordllama"
    semantic_weight: float = 1.2
    semantic_length_scale: float = 30.0
    semantic_candidates: int = 20  # skills per query that may get semantic evidence
    semantic_min_cosine: float = 0.1  # below this a skill gets none, whatever its place
    # Below this λ the query is not embedded: a long task text (λ < 0.05 past about 130 tokens) is decided
    # by its words, and its embedding would cost more than the rest of the query.
    semantic_min_weight: float = 0.05
    # Experience evidence (SPEC §8; segos' own, retrieval/experience.py), added to ρ: the semantic kernel vote
    # of the query's neighbours among every skill's text and every witnessing request (temperature T over
    # cosine), and the lexical share of the query's idf mass the best witness holds, above a floor. Zero on
    # a version without experience. Chosen on MetaTool dev splits (benchmarks/results/learning.md). The
    # floor was 0.2: a two-part request holds at most about half its words in any one past request of
    # either part, so 0.1 lets a partial witness count (with the vote on every short query it raised other
    # requests and two-tool COMP and cost untraced tools little; figures: docs/benchmarks.md). The vote
    # weighs `experience_weight` times the part of λ that falls with the query's length
    # (`Retriever.length_weight`): a long task text is decided by its words, in its experience as at cold
    # start.
    experience_weight: float = 2.0
    experience_temperature: float = 0.05
    experience_lexical_weight: float = 1.0
    experience_lexical_floor: float = 0.1
    # The word vote (retrieval/experience.py), added to the lexical share and weighted with it by
    # `experience_lexical_weight`: each word of the query splits its idf among the skills that claim it
    # (their own text, or at least two of their past requests). 0 turns it off. 1.0 on MetaTool dev
    # (benchmarks/results/learning.md, "The word vote").
    experience_word_weight: float = 1.0
    # Co-use completion (SPEC §8): the skills that served the same successful requests as the query's best
    # candidate on at least `co_use_min_share` of its tasks come along with it, at `co_use_weight` × its
    # score × that share (max with their own ρ, so never above it, and past a skill only when that is more
    # than the skill's own evidence). 0 turns it off. Chosen on MetaTool dev (benchmarks/results/learning.md).
    co_use_weight: float = 0.5
    co_use_min_share: float = 0.5
    reverse: bool = True  # False gives forward-only propagation (an evaluation baseline)
    propagate: bool = True  # False gives lexical seeds without graph propagation (a baseline)


@dataclass(frozen=True)
class EvolutionConfig(_Overridable):
    """One evolution round (SPEC §8). Layers can be switched off for the L1/L2/L3 factorial."""

    l1_topology: bool = True
    l2_weights: bool = True
    l3_descriptions: bool = True
    success_threshold: float = 0.9  # (paper)
    pool_attempts: bool = False  # False: the final attempt per (task, agent) only (SPEC §7)
    zeta: float = 0.6  # I/O-schema overlap a dependency needs (paper); do not lower to make edges
    theta_avoid: int = 2  # failed co-use traces an avoid edge needs
    retract_min_successes: int = 2  # distinct successful task traces that retract an avoid edge
    surfaced_min: int = 3  # times surfaced in a window without use before semantic in-weights halve
    attenuation: float = 0.5
    blend: bool = False  # confidence blending w = λ·w̃ + (1−λ)·w0, λ = n_e/(n_e+n0); off as in the paper
    blend_n0: float = 5.0
    # Experience (SPEC §8, segos' L3 node update): witnessing requests kept per skill (most tasks first),
    # characters kept of each, and the share of the window's traces (by trace-id hash) held out to check the
    # round before it commits, at most `experience_gate_traces` of them replayed. 64 a skill (was 32): a
    # large window holds more requests for a busy skill than that (MetaTool's 250 two-tool traces give 10 of
    # their 15 tools 33-53), and on dev keeping fewer than a skill has costs transfer; 64 cost the query
    # about what 32 did against the evolved/cold bound, 128 clearly more (benchmarks/results/learning.md;
    # figures: docs/benchmarks.md).
    experience: bool = True
    experience_per_skill: int = 64
    experience_chars: int = 1_000
    experience_holdout: float = 0.1
    experience_gate_traces: int = 500
    l3_max_candidates: int = 200  # (skill, witnessing query) pairs examined per round, most evident first
    l3_max_terms: int = 6  # words the grounded editor may add to one description
    editor: str = "grounded"  # "grounded" (no model) or "openai" (an OpenAI-compatible endpoint)
    editor_endpoint: str | None = None  # e.g. http://127.0.0.1:8000/v1 ; nothing is called unless set
    editor_model: str | None = None
    editor_api_key_env: str = "SEGOS_EDITOR_API_KEY"
    # Limits of one model-editor call (segos' choices): a deadline for the whole call, connect, every read
    # and the retries included (a per-read timeout lets a server dripping bytes hold a round for ever);
    # retries on connection errors, 5xx and 429 with backoff editor_backoff_s·2^k (or the server's
    # Retry-After) while the deadline allows; the reply is streamed and dropped past the byte cap.
    editor_timeout_s: float = 30.0
    editor_retries: int = 2
    editor_backoff_s: float = 0.5
    editor_max_response_bytes: int = 1 << 20
    # Seconds of editor calls one round may spend; candidates past it are recorded as skipped. Bounds a
    # round against a slow endpoint: 200 candidates at a 30 s deadline would otherwise be 100 minutes.
    editor_round_budget_s: float = 600.0
    # A round on the served version is served once committed if its held-out check passed
    # (`store/served.py`); False leaves the pointer to `segos promote`.
    auto_promote: bool = True


ENGINES = ("local", "spark")


@dataclass(frozen=True)
class EngineConfig(_Overridable):
    """Where a round's per-partition trace work runs (SPEC §11). Not part of a version's identity: the
    engines compute the same version, so this is kept apart from EvolutionConfig."""

    engine: str = "local"  # "local" (polars in this process) or "spark"
    # Local: a window is cut into partitions of about this many traces (bounds the peak of the pair joins).
    local_partition_rows: int = 500_000
    partitions: int | None = None  # a fixed partition count (None: derived from the window's size)
    # Spark: the master URL (None: $SPARK_REMOTE for Spark Connect, else local[*]).
    spark_master: str | None = None
    spark_partition_rows: int = 250_000  # traces per Spark partition when `partitions` is None
    spark_min_partitions: int = 2
    spark_conf: dict[str, str] = field(default_factory=dict)  # extra Spark settings (spark.* keys)
    # Spark on a store given by URI: the cache base folder on each executor, where its Python workers
    # download the parent version (None: $SEGOS_CACHE on the executor, else a folder in its temp dir).
    executor_cache: str | None = None


@dataclass(frozen=True)
class BuildConfig:
    """Everything that determines a cold-start version; recorded in its manifest."""

    parse: ParseConfig = field(default_factory=ParseConfig)
    graph: GraphConfig = field(default_factory=GraphConfig)
    transition: TransitionConfig = field(default_factory=TransitionConfig)
    preset: str = "default"  # recorded in the manifest; retrieval over the version starts from it

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of_manifest(cls, manifest: dict[str, Any]) -> BuildConfig:
        """The settings a version's manifest records (`to_dict`); absent ones take their defaults."""
        config = manifest.get("config", {})
        parse = dict(config.get("parse", {}))
        parse.pop("follow_symlinks_inside_root", None)  # recorded by older versions, never read
        return cls(
            parse=ParseConfig(**parse),
            graph=GraphConfig(**config.get("graph", {})),
            transition=TransitionConfig(**config.get("transition", {})),
            preset=config.get("preset", "default"),
        )


# ------------------------------------------------------------------------------------------- store

# segos' own choice: how long a writer waits for another writer of the same store before it gives up
# (`segos build|update|add|remove|evolve|ingest --wait SECONDS`). A minute covers an update or an evolution
# round of the demo and dev libraries; a cold start of a 100k library takes longer, so pass --wait for that.
WRITER_WAIT_S = 60.0
# segos' own choice: how often `segos mcp` (`SegosService`) following the newest version of a store at a URI
# lists the URI for new versions (`--poll SECONDS`); between two listings no request asks the URI anything.
# A local store needs no polling (a `stat` of its versions/ folder per request).
REMOTE_POLL_S = 5.0


# ------------------------------------------------------------------------------------------- presets

# `default`: what wins on the dev sets within the speed bars. `paper`: the published settings (every query
# token seeds, no semantic evidence; kNN k = 1 as the default), to reproduce or compare against the paper.
PRESETS = ("default", "paper")


def _check_preset(name: str) -> None:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})")


def build_preset(name: str = "default") -> BuildConfig:
    _check_preset(name)
    if name == "paper":
        return BuildConfig(graph=GraphConfig(knn_k=1), preset="paper")
    return BuildConfig()


def retrieval_preset(name: str = "default") -> RetrievalConfig:
    _check_preset(name)
    if name == "paper":
        return RetrievalConfig(seed_df_max=1.0, semantic="none", rerank_mu=0.5)
    return RetrievalConfig()


def retrieval_for(manifest: dict[str, Any]) -> RetrievalConfig:
    """The retrieval settings a version starts from: those of the preset it was built with (a version
    without one, or with one this code does not know, gets the defaults)."""
    name = manifest.get("config", {}).get("preset", "default")
    return retrieval_preset(name if name in PRESETS else "default")

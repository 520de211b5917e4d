"""Resources: where the data lives and which configuration the stages run with.

The library and the query set are the configured ones, else `$SEGOS_LIBRARY` / `$SEGOS_QUERIES` (read at
run time, as `$SEGOS_STORE`), else the demo data shipped inside `segos_pipeline` (read only), so a fresh
clone materializes with no setup and your own data needs only the environment (docs/dagster.md).
Relative paths are resolved against the project root (not the process CWD: the webserver, the daemon and
run workers may start elsewhere). The store defaults to
`$SEGOS_STORE`, else `data/store`, exactly as the `segos` CLI run from the project root does, so every
version Dagster commits is one `segos versions` lists; the trace landing folder to `$SEGOS_LANDING`, else
`STORE/landing`, as `segos mcp` does, so what agents record is what windows read.

The store may be a URI (`store_root: "s3://bucket/store"`, or `$SEGOS_STORE` holding one): versions are
then read and published through `open_store` exactly as `segos --store URI` does, with a local cache
(`cache_dir`, else `$SEGOS_CACHE`, else ~/.cache/segos) that also holds the landing folder and the IO
manager's intermediate files (docs/storage.md).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from dagster import ConfigurableResource, InitResourceContext, PipesSubprocessClient

from segos_pipeline.config import (
    BuildConfig,
    EngineConfig,
    EvolutionConfig,
    RetrievalConfig,
    TransitionConfig,
    build_preset,
    retrieval_for,
)
from segos_pipeline.store.filesystem import open_location
from segos_pipeline.store.remote import open_store
from segos_pipeline.store.snapshot import SnapshotStore

from .io_managers import SegosIOManager
from .locations import (
    PROJECT_ROOT,
    cache_base,
    library_location,
    queries_location,
    resolve_landing,
    store_location,
)
from .spark_pipes import LAUNCHES


class SegosPaths(ConfigurableResource):
    """Locations of the skill library, the snapshot store, the trace landing folder and the query set."""

    library_root: str | None = None  # None: $SEGOS_LIBRARY, else the demo library shipped with segos
    store_root: str | None = None  # a folder or a URI; None: $SEGOS_STORE, else data/store (as the CLI)
    cache_dir: str | None = None  # local cache of a URI store; None: $SEGOS_CACHE, else ~/.cache/segos
    # None: $SEGOS_LANDING, else STORE/landing (as `segos mcp`); one native <YYYY-MM-DD>.jsonl per window
    landing_dir: str | None = None
    # the query set with gold bundles for the replay report; None: $SEGOS_QUERIES, else the demo's
    queries: str | None = None
    replay_k: int = 5

    def setup_for_execution(self, context: InitResourceContext) -> None:
        """A store URI whose scheme is unknown, or whose fsspec package is missing, stops the run before
        any step computes (the message names the package to install)."""
        where = self.store_location()
        if isinstance(where, str):
            open_location(where)

    def library(self) -> Path:
        return library_location(self.library_root)

    def store_location(self) -> str | Path:
        """The store as `--store` names it: a folder, or a URI."""
        return store_location(self.store_root)

    def store(self) -> SnapshotStore:
        """A local `SnapshotStore`, or a `RemoteStore` for a URI (read and published through its cache)."""
        return open_store(self.store_location(), cache_base(self.cache_dir))

    def landing_file(self, window: str) -> Path:
        return self.landing_path() / f"{window}.jsonl"

    def landing_path(self) -> Path:
        return resolve_landing(self.landing_dir, self.store_root, self.cache_dir)

    def queries_path(self) -> Path:
        return queries_location(self.queries)


def _set(**values: Any) -> dict[str, Any]:
    """Only the settings the user gave: None means "the library's default"."""
    return {k: v for k, v in values.items() if v is not None}


def _given(resource: ConfigurableResource) -> dict[str, Any]:
    """`_set` of every field of an overrides resource."""
    return _set(**{name: getattr(resource, name) for name in type(resource).model_fields})


class BuildSettings(ConfigurableResource):
    """Cold-start overrides (None keeps the published default of `segos_pipeline.config`)."""

    preset: str = "default"  # "paper": the published settings (kNN k = 1; see docs/algorithms.md)
    knn_k: int | None = None
    gamma: dict[str, float] | None = None  # reverse coefficient per relation
    allow_empty: bool = False  # commit a version of a library without a skill package (`--allow-empty`)

    def config(self) -> BuildConfig:
        base = build_preset(self.preset)
        graph = replace(base.graph, **_set(knn_k=self.knn_k))
        transition = TransitionConfig(**_set(gamma=dict(self.gamma) if self.gamma else None))
        return replace(base, graph=graph, transition=transition)


class EvolutionSettings(ConfigurableResource):
    """Evolution-round overrides (None keeps the default); see `EvolutionConfig` for their meaning."""

    l1_topology: bool | None = None
    l2_weights: bool | None = None
    l3_descriptions: bool | None = None
    success_threshold: float | None = None
    pool_attempts: bool | None = None
    zeta: float | None = None
    theta_avoid: int | None = None
    retract_min_successes: int | None = None
    surfaced_min: int | None = None
    attenuation: float | None = None
    blend: bool | None = None
    blend_n0: float | None = None
    editor: str | None = None
    editor_endpoint: str | None = None
    editor_model: str | None = None
    auto_promote: bool | None = None  # False: a round on the served version is not served by itself

    def config(self) -> EvolutionConfig:
        return EvolutionConfig().with_overrides(**_given(self))


class EngineSettings(ConfigurableResource):
    """Where the evolution round's per-partition trace work runs (`segos evolve --engine`): "local", or
    "spark" (reads the window's Parquet in the store; `spark_master` None means $SPARK_REMOTE, else
    local[*]). The version committed is the same either way.

    `launch` says how the Spark engine starts: "in_process" (a PySpark client inside the Dagster step) or
    "pipes" (`spark-submit assets/pipes/spark_round.py`, launched and listened to through Dagster Pipes;
    `spark_submit` None means the spark-submit PySpark ships). `spark_conf`: extra Spark settings."""

    engine: str = "local"
    spark_master: str | None = None
    partitions: int | None = None
    launch: str = "in_process"
    spark_submit: str | None = None
    spark_conf: dict[str, str] | None = None

    def config(self) -> EngineConfig:
        return EngineConfig(
            engine=self.engine,
            spark_master=self.spark_master,
            partitions=self.partitions,
            spark_conf=dict(self.spark_conf or {}),
        )

    def launch_mode(self) -> str:
        """The launch, checked against the engine before any work starts."""
        if self.launch not in LAUNCHES:
            raise ValueError(f"unknown launch {self.launch!r}: use one of {', '.join(LAUNCHES)}")
        if self.launch == "pipes" and self.engine != "spark":
            raise ValueError(f"launch='pipes' starts a Spark job: set engine='spark' (not {self.engine!r})")
        return self.launch


class RetrievalSettings(ConfigurableResource):
    """Retrieval overrides used to reconstruct traces' retrieval, gate L3 and replay the query set."""

    seed_k: int | None = None
    top_n: int | None = None
    alpha: float | None = None
    rerank_mu: float | None = None
    reverse: bool | None = None
    propagate: bool | None = None
    seed_df_max: float | None = None
    semantic: str | None = None  # "wordllama", "model2vec:<folder>", "sentence-transformers:<folder>", "none"

    def config(self, manifest: dict[str, Any] | None = None) -> RetrievalConfig:
        """The overrides on top of the version's preset (`manifest`), or of the defaults without one."""
        base = retrieval_for(manifest) if manifest is not None else RetrievalConfig()
        return base.with_overrides(**_given(self))


def build_resources(
    store_root: str | Path | None = None,
    *,
    cache_dir: str | Path | None = None,
    library_root: str | Path | None = None,
    landing_dir: str | Path | None = None,
    queries: str | Path | None = None,
    evolution: EvolutionSettings | None = None,
    retrieval: RetrievalSettings | None = None,
    build: BuildSettings | None = None,
    engine: EngineSettings | None = None,
) -> dict[str, Any]:
    """The resource dict of the code location; tests pass a tmp `store_root` (a folder or a URI) and keep
    the rest."""
    store = str(store_root) if store_root is not None else None
    cache = str(cache_dir) if cache_dir is not None else None
    paths = SegosPaths(
        **_set(
            store_root=store,
            cache_dir=cache,
            library_root=str(library_root) if library_root is not None else None,
            landing_dir=str(landing_dir) if landing_dir is not None else None,
            queries=str(queries) if queries is not None else None,
        )
    )
    return {
        "segos": paths,
        "io_manager": SegosIOManager(**_set(store_root=store, cache_dir=cache)),
        "build_settings": build or BuildSettings(),
        "evolution_settings": evolution or EvolutionSettings(),
        "retrieval_settings": retrieval or RetrievalSettings(),
        "engine_settings": engine or EngineSettings(),
        # launches `EngineSettings(launch="pipes")`'s spark-submit from the checkout's root
        "pipes_subprocess_client": PipesSubprocessClient(cwd=str(PROJECT_ROOT)),
    }

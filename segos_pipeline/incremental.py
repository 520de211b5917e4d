"""Incremental library updates: add, update or remove one skill without rebuilding the library.

A full rebuild re-parses every package, re-tokenises every skill and re-runs the similarity join. One
changed skill cannot change most of that, so an incremental version reuses the parent's tables and redoes
only what the change can reach:

* nodes / tokens: the changed package is parsed and tokenised alone and spliced into the parent's tables
  (both are sorted by id, so the row indices after it shift by one; nothing else is touched);
* semantic edges (top-k Jaccard, SPEC §4): the only skills whose top-k can change are those that can have
  the changed skill u as a join candidate, i.e. that share a join token with it. Among them,
  - a skill that had u in its top-k (a parent semantic edge v→u) loses or changes that entry and is
    recomputed exactly from its candidates (as is u itself);
  - every other one keeps its candidates' Jaccard scores, so its new top-k is its old top-k merged with
    (u, J(v, u)): dropping a candidate that was not in the top-k cannot change the top-k;
  - the df cap (join tokens are those with df ≤ max(1,000, 1% of n)) can flip a token between joined and
    skipped when u adds or removes it or when n moves the cap; every skill holding a flipped token is then
    recomputed exactly (a rare, slower path that the result reports);
* the edge table: the recomputed skills' semantic rows are replaced (a row whose pair and Jaccard are
  unchanged is kept as it was, with any evolution state); trace-induced edges of existing skills are kept;
  every edge of a removed skill is dropped;
* the operator: rows of the nodes incident to a changed edge are recomputed and spliced into the parent's
  operator after shifting its indices.

A test checks the result equals a full rebuild of the changed library (nodes, tokens, semantic edges and
operator), ties included.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import scipy.sparse as sp

from .build import library_fingerprint
from .config import AVOID, SEMANTIC, TRAVERSABLE, GraphConfig, ParseConfig, TransitionConfig
from .edges import EDGE_SCHEMA, counts_by_relation
from .lexicon import SIGNATURE_FIELDS, token_table
from .parsing import _SKIP_DIRS, NODE_SCHEMA, REPORT_SCHEMA, SKILL_FILE, _duplicate_names, parse_package
from .semantic import _stats, df_cap
from .snapshot import REPORT, Snapshot, SnapshotError, SnapshotStore
from .transition import transition_matrix

ACTIONS = ("add", "update", "remove")
Progress = Callable[[str], None]


class IncrementalError(SnapshotError):
    """A change that cannot be applied as asked (the message says what to do instead)."""


@dataclass
class Patched:
    """The tables of the child version and what the change touched."""

    nodes: pl.DataFrame
    tokens: pl.DataFrame
    edges: pl.DataFrame
    transition: sp.csr_matrix
    counters: dict[str, Any] = field(default_factory=dict)


@dataclass
class IncrementalResult:
    action: str
    skill: str
    changed: bool
    version: str  # the new version (or the parent's when nothing changed)
    parent: str
    manifest: dict[str, Any] | None
    counters: dict[str, Any]
    timings_s: dict[str, float]
    problems: list[dict[str, str]]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


# ----------------------------------------------------------------------------------------- the package


def _library_root(parent: Snapshot, library: str | Path | None) -> Path:
    if library is not None:
        root = Path(library)
    else:
        recorded = parent.manifest.get("library", {}).get("root")
        if not recorded:
            raise IncrementalError(
                f"version {parent.version} records no library root; pass --library ROOT (the folder the "
                "skill ids are relative to)"
            )
        root = Path(recorded)
    if not root.is_dir():
        raise IncrementalError(f"library root not found: {root} (pass --library ROOT)")
    return root


def skill_id_of(skill_dir: str | Path, root: Path) -> str:
    """The skill id a package folder gets in a full build of `root` (its path relative to the root).

    Refuses a folder a full build would not read (outside the root, hidden or vendored, behind a
    symlinked directory), since the incremental version must equal that build.
    """
    path = Path(skill_dir)
    path = path if path.is_absolute() else Path.cwd() / path
    try:
        rel = path.absolute().relative_to(root.absolute())
    except ValueError:
        try:
            rel = path.resolve().relative_to(root.resolve())
        except ValueError:
            raise IncrementalError(
                f"{skill_dir} is not inside the library root {root}; put the package in the library "
                "first (the library folder is the source of truth a full rebuild reads)"
            ) from None
    if not rel.parts:
        raise IncrementalError("the skill folder is the library root itself; give the package folder")
    for i, part in enumerate(rel.parts):
        if part.startswith(".") or part in _SKIP_DIRS:
            raise IncrementalError(f"{skill_dir}: a full build skips folders named {part!r}")
        if i < len(rel.parts) - 1 and (root / Path(*rel.parts[: i + 1])).is_symlink():
            raise IncrementalError(f"{skill_dir}: a full build does not descend the symlinked folder {part}")
    return rel.as_posix()


def _resolve_existing(parent: Snapshot, skill_id: str, ref: str) -> str:
    ids = parent.nodes["id"]
    if (ids == skill_id).any():
        return skill_id
    from .naming import SkillNames  # only needed when the folder is not a known id

    found = SkillNames(parent.nodes).resolve(ref)
    if len(found) == 1:
        return str(ids[found[0]])
    raise IncrementalError(
        f"skill {skill_id!r} is not in version {parent.version}; use `segos add` for a new one"
    )


# ---------------------------------------------------------------------------------------- signatures


class _Signatures:
    """Signature (node, token) rows of a token table with the lookups the patch needs.

    Rows are not de-duplicated up front (a token in several fields appears several times): that would cost
    a pass over the whole table, while every lookup below touches a few thousand rows.
    """

    def __init__(self, tokens: pl.DataFrame):
        self.rows = tokens.filter(pl.col("field").is_in(SIGNATURE_FIELDS)).select("node", "token")

    def postings(self, tokens: list[str]) -> pl.DataFrame:
        """Distinct (node, token) of the given tokens."""
        return self.rows.filter(pl.col("token").is_in(tokens)).unique()

    def sets(self, nodes: np.ndarray) -> pl.DataFrame:
        """Distinct (node, token) of the given nodes."""
        return self.rows.filter(pl.col("node").is_in(pl.Series(nodes, dtype=pl.UInt32).implode())).unique()

    def sizes(self, nodes: np.ndarray) -> dict[int, int]:
        s = self.sets(nodes).group_by("node").len()
        return dict(zip(s["node"].to_list(), s["len"].to_list(), strict=True))

    def df_all(self) -> pl.DataFrame:
        return self.rows.unique().group_by("token").agg(df=pl.len())


def _signature_of(tokens: pl.DataFrame) -> set[str]:
    return set(tokens.filter(pl.col("field").is_in(SIGNATURE_FIELDS))["token"].to_list())


def _topk_rows(pairs: pl.DataFrame, k: int) -> pl.DataFrame:
    """Top-k of each `node` over (node, cand, jac), jac > 0, ties to the smaller candidate index."""
    return (
        pairs.filter((pl.col("jac") > 0) & (pl.col("node") != pl.col("cand")))
        .sort(["node", "jac", "cand"], descending=[False, True, False])
        .group_by("node", maintain_order=True)
        .head(k)
    )


def _exact_topk(
    sig: _Signatures, nodes: np.ndarray, keep: Callable[[pl.DataFrame], pl.DataFrame], k: int
) -> pl.DataFrame:
    """Exact top-k (node, cand, jac) of `nodes` over every candidate that shares a join token."""
    if len(nodes) == 0:
        return pl.DataFrame(schema={"node": pl.UInt32, "cand": pl.UInt32, "jac": pl.Float64})
    own = sig.sets(nodes)
    joined_tokens = keep(own.select("token").unique())["token"].to_list()
    own_kept = own.filter(pl.col("token").is_in(joined_tokens))
    post = sig.postings(joined_tokens).rename({"node": "cand"})
    shared = own_kept.join(post, on="token").group_by("node", "cand").agg(shared=pl.len())
    need = np.union1d(nodes, shared["cand"].unique().to_numpy())
    size = sig.sets(need).group_by("node").agg(size=pl.len())
    pairs = (
        shared.join(size, on="node")
        .join(size.rename({"node": "cand", "size": "size_c"}), on="cand")
        .with_columns(
            jac=pl.col("shared").cast(pl.Float64)
            / (pl.col("size").cast(pl.Float64) + pl.col("size_c").cast(pl.Float64) - pl.col("shared"))
        )
        .select("node", "cand", "jac")
    )
    return _topk_rows(pairs, k)


# -------------------------------------------------------------------------------------------- the patch


def _splice(df: pl.DataFrame, idx: int, row: pl.DataFrame | None, replace: bool) -> pl.DataFrame:
    tail_start = idx + 1 if replace else idx
    parts = [df[:idx]] + ([row] if row is not None else []) + [df[tail_start:]]
    return pl.concat(parts, how="vertical")


def _shift(old: np.ndarray, action: str, idx: int) -> np.ndarray:
    """New index of each old node index (−1 for the removed node)."""
    if action == "add":
        return old + (old >= idx)
    if action == "remove":
        out = old - (old > idx)
        out[old == idx] = -1
        return out
    return old.copy()


def patch_tables(
    parent: Snapshot,
    action: str,
    skill_id: str,
    row: dict[str, Any] | None,
    graph: GraphConfig | None = None,
    tconf: TransitionConfig | None = None,
    progress: Progress | None = None,
) -> Patched:
    """The child's tables after `action` on `skill_id` (`row` is the parsed node row for add/update)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; expected one of {', '.join(ACTIONS)}")
    graph = graph or GraphConfig()
    tconf = tconf or TransitionConfig()
    say = progress or (lambda _m: None)
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    old_nodes, old_tokens = parent.nodes, parent.tokens
    ids_old = old_nodes["id"]
    idx = int(ids_old.search_sorted(skill_id, side="left"))
    present = idx < len(ids_old) and ids_old[idx] == skill_id
    if action == "add" and present:
        raise IncrementalError(
            f"skill {skill_id!r} is already in version {parent.version}; use `segos update`"
        )
    if action != "add" and not present:
        raise IncrementalError(f"skill {skill_id!r} is not in version {parent.version}; use `segos add`")
    n_old = old_nodes.height
    n_new = n_old + (action == "add") - (action == "remove")

    # ---- nodes and tokens: splice the one row and its token rows; shift the node index of the rest
    new_row = pl.DataFrame([row], schema=NODE_SCHEMA) if row is not None else None
    nodes = _splice(old_nodes, idx, new_row, replace=action != "add")
    node_col = old_tokens["node"].to_numpy()
    a = int(np.searchsorted(node_col, idx, side="left"))
    b = int(np.searchsorted(node_col, idx, side="right")) if present else a
    old_u_tokens = old_tokens[a:b]
    new_u_tokens = (
        token_table(new_row).with_columns(node=pl.lit(idx, dtype=pl.UInt32)) if new_row is not None else None
    )
    tail = old_tokens[b:]
    delta = {"add": 1, "remove": -1, "update": 0}[action]
    if delta:
        tail = tail.with_columns((pl.col("node").cast(pl.Int64) + delta).cast(pl.UInt32))
    tokens = pl.concat(
        [p for p in (old_tokens[:a], new_u_tokens, tail) if p is not None and p.height], how="vertical"
    )
    if tokens.height == 0:
        tokens = old_tokens.clear()
    timings["nodes_tokens"] = time.perf_counter() - t0

    # ---- which skills' top-k can change
    t1 = time.perf_counter()
    sig = _Signatures(tokens)
    sig_old_u = _signature_of(old_u_tokens) if present else set()
    sig_new_u = _signature_of(new_u_tokens) if new_u_tokens is not None else set()
    changed_tokens = sorted(sig_old_u | sig_new_u)
    cap_old, cap_new = df_cap(n_old, graph), df_cap(n_new, graph)
    post_changed = sig.postings(changed_tokens)
    df_new = dict(post_changed.group_by("token").len().iter_rows())
    flipped: set[str] = set()
    now_capped: set[str] = set()
    for t in changed_tokens:
        dn = df_new.get(t, 0)
        do = dn - (t in sig_new_u) + (t in sig_old_u)
        if (do <= cap_old) != (dn <= cap_new):
            flipped.add(t)
            if dn > cap_new:
                now_capped.add(t)
    df_table: pl.DataFrame | None = None
    if cap_old != cap_new:  # n moved the cap: any token near it may flip (rare: n ≥ 100k, every 100 skills)
        df_table = sig.df_all()
        lo, hi = min(cap_old, cap_new), max(cap_old, cap_new)
        near = df_table.filter((pl.col("df") > lo - 1) & (pl.col("df") <= hi + 1))
        for t, dn in near.iter_rows():
            do = dn - (t in sig_new_u) + (t in sig_old_u)
            if (do <= cap_old) != (dn <= cap_new):
                flipped.add(t)
                if dn > cap_new:
                    now_capped.add(t)

    def keep_new(tok: pl.DataFrame) -> pl.DataFrame:
        """Tokens (a `token` column) that the join of the new library uses (df ≤ new cap)."""
        toks = tok["token"].to_list()
        df = sig.postings(toks).group_by("token").len()
        return df.filter(pl.col("len") <= cap_new).select("token")

    kept_new_u = [t for t in sig_new_u if df_new.get(t, 0) <= cap_new]
    new_u = idx if new_row is not None else None
    ids_new = nodes["id"].to_numpy()

    # parent semantic edges with integer endpoints in the NEW numbering (-1: the removed skill)
    e = parent.edges
    index_old = pl.DataFrame({"id": ids_old, "i": pl.int_range(n_old, dtype=pl.Int64, eager=True)})
    sem = (
        e.filter(pl.col("relation") == SEMANTIC)
        .join(index_old.rename({"id": "src", "i": "u"}), on="src")
        .join(index_old.rename({"id": "dst", "i": "v"}), on="dst")
    )
    su = _shift(sem["u"].to_numpy(), action, idx)
    sv = _shift(sem["v"].to_numpy(), action, idx)
    # exact recompute: u itself, skills that had (old) u in their top-k, holders of a flipped token
    exact: set[int] = set()
    if new_u is not None:
        exact.add(new_u)
    if present:
        old_u_new_index = idx if action == "update" else -1
        exact.update(int(x) for x in su[sv == old_u_new_index] if x >= 0)
    if flipped:
        exact.update(int(x) for x in sig.postings(sorted(flipped))["node"].unique().to_list())
    # merge: skills that share a join token with the new u (u becomes one more candidate)
    merge_nodes: np.ndarray = np.empty(0, dtype=np.int64)
    if kept_new_u:
        holders = post_changed.filter(pl.col("token").is_in(kept_new_u))
        merge_nodes = np.setdiff1d(holders["node"].unique().to_numpy().astype(np.int64), list(exact) or [-1])
        merge_nodes = merge_nodes[merge_nodes != (new_u if new_u is not None else -1)]
    timings["affected"] = time.perf_counter() - t1
    say(f"{action} {skill_id}: {len(exact)} skill(s) recomputed exactly, {len(merge_nodes)} merged")

    # ---- new top-k rows of the affected skills
    t2 = time.perf_counter()
    k = graph.knn_k
    exact_arr = np.array(sorted(exact), dtype=np.int64)
    exact_rows = _exact_topk(sig, exact_arr, keep_new, k)
    merged_rows = pl.DataFrame(schema={"node": pl.UInt32, "cand": pl.UInt32, "jac": pl.Float64})
    if len(merge_nodes) and new_u is not None:
        u_kept = set(kept_new_u)
        sets_m = sig.sets(merge_nodes)
        shared = sets_m.filter(pl.col("token").is_in(list(u_kept))).group_by("node").agg(shared=pl.len())
        size_m = sets_m.group_by("node").agg(size=pl.len())
        size_u = len(sig_new_u)
        cand_u = shared.join(size_m, on="node").select(
            "node",
            cand=pl.lit(new_u, dtype=pl.UInt32),
            jac=pl.col("shared").cast(pl.Float64)
            / (pl.col("size").cast(pl.Float64) + float(size_u) - pl.col("shared").cast(pl.Float64)),
        )
        keep_old = np.isin(su, merge_nodes)
        old_lists = pl.DataFrame(
            {
                "node": su[keep_old].astype(np.uint32),
                "cand": sv[keep_old].astype(np.uint32),
                "jac": sem["w0"].to_numpy()[keep_old],
            }
        )
        merged_rows = _topk_rows(pl.concat([old_lists, cand_u], how="vertical"), k)
    recomputed = pl.concat([exact_rows, merged_rows], how="vertical")
    sources = np.union1d(exact_arr, merge_nodes).astype(np.int64)
    timings["topk"] = time.perf_counter() - t2

    # ---- edge table: drop the removed skill's edges and the recomputed sources' semantic rows
    t3 = time.perf_counter()
    src_ids = set(ids_new[sources].tolist()) if len(sources) else set()
    drop_ids = {skill_id} if action == "remove" else set()
    edges = e
    if drop_ids:
        edges = edges.filter(~pl.col("src").is_in(list(drop_ids)) & ~pl.col("dst").is_in(list(drop_ids)))
    dropped_with_skill = e.height - edges.height
    old_sem_of_sources = edges.filter((pl.col("relation") == SEMANTIC) & pl.col("src").is_in(list(src_ids)))
    edges = edges.filter(~((pl.col("relation") == SEMANTIC) & pl.col("src").is_in(list(src_ids))))
    fresh = pl.DataFrame(
        {
            "src": ids_new[recomputed["node"].to_numpy().astype(np.int64)] if recomputed.height else [],
            "dst": ids_new[recomputed["cand"].to_numpy().astype(np.int64)] if recomputed.height else [],
            "w0_new": recomputed["jac"],
        },
        schema={"src": pl.String, "dst": pl.String, "w0_new": pl.Float64},
    )
    # keep the parent's row (and any evolution state on it) when the pair and its Jaccard are unchanged
    kept = old_sem_of_sources.join(fresh, on=["src", "dst"], how="inner").filter(
        pl.col("w0") == pl.col("w0_new")
    )
    new_rows = fresh.join(kept.select("src", "dst"), on=["src", "dst"], how="anti").select(
        "src",
        "dst",
        relation=pl.lit(SEMANTIC),
        weight="w0_new",
        w0="w0_new",
        n_e=pl.lit(0, dtype=pl.Int64),
        round_created=pl.lit(parent.round, dtype=pl.Int64),
        round_updated=pl.lit(parent.round, dtype=pl.Int64),
        w_raw="w0_new",
    )
    # a pair with an avoid edge never also gets a navigation edge (SPEC §8 non-contradiction)
    avoid = edges.filter(pl.col("relation") == AVOID).select(lo="src", hi="dst")
    pair = new_rows.with_columns(lo=pl.min_horizontal("src", "dst"), hi=pl.max_horizontal("src", "dst"))
    blocked = pair.join(avoid, on=["lo", "hi"], how="semi").height
    new_rows = pair.join(avoid, on=["lo", "hi"], how="anti").drop("lo", "hi")
    edges = pl.concat([edges, kept.select(list(EDGE_SCHEMA)), new_rows.cast(EDGE_SCHEMA)], how="vertical")
    edges = edges.sort("src", "dst", "relation")
    timings["edges"] = time.perf_counter() - t3

    # ---- operator: shift the parent's indices, recompute the rows of nodes incident to a changed edge
    t4 = time.perf_counter()
    before = e.filter(pl.col("relation").is_in(TRAVERSABLE)).select("src", "dst", "relation", "weight")
    after = edges.filter(pl.col("relation").is_in(TRAVERSABLE)).select("src", "dst", "relation", "weight")
    changed = pl.concat(
        [
            before.join(after, on=list(before.columns), how="anti"),
            after.join(before, on=list(after.columns), how="anti"),
        ]
    )
    touched_ids = set(changed["src"].to_list()) | set(changed["dst"].to_list())
    touched_ids.discard(skill_id if action == "remove" else "")
    if new_u is not None:
        touched_ids.add(skill_id)
    transition = _patch_operator(
        parent.transition, action, idx, n_new, edges, nodes["id"], touched_ids, tconf
    )
    timings["operator"] = time.perf_counter() - t4

    counters = {
        "action": action,
        "skill": skill_id,
        "recomputed_exact": len(exact),
        "merged": len(merge_nodes),
        "flipped_tokens": len(flipped),
        # tokens newly skipped by the join minus tokens newly joined (keeps the capped-token count exact)
        "capped_tokens_delta": sum(1 if t in now_capped else -1 for t in flipped),
        "df_cap": {"before": cap_old, "after": cap_new},
        "semantic_rows_replaced": int(old_sem_of_sources.height - kept.height),
        "semantic_rows_added": int(new_rows.height),
        "semantic_blocked_by_avoid": int(blocked),
        "edges_dropped_with_skill": int(dropped_with_skill),
        "operator_rows_recomputed": len(touched_ids),
        "timings_s": {k2: round(v, 4) for k2, v in timings.items()},
    }
    return Patched(nodes=nodes, tokens=tokens, edges=edges, transition=transition, counters=counters)


def _patch_operator(
    old: sp.csr_matrix,
    action: str,
    idx: int,
    n_new: int,
    edges: pl.DataFrame,
    node_ids: pl.Series,
    touched_ids: set[str],
    tconf: TransitionConfig,
) -> sp.csr_matrix:
    """The parent's operator re-indexed for the new node set, with the touched nodes' rows rebuilt.

    A row of T gets mass from a node's out-edges (A→) and in-edges (A←, reverse), so rebuilding the rows of
    every endpoint of a changed edge from all edges incident to them gives exactly the full operator's rows.
    """
    coo = old.tocoo()
    r, c = _shift(coo.row.astype(np.int64), action, idx), _shift(coo.col.astype(np.int64), action, idx)
    ok = (r >= 0) & (c >= 0)
    r, c, d = r[ok], c[ok], coo.data[ok]
    index = pl.DataFrame({"id": node_ids, "i": pl.int_range(len(node_ids), dtype=pl.Int64, eager=True)})
    touched = (
        np.sort(index.filter(pl.col("id").is_in(sorted(touched_ids)))["i"].to_numpy())
        if touched_ids
        else np.empty(0, np.int64)
    )
    keep = ~np.isin(r, touched)
    r, c, d = r[keep], c[keep], d[keep]
    if len(touched):
        tids = sorted(touched_ids)
        incident = edges.filter(pl.col("src").is_in(tids) | pl.col("dst").is_in(tids))
        sub = transition_matrix(incident, node_ids, tconf).tocsr()
        rows = sub[touched].tocoo()
        r = np.concatenate([r, touched[rows.row]])
        c = np.concatenate([c, rows.col.astype(np.int64)])
        d = np.concatenate([d, rows.data])
    out = sp.csr_matrix((d, (r, c)), shape=(n_new, n_new))
    out.sort_indices()
    return out


# ------------------------------------------------------------------------------------------ committing


def _report(parent: Snapshot, nodes: pl.DataFrame, source: str, problems: list[Any]) -> pl.DataFrame:
    """The parent's build report with the changed package's rows replaced and duplicate names redone."""
    try:
        old = parent.read_extra(REPORT)
    except SnapshotError:
        old = pl.DataFrame(schema=REPORT_SCHEMA)
    is_dup = pl.col("problem").str.contains(r"^name '.*' is also used by ")
    rest = old.filter((pl.col("file") != source) & ~is_dup)
    own = pl.DataFrame(
        [(p.file, p.problem, p.action, p.severity) for p in problems], schema=REPORT_SCHEMA, orient="row"
    )
    dups = _duplicate_names(nodes)
    dup_rows = pl.DataFrame(
        [(p.file, p.problem, p.action, p.severity) for p in dups], schema=REPORT_SCHEMA, orient="row"
    )
    return pl.concat([rest, own, dup_rows], how="vertical")


def apply_change(
    store: SnapshotStore | str | Path,
    action: str,
    skill_dir: str | Path,
    *,
    library: str | Path | None = None,
    from_version: str | None = None,
    progress: Progress | None = None,
) -> IncrementalResult:
    """Make a new version (kind `incremental`, parent = `from_version` or the latest) with one skill
    added, updated or removed. `skill_dir` is the package folder inside the library root (for `remove`
    its folder must be deleted first). Returns the result with the new manifest."""
    t0 = time.perf_counter()
    store = store if isinstance(store, SnapshotStore) else SnapshotStore(store)
    say = progress or (lambda _m: None)
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; expected one of {', '.join(ACTIONS)}")
    timings: dict[str, float] = {}
    parent = store.load(from_version)
    timings["load_parent"] = time.perf_counter() - t0
    root = _library_root(parent, library)
    skill_id = skill_id_of(skill_dir, root)
    config = parent.manifest.get("config", {})
    pconf = ParseConfig(**config.get("parse", {}))
    gconf = GraphConfig(**config.get("graph", {}))
    tconf = TransitionConfig(**config.get("transition", {}))
    t = time.perf_counter()
    row: dict[str, Any] | None = None
    problems: list[Any] = []
    source = f"{skill_id}/{SKILL_FILE}"
    if action == "remove":
        skill_id = _resolve_existing(parent, skill_id, Path(skill_dir).name)
        source = f"{skill_id}/{SKILL_FILE}"
        if (root / source).is_file():
            # the library folder is the source of truth: a version without a skill that is still on disk
            # would differ from every later full build of the same library
            raise IncrementalError(
                f"{root / source} still exists; delete the package folder first, then run `segos remove`"
            )
    else:
        pkg = root / skill_id
        if not (pkg / SKILL_FILE).is_file():
            raise IncrementalError(f"{pkg} has no {SKILL_FILE}; a skill package is a folder with a SKILL.md")
        row, problems = parse_package(pkg, root, pconf)
        if row is None:
            reasons = "; ".join(p.problem for p in problems) or "unreadable"
            raise IncrementalError(f"cannot read {pkg / SKILL_FILE}: {reasons}")
    timings["parse"] = time.perf_counter() - t
    if action == "update":
        old = parent.nodes.filter(pl.col("id") == skill_id)
        if old.height and old.to_dicts()[0] == row:
            return IncrementalResult(
                action,
                skill_id,
                False,
                parent.version,
                parent.version,
                None,
                {"note": "the package is unchanged; no version was made"},
                {k: round(v, 4) for k, v in timings.items()},
                [],
            )
    t = time.perf_counter()
    patched = patch_tables(parent, action, skill_id, row, gconf, tconf, say)
    timings["patch"] = time.perf_counter() - t
    t = time.perf_counter()
    report = _report(parent, patched.nodes, source, problems)
    node_index = pl.DataFrame(
        {"id": patched.nodes["id"], "i": pl.int_range(patched.nodes.height, eager=True)}
    )
    sem = patched.edges.filter(pl.col("relation") == SEMANTIC)
    sem_i = sem.join(node_index.rename({"id": "src", "i": "u"}), on="src").join(
        node_index.rename({"id": "dst", "i": "v"}), on="dst"
    )
    stats = _stats(
        patched.nodes.height,
        sem_i["u"].to_numpy().astype(np.int64),
        sem_i["v"].to_numpy().astype(np.int64),
        df_cap(patched.nodes.height, gconf),
        int(parent.manifest.get("counts", {}).get("semantic", {}).get("capped_tokens", 0))
        + int(patched.counters["capped_tokens_delta"]),
    )
    timings["report_stats"] = time.perf_counter() - t
    manifest = {
        "kind": "incremental",
        "parent": parent.version,
        "round": parent.round,
        "window": None,
        "library": {
            "root": str(root.resolve()),
            "fingerprint": library_fingerprint(patched.nodes),
            "skills": patched.nodes.height,
        },
        "config": config,
        "change": {"action": action, "skill": skill_id, "source": source},
        "counters": patched.counters,
        "counts": {
            "skills": patched.nodes.height,
            "edges": patched.edges.height,
            "edges_by_relation": counts_by_relation(patched.edges),
            "semantic": stats.as_dict(),
            "transition_nnz": int(patched.transition.nnz),
            "problems": report.height,
        },
    }
    t = time.perf_counter()
    manifest["timings_s"] = {k: round(v, 4) for k, v in timings.items()}
    written = store.write(
        nodes=patched.nodes,
        tokens=patched.tokens,
        edges=patched.edges,
        transition=patched.transition,
        manifest=manifest,
        extra_tables={REPORT: report},
    )
    timings["write"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - t0
    say(f"committed {written['version']} ({action} {skill_id}) in {timings['total']:.2f}s")
    return IncrementalResult(
        action=action,
        skill=skill_id,
        changed=True,
        version=written["version"],
        parent=parent.version,
        manifest=written,
        counters=patched.counters,
        timings_s={k: round(v, 4) for k, v in timings.items()},
        problems=[{"file": p.file, "problem": p.problem, "action": p.action} for p in problems],
    )


def add_skill(store: SnapshotStore | str | Path, skill_dir: str | Path, **kw: Any) -> IncrementalResult:
    return apply_change(store, "add", skill_dir, **kw)


def update_skill(store: SnapshotStore | str | Path, skill_dir: str | Path, **kw: Any) -> IncrementalResult:
    return apply_change(store, "update", skill_dir, **kw)


def remove_skill(store: SnapshotStore | str | Path, skill_dir: str | Path, **kw: Any) -> IncrementalResult:
    return apply_change(store, "remove", skill_dir, **kw)

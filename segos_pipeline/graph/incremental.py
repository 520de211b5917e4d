"""Incremental library updates: add, update or remove one skill without rebuilding the library.

A full rebuild re-parses every package, re-tokenises every skill and re-runs the similarity join. One
changed skill cannot change most of that, so an incremental version reuses the parent's files and redoes
only what the change can reach:

* nodes / tokens: the changed package is parsed and tokenised alone and spliced into the one stored part
  that holds it (store/parts.py); every other part is hard-linked from the parent, unread;
* the signature (the binary skill × token matrix the Jaccard graph is made of) is stored with each version:
  its row for the skill is replaced, inserted or deleted, and tokens it never saw are appended;
* semantic edges (top-k Jaccard, SPEC §4): the only skills whose top-k can change are those that can have
  the changed skill u as a join candidate, i.e. that share a join token with it. Among them,
  - a skill that had u in its top-k (a parent semantic edge v→u) loses or changes that entry and is
    recomputed exactly from its candidates (as is u itself);
  - every other one keeps its candidates' Jaccard scores, so its new top-k is its old top-k merged with
    (u, J(v, u)): dropping a candidate that was not in the top-k cannot change the top-k;
  - the df cap (join tokens are those with df ≤ max(df_cap_min, df_cap_fraction·n): a fixed 1,000 by
    default) can flip a token between joined and skipped when u adds or removes it or when n moves a
    growing cap; every skill holding a flipped token is then
    recomputed exactly (found by comparing every column's df before and after, so nothing is missed);
* the edge table: the recomputed skills' semantic rows are replaced (a row whose pair and Jaccard are
  unchanged is kept as it was, with any evolution state); trace-induced edges of existing skills are kept;
  every edge of a removed skill is dropped;
* the operator: rows of the nodes incident to a changed edge are recomputed and spliced into the parent's
  operator after shifting its indices.

Of the parent it reads the key columns of the node parts, the changed part, the signature, the edge table
and the operator, and verifies each against the manifest first. A test checks the result equals a full
rebuild of the changed library (nodes, tokens, semantic edges and operator), ties included.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import scipy.sparse as sp

from ..config import SEMANTIC, BuildConfig, GraphConfig, TransitionConfig
from ..progress import Progress
from ..store import parts as parts_mod
from ..store.layout import EDGES, EXPERIENCE, REPORT, SIGNATURE, TRANSITION, VOCAB
from ..store.parts import NewPart, local_tokens, split_rows
from ..store.served import advance
from ..store.snapshot import SnapshotError, SnapshotStore
from ..store.version_files import SamePart, VersionFiles
from ..text.lexicon import TOKEN_SCHEMA, Signature
from ..text.token_rows import table_signature, token_table
from .build import graph_counts, library_record
from .discovery import SKILL_FILE, SKIP_DIRS
from .incremental_graph import (
    holders,
    patch_edges,
    patch_operator_for,
    patch_signature,
    shift_indices,
    topk_of_rows,
    topk_rows,
)
from .parsing import NODE_SCHEMA, _duplicate_names, parse_package
from .report import REPORT_SCHEMA, report_frame
from .semantic_edges import SemanticStats, _stats, df_cap
from .transition import edge_indices

ACTIONS = ("add", "update", "remove")
# The node columns an update reads of every skill (ids for indices, names for duplicate-name warnings,
# content hashes for the library fingerprint); whole rows are read of the changed skill's part only.
KEY_COLUMNS = ("id", "name", "folder", "source_path", "content_hash")


class IncrementalError(SnapshotError):
    """A change that cannot be applied as asked (the message says what to do instead)."""


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
    served: bool = False  # the new version is served: its parent was (`store/served.py`)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


# ----------------------------------------------------------------------------------------- the package


def _library_root(parent: VersionFiles, library: str | Path | None) -> Path:
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
        if part.startswith(".") or part in SKIP_DIRS:
            raise IncrementalError(f"{skill_dir}: a full build skips folders named {part!r}")
        if i < len(rel.parts) - 1 and (root / Path(*rel.parts[: i + 1])).is_symlink():
            raise IncrementalError(f"{skill_dir}: a full build does not descend the symlinked folder {part}")
    return rel.as_posix()


def _resolve_existing(parent: VersionFiles, keys: pl.DataFrame, skill_id: str, ref: str) -> str:
    ids = keys["id"]
    if (ids == skill_id).any():
        return skill_id
    from ..text.names import SkillNames  # only needed when the folder is not a known id

    found = SkillNames(keys).resolve(ref)
    if len(found) == 1:
        return str(ids[found[0]])
    raise IncrementalError(
        f"skill {skill_id!r} is not in version {parent.version}; use `segos add` for a new one"
    )


# ------------------------------------------------------------------------------------------ the parts


def _position(ids: pl.Series, skill_id: str) -> tuple[int, bool]:
    """Where `skill_id` is (or would be inserted) in the sorted ids, and whether it is there."""
    idx = int(ids.search_sorted(skill_id, side="left"))
    return idx, idx < len(ids) and ids[idx] == skill_id


def _splice(df: pl.DataFrame, idx: int, row: pl.DataFrame | None, replace: bool) -> pl.DataFrame:
    tail_start = idx + 1 if replace else idx
    parts = [df[:idx]] + ([row] if row is not None else []) + [df[tail_start:]]
    return pl.concat(parts, how="vertical")


def _change_part(
    parent: VersionFiles,
    idx: int,
    present: bool,
    new_row: pl.DataFrame | None,
    new_tokens: pl.DataFrame | None,
) -> list[NewPart | SamePart]:
    """Splice the skill into the one part that holds it; every other part is linked from the parent.

    A part that grows past twice `PART_ROWS` is split again and one that empties is dropped, so part sizes
    stay bounded under any sequence of updates.
    """
    n_parts = len(parent.parts)
    p, start = parent.part_at(idx)
    if n_parts:
        part_nodes, part_tokens = parent.read_part(p)
    else:  # a format-1 version of an empty library has no part at all
        part_nodes, part_tokens = pl.DataFrame(schema=NODE_SCHEMA), pl.DataFrame(schema=TOKEN_SCHEMA)
    local = idx - start
    nodes = _splice(part_nodes, local, new_row, replace=present)
    node_col = part_tokens["node"]
    a = int(node_col.search_sorted(local, side="left"))
    b = int(node_col.search_sorted(local, side="right")) if present else a
    delta = (new_row is not None) - present
    tail = part_tokens[b:]
    if delta:
        tail = tail.with_columns((pl.col("node").cast(pl.Int64) + delta).cast(pl.UInt32))
    if new_tokens is not None:
        new_tokens = new_tokens.with_columns(node=pl.lit(local, dtype=pl.UInt32))
    pieces = [t for t in (part_tokens[:a], new_tokens, tail) if t is not None and t.height]
    tokens = pl.concat(pieces, how="vertical") if pieces else part_tokens.clear()
    if nodes.height > 2 * parts_mod.PART_ROWS:
        middle = [NewPart(nodes[x:y], local_tokens(tokens, x, y)) for x, y in split_rows(nodes.height)]
    elif nodes.height == 0 and n_parts > 1:
        middle = []
    else:
        middle = [NewPart(nodes, tokens)]
    plan = [parent.same_part(i) for i in range(p)] + middle
    return plan + [parent.same_part(i) for i in range(p + 1, n_parts)]


# -------------------------------------------------------------------------------------------- the patch


@dataclass
class Patched:
    """The child version of one change, ready to write, and what the change touched."""

    parts: list[NewPart | SamePart]
    keys: pl.DataFrame  # KEY_COLUMNS of every skill of the child, in node order
    signature: Signature
    edges: pl.DataFrame
    transition: sp.csr_matrix
    stats: SemanticStats
    counters: dict[str, Any] = field(default_factory=dict)


def patch_version(
    parent: VersionFiles,
    action: str,
    skill_id: str,
    row: dict[str, Any] | None,
    graph: GraphConfig,
    tconf: TransitionConfig,
    progress: Progress | None = None,
    keys: pl.DataFrame | None = None,
) -> Patched:
    """The child of `parent` after `action` on `skill_id` (`row` is the parsed node row for add/update).

    Reads only the key columns of the node parts, the one part the skill lives in, the signature, the edge
    table and the operator of the parent.
    """
    say = progress or (lambda _m: None)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    keys_old = parent.read_nodes(KEY_COLUMNS) if keys is None else keys
    ids_old = keys_old["id"]
    idx, present = _position(ids_old, skill_id)
    if action == "add" and present:
        raise IncrementalError(
            f"skill {skill_id!r} is already in version {parent.version}; use `segos update`"
        )
    if action != "add" and not present:
        raise IncrementalError(f"skill {skill_id!r} is not in version {parent.version}; use `segos add`")
    n_old = keys_old.height
    new_row = pl.DataFrame([row], schema=NODE_SCHEMA) if row is not None else None
    new_tokens = token_table(new_row) if new_row is not None else None  # the one skill tokenised
    plan = _change_part(parent, idx, present, new_row, new_tokens)
    new_keys = new_row.select(KEY_COLUMNS) if new_row is not None else None
    keys = _splice(keys_old, idx, new_keys, replace=present)
    n_new = keys.height
    timings["parts"] = time.perf_counter() - t0

    # ---- the signature, and which skills' top-k can change
    t1 = time.perf_counter()
    old_sig = (
        parent.read_signature()
        if parent.has_signature()
        else table_signature(parent.read_tokens(), n_old)  # format 1: derive it once (slow path)
    )
    sig, old_cols, new_cols = patch_signature(old_sig, idx, present, new_tokens)
    vocab_size = sig.matrix.shape[1]
    df_old = np.bincount(old_sig.matrix.indices, minlength=vocab_size)
    df_new = df_old.copy()
    np.subtract.at(df_new, old_cols, 1)
    np.add.at(df_new, new_cols, 1)
    cap_old, cap_new = df_cap(n_old, graph), df_cap(n_new, graph)
    joined = df_new <= cap_new  # an empty column joins nothing, whatever its flag
    flipped = np.flatnonzero((df_old <= cap_old) != joined)
    m = sig.matrix
    sizes = np.diff(m.indptr).astype(np.float64)
    # copies: eliminate_zeros works in place, and the signature's arrays are written out as they are
    join = sp.csr_matrix(
        (joined[m.indices].astype(np.float32), m.indices.copy(), m.indptr.copy()), shape=m.shape
    )
    join.eliminate_zeros()
    new_u = idx if new_row is not None else None

    # parent semantic edges with integer endpoints in the NEW numbering (-1: the removed skill)
    e = parent.read_edges()
    sem = edge_indices(e.filter(pl.col("relation") == SEMANTIC), ids_old)
    su = shift_indices(sem["u"].to_numpy(), action, idx)
    sv = shift_indices(sem["v"].to_numpy(), action, idx)
    # exact recompute: u itself, skills that had (old) u in their top-k, holders of a flipped token
    exact = [np.array([new_u] if new_u is not None else [], dtype=np.int64)]
    if present:
        exact.append(su[(sv == (idx if action == "update" else -1)) & (su >= 0)])
    if len(flipped):
        exact.append(holders(m, flipped))
    exact_arr = np.unique(np.concatenate(exact)).astype(np.int64)
    timings["affected"] = time.perf_counter() - t1

    # ---- new top-k rows of the affected skills
    t2 = time.perf_counter()
    k = graph.knn_k
    r, c, w, inter = topk_of_rows(join, sizes, exact_arr, k)
    exact_rows = _candidates(r, c, w)
    merge_nodes = np.empty(0, dtype=np.int64)
    merged_rows = exact_rows.clear()
    if new_u is not None:
        # u is one more candidate of every skill sharing a joined token with it: J(v, u) = J(u, v)
        u_row = inter[int(np.searchsorted(exact_arr, new_u))]
        v = u_row.indices.astype(np.int64)
        shared = u_row.data.astype(np.float64)
        keep = ~np.isin(v, exact_arr)
        v, shared = v[keep], shared[keep]
        merge_nodes = v
        cand_u = _candidates(v, np.full(len(v), new_u), shared / (sizes[v] + sizes[new_u] - shared))
        keep_old = np.isin(su, merge_nodes)
        old_lists = _candidates(su[keep_old], sv[keep_old], sem["w0"].to_numpy()[keep_old])
        merged_rows = topk_rows(pl.concat([old_lists, cand_u], how="vertical"), k)
    recomputed = pl.concat([exact_rows, merged_rows], how="vertical")
    sources = np.union1d(exact_arr, merge_nodes).astype(np.int64)
    timings["topk"] = time.perf_counter() - t2
    say(f"{action} {skill_id}: {len(exact_arr)} skill(s) recomputed exactly, {len(merge_nodes)} merged")

    # ---- edge table and operator
    t3 = time.perf_counter()
    ids_new = keys["id"].to_numpy()
    edges, edge_counts = patch_edges(e, recomputed, ids_new, sources, skill_id, action, _round_of(parent))
    timings["edges"] = time.perf_counter() - t3
    t4 = time.perf_counter()
    transition, touched = patch_operator_for(
        e, edges, parent.read_transition(), action, idx, n_new, keys["id"], skill_id, new_u, tconf
    )
    timings["operator"] = time.perf_counter() - t4

    capped = int((df_new > cap_new).sum())
    sem_i = edge_indices(edges.filter(pl.col("relation") == SEMANTIC), keys["id"])
    stats = _stats(n_new, sem_i["u"].to_numpy(), sem_i["v"].to_numpy(), cap_new, capped)
    counters = {
        "action": action,
        "skill": skill_id,
        "recomputed_exact": len(exact_arr),
        "merged": len(merge_nodes),
        "flipped_tokens": len(flipped),
        "df_cap": {"before": cap_old, "after": cap_new},
        **edge_counts,
        "operator_rows_recomputed": touched,
        "parts": {"total": len(plan), "written": sum(isinstance(x, NewPart) for x in plan)},
        "timings_s": {k2: round(v2, 4) for k2, v2 in timings.items()},
    }
    return Patched(plan, keys, sig, edges, transition, stats, counters)


def _candidates(node: np.ndarray, cand: np.ndarray, jac: np.ndarray) -> pl.DataFrame:
    """(node, cand, jac) rows: skill `cand` as a top-k candidate of skill `node`, with their Jaccard."""
    return pl.DataFrame(
        {"node": node.astype(np.uint32), "cand": cand.astype(np.uint32), "jac": jac},
        schema={"node": pl.UInt32, "cand": pl.UInt32, "jac": pl.Float64},
    )


def _round_of(parent: VersionFiles) -> int:
    return int(parent.manifest.get("round", 0))


# ------------------------------------------------------------------------------------------ committing


def _report(parent: VersionFiles, keys: pl.DataFrame, source: str, problems: list[Any]) -> pl.DataFrame:
    """The parent's build report with the changed package's rows replaced and duplicate names redone."""
    try:
        old = parent.read_extra(REPORT)
    except SnapshotError:
        old = pl.DataFrame(schema=REPORT_SCHEMA)
    is_dup = pl.col("problem").str.contains(r"^name '.*' is also used by ")
    rest = old.filter((pl.col("file") != source) & ~is_dup)
    return pl.concat([rest, report_frame([*problems, *_duplicate_names(keys)])], how="vertical")


def _read_files(parent: VersionFiles) -> list[str]:
    """The parent's files an update reads whole, verified before use (the changed part is verified when it
    is read, see `VersionFiles.read_part`). Parts linked unread keep their recorded hashes, so damage to
    them stays detectable in the child without hashing them here."""
    names = [*(p["nodes"] for p in parent.parts), EDGES, TRANSITION, REPORT]
    names += [SIGNATURE, VOCAB] if parent.has_signature() else [p["tokens"] for p in parent.parts]
    return [n for n in names if n in parent.manifest.get("files", {})]


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
    parent = store.files(from_version)
    parent.check(_read_files(parent))
    timings["verify_parent"] = time.perf_counter() - t0
    root = _library_root(parent, library)
    skill_id = skill_id_of(skill_dir, root)
    config = parent.manifest.get("config", {})  # carried into the child's manifest as recorded
    settings = BuildConfig.of_manifest(parent.manifest)
    pconf, gconf, tconf = settings.parse, settings.graph, settings.transition
    t = time.perf_counter()
    keys = parent.read_nodes(KEY_COLUMNS)
    row: dict[str, Any] | None = None
    problems: list[Any] = []
    source = f"{skill_id}/{SKILL_FILE}"
    if action == "remove":
        skill_id = _resolve_existing(parent, keys, skill_id, Path(skill_dir).name)
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
    if action == "update" and _stored_row(parent, keys, skill_id) == row:
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
    patched = patch_version(parent, action, skill_id, row, gconf, tconf, say, keys=keys)
    timings["patch"] = time.perf_counter() - t
    t = time.perf_counter()
    report = _report(parent, patched.keys, source, problems)
    timings["report"] = time.perf_counter() - t
    manifest = {
        "kind": "incremental",
        "parent": parent.version,
        "round": _round_of(parent),
        "window": None,
        "library": library_record(root, patched.keys),
        "config": config,
        "change": {"action": action, "skill": skill_id, "source": source},
        "counters": patched.counters,
        "counts": {
            **graph_counts(patched.keys, patched.edges, patched.transition, patched.stats),
            "problems": report.height,
        },
        "timings_s": {k: round(v, 4) for k, v in timings.items()},
    }
    t = time.perf_counter()
    written = store.write_parts(
        parts=patched.parts,
        signature=patched.signature,
        edges=patched.edges,
        transition=patched.transition,
        manifest=manifest,
        extra_tables={REPORT: report, **_carried_experience(parent, patched.keys["id"])},
    )
    timings["write"] = time.perf_counter() - t
    # a change to the served version is served (forward along the lineage, as a round); a change to an
    # older one (`from_version`) is not
    served = advance(store, written, f"{action} {skill_id}")
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
        served=served,
    )


def _carried_experience(parent: VersionFiles, ids: pl.Series) -> dict[str, pl.DataFrame]:
    """The parent's experience for the skills the new version holds: an updated skill keeps what it learned
    from the requests it served, a removed one takes its experience with it."""
    if EXPERIENCE not in parent.manifest.get("files", {}):
        return {}
    table = parent.read_extra(EXPERIENCE)
    return {EXPERIENCE: table.filter(pl.col("skill").is_in(ids.implode()))}


def _stored_row(parent: VersionFiles, keys: pl.DataFrame, skill_id: str) -> dict[str, Any] | None:
    """The parent's node row of `skill_id` (read from the one part that holds it)."""
    idx, present = _position(keys["id"], skill_id)
    if not present:
        return None
    part, start = parent.part_at(idx)
    return parent.read_part(part)[0][idx - start].to_dicts()[0]

"""The Python API of the agent-facing service: what `segos mcp` serves and the CLI calls.

`SegosService` answers requests against one version of a store. Pinned (`version=...`) it always serves
that version; otherwise it follows the store's served pointer (`store/served.py`: the version a round on
the served version, `segos promote` or `segos rollback` made served; the latest in a store without one) and
switches once the pointer names another version, at the start of a request. Versions are committed
atomically (manifest last, folder renamed into place), so a half-written version is never visible; a
served version whose files fail their hash check is not switched to (the service keeps serving the old one
and reports why in `status()`), and at start one is passed over for the version served before it that
loads. The check between requests is a `stat` of the store's `versions/` folder and of its pointer file, so
following costs nothing until one of them changes. A store at a URI (`RemoteStore`) is instead listed (and
its pointer read) at most every `poll_s` seconds (`config.REMOTE_POLL_S` by default): requests in between
ask the URI nothing, and a new version is downloaded into the cache (hash-checked) by the same background
load before it is swapped in.

Loading a version (verify, read, build the retriever) takes seconds on a large library (longer when its
lexical index is not cached yet, as after every `segos update`). With
`reload="background"` (the default) a new version is loaded on a thread while requests go on being answered
from the old one, and it is swapped in at the start of the first request after it is ready; no request
waits for a load. `reload="sync"` loads it inside the request that notices it.

Every method returns plain JSON-ready dicts (the MCP tools return them unchanged). Expected failures raise
`ServiceError` (or a `SnapshotError`), whose message says what to do; the MCP server turns them into tool
errors.

Following and loading versions is `versions.py` (`ServedVersions`, which `SegosService` extends), the
checks of request arguments `arguments.py`, the errors `errors.py`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from ..config import AVOID, RELATIONS, RetrievalConfig
from ..evolution.landing import LandingWriteError, append_line
from ..evolution.traces import (
    NATIVE_KEYS,
    TraceError,
    native_line,
    native_row,
    validate_line,
)
from ..paths import default_landing
from ..retrieval.bundle import hydrate_rows
from ..retrieval.ordering import ExecutionOrder, Precedence, execution_order
from ..retrieval.packages import (
    MAX_FILE_BYTES,
    PackageError,
    PackageFile,
    list_package_files,
    package_folder,
    read_package_file,
)
from ..store.served import served
from ..store.snapshot import SnapshotError, SnapshotStore
from ..text.names import UnknownName
from .arguments import bounded_int, char_budget, checked_min_score, checked_query, echoed
from .errors import FileRefused, PackageMissing, ServiceError, TraceNotWritten, TraceRejected, UnknownSkill
from .versions import LoadedVersion, ServedVersions

log = logging.getLogger(__name__)  # `segos mcp` shows it on stderr; versions.py logs under this name too
MAX_REPLY_UNKNOWN = 20  # unknown skill names listed in a record_trace reply (the count is always given)
MAX_SUGGESTED = 5  # unknown names of one request that get near-miss suggestions (each costs a few ms)


class SegosService(ServedVersions):
    """Skill search, ordered bundles, skill details and trace recording over a snapshot store.

    `version`: a version id / prefix / `vN` to pin, or None (or "served", "latest") to follow the store's
    served version (at start, the served one or, if it does not load, the newest served before it that
    does). `landing`: the folder `record_trace` appends to (default `$SEGOS_LANDING`, else `landing/`
    inside the store). `config`: retrieval settings. `cache_bytes`: the memory loaded versions
    may hold (requests may name older ones; default `$SEGOS_VERSION_CACHE_MB`, else 2 GiB; the served one is
    always kept, see `version_cache.py`). `reload`: "background" or "sync", see the module docstring.
    `store` may be a folder, a URI (cached under `$SEGOS_CACHE`) or a store; `poll_s`: how often a store at
    a URI is listed for new versions (default `config.REMOTE_POLL_S`; unused for a local store).
    """

    def __init__(
        self,
        store: SnapshotStore | str | Path,
        version: str | None = None,
        *,
        config: RetrievalConfig | None = None,
        landing: str | Path | None = None,
        verify: bool = True,
        cache_bytes: int | None = None,
        reload: str = "background",
        poll_s: float | None = None,
    ):
        super().__init__(
            store,
            version,
            config=config,
            verify=verify,
            cache_bytes=cache_bytes,
            reload=reload,
            poll_s=poll_s,
        )
        self.landing = Path(landing) if landing is not None else default_landing(self.store.root)

    # ------------------------------------------------------------------------------------ status

    def status(self) -> dict[str, Any]:
        lo = self._request()
        m = lo.snapshot.manifest
        latest, serving = self._named(self.store.latest), self._named(lambda: served(self.store))
        return {
            "store": self.store.address,
            # a store at a URI: its local cache and how often the URI is listed for new versions
            "cache": str(self.store.local_cache) if self.store.local_cache is not None else None,
            "poll_s": self.store.listing_max_age,
            "version": lo.version,
            # "served": following the store's served pointer (it names `served`, switched to once loaded)
            "mode": "pinned" if self.pinned else "served",
            "latest": latest,
            "served": serving,
            "kind": m.get("kind"),
            "parent": m.get("parent"),
            "round": m.get("round", 0),
            "window": m.get("window"),
            "created_at": m.get("created_at"),
            "counts": m.get("counts", {}),
            "config": {"retrieval": asdict(lo.retriever.config), "build": m.get("config", {})},
            "ordering": {"precedence": lo.precedence.as_dict()},
            "landing": str(self.landing),
            "loaded_at": lo.loaded_at,
            "switches": self.switches,
            "loading": self.loading,
            "in_memory": list(dict.fromkeys([lo.version, *self._cache])),
            "in_memory_bytes": self._cache.total(),
            "last_reload_error": self.last_reload_error,
            "unservable": dict(self._failed),  # version → why it could not be loaded (not retried)
        }

    @staticmethod
    def _named(which: Callable[[], str]) -> str | None:
        """A version `status` names (latest, served); None when the store cannot say right now."""
        try:
            return which()
        except (SnapshotError, OSError):
            return None

    # ----------------------------------------------------------------------------------------- skills

    def skill_table(self, version: str | None = None) -> Any:
        """The node table (a polars DataFrame: id, name, capability, ...) of the version a request would be
        answered from; the MCP server lists and completes skill resources from it."""
        return self._request(version).snapshot.nodes

    def _resolve(self, lo: LoadedVersion, name: str, suggest: bool = True) -> tuple[int, list[str]]:
        """Row index of a skill named by id or name (most specific first) and the other matches; an unknown
        one's error suggests near misses when `suggest`."""
        if not isinstance(name, str) or not name.strip():
            raise ServiceError("give a skill id or name")
        try:
            found = lo.names.require(name, lo.version, suggest)
        except UnknownName as exc:
            raise UnknownSkill(str(exc)) from None
        return found[0], [lo.names.ids[i] for i in found[1:]]

    def search(
        self, query: str, top_k: int = 10, version: str | None = None, min_score: float | None = None
    ) -> dict[str, Any]:
        """Ranked overview of the skills for `query`: id, name, capability, score, relevance; no bodies.
        None, with `no_match`, when none reaches the relevance floor (`min_score`, else the configured)."""
        query = checked_query(query)
        top_k = bounded_int("top_k", top_k)
        lo = self._request(version)
        r = lo.retriever
        ranking = r.rank(query, depth=top_k)
        picked = r.members(ranking, top_k, checked_min_score(min_score))
        chosen, pruned, relevance = picked.chosen, picked.pruned, picked.relevance.value
        seeds = set(ranking.seeds.tolist())
        caps = lo.snapshot.nodes["capability"]
        names = lo.snapshot.nodes["name"]
        results = [
            {
                "rank": rank,
                "id": str(r.ids[i]),
                "name": names[i],
                "capability": caps[i] or "",
                "score": round(ranking.score_of(i), 6),
                "relevance": round(float(relevance[pos]), 6),
                "seed": i in seeds,
            }
            for pos, (rank, i) in enumerate(enumerate(chosen, start=1))
        ]
        return {
            "version": lo.version,
            "query": echoed(query),
            "results": results,
            "pruned": pruned,
            "no_match": picked.no_match,
            "min_score": picked.floor,
        }

    def retrieve_bundle(
        self,
        query: str,
        top_n: int | None = None,
        max_chars: int | None = None,
        version: str | None = None,
        min_score: float | None = None,
    ) -> dict[str, Any]:
        """The hydrated bundle for `query` under the budgets, in execution order, with the edges among its
        members and why each skill is included; empty, with `no_match`, when none reaches the relevance
        floor (`min_score`, else the configured one)."""
        query = checked_query(query)
        lo = self._request(version)
        r = lo.retriever
        cfg = r.config
        top_n = bounded_int("top_n", top_n if top_n is not None else cfg.top_n)
        total = char_budget(cfg, max_chars)
        # Ranked, pruned and hydrated in retrieval rank (the budget goes to the best-supported skills
        # first) by the one bundle builder, each member with why it is there; ordered for execution below.
        bundle = r.retrieve(query, top_n, max_chars=total, min_score=checked_min_score(min_score))
        rows = [r.names.row_of(s.id) for s in bundle.skills]
        contracts = lo.snapshot.nodes[rows].select("inputs", "outputs").to_dicts()
        # Each skill's record is the one `segos retrieve --json` prints (its figures rounded), with the
        # skill's contract; its position and prerequisites in the execution order are added below.
        kept = [
            {**{k: round(v, 6) if isinstance(v, float) else v for k, v in record.items()}, **contract}
            for record, contract in zip(bundle.to_dict()["skills"], contracts, strict=True)
        ]
        seed_ids, pruned, over = bundle.seeds, bundle.pruned, bundle.over_budget
        members = [s["id"] for s in kept]
        among = lo.edges_among(members)
        order = execution_order(
            members,
            {s["id"]: s["score"] for s in kept},
            [(s, d, rel) for s, d, rel, _w in among],
            lo.precedence,
        )
        by_id = {s["id"]: s for s in kept}
        skills = [
            {
                "position": pos,
                **by_id[sid],
                "after": sorted(c.before for c in order.constraints if c.after == sid),
            }
            for pos, sid in enumerate(order.order, start=1)
        ]
        return {
            "version": lo.version,
            "query": echoed(query),
            "order": order.order,
            "skills": skills,
            "edges": [{"src": s, "dst": d, "relation": rel, "weight": round(w, 6)} for s, d, rel, w in among],
            "ordering": _ordering_summary(order, lo.precedence),
            "seeds": seed_ids,
            "chars": sum(s["chars"] for s in kept),
            "budget": {"per_skill_chars": cfg.per_skill_chars, "max_chars": total, "top_n": top_n},
            "pruned": pruned,
            "over_budget": over,
            "no_match": bundle.no_match,
            "min_score": bundle.min_score,
        }

    def hydrate(
        self,
        names: list[str],
        max_chars: int | None = None,
        version: str | None = None,
        *,
        partial: bool = False,
    ) -> dict[str, Any]:
        """The hydrated text of named skills, in the order given, under the per-skill and global budgets.

        An unknown name fails the call, unless `partial`: then the known ones are hydrated and each unknown
        one gets an entry `{name, error}` under `errors` (the call fails only if no name is known).
        """
        if isinstance(names, str):
            names = [names]
        if not names:
            raise ServiceError("give at least one skill id or name")
        lo = self._request(version)
        cfg = lo.retriever.config
        total = char_budget(cfg, max_chars)
        unknown: list[tuple[str, str]] = []
        idx: list[int] = []
        for n in names:
            try:
                idx.append(self._resolve(lo, n, suggest=len(unknown) < MAX_SUGGESTED)[0])
            except UnknownSkill as exc:
                unknown.append((n, str(exc)))
        if unknown and (not partial or not idx):
            raise UnknownSkill("; ".join(msg for _n, msg in unknown))
        idx = list(dict.fromkeys(idx))
        rows = lo.snapshot.nodes[idx].to_dicts()
        hydrated, over = hydrate_rows(rows, cfg.per_skill_chars, total)
        out = [
            {"id": rows[pos]["id"], "name": rows[pos]["name"], "chars": len(text), "text": text}
            for pos, text in hydrated
        ]
        result = {
            "version": lo.version,
            "skills": out,
            "chars": sum(s["chars"] for s in out),
            "over_budget": over,
        }
        if partial:
            result["errors"] = [{"name": n, "error": msg} for n, msg in unknown]
        return result

    def skill_detail(self, name: str, version: str | None = None) -> dict[str, Any]:
        """Every parsed field of one skill (full body), its edge counts by relation, and its package: the
        absolute `folder` on this machine (None, with `folder_error` saying why, when the library is not
        there) and its `files`, each readable as the resource `skill://{id}/files/{path}`; and what it learned
        from traces (`_learned`)."""
        lo = self._request(version)
        i, others = self._resolve(lo, name)
        row = lo.snapshot.nodes[i].to_dicts()[0]
        sid = row["id"]
        where = package_folder(lo.snapshot.manifest, row["source_path"])
        files, more = list_package_files(Path(where.path)) if where.path is not None else ([], False)
        deg_out = {r: 0 for r in RELATIONS}
        deg_in = {r: 0 for r in RELATIONS}
        for src, dst, rel, _w in lo.incidence.of(i):
            if src == sid:
                deg_out[rel] = deg_out.get(rel, 0) + 1
            if dst == sid:
                deg_in[rel] = deg_in.get(rel, 0) + 1
        return {
            "version": lo.version,
            "skill": row,
            "degree": {"out": deg_out, "in": deg_in},
            "also_matches": others,
            "folder": where.path,
            "folder_error": where.problem,
            "files": [{**f, "uri": f"skill://{sid}/files/{f['path']}"} for f in files],
            "files_truncated": more,
            "experience": _learned(lo, i),
        }

    def skill_file(self, name: str, path: str, version: str | None = None) -> PackageFile:
        """The file at `path` inside one skill's package folder (`retrieval/packages.py`: never outside
        it, at most `MAX_FILE_BYTES`). UnknownSkill for an unknown skill, FileRefused for a path that names
        no readable file inside the package, PackageMissing when the package folder is not on this machine."""
        lo = self._request(version)
        i, _others = self._resolve(lo, name)
        row = lo.snapshot.nodes.row(i, named=True)
        folder = package_folder(lo.snapshot.manifest, row["source_path"])
        if folder.path is None:
            raise PackageMissing(f"{row['id']}: {folder.problem}")
        try:
            return read_package_file(Path(folder.path), path, MAX_FILE_BYTES)
        except PackageError as exc:
            raise FileRefused(f"{row['id']}: {exc}") from None

    def file_ref(self, ref: str, version: str | None = None) -> tuple[str, str] | None:
        """(skill id, path) when `ref` reads `{skill}/files/{path}` (the resource `skill://{ref}`), the
        leftmost `/files/` after which a known skill ends; None when `ref` names a skill itself or no file."""
        lo = self._request(version)
        if not isinstance(ref, str) or lo.names.resolve(ref.strip()):
            return None
        start = 0
        while (at := ref.find("/files/", start)) > 0:
            found = lo.names.resolve(ref[:at])
            if found:
                return lo.names.ids[found[0]], ref[at + len("/files/") :]
            start = at + 1
        return None

    def neighbors(self, name: str, version: str | None = None) -> dict[str, Any]:
        """Typed out- and in-edges of one skill (avoid edges, being unordered, are listed on both sides)."""
        lo = self._request(version)
        i, others = self._resolve(lo, name)
        sid = lo.names.ids[i]
        names = lo.snapshot.nodes["name"]
        mine = lo.incidence.rows_of(i).to_dicts()
        out: list[dict[str, Any]] = []
        inc: list[dict[str, Any]] = []

        def item(other: str, edge: dict[str, Any]) -> dict[str, Any]:
            j = lo.names.row_of(other)
            return {
                "id": other,
                "name": names[j] if j is not None else other,
                "relation": edge["relation"],
                "weight": round(float(edge["weight"]), 6),
                "w0": round(float(edge["w0"]), 6),
                "n_e": int(edge["n_e"]),
                "round_created": int(edge["round_created"]),
                "round_updated": int(edge["round_updated"]),
            }

        for edge in mine:
            src, dst = edge["src"], edge["dst"]
            if edge["relation"] == AVOID:  # unordered (stored once, smaller id first): on both sides
                both = item(dst if src == sid else src, edge)
                out.append(both)
                inc.append(dict(both))
                continue
            if src == sid:
                out.append(item(dst, edge))
            if dst == sid:
                inc.append(item(src, edge))

        def key(x: dict[str, Any]) -> tuple[int, float, str]:
            return (RELATIONS.index(x["relation"]), -x["weight"], x["id"])

        return {
            "version": lo.version,
            "skill": sid,
            "out": sorted(out, key=key),
            "in": sorted(inc, key=key),
            "also_matches": others,
        }

    # ----------------------------------------------------------------------------------------- traces

    def record_trace(
        self,
        task_id: str,
        queries: list[Any],
        used: list[str],
        reward: float | None = None,
        ctrf: dict[str, Any] | None = None,
        agent: str | None = None,
        *,
        trace_id: str | None = None,
        attempt: int | None = None,
        timestamp: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Validate one trace exactly as ingestion does and append it to `<landing>/<YYYY-MM-DD>.jsonl`.

        The arguments become the JSON line that will be appended, and that line is checked with the same
        function `segos ingest` applies to each line (`traces.validate_line`: the contract's size caps,
        ranges and types), so whatever is recorded is ingested without quarantine. One call appends at most
        `traces.MAX_LINE_BYTES`. The reply is bounded: ids are capped by the contract and at most
        `MAX_REPLY_UNKNOWN` unknown skill names are listed (with their count).

        The next `segos ingest <landing>` reads it into its window (the date of its timestamp, UTC; now
        when none is given). Unknown skill names do not reject a trace (ingestion keeps it and reports them).

        The reply comes only once the line is on disk whole (`evolution.landing.append_line`: locked,
        fsynced); when it cannot be (disk full, I/O error) the call raises TraceNotWritten and the landing
        file is left as it was.
        """
        # Only what the caller gave (a fresh id and the time now aside): the contract alone decides what is
        # valid and what an absent key means, exactly as for a line of a file.
        if clash := sorted(NATIVE_KEYS & set(extra or {})):
            raise TraceRejected(
                f"`extra` may not set trace fields ({', '.join(clash)}); pass them as arguments"
            )
        obj: dict[str, Any] = dict(extra or {})
        obj.update(
            {
                "trace_id": f"mcp-{uuid.uuid4().hex[:16]}" if trace_id is None else trace_id,
                "task_id": task_id,
                "timestamp": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
                if timestamp is None
                else timestamp,
                "queries": queries,
                "used": used,
            }
        )
        given = {"agent": agent, "attempt": attempt, "reward": reward, "ctrf": ctrf}
        obj.update({k: v for k, v in given.items() if v is not None})
        lo = self._request()
        obj.setdefault("served_version", lo.version)
        try:
            line = native_line(obj)
            row = native_row(validate_line(line), source="mcp")
        except TraceError as exc:
            raise TraceRejected(f"trace rejected: {exc}") from None
        window = (row["timestamp"] or "")[:10]
        # what ingestion will report as unknown: the names no skill of this version answers to
        listed = [r for q in row["queries"] for key in ("retrieved", "seeds") for r in q[key] or []]
        unknown = sorted({ref for ref in [*row["used"], *listed] if lo.names.resolve_one(ref) is None})
        self.landing.mkdir(parents=True, exist_ok=True)
        path = self.landing / f"{window}.jsonl"
        try:  # under a lock, whole and fsynced, a torn tail moved aside first: only then acknowledged
            done = append_line(path, line)
        except LandingWriteError as exc:
            raise TraceNotWritten(str(exc)) from None
        if done.torn_bytes:
            log.warning(
                "%s ended in a torn line (%d bytes, a write cut short): moved to %s",
                path,
                done.torn_bytes,
                done.torn_file,
            )
        return {
            **{key: row[key] for key in ("trace_id", "task_id", "agent", "reward", "reward_source")},
            "window": window,
            "file": str(path),
            "unknown_skills": unknown[:MAX_REPLY_UNKNOWN],
            "unknown_skills_count": len(unknown),
            "bytes": len(line) + 1,
            "version": lo.version,
            # for the agent that recorded it, not an operator's shell: what happens to the trace next
            "next": f"recorded in the landing folder for the {window} window: the evolution round over "
            "that window learns from it",
        }


def _ordering_summary(order: ExecutionOrder, precedence: Precedence) -> dict[str, Any]:
    return {
        "rule": "prerequisites first: dependency edges, then first-use precedence from successful traces of "
        "the version's lineage, then workflow edges; ties and cycles by retrieval score, then id",
        "constraints": [c.as_dict() for c in order.constraints],
        "broken": [c.as_dict() for c in order.broken],
        "precedence": precedence.as_dict(),
    }


LEARNED_ROWS = 10  # requests and companions listed in a skill's detail


def _learned(lo: LoadedVersion, node: int) -> dict[str, Any]:
    """What one skill learned from successful traces in this version (SPEC §8, "Experience"): its
    witnessing requests (`tasks` the distinct successful tasks that asked them), most tasks first, and the
    skills it was used with on most of its tasks (its co-use companions, which come along in its bundles)."""
    sid = str(lo.retriever.ids[node])
    rows = lo.snapshot.experience.filter(pl.col("skill") == sid).sort(
        ["tasks", "text"], descending=[True, False]
    )
    companions: list[dict[str, Any]] = []
    if lo.retriever.experience is not None:
        nodes, tasks = lo.retriever.experience.used_with(node)
        top = zip(nodes[:LEARNED_ROWS].tolist(), tasks[:LEARNED_ROWS].tolist(), strict=True)
        companions = [{"id": str(lo.retriever.ids[v]), "tasks": int(t)} for v, t in top]
    return {
        "requests": rows.height,
        "tasks": int(rows["tasks"].sum()),
        "top": rows.select("text", "tasks", "first_round", "last_round").head(LEARNED_ROWS).to_dicts(),
        "used_with": companions,
    }

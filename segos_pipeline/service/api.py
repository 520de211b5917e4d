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

Loading a version (verify, read, build the retriever) takes seconds on a large library (on 100k skills
about 2 s, 5-6 s when its lexical index is not cached yet, as after every `segos update`). With
`reload="background"` (the default) a new version is loaded on a thread while requests go on being answered
from the old one, and it is swapped in at the start of the first request after it is ready; no request
waits for a load. `reload="sync"` loads it inside the request that notices it.

Every method returns plain JSON-ready dicts (the MCP tools return them unchanged). Expected failures raise
`ServiceError` (or a `SnapshotError`), whose message says what to do; the MCP server turns them into tool
errors.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ..config import AVOID, MAX_TEXT_CHARS, MAX_TOP, RELATIONS, REMOTE_POLL_S, RetrievalConfig
from ..evolution.landing import LandingWriteError, append_line
from ..evolution.traces import (
    TraceError,
    native_line,
    native_row,
    record_of_row,
    resolve_skills,
    validate_line,
)
from ..paths import default_landing
from ..retrieval.incidence import Edge, Incidence
from ..retrieval.ordering import ExecutionOrder, Precedence, execution_order, lineage_precedence
from ..retrieval.packages import (
    MAX_FILE_BYTES,
    PackageError,
    PackageFile,
    list_package_files,
    package_folder,
    read_package_file,
)
from ..retrieval.ranker import Retriever, hydrate_rows
from ..store.remote import RemoteStore, open_store
from ..store.served import SERVED, pointer, served
from ..store.snapshot import Snapshot, SnapshotError, SnapshotStore, VersionFiles
from ..text.names import SkillNames, UnknownName
from .version_cache import VersionCache, cache_budget, memory_bytes

log = logging.getLogger(__name__)  # version switches; `segos mcp` shows them on stderr
MAX_REPLY_UNKNOWN = 20  # unknown skill names listed in a record_trace reply (the count is always given)
MAX_SUGGESTED = 5  # unknown names of one request that get near-miss suggestions (each costs a few ms)
MAX_ECHO_CHARS = 200  # of a query, repeated in a reply
_STABLE_AFTER_NS = 2_000_000_000  # a versions/ mtime older than this cannot hide a same-tick commit


class ServiceError(ValueError):
    """A request that cannot be answered as asked (unknown skill, bad argument, malformed trace)."""


class UnknownSkill(ServiceError, UnknownName):
    pass


class TraceRejected(ServiceError):
    pass


class FileRefused(ServiceError):
    """A package file that is not given: a path outside the package, a link out of it, too large, absent."""


class PackageMissing(ServiceError):
    """The skill's package folder is not on this machine (library moved, deleted or built elsewhere)."""


class TraceNotWritten(ServiceError):
    """A valid trace the landing file could not take (disk full, I/O error): nothing of it was kept."""


@dataclass
class _Loaded:
    """One loaded version with everything requests need, built once per version."""

    snapshot: Snapshot
    retriever: Retriever
    precedence: Precedence
    loaded_at: str

    @property
    def incidence(self) -> Incidence:
        """Every edge touching each skill (the retriever's, built when the version loaded)."""
        return self.retriever.incidence

    @property
    def version(self) -> str:
        return self.snapshot.version

    @property
    def names(self) -> SkillNames:
        return self.retriever.names

    def touching(self, skill_id: str) -> list[Edge]:
        """Every edge (src, dst, relation, weight) that touches a skill, in edge-table order."""
        i = self.names.row_of(skill_id)
        return self.incidence.of(i) if i is not None else []

    def edges_among(self, members: list[str]) -> list[Edge]:
        """Every edge (src, dst, relation, weight) with both ends in `members`, by pair then relation."""
        inside = set(members)
        return sorted(
            {e for m in members for e in self.touching(m) if e[0] in inside and e[1] in inside},
            key=lambda e: (e[0], e[1], RELATIONS.index(e[2]) if e[2] in RELATIONS else 99),
        )


class SegosService:
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
        store = store if isinstance(store, SnapshotStore) else open_store(store)
        self.poll_s = REMOTE_POLL_S if poll_s is None else float(poll_s)
        # a reader of its own that lists the URI at most every poll_s: requests in between never ask it
        self.store = store.polling(self.poll_s) if isinstance(store, RemoteStore) else store
        self.remote = isinstance(self.store, RemoteStore)
        # joined once: refresh stats both on every request
        self._watched = (str(self.store.versions_dir), str(self.store.root / SERVED))
        self.config = config  # None: each version's own preset (see config.retrieval_for)
        self.landing = Path(landing) if landing is not None else default_landing(self.store.root)
        self.verify = verify
        if reload not in ("background", "sync"):
            raise ServiceError(f"reload must be 'background' or 'sync', not {reload!r}")
        self.reload = reload
        following = version in (None, "", "latest", "served")
        self.pinned: str | None = None if following else self.store.resolve(version)
        self._lock = threading.RLock()  # guards the cache and the switching state; never held during a load
        self._cache = VersionCache(cache_budget(cache_bytes))
        self._seen_mtime: tuple[int, int] | None = None  # of versions/ and the pointer, when last looked
        self._failed: dict[str, str] = {}  # version → why it could not be loaded (not retried)
        self.switches = 0
        self.last_reload_error: str | None = None
        self.loading: str | None = None  # the version being loaded to be switched to, if any
        self._loader: threading.Thread | None = None
        self._ready: _Loaded | None = None  # loaded in the background, swapped in by the next request
        self._served = self._load(self.pinned) if self.pinned is not None else self._served_servable()

    # ------------------------------------------------------------------------------------ versions

    @property
    def version(self) -> str:
        """The version requests are answered from right now."""
        return self._served.version

    def _load(self, vid: str) -> _Loaded:
        with self._lock:
            kept = self._cache.get(vid)
            if kept is not None:
                return kept
        # Outside the lock, so requests go on while a version loads; two threads loading the same version
        # at once waste work but keep one result.
        snap = self.store.load(vid, verify=self.verify)
        if isinstance(self.store, RemoteStore):
            _cache_lineage(self.store, snap)
        precedence = lineage_precedence(self.store, snap)
        if precedence.skipped:
            log.warning(
                "version %s: the round traces of %s are damaged and do not count towards execution order "
                "(run `segos verify` on them)",
                vid,
                ", ".join(precedence.skipped),
            )
        retriever = Retriever(snap, self.config)
        retriever.prepare()  # on the loading thread: no request embeds the witnesses or indexes the edges
        loaded = _Loaded(
            snapshot=snap,
            retriever=retriever,
            precedence=precedence,
            loaded_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        size = memory_bytes(loaded)  # outside the lock: it walks the version's tables
        with self._lock:
            served_now = getattr(self, "_served", None)  # unset while the first version loads
            return self._cache.put(vid, loaded, size, keep=(served_now.version if served_now else None,))

    def _served_servable(self) -> _Loaded:
        """Following the served version, at start: the served one if it loads, else the newest version
        served before it that does (the pointer's history; without a pointer file, the versions before
        the latest). A damaged one is passed over, logged and recorded like a running service records one
        it cannot switch to (not retried): an agent's client starts its server by itself, and a server
        that refused to start would leave the agent with no skills at all, where the version before
        serves."""
        # one listing of the store; without versions, latest() fails with how to make one
        listed = [m["version"] for m in self.store.list_versions()] or [self.store.latest()]
        for vid, why in sorted(self.store.unreadable_versions().items()):
            log.warning("version %s is passed over: %s (`segos verify --all` reports it)", vid, why)
        now = pointer(self.store)
        history = [now.version, *reversed(now.previous)] if now.recorded else list(reversed(listed))
        versions = list(reversed([v for v in dict.fromkeys(history) if v in listed]))
        if not versions:
            raise SnapshotError(
                f"{self.store_name} serves {now.version}, which it does not hold; serve another version "
                f"with `segos promote VERSION --store {self.store_name}`"
            )
        for vid in reversed(versions):
            try:
                return self._load(vid)
            except (SnapshotError, OSError, ValueError) as exc:
                self._failed[vid] = f"{type(exc).__name__}: {exc}"
                log.warning("version %s cannot be served, trying the one before: %s", vid, exc)
        raise SnapshotError(
            f"no version of {self.store_name} can be served (newest {versions[-1]}); run `segos verify` on "
            "them, or `segos build` a new one"
        )

    def refresh(self, wait: bool | None = None) -> bool:
        """Switch to the store's served version if it differs from the one served; True if switched.

        Cheap when nothing changed: a `stat` of `versions/` (a commit renames a folder into it, which
        updates its mtime) and one of the pointer file (replaced whole when it moves). The store is read
        only when an mtime moved or is too recent to trust. A store at a URI is listed (and its pointer
        read) at most every `poll_s` seconds (the last answers are reused in between).
        `wait`: load a new version here and switch before returning (default: `reload == "sync"`);
        otherwise it is loaded on a background thread and swapped in by a later call once ready.
        """
        if self.pinned is not None:
            return False
        wait = self.reload == "sync" if wait is None else wait
        switched = self._adopt()
        while True:
            loader = self._loader
            if loader is None or not loader.is_alive():  # one load at a time, whoever asks
                loader = self._start_load()
            if loader is None or not wait:
                return switched
            loader.join()  # waiting callers look at the store again afterwards: it may hold a newer one
            switched = self._adopt() or switched

    def _start_load(self) -> threading.Thread | None:
        """Start loading the served version on a thread if it is new; None when there is nothing to load."""
        mtime = None if self.remote else self._store_mtime()
        if not self.remote and (
            mtime is None or (mtime == self._seen_mtime and time.time_ns() - max(mtime) > _STABLE_AFTER_NS)
        ):
            return None
        with self._lock:
            if self._loader is not None and self._loader.is_alive():
                return self._loader  # another caller started one meanwhile
            try:
                target = served(self.store)  # at a URI: read at most every poll_s, else the last answer
            except (SnapshotError, OSError):
                return None  # an unreachable URI or a pointer to fix: keep serving, the next poll tries again
            if target == self._served.version or target in self._failed:
                self._seen_mtime = mtime
                return None
            self.loading = target
            log.info("version %s is served; loading it (serving %s meanwhile)", target, self._served.version)
            self._loader = threading.Thread(
                target=self._fetch, args=(target, mtime), name=f"segos-load-{target}", daemon=True
            )
            self._loader.start()
            return self._loader

    def _store_mtime(self) -> tuple[int, int] | None:
        """The mtimes of `versions/` and of the served pointer (0 while there is none)."""
        versions_dir, pointer_file = self._watched
        try:
            versions = os.stat(versions_dir).st_mtime_ns
        except OSError:
            return None
        try:
            return versions, os.stat(pointer_file).st_mtime_ns
        except OSError:
            return versions, 0

    def _fetch(self, vid: str, mtime: tuple[int, int] | None) -> None:
        """Load `vid` to be swapped in (`_ready`), or record why it cannot be (a damaged or unreadable
        version: the old one stays served and the failed one is not retried)."""
        started = time.perf_counter()
        try:
            loaded = self._load(vid)
        except Exception as exc:
            log.warning("could not switch to %s, still serving %s: %s", vid, self._served.version, exc)
            with self._lock:
                self._failed[vid] = f"{type(exc).__name__}: {exc}"
                self.last_reload_error = f"could not switch to {vid}: {exc}"
                self._seen_mtime, self.loading = mtime, None
            return
        log.info("version %s loaded in %.1f s", vid, time.perf_counter() - started)
        with self._lock:
            self._ready, self._seen_mtime, self.loading = loaded, mtime, None

    def _adopt(self) -> bool:
        """Swap in a version loaded in the background; called only between requests."""
        with self._lock:
            if self._loader is not None and not self._loader.is_alive():
                self._loader = None
            ready, self._ready = self._ready, None
            if ready is None or ready.version == self._served.version:
                return False
            log.info("now serving %s (was %s)", ready.version, self._served.version)
            # The replaced version leaves the cache: a version is ~1 GiB in memory on 100k skills, and a
            # server following the newest would otherwise keep as many of them as the budget holds. Asked
            # for by `version=`, it is loaded again.
            self._cache.pop(self._served.version)
            self._served = ready
            self.switches += 1
            self.last_reload_error = None
            return True

    def _request(self, version: str | None = None) -> _Loaded:
        """The version one request is answered from, fixed for the whole request."""
        if version not in (None, ""):
            return self._load(self.store.resolve(version))
        self.refresh()
        return self._served

    def list_versions(self) -> dict[str, Any]:
        self.refresh()
        out = []
        for m in self.store.list_versions():
            c = m.get("counts", {})
            out.append(
                {
                    "version": m["version"],
                    "kind": m.get("kind"),
                    "parent": m.get("parent"),
                    "round": m.get("round", 0),
                    "window": m.get("window"),
                    "created_at": m.get("created_at"),
                    "skills": c.get("skills"),
                    "edges": c.get("edges"),
                    "served": m["version"] == self.version,
                }
            )
        return {"served": self.version, "latest": out[-1]["version"] if out else None, "versions": out}

    @property
    def store_name(self) -> str:
        """What `--store` reaches this store by: its URI, or its folder."""
        return self.store.uri if isinstance(self.store, RemoteStore) else str(self.store.root)

    def status(self) -> dict[str, Any]:
        lo = self._request()
        m = lo.snapshot.manifest
        latest, serving = self._named(self.store.latest), self._named(lambda: served(self.store))
        return {
            "store": self.store_name,
            # a store at a URI: its local cache and how often the URI is listed for new versions
            "cache": str(self.store.root) if self.remote else None,
            "poll_s": self.poll_s if self.remote else None,
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

    def _resolve(self, lo: _Loaded, name: str, suggest: bool = True) -> tuple[int, list[str]]:
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
        query = _query(query)
        top_k = _bounded("top_k", top_k)
        lo = self._request(version)
        r = lo.retriever
        ranking = r.rank(query, depth=top_k)
        picked = r.members(ranking, top_k, _min_score(min_score))
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
            "query": _echo(query),
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
        query = _query(query)
        lo = self._request(version)
        r = lo.retriever
        cfg = r.config
        top_n = _bounded("top_n", top_n if top_n is not None else cfg.top_n)
        total = _max_chars(cfg, max_chars)
        # Ranked, pruned and hydrated in retrieval rank (the budget goes to the best-supported skills
        # first) by the one bundle builder, each member with why it is there; ordered for execution below.
        bundle = r.retrieve(query, top_n, max_chars=total, min_score=_min_score(min_score))
        rows = [r.names.row_of(s.id) for s in bundle.skills]
        contracts = lo.snapshot.nodes[rows].select("inputs", "outputs").to_dicts()
        kept: list[dict[str, Any]] = []
        for s, contract in zip(bundle.skills, contracts, strict=True):
            kept.append(
                {
                    "id": s.id,
                    "name": s.name,
                    "rank": s.rank,
                    "score": round(s.score, 6),
                    "seed": s.seed,
                    "lexical": round(s.lexical, 6),
                    "graph": round(s.graph, 6),
                    "semantic": round(s.semantic, 6),
                    "experience": round(s.experience, 6),
                    "co_use": round(s.co_use, 6),
                    "relevance": round(s.relevance, 6),
                    "capability": s.capability,
                    "source_path": s.source_path,
                    "folder": s.folder,
                    "folder_error": s.folder_error,
                    **contract,
                    "chars": s.chars,
                    "text": s.text,
                }
            )
        why = {s.id: (s.why, s.reasons) for s in bundle.skills}
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
        skills = []
        for pos, sid in enumerate(order.order, start=1):
            headline, reasons = why[sid]
            skills.append({"position": pos, **by_id[sid], "why": headline, "reasons": reasons})
            skills[-1]["after"] = sorted(c.before for c in order.constraints if c.after == sid)
        return {
            "version": lo.version,
            "query": _echo(query),
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
        total = _max_chars(cfg, max_chars)
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
        there) and its `files`, each readable as the resource `skill://{id}/files/{path}`."""
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
        if reward is not None and ctrf is not None:
            raise TraceRejected(
                "give `reward` or `ctrf`, not both (the reward is derived from a CTRF report)"
            )
        obj: dict[str, Any] = dict(extra or {})
        obj.update(
            {
                "trace_id": trace_id or f"mcp-{uuid.uuid4().hex[:16]}",
                "task_id": task_id,
                "attempt": 1 if attempt is None else attempt,
                "timestamp": timestamp
                or datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
                "queries": queries,
                "used": used,
            }
        )
        if agent is not None:
            obj["agent"] = agent
        if reward is not None:
            obj["reward"] = reward
        if ctrf is not None:
            obj["ctrf"] = ctrf
        lo = self._request()
        obj.setdefault("served_version", lo.version)
        try:
            line = native_line(obj)
            record = record_of_row(native_row(validate_line(line), source="mcp"))
        except TraceError as exc:
            raise TraceRejected(f"trace rejected: {exc}") from None
        window = (record.timestamp or "")[:10]
        check = resolve_skills(record_of_row(record.row()), lo.names)  # a copy: resolving rewrites it
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
            "trace_id": record.trace_id,
            "task_id": record.task_id,
            "agent": record.agent,
            "reward": record.reward,
            "reward_source": record.reward_source,
            "window": window,
            "file": str(path),
            "unknown_skills": check.unknown_skills[:MAX_REPLY_UNKNOWN],
            "unknown_skills_count": len(check.unknown_skills),
            "bytes": len(line) + 1,
            "version": lo.version,
            # for the agent that recorded it, not an operator's shell: what happens to the trace next
            "next": f"recorded in the landing folder for the {window} window: the evolution round over "
            "that window learns from it",
        }


# ------------------------------------------------------------------------------------------- helpers


def _cache_lineage(store: RemoteStore, snapshot: Snapshot) -> None:
    """Download into the cache the ancestors of `snapshot` whose round traces execution order reads
    (`lineage_precedence` reads them from the cache folder). Files shared with cached versions are linked,
    not downloaded; an ancestor that cannot be fetched is left out, and precedence then reports it skipped
    as it does for a damaged local one."""
    parent = snapshot.manifest.get("parent")
    seen = {snapshot.version}
    while parent and parent not in seen:
        seen.add(parent)
        try:
            manifest = store.manifest(parent)
        except (SnapshotError, OSError, ValueError):
            return  # the walk of lineage_traces ends there too
        try:
            if VersionFiles(store.versions_dir / parent, manifest).has_round_traces():
                store.files(parent)
        except (SnapshotError, OSError) as exc:
            log.warning(
                "version %s: its ancestor %s could not be downloaded: %s", snapshot.version, parent, exc
            )
        parent = manifest.get("parent")


def _query(query: Any) -> str:
    if not isinstance(query, str) or not query.strip():
        raise ServiceError("the query is empty; describe the task to retrieve skills for")
    return check_query_length(query.strip())


def check_query_length(query: str) -> str:
    """`query`, unless it is longer than a trace may record one (MAX_TEXT_CHARS): a query is read in full
    and echoed in replies, so its length is what bounds a request's work and its reply."""
    if len(query) > MAX_TEXT_CHARS:
        raise ServiceError(
            f"the query is {len(query):,} characters; at most {MAX_TEXT_CHARS:,} are accepted: "
            "describe the task, not its data"
        )
    return query


def _echo(query: str) -> str:
    """The query as a reply repeats it: a bounded prefix (the client has the rest), so that a reply never
    grows with what a client sends."""
    return query if len(query) <= MAX_ECHO_CHARS else query[:MAX_ECHO_CHARS] + "…"


def _bounded(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 1 <= int(value) <= MAX_TOP:
        raise ServiceError(f"{name} must be an integer between 1 and {MAX_TOP}, got {value!r}")
    return int(value)


def _min_score(value: float | None) -> float | None:
    """A relevance floor from a client: a finite number from 0 (off) up, or None for the configured one."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
        raise ServiceError(f"min_score must be a number from 0 (no floor) up, got {value!r}")
    return float(value)


def _max_chars(config: RetrievalConfig, max_chars: int | None) -> int:
    """The global character budget of a request (the configured one unless given)."""
    total = config.total_chars if max_chars is None else int(max_chars)
    if total < 1:
        raise ServiceError("max_chars must be a positive number of characters")
    return total


def _ordering_summary(order: ExecutionOrder, precedence: Precedence) -> dict[str, Any]:
    return {
        "rule": "prerequisites first: dependency edges, then first-use precedence from successful traces of "
        "the version's lineage, then workflow edges; ties and cycles by retrieval score, then id",
        "constraints": [c.as_dict() for c in order.constraints],
        "broken": [c.as_dict() for c in order.broken],
        "precedence": precedence.as_dict(),
    }

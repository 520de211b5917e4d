"""Which version a service answers from: one pinned, or the store's served one followed (a new one loaded in
the background, or in the request that notices it, and swapped in between requests), and the loaded
versions kept in memory. `SegosService` (api.py) answers requests on top of it; its docstring tells how
following works."""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..config import RELATIONS, REMOTE_POLL_S, RetrievalConfig
from ..retrieval.incidence import Edge, Incidence
from ..retrieval.ordering import Precedence, lineage_precedence
from ..retrieval.ranker import Retriever
from ..retrieval.round_traces import has_round_traces
from ..store.remote import open_store
from ..store.served import SERVED, pointer, served
from ..store.snapshot import Snapshot, SnapshotError, SnapshotStore
from ..text.names import SkillNames
from .errors import ServiceError
from .version_cache import VersionCache, cache_budget, memory_bytes

# The service's logger, under the name `segos mcp` shows on stderr (cli/service.py): version switches.
log = logging.getLogger("segos_pipeline.service.api")
_STABLE_AFTER_NS = 2_000_000_000  # a versions/ mtime older than this cannot hide a same-tick commit


@dataclass
class LoadedVersion:
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


class ServedVersions:
    """The versions of one store a service answers from (see the module docstring); `SegosService`
    documents the arguments."""

    def __init__(
        self,
        store: SnapshotStore | str | Path,
        version: str | None = None,
        *,
        config: RetrievalConfig | None = None,
        verify: bool = True,
        cache_bytes: int | None = None,
        reload: str = "background",
        poll_s: float | None = None,
    ):
        store = store if isinstance(store, SnapshotStore) else open_store(store)
        self.poll_s = REMOTE_POLL_S if poll_s is None else float(poll_s)
        # a reader of its own that lists the URI at most every poll_s: requests in between never ask it
        self.store = store.polling(self.poll_s)  # a folder: itself
        # joined once: refresh stats both on every request
        self._watched = (str(self.store.versions_dir), str(self.store.root / SERVED))
        self.config = config  # None: each version's own preset (see config.retrieval_for)
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
        self._ready: LoadedVersion | None = None  # loaded in the background, swapped in by the next request
        self._served = self._load(self.pinned) if self.pinned is not None else self._served_servable()

    @property
    def version(self) -> str:
        """The version requests are answered from right now."""
        return self._served.version

    def _load(self, vid: str) -> LoadedVersion:
        with self._lock:
            kept = self._cache.get(vid)
            if kept is not None:
                return kept
        # Outside the lock, so requests go on while a version loads; two threads loading the same version
        # at once waste work but keep one result.
        snap = self.store.load(vid, verify=self.verify)
        for ancestor, exc in self.store.fetch_ancestors(snap, has_round_traces):  # at a URI: into its cache
            log.warning(
                "version %s: its ancestor %s could not be downloaded: %s", snap.version, ancestor, exc
            )
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
        loaded = LoadedVersion(
            snapshot=snap,
            retriever=retriever,
            precedence=precedence,
            loaded_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        size = memory_bytes(loaded)  # outside the lock: it walks the version's tables
        with self._lock:
            served_now = getattr(self, "_served", None)  # unset while the first version loads
            return self._cache.put(vid, loaded, size, keep=(served_now.version if served_now else None,))

    def _served_servable(self) -> LoadedVersion:
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
                f"{self.store.address} serves {now.version}, which it does not hold; serve another version "
                f"with `segos promote VERSION --store {self.store.address}`"
            )
        for vid in reversed(versions):
            try:
                return self._load(vid)
            except (SnapshotError, OSError, ValueError) as exc:
                self._failed[vid] = f"{type(exc).__name__}: {exc}"
                log.warning("version %s cannot be served, trying the one before: %s", vid, exc)
        raise SnapshotError(
            f"no version of {self.store.address} can be served (newest {versions[-1]}); run `segos verify` "
            "on them, or `segos build` a new one"
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
        watched = self.store.commits_show_locally  # else a URI, listed at most every poll_s
        mtime = self._store_mtime() if watched else None
        if watched and (
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
            # The replaced version leaves the cache: a large version holds much memory, and a
            # server following the newest would otherwise keep as many of them as the budget holds.
            # Asked for by `version=`, it is loaded again.
            self._cache.pop(self._served.version)
            self._served = ready
            self.switches += 1
            self.last_reload_error = None
            return True

    def _request(self, version: str | None = None) -> LoadedVersion:
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

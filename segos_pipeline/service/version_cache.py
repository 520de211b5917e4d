"""The service's loaded versions, bounded by the memory they hold rather than by their count.

A request may name any version (`version=` on the MCP tools); a loaded version is kept so that the next
request naming it does not load it again. Versions differ in size by orders of magnitude (a demo version
against a 100k-skill one), so a count bound either held gigabytes or reloaded small
versions on every call when a client cycled through more than it: the bound is the sum of the loaded
versions' sizes (`memory_bytes`), least recently used first out, and the version being served and the one
just loaded are never evicted (they are held by the service anyway, and the budget counts them).
"""

from __future__ import annotations

import os
import sys
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import scipy.sparse as sp

from ..retrieval.embeddings import Model2VecBackend, SentenceTransformersBackend, WordLlamaBackend

# Loaded once per process (`embeddings.backend_for`) and shared by every version: evicting a version frees
# none of it (on the demo the model's word table is far larger than a version).
PROCESS_WIDE = (WordLlamaBackend, Model2VecBackend, SentenceTransformersBackend)

# segos' own choice: loaded versions kept in memory, in MiB (`$SEGOS_VERSION_CACHE_MB`). 2 GiB holds one
# 100k-skill version beside the served one, and hundreds of demo-sized ones.
VERSION_CACHE_MB = 2048
VERSION_CACHE_ENV = "SEGOS_VERSION_CACHE_MB"


def cache_budget(given: int | None = None, env: Mapping[str, str] = os.environ) -> int:
    """The cache's budget in bytes: `given`, else `$SEGOS_VERSION_CACHE_MB`, else `VERSION_CACHE_MB`."""
    if given is not None:
        if given < 0:
            raise ValueError(f"the version cache budget must be at least 0 bytes, not {given}")
        return given
    raw = env.get(VERSION_CACHE_ENV) or str(VERSION_CACHE_MB)
    try:
        mb = float(raw)
    except ValueError:
        mb = -1.0
    if not mb >= 0:
        raise ValueError(f"{VERSION_CACHE_ENV} must be a number of MiB (0 or more), not {raw!r}")
    return int(mb * (1 << 20))


def memory_bytes(obj: Any) -> int:
    """The bytes an object holds in arrays, frames and sparse matrices, and in the Python containers and
    strings of segos' own objects reachable from it (each object counted once). Objects of other libraries
    than numpy, scipy and polars are not entered, nor the process-wide embedding backends."""
    seen: set[int] = set()
    stack = [obj]
    total = 0
    while stack:
        o = stack.pop()
        if o is None or isinstance(o, (bool, int, float, *PROCESS_WIDE)) or id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, pl.DataFrame | pl.Series):
            total += o.estimated_size()
        elif isinstance(o, np.ndarray):
            if isinstance(o.base, np.ndarray):  # a view holds its base's memory: count that, once
                stack.append(o.base)
            else:
                total += o.nbytes
        elif sp.issparse(o):
            stack += [getattr(o, a, None) for a in ("data", "indices", "indptr", "row", "col")]
        elif isinstance(o, str | bytes | bytearray):
            total += sys.getsizeof(o)
        elif isinstance(o, dict):
            total += sys.getsizeof(o)
            stack += [v for v in o.values() if not isinstance(v, bool | int | float)]
            stack += [k for k in o if isinstance(k, str | bytes)]
        elif isinstance(o, list | tuple | set | frozenset):
            total += sys.getsizeof(o)
            stack += [v for v in o if not isinstance(v, bool | int | float)]
        elif type(o).__module__.startswith("segos_pipeline."):
            stack += list(getattr(o, "__dict__", {}).values())
            stack += [getattr(o, s, None) for s in getattr(type(o), "__slots__", ())]
    return total


@dataclass
class _Entry:
    value: Any
    size: int


class VersionCache:
    """Loaded versions by id, least recently used first out once their sizes pass `budget` bytes."""

    def __init__(self, budget: int):
        self.budget = budget
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    def __iter__(self) -> Iterator[str]:
        """The ids, least recently used first."""
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, vid: str) -> Any | None:
        """The loaded version, marked most recently used; None when it is not kept."""
        entry = self._entries.get(vid)
        if entry is None:
            return None
        self._entries.move_to_end(vid)
        return entry.value

    def put(self, vid: str, value: Any, size: int, keep: tuple[str | None, ...] = ()) -> Any:
        """Keep `value` (`size` bytes, `memory_bytes`) under `vid` (the one already kept wins: two loads of
        one version keep one result), then evict the least recently used versions other than `vid` and
        `keep` while over budget."""
        if vid not in self._entries:
            self._entries[vid] = _Entry(value, size)
        self._entries.move_to_end(vid)
        protected = {vid, *keep}
        for old in list(self._entries):
            if self.total() <= self.budget:
                break
            if old not in protected:
                del self._entries[old]
        return self._entries[vid].value

    def pop(self, vid: str) -> None:
        self._entries.pop(vid, None)

    def total(self) -> int:
        return sum(e.size for e in self._entries.values())

    def sizes(self) -> dict[str, int]:
        """Bytes each kept version holds, least recently used first."""
        return {vid: e.size for vid, e in self._entries.items()}

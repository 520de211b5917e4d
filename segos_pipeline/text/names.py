"""Resolving skill references (ids or names) with the shared matching rule.

A reference matches a skill when, casefolded with non-alphanumerics removed, it equals the skill's id,
its folder name or its frontmatter name. One reference may match several skills (duplicate names); they
are returned most specific first: exact id, then id, then folder name, then frontmatter name, so a
package that merely borrows another's `name` never shadows the package whose folder it names.
"""

from __future__ import annotations

import difflib
from functools import cached_property

import numpy as np
import polars as pl

from ..arrays import ranges, unique
from .lexicon import position_index
from .tokens import normalize_name, normalize_names


class UnknownName(ValueError):
    """A reference no skill of the version carries (the message suggests near misses)."""


class SkillNames:
    def __init__(self, nodes: pl.DataFrame):
        self.ids: list[str] = nodes["id"].to_list()
        self._exact = {skill_id: i for i, skill_id in enumerate(self.ids)}
        self._tiers = [_Tier(nodes[column]) for column in ("id", "folder", "name")]
        self._names: pl.Series = nodes["name"]

    @cached_property
    def suggestions(self) -> Suggestions:
        """Near-miss ids and names for an unknown reference (built on first use)."""
        return Suggestions(self.ids + self._names.to_list())

    def resolve(self, ref: str) -> list[int]:
        """Row indices matching `ref`, most specific first; [] when unknown."""
        if ref in self._exact:
            return [self._exact[ref]]
        key = normalize_name(ref)
        found: list[int] = []
        for tier in self._tiers:
            found += [i for i in tier.rows(key) if i not in found]
        return found

    def row_of(self, skill_id: str) -> int | None:
        """Row index of an exact skill id; None when no skill has it."""
        return self._exact.get(skill_id)

    def require(self, ref: str, version: str, suggest: bool = True) -> list[int]:
        """`resolve`, or UnknownName naming `version` and, when `suggest`, the near misses."""
        found = self.resolve(ref.strip())
        if not found:
            close = self.suggestions(ref) if suggest else []
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise UnknownName(f"unknown skill {ref!r} in version {version}{hint}")
        return found

    def resolve_one(self, ref: str) -> int | None:
        found = self.resolve(ref)
        return found[0] if found else None


class _Tier:
    """Normalised name → the rows carrying it, in row order: a dict to a group number, and the groups' rows
    as CSR arrays. A list per name (`to_list()` of the grouped rows) held the GIL for long stretches on a
    large library while a version loaded in the background, stalling every request meanwhile."""

    def __init__(self, names: pl.Series):
        rows = pl.DataFrame({"key": normalize_names(names), "row": pl.int_range(names.len(), eager=True)})
        groups = rows.filter(pl.col("key") != "").group_by("key", maintain_order=True).agg("row")
        self._rows = groups["row"].explode().to_numpy()
        self._indptr = np.zeros(groups.height + 1, dtype=np.int64)
        np.cumsum(groups["row"].list.len().to_numpy(), out=self._indptr[1:])
        self._group: dict[str, int] = position_index(groups["key"])

    def rows(self, key: str) -> list[int]:
        g = self._group.get(key)
        return [] if g is None else self._rows[self._indptr[g] : self._indptr[g + 1]].tolist()


class Suggestions:
    """Near-miss suggestions for an unknown skill reference, from a trigram index built once per version.

    A reference's trigrams are looked up rarest first within a fixed budget of postings, candidates are
    scored by shared trigrams (Jaccard), and only the best few are compared character by character, so one
    suggestion costs the same however large the library is (difflib over every id and name costs time in
    proportion to the library for each name, and a request could ask for many)."""

    def __init__(self, candidates: list[str]):
        self.candidates = list(dict.fromkeys(c for c in candidates if c))
        codes, owners = _trigram_pairs([c.casefold() for c in self.candidates])
        pairs = unique((codes << 32) | owners)  # (trigram, candidate) pairs, sorted by trigram
        self._codes, self._owners = pairs >> 32, pairs & 0xFFFFFFFF
        first = np.flatnonzero(np.append(True, self._codes[1:] != self._codes[:-1]))
        self._keys, self._starts = self._codes[first], np.append(first, len(self._codes))
        self._sizes = np.bincount(self._owners, minlength=len(self.candidates))

    def __call__(self, ref: str, n: int = 3, cutoff: float = 0.6) -> list[str]:
        ref = ref.casefold()[:_MAX_REF]
        codes = unique(_trigram_pairs([ref])[0])
        at = np.searchsorted(self._keys, codes)
        at = at[(at < len(self._keys)) & (self._keys[np.minimum(at, len(self._keys) - 1)] == codes)]
        if not len(at) or not self.candidates:
            return []
        lengths = self._starts[at + 1] - self._starts[at]
        order = np.argsort(lengths, kind="stable")
        within = np.cumsum(lengths[order]) <= _POSTINGS_BUDGET
        within[0] = True  # the rarest trigram is always read
        at = at[order[within]]
        owners = np.concatenate([self._owners[self._starts[a] : self._starts[a + 1]] for a in at])
        shared = np.bincount(owners, minlength=len(self.candidates))
        hit = np.flatnonzero(shared)
        jaccard = shared[hit] / (len(codes) + self._sizes[hit] - shared[hit])
        best = hit[np.lexsort((hit, -jaccard))[:_COMPARED]]
        scored = [
            (difflib.SequenceMatcher(None, ref, self.candidates[i].casefold()).ratio(), -int(i)) for i in best
        ]
        return [self.candidates[-j] for r, j in sorted(scored, reverse=True) if r >= cutoff][:n]


_MAX_REF = 256  # characters of a reference that are looked at
_POSTINGS_BUDGET = 50_000  # candidate entries read per suggestion
_COMPARED = 32  # candidates compared character by character


def _trigram_pairs(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(trigram code, text index) for every trigram of every text padded with a space on each side, codes
    from the UTF-8 bytes (three bytes in one integer)."""
    padded = [f" {t} ".encode() for t in texts]
    lengths = np.fromiter((len(p) for p in padded), np.int64, len(padded))
    if not len(padded) or lengths.sum() == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    data = np.frombuffer(b"".join(padded), dtype=np.uint8).astype(np.int64)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    grams = np.maximum(lengths - 2, 0)
    owner = np.repeat(np.arange(len(padded), dtype=np.int64), grams)
    pos = ranges(starts, starts + grams)
    codes = (data[pos] << 16) | (data[pos + 1] << 8) | data[pos + 2]
    return codes, owner

"""Resolving skill references (ids or names) with the shared matching rule.

A reference matches a skill when, casefolded with non-alphanumerics removed, it equals the skill's id,
its folder name or its frontmatter name. One reference may match several skills (duplicate names); they
are returned most specific first: exact id, then id, then folder name, then frontmatter name, so a
package that merely borrows another's `name` never shadows the package whose folder it names.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from .lexicon import position_index
from .tokens import normalize_name, normalize_names


class SkillNames:
    def __init__(self, nodes: pl.DataFrame):
        self.ids: list[str] = nodes["id"].to_list()
        self._exact = {skill_id: i for i, skill_id in enumerate(self.ids)}
        self._tiers = [_Tier(nodes[column]) for column in ("id", "folder", "name")]

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

    def resolve_one(self, ref: str) -> int | None:
        found = self.resolve(ref)
        return found[0] if found else None


class _Tier:
    """Normalised name → the rows carrying it, in row order: a dict to a group number, and the groups' rows
    as CSR arrays. A list per name (`to_list()` of the grouped rows) held the GIL for up to 100 ms on 100k
    skills while a version loaded in the background, stalling every request meanwhile."""

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

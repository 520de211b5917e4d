"""Resolving skill references (ids or names) with the shared matching rule.

A reference matches a skill when, casefolded with non-alphanumerics removed, it equals the skill's id,
its folder name or its frontmatter name. One reference may match several skills (duplicate names); they
are returned most specific first: exact id, then id, then folder name, then frontmatter name, so a
package that merely borrows another's `name` never shadows the package whose folder it names.
"""

from __future__ import annotations

from collections import defaultdict

import polars as pl

from .text import normalize_name


class SkillNames:
    def __init__(self, nodes: pl.DataFrame):
        self.ids: list[str] = nodes["id"].to_list()
        self._exact = {skill_id: i for i, skill_id in enumerate(self.ids)}
        self._tiers: list[dict[str, list[int]]] = [defaultdict(list) for _ in range(3)]
        for i, row in enumerate(nodes.select("id", "folder", "name").iter_rows()):
            for tier, value in zip(self._tiers, row, strict=True):
                key = normalize_name(value)
                if key:
                    tier[key].append(i)

    def resolve(self, ref: str) -> list[int]:
        """Row indices matching `ref`, most specific first; [] when unknown."""
        if ref in self._exact:
            return [self._exact[ref]]
        key = normalize_name(ref)
        found: list[int] = []
        for tier in self._tiers:
            found += [i for i in tier.get(key, []) if i not in found]
        return found

    def resolve_one(self, ref: str) -> int | None:
        found = self.resolve(ref)
        return found[0] if found else None

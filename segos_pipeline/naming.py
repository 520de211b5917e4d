"""Resolving skill references (ids or names) with the shared matching rule.

A reference matches a skill when, casefolded with non-alphanumerics removed, it equals the skill's id,
its folder name or its frontmatter name. One reference may match several skills (duplicate names).
"""

from __future__ import annotations

from collections import defaultdict

import polars as pl

from .text import normalize_name


class SkillNames:
    def __init__(self, nodes: pl.DataFrame):
        self.ids: list[str] = nodes["id"].to_list()
        self._by_key: dict[str, list[int]] = defaultdict(list)
        for i, (skill_id, folder, name) in enumerate(nodes.select("id", "folder", "name").iter_rows()):
            for key in {normalize_name(skill_id), normalize_name(folder), normalize_name(name)}:
                if key:
                    self._by_key[key].append(i)
        self._exact = {skill_id: i for i, skill_id in enumerate(self.ids)}

    def resolve(self, ref: str) -> list[int]:
        """Row indices matching `ref` (exact id first; else the normalised name rule); [] when unknown."""
        if ref in self._exact:
            return [self._exact[ref]]
        return list(self._by_key.get(normalize_name(ref), []))

    def resolve_one(self, ref: str) -> int | None:
        found = self.resolve(ref)
        return found[0] if found else None

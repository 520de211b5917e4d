"""A bundle as a skills folder an agent loads natively (`segos export QUERY --to DIR`).

Each bundle skill becomes `DIR/<name>/` holding a copy of its package: its `SKILL.md` and its files, read
as MCP serves them (`retrieval/packages.py`: never outside the package, links not followed, each file at most
1 MiB). `<name>` is the skill's name made a safe folder name (lowercase letters, digits and hyphens, at most
64 characters, as Claude Code names skills); two skills of one name get `-2`, `-3`. Pointed at
`.claude/skills/` (a project's, or `~/.claude/skills/`), Claude Code loads them as its own skills.

Nothing is written unless every bundle skill's package is on this machine, and a DIR that holds anything is
refused unless `force` (then only the folders of the exported names are replaced, whole). The skills are
written into a staging folder inside DIR and renamed into place, so a failure leaves DIR as it was. A bundle
with no relevant skill (`no_match`) writes nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..retrieval.bundle import Bundle
from ..retrieval.packages import SKILL_FILE, copy_package, package_folder

MAX_NAME = 64  # Claude Code's limit on a skill name


class ExportError(ValueError):
    """An export that cannot be made as asked; nothing was written."""


@dataclass
class ExportedSkill:
    id: str
    name: str
    folder: str  # the written folder, absolute
    source: str  # the package folder it was copied from
    files: list[str]
    skipped: list[dict[str, str]] = field(default_factory=list)  # {path, reason}: links, files too large


@dataclass
class Export:
    version: str
    query: str
    to: str
    no_match: bool
    min_score: float
    skills: list[ExportedSkill]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def safe_name(name: str) -> str:
    """A skill name as a folder name Claude Code accepts: `[a-z0-9-]`, at most 64 characters."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:MAX_NAME].strip("-")
    return slug or "skill"


def _folder_names(names: list[str]) -> list[str]:
    out: list[str] = []
    for name in names:
        base, n = safe_name(name), 1
        pick = base
        while pick in out:
            n += 1
            suffix = f"-{n}"
            pick = base[: MAX_NAME - len(suffix)] + suffix
        out.append(pick)
    return out


def export_bundle(bundle: Bundle, manifest: dict[str, Any], dest: str | Path, force: bool = False) -> Export:
    """Write `bundle` (`Retriever.retrieve`) of the version with `manifest` as skill folders under `dest`."""
    dest = Path(dest).expanduser().absolute()
    result = Export(bundle.version, bundle.query, str(dest), bundle.no_match, bundle.min_score, [])
    if bundle.no_match or not bundle.skills:
        return result
    if dest.exists() and not dest.is_dir():
        raise ExportError(f"{dest} is a file; --to takes a folder")
    if dest.is_dir() and any(dest.iterdir()) and not force:
        raise ExportError(f"{dest} is not empty; give an empty or new folder, or --force to replace skills")
    sources = []
    for s in bundle.skills:
        where = package_folder(manifest, s.source_path)
        if where.path is None:
            raise ExportError(f"cannot export {s.id}: {where.problem}; nothing was written")
        sources.append(where.path)
    dest.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".segos-export-", dir=dest))
    try:
        staged = []
        names = _folder_names([s.name for s in bundle.skills])
        for s, source, folder in zip(bundle.skills, sources, names, strict=True):
            files, skipped = copy_package(Path(source), staging / folder)
            if SKILL_FILE not in files:
                raise ExportError(f"cannot export {s.id}: its {SKILL_FILE} was not copied ({skipped})")
            staged.append(folder)
            result.skills.append(ExportedSkill(s.id, s.name, str(dest / folder), source, files, skipped))
        for folder in staged:
            _replace(staging / folder, dest / folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return result


def _replace(staged: Path, target: Path) -> None:
    """Move `staged` to `target`, removing what `target` held (a link is removed, not followed)."""
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.is_dir():
        shutil.rmtree(target)
    os.replace(staged, target)

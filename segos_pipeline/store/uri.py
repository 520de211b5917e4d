"""Telling a store URI from a local path (standard library only: the snapshot module checks it too)."""

from __future__ import annotations

import re

# Two or more letters before `://`: a Windows drive letter (`C://x`) is not a scheme.
_URI_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]+://")


def is_uri(root: object) -> bool:
    """True for `scheme://...` text; a `Path` never is one (it folds `//` into `/`)."""
    return isinstance(root, str) and bool(_URI_RE.match(root))


def scheme(uri: str) -> str:
    return uri.split("://", 1)[0].lower()

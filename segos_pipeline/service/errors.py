"""The failures `SegosService` reports: each message says what to do; the MCP server turns them into tool
errors."""

from __future__ import annotations

from ..text.names import UnknownName


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

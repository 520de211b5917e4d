"""The store's errors: problems with a store or a version that a user can act on (the message says how).

Their own module so that every store module raises them without importing another's code (`snapshot.py`
and `served.py` both do); `snapshot.py` re-exports them, where callers have always imported them from.
"""

from __future__ import annotations


class SnapshotError(Exception):
    """A problem with the store or a version that a user can act on (message says how)."""


class UnknownVersion(SnapshotError):
    pass


class DamagedSnapshot(SnapshotError):
    pass


class StoreBusy(SnapshotError):
    """Another writer holds the store's writer lock (the message names it: PID, command, since)."""


class StoreWriteError(SnapshotError):
    """Writing a version failed (disk full, read-only store, ...): nothing was committed."""


class StaleParent(SnapshotError):
    """The parent this writer read as the latest version is no longer the latest: nothing was committed."""

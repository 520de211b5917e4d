"""Store layer: immutable, hash-verified graph versions on disk (snapshots) and the diffs between them."""

"""External processes the code location launches through Dagster Pipes (run as files, outside Dagster)."""

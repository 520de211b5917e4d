"""Pipeline layer (top, beside cli): the stage functions the Dagster code location in assets/ runs."""

"""CLI layer (top, beside pipeline): the `segos` command line; `main` is the click group."""

from .main import main

__all__ = ["main"]

"""`python -m segos_pipeline.cli ...`: the `segos` command without its console script."""

from .main import main

if __name__ == "__main__":  # pragma: no cover
    main()

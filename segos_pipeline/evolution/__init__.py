"""Evolution layer: trace contract, adapters, ingestion; rounds (L1 topology, L2 weights, L3 descriptions)."""

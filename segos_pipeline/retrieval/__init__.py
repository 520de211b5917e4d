"""Retrieval layer: lexical seeding, graph propagation into a bounded bundle, incidence, execution order."""

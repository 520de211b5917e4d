"""Graph layer: SKILL.md parsing, typed and semantic edges, transition matrix, full and incremental builds."""

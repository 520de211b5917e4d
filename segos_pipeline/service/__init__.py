"""Service layer: the agent-facing service (SegosService) over a store, and the MCP server around it."""

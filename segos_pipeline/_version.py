"""The code version, recorded in every manifest and reported by the MCP server (re-exported as
`segos_pipeline.__version__`). Its own module so that the layers below the package's lazy facade
(`__init__.py`, which imports them) can read it without importing the facade."""

__version__ = "0.1.0"

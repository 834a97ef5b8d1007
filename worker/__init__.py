"""The build-prompt worker: renders build-prompt jobs into LLM message lists."""

# The package's version, read by setuptools at build time (pyproject.toml, dynamic);
# a literal, so that knowing it costs no importlib.metadata at start-up.
__version__ = "0.1.0"

"""The build-prompt worker: renders build-prompt jobs into LLM message lists."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("build-prompt-worker")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

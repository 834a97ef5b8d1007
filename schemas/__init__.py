"""Pydantic models of the build-prompt wire contract (CONTRACT.md §2-3).

The JSON Schema and AsyncAPI documents beside this file are generated from these
models (`prompt-worker schema`, `prompt-worker asyncapi`); tests fail when they are stale.

The names below are imported on first use: `import schemas.job` (the data path) then
builds the job models without the reply models, which only clients and the schema
documents need.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from schemas.codes import ErrorCode
    from schemas.job import Job, Kind
    from schemas.reply import ErrorReply, Message, OkReply

__all__ = ["ErrorCode", "ErrorReply", "Job", "Kind", "Message", "OkReply"]

_HOMES = {
    "ErrorCode": "schemas.codes",
    "ErrorReply": "schemas.reply",
    "Job": "schemas.job",
    "Kind": "schemas.job",
    "Message": "schemas.reply",
    "OkReply": "schemas.reply",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'schemas' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value

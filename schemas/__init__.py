"""Pydantic models of the build-prompt wire contract (CONTRACT.md §2-3).

The JSON Schema and AsyncAPI documents beside this file are generated from these
models (`prompt-worker schema`, `prompt-worker asyncapi`); tests fail when they are stale.
"""

from schemas.job import Job, Kind
from schemas.reply import ErrorCode, ErrorReply, Message, OkReply

__all__ = ["ErrorCode", "ErrorReply", "Job", "Kind", "Message", "OkReply"]

"""An archive record (SPEC §12, CONTRACT.md §12): one answered job on the archive stream.

The record is the body of one AMQP message on the stream, zstd-compressed
(`content_encoding: zstd`); these models describe its JSON once decompressed: the
reply's own members as the caller got them (`OkReply` or `ErrorReply`), plus the
record's version, when the job was answered, the worker's version and the job as it
was rendered (after masking). The worker writes records from the reply's bytes
(worker/archive/record.py); these models are for the JSON Schema, the AsyncAPI document
and readers that want typed records.
"""

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from schemas.reply import ErrorReply, OkReply

__all__ = ["ArchiveRecord", "ErrorRecord", "OkRecord", "parse_record"]

_JOB = (
    "The job as it was rendered: parsed, its outside-world texts masked (a credential "
    "never reaches the archive). Null when there was none to keep: a body that is not "
    "JSON, too large to be read, or one masking could not finish."
)


class OkRecord(OkReply):
    record: Literal[1] = Field(description="The record layout's version.")
    answered_at: datetime = Field(description="When the job was answered (RFC 3339, UTC).")
    worker_version: str
    job: dict[str, Any] | None = Field(description=_JOB)


class ErrorRecord(ErrorReply):
    record: Literal[1] = Field(description="The record layout's version.")
    answered_at: datetime = Field(description="When the job was answered (RFC 3339, UTC).")
    worker_version: str
    job: Any = Field(description=_JOB + " The JSON value as sent, masked, when it was no job.")


ArchiveRecord = Annotated[OkRecord | ErrorRecord, Field(discriminator="status")]
_record_adapter: TypeAdapter[OkRecord | ErrorRecord] = TypeAdapter(ArchiveRecord)


def parse_record(data: bytes | str | dict[str, Any]) -> OkRecord | ErrorRecord:
    """Parse a decompressed archive record into its typed model."""
    if isinstance(data, dict):
        return _record_adapter.validate_python(data)
    return _record_adapter.validate_json(data)

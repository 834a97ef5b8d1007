"""An archive record's body, decompressed and parsed (SPEC §12, "A record").

A record is a JSON object, compressed as its `content_encoding` property says (`zstd`,
`gzip`, or none). What cannot be read is a `BadRecord` (the reading run counts it and
goes on); a record of a newer schema than this worker knows is a `NewerRecord` (the
run stops there, so that a newer worker can resume it and nothing is lost).
"""

import gzip
import zlib
from typing import Any

import orjson
import zstandard

from worker.archive.record import RECORD_VERSION

# A decompressed record larger than this is not a record (a bound on a bad body).
MAX_RECORD_BYTES = 256 * 1024 * 1024
ENCODINGS = ("zstd", "gzip", "")


class BadRecord(Exception):
    """A record that cannot be read: the reason, one line."""


class NewerRecord(Exception):
    """A record of a schema newer than `RECORD_VERSION`."""

    def __init__(self, version: int) -> None:
        super().__init__(
            f"a record of schema {version}, newer than this worker reads ({RECORD_VERSION}):"
            " upgrade the worker and resume"
        )
        self.version = version


def decompress(body: bytes, encoding: str | None) -> bytes:
    name = (encoding or "").strip().lower()
    if name == "zstd":
        try:
            return zstandard.ZstdDecompressor().decompress(body, max_output_size=MAX_RECORD_BYTES)
        except zstandard.ZstdError as exc:
            raise BadRecord(f"not zstd: {exc}") from None
    if name == "gzip":
        try:
            return gzip.decompress(body)
        except (OSError, EOFError, zlib.error) as exc:
            raise BadRecord(f"not gzip: {exc}") from None
    if name in ("", "identity"):
        return body
    raise BadRecord(f"unknown content_encoding {name!r} (zstd, gzip or none)")


def decode_record(body: bytes, encoding: str | None) -> dict[str, Any]:
    """The record as a dict; raises BadRecord or NewerRecord. Its `job` is an object,
    or None for a job the worker could not read (worker/archive/record.py)."""
    text = decompress(body, encoding)
    try:
        record = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise BadRecord(f"not JSON: {exc}") from None
    if not isinstance(record, dict):
        raise BadRecord("not a JSON object")
    version = record.get("record")
    if isinstance(version, int) and not isinstance(version, bool) and version > RECORD_VERSION:
        raise NewerRecord(version)
    if version != RECORD_VERSION:
        raise BadRecord(f"'record' is {version!r}, expected {RECORD_VERSION}")
    if record.get("job") is not None and not isinstance(record["job"], dict):
        raise BadRecord("'job' is neither an object nor null")
    return record

"""JSON Schema documents of the wire contract, for producers in other languages."""

import json
from typing import Any

from pydantic import TypeAdapter

from schemas.archive import ArchiveRecord
from schemas.job import Job
from schemas.reply import Reply

SCHEMA_FILES = {
    "job": "job.schema.json",
    "reply": "reply.schema.json",
    "archive-record": "archive-record.schema.json",
}
_BASE_ID = "https://schemas.build-prompt-worker.dev/v1/"


def schema_document(which: str) -> dict[str, Any]:
    if which == "job":
        schema = Job.model_json_schema()
        title = "Build-prompt job"
    elif which == "reply":
        schema = TypeAdapter(Reply).json_schema()
        title = "Build-prompt reply"
    elif which == "archive-record":
        schema = TypeAdapter(ArchiveRecord).json_schema()
        title = "Build-prompt archive record (decompressed)"
    else:
        raise ValueError(f"unknown schema {which!r}")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": _BASE_ID + SCHEMA_FILES[which],
        "title": title,
        **{k: v for k, v in schema.items() if k != "title"},
    }


def render_schema(which: str) -> str:
    return json.dumps(schema_document(which), indent=2, ensure_ascii=False) + "\n"

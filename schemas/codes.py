"""The error codes of a reply (CONTRACT.md §3), apart from the reply models.

The data path writes error replies from dicts and needs only these codes; keeping them
out of `schemas.reply` spares `prompt-worker render` and the worker building the reply
models at start-up (docs/PERFORMANCE.md, "Command start-up").
"""

from enum import StrEnum


class ErrorCode(StrEnum):
    INVALID_JSON = "invalid_json"
    INVALID_JOB = "invalid_job"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    OVER_BUDGET = "over_budget"  # what may never be cut does not fit the job's budget
    # The render took longer than the worker's deadline on every delivery of the job.
    RENDER_TIMEOUT = "render_timeout"
    INTERNAL = "internal"
    TIMEOUT = "timeout"  # only written by clients (rerender --broker), never by the worker

"""What the renderer hands back: `RenderOutcome` (the reply bytes and the facts the
transport logs, counts and routes by) and every error reply the contract defines,
including those the transport asks for when it cannot send a render's own reply
(`failure_reply`): the transport knows no error code nor any `details` shape."""

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson
from pydantic import ValidationError

from schemas.codes import ErrorCode

# The largest job body the worker reads (`serve --max-message-bytes`); larger ones are
# answered `payload_too_large` unread.
DEFAULT_MAX_MESSAGE_BYTES = 32 * 1024 * 1024


# A phase of a render: its name, start and end (time.perf_counter, in seconds).
Phase = tuple[str, float, float]


@dataclass(slots=True)
class RenderOutcome:
    """A rendered reply and what the edges need to know about it."""

    body: bytes
    status: str
    job_id: str | None = None
    kind: str | None = None
    error_code: str | None = None
    error_message: str | None = None
    request_bytes: int = 0
    prompt_chars: int = 0
    render_seconds: float = 0.0
    masked: dict[str, int] = field(default_factory=dict)
    messages: list[dict[str, str]] | None = None
    # Budgets (CONTRACT.md §11): whether material was left out to fit, and how much.
    trimmed: bool = False
    tokens_left_out: int = 0
    # Set for `internal` errors only, so the edge can log the stack trace.
    exception: BaseException | None = None
    # For the trace: the family and templates of an ok reply, and the phases of its
    # render (name, start, end on the perf_counter clock, which every process shares).
    family: str | None = None
    template_version: str | None = None
    phases: list[Phase] = field(default_factory=list)
    # For the archive (SPEC §12): the parsed job after masking (None when the body was
    # not JSON, too large to read, or could not be masked to the end), and the JSON of a
    # tool catalogue the decoder cut out of it, as spelt (then `job` holds no `tools`).
    job: Any = None
    tools_json: bytes | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def internal_error(self) -> bool:
        """An error of the worker's own (a bug), not of the job."""
        return self.error_code == ErrorCode.INTERNAL.value


def _field_path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


def validation_details(error: ValidationError) -> list[dict[str, str]]:
    return [
        {"field": _field_path(item["loc"]), "type": item["type"], "message": item["msg"]}
        for item in error.errors(include_url=False, include_input=False)
    ]


def peek_identity(data: Any) -> tuple[str | None, str | None]:
    """Best-effort job id and kind of a body that failed validation (error path only)."""
    if not isinstance(data, dict):
        return None, None
    job_id = data.get("job_id")
    kind = data.get("kind")
    return (
        job_id if isinstance(job_id, str) and job_id else None,
        kind if isinstance(kind, str) and kind else None,
    )


def error_reply(
    code: ErrorCode,
    message: str,
    *,
    job_id: str | None = None,
    kind: str | None = None,
    details: list[dict[str, Any]] | None = None,
    request_bytes: int = 0,
    exception: BaseException | None = None,
) -> RenderOutcome:
    reply = {
        "job_id": job_id,
        "status": "error",
        "kind": kind,
        "error": {"code": code.value, "message": message, "details": details or []},
    }
    return RenderOutcome(
        body=orjson.dumps(reply),
        status="error",
        job_id=job_id,
        kind=kind,
        error_code=code.value,
        error_message=message,
        request_bytes=request_bytes,
        exception=exception,
    )


def invalid_job(
    details: list[dict[str, str]], job_id: str | None, kind: str | None, request_bytes: int
) -> RenderOutcome:
    count = len(details)
    return error_reply(
        ErrorCode.INVALID_JOB,
        f"job failed validation ({count} problem{'' if count == 1 else 's'})",
        job_id=job_id,
        kind=kind,
        details=details,
        request_bytes=request_bytes,
    )


def payload_too_large(size: int, limit: int) -> RenderOutcome:
    """The reply to a body above the worker's limit, which is refused unread."""
    return error_reply(
        ErrorCode.PAYLOAD_TOO_LARGE,
        f"message of {size} bytes exceeds the limit of {limit} bytes",
        request_bytes=size,
    )


def too_deep(job_id: str | None, kind: str | None) -> RenderOutcome:
    # Values nested close to the parser's depth limit are valid JSON (and opaque to the
    # models) but cannot be masked or written out as text: the job's fault, not ours.
    return error_reply(
        ErrorCode.INVALID_JOB,
        "a value in the job is nested too deeply to render",
        job_id=job_id,
        kind=kind,
        details=[{"field": "", "type": "too_deep", "message": "nesting too deep"}],
    )


class Failure(StrEnum):
    """Why the transport answers a job with `failure_reply` instead of its render."""

    REPLY_TOO_LARGE = "reply_too_large"  # the reply exceeds the broker's message limit
    RENDER_TIMEOUT = "render_timeout"  # the render overran its deadline on every delivery
    RENDER_PROCESS_DIED = "render_process_died"  # the render helper died on every delivery
    HANDLER_BUG = "handler_bug"  # an exception outside the renderer's own guard, every time


# A body that could not be rendered is read again for its job id and kind only when it
# is small enough to parse on the event loop at no real cost.
PEEK_IDENTITY_BYTES = 1024 * 1024


def failure_reply(
    reason: Failure,
    request: bytes,
    *,
    reply: RenderOutcome | None = None,
    limit_bytes: int = 0,
    render_timeout: float = 0.0,
    error: BaseException | None = None,
) -> RenderOutcome:
    """The error reply to `request` for `reason`: `reply` (the render too large for the
    broker's `limit_bytes`), `render_timeout` (the deadline it overran) and `error` (the
    bug) are the facts each reason needs."""
    if reason is Failure.REPLY_TOO_LARGE:
        assert reply is not None
        return error_reply(
            ErrorCode.PAYLOAD_TOO_LARGE,
            f"the reply of {len(reply.body)} bytes exceeds the broker's limit of "
            f"{limit_bytes} bytes",
            job_id=reply.job_id,
            kind=reply.kind,
            details=[{"field": "", "type": "reply_too_large", "message": "reply too large"}],
            request_bytes=len(request),
        )
    if reason is Failure.RENDER_TIMEOUT:
        code = ErrorCode.RENDER_TIMEOUT
        message = f"rendering took longer than {render_timeout:g} s on every attempt at this job"
    elif reason is Failure.RENDER_PROCESS_DIED:
        code = ErrorCode.INTERNAL
        message = "the render process died on every attempt at this job"
    else:
        code = ErrorCode.INTERNAL
        what = type(error).__name__ if error is not None else "unknown"
        message = f"internal error while handling the job: {what}"
    job_id, kind = _identity(request)
    return error_reply(code, message, job_id=job_id, kind=kind, request_bytes=len(request))


def _identity(body: bytes) -> tuple[str | None, str | None]:
    """The job id and kind of a body that could not be rendered, if cheap to read."""
    if len(body) > PEEK_IDENTITY_BYTES:
        return None, None
    try:
        return peek_identity(orjson.loads(body))
    except orjson.JSONDecodeError:
        return None, None

"""The data path: bytes -> job -> (masking) -> family builder -> reply -> bytes.

`Renderer.render(body)` never raises: every outcome, including a bug in a builder, is a
reply (`ok` or `error`) plus the facts the transport needs to log, count and route it.
The same object serves the queue consumer, `prompt-worker render` and `rerender`.
"""

import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import ValidationError

from schemas.job import Job, Tool, kind_rule_violations
from schemas.reply import ErrorCode
from worker import __version__
from worker.families import FAMILIES
from worker.families.base import RenderContext
from worker.families.contributors import Contributors
from worker.families.system_prompt import builder as system_prompt
from worker.masking.masker import Masker
from worker.render.catalogue import CATALOGUES
from worker.render.config import WorkerConfig

DEFAULT_MAX_MESSAGE_BYTES = 32 * 1024 * 1024
# Stands in for a known tool catalogue cut out of a body before parsing. Random per
# process: finding it as the job's `tools` proves the cut was at the job's own key.
_CATALOGUE_PLACEHOLDER = f"known-tool-catalogue-{secrets.token_hex(16)}"
_CATALOGUE_PLACEHOLDER_JSON = orjson.dumps(_CATALOGUE_PLACEHOLDER)


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
    # Set for `internal` errors only, so the edge can log the stack trace.
    exception: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(slots=True)
class ParsedJob:
    """A validated job whose outside-world texts are masked."""

    job: Job
    masked: dict[str, int]  # what masking removed, by detector
    masking_seconds: float


def _field_path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


def validation_details(error: ValidationError) -> list[dict[str, str]]:
    return [
        {"field": _field_path(item["loc"]), "type": item["type"], "message": item["msg"]}
        for item in error.errors(include_url=False, include_input=False)
    ]


def load_json(body: bytes | str) -> Any:
    """Parse a body with orjson. Raises ValueError.

    Integers beyond 64 bits are read as floats, as Go's decoder (the seed's) reads every
    number; lone surrogates are refused here rather than failing at serialisation.
    """
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ValueError(str(exc)) from None


# Families whose seeds define text with Python semantics (`str(value)`): for them an
# integer beyond 64 bits must stay an exact integer, which orjson cannot give.
_PYTHON_SEMANTICS_PAYLOADS = ("legacy", "skill_react", "skill_error_observation")
_WIDE = float(2**63)


def _holds_wide_float(value: Any) -> bool:
    """Whether `value` holds an integral float of 64+ bits: a wide integer orjson widened."""
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is float:
            if abs(item) >= _WIDE and item.is_integer():
                return True
        elif type(item) is dict:
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)
    return False


def _exact_integers(body: bytes | str, data: Any) -> Any:
    """`data`, re-read with the standard library when a Python-semantics payload holds a
    wide integer. Seed-000 jobs pay one dict lookup per payload name; legacy and skill
    jobs pay a walk over their payload (~30 µs on the typical legacy job)."""
    if type(data) is not dict:
        return data
    for name in _PYTHON_SEMANTICS_PAYLOADS:
        payload = data.get(name)
        if payload is not None and _holds_wide_float(payload):
            try:
                return json.loads(body)
            except (ValueError, RecursionError):
                return data
    return data


def _load_without_catalogue(body: bytes) -> tuple[Any, list[Tool]] | None:
    """The parsed body without its tool list, when the list is a known catalogue
    spelt as before and is the body's last member: the catalogue's bytes are cut out
    before parsing, which was a fifth of a typical ReAct job. None when the body ends
    with no known spelling as the job's own `tools`, or is not JSON (the caller parses
    it whole, for its own error message)."""
    hit = CATALOGUES.locate(body)
    if hit is None:
        return None
    start, end, tools = hit
    view = memoryview(body)
    spliced = b"".join((view[:start], _CATALOGUE_PLACEHOLDER_JSON, view[end:]))
    try:
        data = load_json(spliced)
    except ValueError:
        return None
    # The cut was at the body's last member; only if that is the job's own `tools`
    # (and not, say, a key `x"tools` whose escaped quote looked like the key's) does
    # the job's `tools` hold the placeholder now.
    if type(data) is not dict or data.get("tools") != _CATALOGUE_PLACEHOLDER:
        return None
    data = _exact_integers(spliced, data)
    del data["tools"]
    return data, tools


def _peek_identity(data: Any) -> tuple[str | None, str | None]:
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
    details: list[dict[str, str]] | None = None,
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


class Renderer:
    """Turns job bodies into reply bodies. Build once; thread-safe; no I/O."""

    def __init__(
        self,
        config: WorkerConfig | None = None,
        *,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        self.config = config if config is not None else WorkerConfig()
        self.max_message_bytes = max_message_bytes
        # Each family gets its own section of the configuration, never all of it.
        self.context = RenderContext(
            registry=self.config.registry(),
            family_state={
                system_prompt.NAME: system_prompt.prepare(self.config.system_prompt()),
            },
        )
        self.masker = (
            Masker.from_config(self.config.masking) if self.config.masking.enabled else None
        )
        self.contributors = Contributors.from_config(self.config.contributors)
        self.worker_version = __version__

    def template_versions(self) -> dict[str, str]:
        """Template version of each family, e.g. for a rerender report."""
        return {spec.name: spec.template_version for spec in FAMILIES.values()}

    def parse(self, body: bytes | str) -> ParsedJob | RenderOutcome:
        """The masked job in `body`, or the error reply explaining why there is none."""
        size = len(body)
        if size > self.max_message_bytes:
            # Not parsed: the limit exists so that huge bodies cost nothing.
            return error_reply(
                ErrorCode.PAYLOAD_TOO_LARGE,
                f"message of {size} bytes exceeds the limit of {self.max_message_bytes} bytes",
                request_bytes=size,
            )
        # orjson + python-mode validation measured faster than model_validate_json here:
        # arbitrary JSON (tool schemas) passes through instead of being rebuilt.
        try:
            data, tools = self._load(body)
        except ValueError as exc:
            return error_reply(
                ErrorCode.INVALID_JSON, f"body is not valid JSON: {exc}", request_bytes=size
            )
        masked: dict[str, int] = {}
        masking_seconds = 0.0
        if self.masker is not None:
            # On the parsed JSON, before validation: see Masker.mask_payload.
            started = time.perf_counter()
            try:
                masked = self.masker.mask_payload(data)
            except RecursionError:
                return too_deep(*_peek_identity(data))
            masking_seconds = time.perf_counter() - started
        try:
            job = self._validate(data, tools, body)
        except ValidationError as exc:
            job_id, kind = _peek_identity(data)
            return invalid_job(validation_details(exc), job_id, kind, size)
        problems = kind_rule_violations(job)
        if problems:
            return invalid_job(problems, job.job_id, job.kind.value, size)
        return ParsedJob(job, masked, masking_seconds)

    @staticmethod
    def _load(body: bytes | str) -> tuple[Any, list[Tool] | None]:
        """The parsed body, and the validated tool list when the body spells a known
        catalogue (then the list is not in the returned data). Raises ValueError for a
        body that is not JSON."""
        if isinstance(body, bytes):
            known = _load_without_catalogue(body)
            if known is not None:
                return known
        return _exact_integers(body, load_json(body)), None

    @staticmethod
    def _validate(data: Any, tools: list[Tool] | None = None, body: bytes | str = b"") -> Job:
        """`Job.model_validate`, reusing the validated list of a known catalogue: the
        one `_load` cut out (`tools`), or one found by the list's JSON, in which case
        the memo learns how `body` spells it."""
        if tools is None:
            raw_tools = data.get("tools") if type(data) is dict else None
            if type(raw_tools) is not list or not raw_tools:
                return Job.model_validate(data)
            try:
                key = orjson.dumps(raw_tools)
            except orjson.JSONEncodeError:  # nested beyond orjson's limit: no memo for it
                return Job.model_validate(data)
            tools = CATALOGUES.tools(key)
            if tools is None:
                job = Job.model_validate(data)
                CATALOGUES.remember(key, job.tools)
                return job
            if isinstance(body, bytes):
                # Seen before, yet not found in the bytes: learn how this producer
                # spells it, so that its next job skips parsing it.
                CATALOGUES.learn_spelling(body, key)
            data = data.copy()
            del data["tools"]
        job = Job.model_validate(data)
        # What model_copy(update=...) does, in place: the job is new and not yet shared,
        # and copying its other fields cost ~6 µs a job. The very list object is kept,
        # which is what the text memo keys on.
        job.__dict__["tools"] = tools
        job.__pydantic_fields_set__.add("tools")
        return job

    def render(self, body: bytes | str) -> RenderOutcome:
        """Render one job body into a reply body. Never raises."""
        try:
            parsed = self.parse(body)
        except Exception as exc:  # a bug in validation must still produce a reply
            return error_reply(
                ErrorCode.INTERNAL,
                f"internal error while parsing the job: {type(exc).__name__}",
                request_bytes=len(body),
                exception=exc,
            )
        if isinstance(parsed, RenderOutcome):
            return parsed
        outcome = self.render_job(parsed.job, parsed.masked, parsed.masking_seconds)
        outcome.request_bytes = len(body)
        return outcome

    def render_job(
        self, job: Job, masked: dict[str, int] | None = None, masking_seconds: float = 0.0
    ) -> RenderOutcome:
        """Render a validated job whose texts are already masked (`parse` masks them).
        Never raises. `render_ms` counts the masking time as well as the building."""
        started = time.perf_counter()
        masked = {} if masked is None else masked
        try:
            spec = FAMILIES[job.kind]
            result = spec.build(job, self.context)
            messages = self.contributors.apply(job, result.messages)
        except RecursionError:
            return too_deep(job.job_id, job.kind.value)
        except Exception as exc:
            return error_reply(
                ErrorCode.INTERNAL,
                f"internal error while rendering: {type(exc).__name__}",
                job_id=job.job_id,
                kind=job.kind.value,
                exception=exc,
            )
        elapsed = time.perf_counter() - started + masking_seconds
        prompt_chars = sum(len(m["content"]) for m in messages)
        meta: dict[str, Any] = {
            "template_version": spec.template_version,
            "family": spec.name,
            "worker_version": self.worker_version,
            "render_ms": round(elapsed * 1000, 3),
            "prompt_chars": prompt_chars,
            "masked": masked,
            "warnings": result.warnings,
        }
        if result.meta:
            meta.update(result.meta)
        reply = {
            "job_id": job.job_id,
            "status": "ok",
            "kind": job.kind.value,
            "messages": messages,
            "meta": meta,
        }
        return RenderOutcome(
            body=orjson.dumps(reply),
            status="ok",
            job_id=job.job_id,
            kind=job.kind.value,
            prompt_chars=prompt_chars,
            render_seconds=elapsed,
            masked=masked,
            messages=messages,
        )

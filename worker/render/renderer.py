"""The data path: bytes -> job -> (masking) -> family builder -> reply -> bytes.

`Renderer.render(body)` never raises: every outcome, including a bug in a builder, is a
reply (`ok` or `error`) plus the facts the transport needs to log, count and route it.
The same object serves the queue consumer, `prompt-worker render` and `rerender`.
"""

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import ValidationError

from schemas.budget import Budget
from schemas.codes import ErrorCode
from schemas.job import Job, kind_rule_violations
from worker import __version__
from worker.families import FAMILIES, prepare_states
from worker.families.base import Builder, Messages, RenderContext, StableEnd
from worker.families.contributors import Contributors
from worker.masking.masker import Masker
from worker.render.cache import cache_meta, estimate_cache_meta, first_difference
from worker.render.catalogue import CATALOGUES
from worker.render.config import WorkerConfig
from worker.render.decode import load_body_spelt, validate_job
from worker.render.members import unknown_member_warnings
from worker.render.replies import (
    DEFAULT_MAX_MESSAGE_BYTES,
    Phase,
    RenderOutcome,
    error_reply,
    invalid_job,
    payload_too_large,
    peek_identity,
    too_deep,
    validation_details,
)

if TYPE_CHECKING:
    from worker.render.budget import Fitted


# The detail of a body that is a JSON array: most likely several jobs where one belongs.
ARRAY_OF_JOBS = {
    "field": "",
    "type": "model_type",
    "message": "a job is a JSON object, and this is an array: send each job on its own "
    "(for `prompt-worker render` and `rerender`, one job a line: JSON Lines)",
}


@dataclass(slots=True)
class ParsedJob:
    """A validated job whose outside-world texts are masked."""

    job: Job
    masked: dict[str, int]  # what masking removed, by detector
    masking_seconds: float
    # Sentences for `meta.warnings` about the job itself (its unknown members).
    warnings: list[str]
    # decode, mask and validate, timed for the trace (render.Phase)
    phases: list[Phase]
    # The parsed job after masking and its cut-out catalogue's JSON (RenderOutcome.job).
    data: Any = None
    tools_json: bytes | None = None


def _with_job(outcome: RenderOutcome, data: Any, tools_json: bytes | None) -> RenderOutcome:
    """`outcome` holding its masked job, for the archive (a reference: no copy)."""
    outcome.job = data
    outcome.tools_json = tools_json
    return outcome


class Renderer:
    """Turns job bodies into reply bodies. Build once; thread-safe; no I/O."""

    def __init__(
        self,
        config: WorkerConfig | None = None,
        *,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        default_budget: Budget | None = None,
    ) -> None:
        self.config = config if config is not None else WorkerConfig()
        # The budget of jobs that carry none (render and rerender --budget); None: none.
        self.default_budget = default_budget
        self.max_message_bytes = max_message_bytes
        # Each family gets its own section of the configuration, never all of it.
        self.context = RenderContext(
            registry=self.config.registry(),
            tool_texts=CATALOGUES,
            family_state=prepare_states(self.config),
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
            return payload_too_large(size, self.max_message_bytes)
        # orjson + python-mode validation rather than model_validate_json: arbitrary JSON
        # (tool schemas) passes through instead of being rebuilt (docs/PERFORMANCE.md,
        # "The builder").
        started = time.perf_counter()
        try:
            data, tools, tools_json = load_body_spelt(body)
        except ValueError as exc:
            return error_reply(
                ErrorCode.INVALID_JSON, f"body is not valid JSON: {exc}", request_bytes=size
            )
        decoded = time.perf_counter()
        phases: list[Phase] = [("decode", started, decoded)]
        masked: dict[str, int] = {}
        masking_seconds = 0.0
        if self.masker is not None:
            # On the parsed JSON, before validation: see Masker.mask_payload.
            try:
                masked = self.masker.mask_payload(data)
            except RecursionError:
                return too_deep(*peek_identity(data))
            unmasked = decoded
            decoded = time.perf_counter()
            masking_seconds = decoded - unmasked
            phases.append(("mask", unmasked, decoded))
        try:
            job = validate_job(data, tools, body)
        except ValidationError as exc:
            if type(data) is list:
                invalid = invalid_job([ARRAY_OF_JOBS], None, None, size)
            else:
                job_id, kind = peek_identity(data)
                invalid = invalid_job(validation_details(exc), job_id, kind, size)
            return _with_job(invalid, data, tools_json)
        problems = kind_rule_violations(job)
        if problems:
            invalid = invalid_job(problems, job.job_id, job.kind.value, size)
            return _with_job(invalid, data, tools_json)
        phases.append(("validate", decoded, time.perf_counter()))
        warnings = unknown_member_warnings(data)
        return ParsedJob(job, masked, masking_seconds, warnings, phases, data, tools_json)

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
        outcome = self.render_job(
            parsed.job, parsed.masked, parsed.masking_seconds, parsed.warnings
        )
        outcome.request_bytes = len(body)
        outcome.phases = parsed.phases + outcome.phases
        return _with_job(outcome, parsed.data, parsed.tools_json)

    def render_job(
        self,
        job: Job,
        masked: dict[str, int] | None = None,
        masking_seconds: float = 0.0,
        job_warnings: list[str] | None = None,
    ) -> RenderOutcome:
        """Render a validated job whose texts are already masked (`parse` masks them).
        Never raises. `render_ms` counts the masking time as well as the building;
        `job_warnings` (from `parse`) come first in `meta.warnings`."""
        started = time.perf_counter()
        masked = {} if masked is None else masked
        budget_meta: dict[str, Any] | None = None
        tokens_left_out = 0
        phases: list[Phase] = []
        try:
            spec = FAMILIES[job.kind]
            result = spec.build(job, self.context)
            messages = self.contributors.apply(job, result.messages)
            built = time.perf_counter()
            phases.append(("build", started, built))
            budget = job.budget or self.default_budget
            if budget is None:
                cache = estimate_cache_meta(messages, spec.stable_end(job, messages))
            else:
                fitted = self._fit(job, budget, spec.build, messages)
                phases.append(("budget", built, time.perf_counter()))
                if isinstance(fitted, RenderOutcome):
                    return fitted
                cache = self._budgeted_cache(job, budget, spec.stable_end, fitted, messages)
                messages = fitted.messages
                budget_meta = fitted.meta(budget.max_prompt_tokens, budget.tokenizer)
                tokens_left_out = fitted.tokens_left_out
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
            "warnings": [*job_warnings, *result.warnings] if job_warnings else result.warnings,
        }
        if result.meta:
            meta.update(result.meta)
        if budget_meta is not None:
            meta["budget"] = budget_meta
        meta["cache"] = cache
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
            trimmed=bool(budget_meta and budget_meta["trimmed"]),
            tokens_left_out=tokens_left_out,
            family=spec.name,
            template_version=spec.template_version,
            phases=phases,
        )

    @staticmethod
    def _budgeted_cache(
        job: Job, budget: Budget, stable_end: StableEnd, fitted: "Fitted", whole: Messages
    ) -> dict[str, Any]:
        """`meta.cache` of a budgeted reply: by the budget's tokenizer, at the stable
        point of the job its messages were built from (trimmed or not), its cut where
        they depart from the `whole` job's."""
        from worker.render.budget import tokenizers

        built = fitted.job if fitted.job is not None else job
        return cache_meta(
            fitted.messages,
            stable_end(built, fitted.messages),
            tokenizers.get(budget.tokenizer),
            fitted.message_tokens,
            first_difference(whole, fitted.messages) if fitted.trimmed else None,
        )

    def _fit(
        self, job: Job, budget: Budget, build: Builder, messages: Messages
    ) -> "Fitted | RenderOutcome":
        """The job's messages fitted into `budget`, or the error reply saying why not."""
        # Imported here: only jobs with a budget pay for the module (and tiktoken).
        from worker.render.budget import OverBudget, UnavailableTokenizer, fit_to_budget

        def rebuild(trimmed: Job) -> Messages:
            return self.contributors.apply(trimmed, build(trimmed, self.context).messages)

        try:
            fitted = fit_to_budget(job, budget, messages, rebuild)
        except UnavailableTokenizer as exc:
            detail = {"field": "budget.tokenizer", "type": "unavailable", "message": str(exc)}
            return invalid_job([detail], job.job_id, job.kind.value, 0)
        if isinstance(fitted, OverBudget):
            return error_reply(
                ErrorCode.OVER_BUDGET,
                f"what may never be cut takes {fitted.required} tokens by "
                f"{budget.tokenizer}; the budget allows {fitted.allowed}",
                job_id=job.job_id,
                kind=job.kind.value,
                details=[
                    {
                        "field": "budget.max_prompt_tokens",
                        "type": "over_budget",
                        "message": "the prompt cannot be cut to fit",
                        "required": fitted.required,
                        "allowed": fitted.allowed,
                    }
                ],
            )
        return fitted

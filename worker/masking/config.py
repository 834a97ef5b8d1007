"""Configuration of the masking stage (`masking:` in worker.yaml).

Every problem is raised from the model's validators, so `worker.config.load_config`
reports it as `<file>: masking.patterns.0.regex: ...` and the worker refuses to start
rather than run with a pattern that silently never matches.
"""

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from worker.masking import linear_regex
from worker.masking.detectors import BUILTIN_NAMES, DEFAULT_GROUPS, GROUPS, RESERVED_NAMES
from worker.masking.linear_regex import LinearPattern

# Detector names become Prometheus label values and `meta.masked` keys.
_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")
_MAX_REGEX_CHARS = 2000


class CustomPattern(BaseModel):
    """An operator-defined detector: every match of `regex` becomes `replacement`.

    When the regex has a group named `secret`, only that group is replaced, so context
    such as a key name can stay readable (`ticket_key=(?P<secret>\\w+)`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    regex: str
    replacement: str = "[MASKED]"
    ignore_case: bool = False
    # Literal strings of which at least one occurs in every match. With them the regex
    # only runs on texts containing one (fast); without them it runs on every text.
    anchors: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError(
                "must be lower-case letters, digits and underscores, starting with a letter"
            )
        if value in RESERVED_NAMES:
            raise ValueError(f"{value!r} is the name of a built-in detector")
        return value

    @field_validator("regex")
    @classmethod
    def _check_regex(cls, value: str) -> str:
        if not value:
            raise ValueError("must not be empty")
        if len(value) > _MAX_REGEX_CHARS:
            raise ValueError(f"longer than {_MAX_REGEX_CHARS} characters")
        try:
            compiled = LinearPattern(value)
        except linear_regex.error as exc:
            # RE2 syntax: Python's, less look-around and back-references (which would
            # let a pattern backtrack over the text).
            raise ValueError(
                f"invalid regular expression (RE2 syntax): {linear_regex.describe(exc)}"
            ) from None
        if compiled.fullmatch(""):
            raise ValueError("matches the empty string, which would mask nothing useful")
        return value

    @field_validator("replacement")
    @classmethod
    def _check_replacement(cls, value: str) -> str:
        if not value:
            raise ValueError("must not be empty (say what was removed, e.g. [MASKED_KEY])")
        return value

    @model_validator(mode="after")
    def _check_consistency(self) -> "CustomPattern":
        compiled = self.compiled()
        if compiled.search(self.replacement):
            # Masking must be idempotent: the replacement would be masked again.
            raise ValueError(f"the regex matches its own replacement {self.replacement!r}")
        return self

    def compiled(self) -> LinearPattern:
        return LinearPattern(self.regex, ignore_case=self.ignore_case)


class MaskingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    # Built-in detector groups: `secrets` (credentials, keys, tokens) and `pii`
    # (e-mail addresses, off by default).
    groups: list[str] = Field(default_factory=lambda: list(DEFAULT_GROUPS))
    # Built-in detectors to turn off by name, for a detector that misfires on some
    # producer's text (see `prompt-worker mask`).
    disabled: list[str] = Field(default_factory=list)
    patterns: list[CustomPattern] = Field(default_factory=list)
    # What runs the one scan for anchors (docs/MASKING.md, "Performance"):
    # `auto` takes the fastest that works here. Naming one makes the worker refuse to
    # start without it, e.g. to insist on the system's libhs in production.
    engine: Literal["auto", "libhs", "hyperscan", "python"] = "auto"

    @field_validator("groups")
    @classmethod
    def _check_groups(cls, value: list[str]) -> list[str]:
        unknown = [g for g in value if g not in GROUPS]
        if unknown:
            raise ValueError(
                f"unknown group(s) {', '.join(map(repr, unknown))}; known: {', '.join(GROUPS)}"
            )
        return value

    @field_validator("disabled")
    @classmethod
    def _check_disabled(cls, value: list[str]) -> list[str]:
        unknown = [d for d in value if d not in BUILTIN_NAMES]
        if unknown:
            raise ValueError(
                f"unknown detector(s) {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(sorted(BUILTIN_NAMES))}"
            )
        return value

    @model_validator(mode="after")
    def _check_unique_names(self) -> "MaskingConfig":
        seen: set[str] = set()
        for pattern in self.patterns:
            if pattern.name in seen:
                raise ValueError(f"two custom patterns are named {pattern.name!r}")
            seen.add(pattern.name)
        return self

"""Payload of the `system_prompt` kind (seed 003, SPEC.md §10).

PLACEHOLDER: the tiered-prompts issue fills this in.
"""

from schemas.base import WireModel


class SystemPromptPayload(WireModel):
    pass

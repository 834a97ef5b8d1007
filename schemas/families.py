"""Payloads of the seed-001 (legacy TARSy) and seed-002 (JSON-ReAct skill) families.

PLACEHOLDER: the families issue fills these in (SPEC.md §8).
"""

from typing import Any

from schemas.base import WireModel


class LegacyPayload(WireModel):
    alert_data: dict[str, Any]


class SkillReactPayload(WireModel):
    pass


class SkillErrorObservationPayload(WireModel):
    pass

"""Configuration of the masking stage (`masking:` in worker.yaml).

PLACEHOLDER: the masking issue fills this in.
"""

from pydantic import BaseModel, ConfigDict


class MaskingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True

"""The masking stage applied to every outside text of a job before it is rendered.

PLACEHOLDER: the masking issue implements the detectors. Interface the pipeline uses:
`Masker.from_config(cfg)` once at start-up, then `mask_job(job) -> (job, counts)` per job.
"""

from schemas.job import Job
from worker.masking.config import MaskingConfig


class Masker:
    def __init__(self, config: MaskingConfig) -> None:
        self.config = config

    @classmethod
    def from_config(cls, config: MaskingConfig) -> "Masker":
        return cls(config)

    def mask_job(self, job: Job) -> tuple[Job, dict[str, int]]:
        return job, {}

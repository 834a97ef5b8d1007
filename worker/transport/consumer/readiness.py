"""Whether the worker is ready for jobs (`/readyz`, the `prompt_worker_ready` gauge).

Ready means: connected to the broker, consuming the request queue, not stopping, not
blocked by a broker alarm, and replies reaching the broker (none refused for longer
than `backpressure.NOT_READY_AFTER`). Whoever changes one of them calls `update()`.
"""

from worker.ops.metrics import Metrics
from worker.transport.link.flow import BrokerFlow


class Readiness:
    def __init__(self, metrics: Metrics, flow: BrokerFlow) -> None:
        self.metrics = metrics
        self.flow = flow
        self.connected = False
        self.consuming = False
        self.accepting = True
        self.replies_accepted = True

    def facts(self) -> dict[str, bool]:
        return {
            "connected": self.connected,
            "consuming": self.consuming,
            "accepting": self.accepting,
            "unblocked": not self.flow.blocked,
            "replies_accepted": self.replies_accepted,
        }

    @property
    def ready(self) -> bool:
        return all(self.facts().values())

    def update(self) -> None:
        self.metrics.broker_blocked.set(1 if self.flow.blocked else 0)
        self.metrics.ready.set(1 if self.ready else 0)

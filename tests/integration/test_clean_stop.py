"""A stopping worker prints nothing after `stopped`: no traceback from any thread.

The render helper (a process pool) is shut down as the worker stops. Shut down without
waiting, its manager thread could still be closing the pool's wake-up pipe when the
interpreter's exit hook writes to that pipe, and Python printed `OSError: [Errno 9] Bad
file descriptor` from concurrent/futures/process.py (about one stop in 17). The race
is rare, so the worker is started and stopped many times, with the helper in use.
"""

import signal
from collections.abc import Callable

import pytest

from tests.integration.helpers import StartWorker, a_job, needs_broker
from worker.transport.producers.client import PromptClient

STOPS = 12


@needs_broker
@pytest.mark.slow
async def test_no_stop_prints_a_traceback(start_worker: StartWorker, client: PromptClient) -> None:
    for stop in range(STOPS):
        # --offload-bytes 0: every job renders in the helper process.
        worker = start_worker("--offload-bytes", "0")
        await worker.wait_ready()
        reply = await client.build(a_job(f"stop-{stop}"), timeout=60)
        assert reply["status"] == "ok", reply
        worker.signal(signal.SIGTERM)
        assert await worker.wait_exit() == 0, worker.logs()[-3000:]
        logs = worker.logs()
        assert '"stopped"' in logs, logs[-3000:]
        assert "Traceback" not in logs, f"stop {stop}:\n{logs[-3000:]}"
        assert _after_stopped(logs, lambda line: line.strip() != "") == [], logs[-3000:]


def _after_stopped(logs: str, keep: Callable[[str], bool]) -> list[str]:
    """The lines logged after the `stopped` event."""
    lines = logs.splitlines()
    last = max(i for i, line in enumerate(lines) if '"stopped"' in line)
    return [line for line in lines[last + 1 :] if keep(line)]

"""`prompt-worker serve --processes N`: N worker processes sharing the request queue.

The processes are competing consumers of the same queue, each with its own connection,
prefetch and render helper, so throughput scales with cores. The supervisor itself
holds no connection: it starts each worker as `python -m worker serve` with the
resolved settings in its environment, restarts one that dies (with a backoff when it
keeps dying young), forwards SIGTERM/SIGINT to all of them and waits for their
graceful exits. A second signal kills them at once. A worker exiting with code 2 (a
configuration error, which a restart would only repeat) stops the whole group with 2.

Process i serves HTTP on `http_port + i`, so each keeps its own /readyz and /metrics.
"""

import contextlib
import functools
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from types import FrameType

from worker.ops.logs import get_logger
from worker.transport.processes.parent import die_with_parent
from worker.transport.retry import Backoff
from worker.transport.settings import Settings, without_settings

CONFIG_ERROR_EXIT = 2
# A worker that lived this long before dying is restarted at once; one that keeps
# dying younger waits longer each time (1, 2, 4 ... 30 s) instead of spinning.
_HEALTHY_AFTER = 10.0
_MAX_BACKOFF = 30.0


@dataclass
class _Slot:
    index: int
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    pauses: Backoff = field(default_factory=lambda: Backoff(1.0, _MAX_BACKOFF))
    restart_at: float | None = None
    done: bool = False


class Supervisor:
    def __init__(self, settings: Settings, command: list[str] | None = None) -> None:
        self.settings = settings
        self.command = command or [sys.executable, "-m", "worker", "serve"]
        self.slots = [_Slot(i) for i in range(settings.processes)]
        self.log = get_logger(component="supervisor")
        self._signals = 0
        self._exit_code = 0

    def _child_env(self, index: int) -> dict[str, str]:
        # The resolved settings replace the inherited ones, so a URL read from a file is
        # passed on as that file (never as its value) and no setting is given twice.
        env = without_settings(os.environ)
        env.update(self.settings.to_env())
        env["PROMPT_WORKER_PROCESSES"] = "1"
        port = self.settings.http_port
        env["PROMPT_WORKER_HTTP_PORT"] = str(port + index if port else 0)
        return env

    def _start(self, slot: _Slot) -> None:
        slot.process = subprocess.Popen(
            self.command,
            env=self._child_env(slot.index),
            # Own session: a Ctrl-C on the terminal reaches only the supervisor, which
            # forwards one SIGTERM (two signals would mean "exit at once" to a worker).
            start_new_session=True,
            preexec_fn=functools.partial(die_with_parent, signal.SIGTERM, os.getpid()),
        )
        slot.started = time.monotonic()
        slot.restart_at = None
        self.log.info("worker_started", index=slot.index, pid=slot.process.pid)

    def _signal_all(self, sig: signal.Signals) -> None:
        for slot in self.slots:
            if slot.process is not None and slot.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    slot.process.send_signal(sig)

    def _on_signal(self, signum: int, _: FrameType | None) -> None:
        self._signals += 1
        if self._signals == 1:
            self._signal_all(signal.SIGTERM)
            return
        self._signal_all(signal.SIGKILL)
        os._exit(128 + signum)

    def _stop(self, exit_code: int) -> None:
        self._exit_code = max(self._exit_code, exit_code)
        if self._signals == 0:
            self._signals = 1
            self._signal_all(signal.SIGTERM)

    def _reap(self, slot: _Slot, now: float) -> None:
        assert slot.process is not None
        code = slot.process.poll()
        if code is None:
            return
        pid = slot.process.pid
        slot.process = None
        if self._signals:
            slot.done = True
            if code != 0:
                self._exit_code = max(self._exit_code, 1)
            self.log.info("worker_stopped", index=slot.index, pid=pid, exit_code=code)
            return
        if code == CONFIG_ERROR_EXIT:
            slot.done = True
            self.log.error("worker_config_error", index=slot.index, pid=pid, exit_code=code)
            self._stop(CONFIG_ERROR_EXIT)
            return
        lived = now - slot.started
        if lived >= _HEALTHY_AFTER:
            slot.pauses.reset()
            slot.restart_at = now
        else:
            slot.restart_at = now + slot.pauses.next()
        self.log.warning(
            "worker_died",
            index=slot.index,
            pid=pid,
            exit_code=code,
            lived_s=round(lived, 1),
            restart_in_s=round(slot.restart_at - now, 1),
        )

    def run(self) -> int:
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            for slot in self.slots:
                self._start(slot)
            while True:
                now = time.monotonic()
                for slot in self.slots:
                    if slot.process is not None:
                        self._reap(slot, now)
                    elif self._signals:
                        slot.done = True
                    elif slot.restart_at is not None and now >= slot.restart_at:
                        self._start(slot)
                if all(slot.done for slot in self.slots):
                    return self._exit_code
                time.sleep(0.1)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

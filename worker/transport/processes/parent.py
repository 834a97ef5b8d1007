"""Process plumbing shared by the supervisor and the render helper."""

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: signal.Signals = signal.SIGTERM, parent: int | None = None) -> None:
    """Have Linux send `sig` to this process when its parent dies (no-op elsewhere).

    Without it, a supervisor or worker killed with SIGKILL would leave its children
    orphaned: workers still consuming, render helpers idling forever. `parent` is the
    pid the caller expects as its parent; if that one is already gone, the signal
    would never come, so the process exits at once.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if parent is not None and os.getppid() != parent:
        os._exit(0)

"""Running the real `prompt-worker` command, as a user or an operator runs it."""

import subprocess
import sys

from tests.data import REPO


def prompt_worker(
    *args: str, stdin: bytes = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """`python -m worker ARGS` from the repository root; its exit status and output."""
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        input=stdin,
        capture_output=True,
        cwd=REPO,
        env=env,
        timeout=120,
        check=False,
    )

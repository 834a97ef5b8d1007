"""`prompt-worker` run as a user runs it: a fresh interpreter in the repository."""

import subprocess
import sys

from tests.data import REPO


def prompt_worker(
    *args: str, stdin: bytes = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        input=stdin,
        capture_output=True,
        cwd=REPO,
        env=env,
        timeout=120,
        check=False,
    )

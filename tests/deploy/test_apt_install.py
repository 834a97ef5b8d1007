"""scripts/apt-install, which every ensure-* script installs with: another apt holding
the package lock makes it wait, not fail with a bare "Could not get lock".

apt runs for real, as root, on a copy of this machine's package database (its lock in
a directory of the test's own, through APT_CONFIG), asked for a package that is
installed already (`--no-upgrade`): nothing is installed, but the lock is taken.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.data import REPO
from tests.unavailable import missing

HOLD_LOCK = """
import fcntl, sys
lock = open(sys.argv[1], "a+")
fcntl.lockf(lock, fcntl.LOCK_EX)  # the kind of lock apt and dpkg take
print("held", flush=True)
sys.stdin.read()  # until the test closes stdin
"""


@pytest.fixture
def apt_root(tmp_path: Path) -> dict[str, str]:
    """The environment of an apt whose dpkg database (and lock) is a copy in tmp_path."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        missing("apt-get as root", "run the suite as root on Debian, as CI does")
    admin = tmp_path / "dpkg"
    (admin / "updates").mkdir(parents=True)
    shutil.copy("/var/lib/dpkg/status", admin / "status")
    config = tmp_path / "apt.conf"
    config.write_text(f'Dir::State::status "{admin}/status";\n')
    return {**os.environ, "APT_CONFIG": str(config)}


def hold(lock: Path) -> "subprocess.Popen[str]":
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(lock)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def apt_install(env: dict[str, str]) -> "subprocess.Popen[str]":
    return subprocess.Popen(
        [str(REPO / "scripts" / "apt-install"), "--no-upgrade", "bash"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_held_lock_is_waited_for(apt_root: dict[str, str], tmp_path: Path) -> None:
    holder = hold(tmp_path / "dpkg" / "lock-frontend")
    install = apt_install(apt_root)
    try:
        # Still waiting while the lock is held: it did not give up with an error.
        with pytest.raises(subprocess.TimeoutExpired):
            install.wait(timeout=3)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    _, err = install.communicate(timeout=300)
    assert install.returncode == 0, err
    assert "Could not get lock" not in err


def test_a_lock_held_past_the_wait_is_one_clear_failure(
    apt_root: dict[str, str], tmp_path: Path
) -> None:
    holder = hold(tmp_path / "dpkg" / "lock-frontend")
    try:
        install = apt_install({**apt_root, "APT_LOCK_WAIT": "1"})
        _, err = install.communicate(timeout=300)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    assert install.returncode == 1
    assert err.splitlines()[-1] == (
        "[apt-install] the package lock was still held after 1s (APT_LOCK_WAIT): try again later"
    )


def test_every_ensure_script_installs_through_it() -> None:
    for script in sorted((REPO / "scripts").glob("ensure-*")):
        for line in script.read_text(encoding="utf-8").splitlines():
            words = line.split()
            said = words[:1] in (["echo"], ["log"], ["#"])  # words, not a command
            if not said and "apt-get" in words and ("install" in words or "update" in words):
                assert "Lock::Timeout" in line, f"{script.name}: {line.strip()}"

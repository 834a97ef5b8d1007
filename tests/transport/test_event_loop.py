"""The event loop `serve` runs on: uvloop by default where installed, asyncio on request."""

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
import uvloop

from worker.transport.event_loop import (
    EventLoopUnavailable,
    loop_factory,
    run_on,
    running_loop_name,
)

REPO = Path(__file__).resolve().parents[2]


async def _name_and_class() -> tuple[str, type]:
    return running_loop_name(), type(asyncio.get_running_loop())


def test_auto_and_uvloop_run_on_uvloop() -> None:
    for choice in ("auto", "uvloop"):
        name, cls = run_on(loop_factory(choice), _name_and_class())
        assert name == "uvloop"
        assert issubclass(cls, uvloop.Loop)


def test_asyncio_runs_on_the_standard_loop() -> None:
    assert loop_factory("asyncio") is None
    name, cls = run_on(loop_factory("asyncio"), _name_and_class())
    assert name == "asyncio"
    assert not issubclass(cls, uvloop.Loop)
    assert issubclass(cls, asyncio.BaseEventLoop)


def test_without_uvloop_auto_falls_back_and_uvloop_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # None in sys.modules makes `import uvloop` raise ImportError, as on a platform
    # without its wheels.
    monkeypatch.setitem(sys.modules, "uvloop", None)
    assert loop_factory("auto") is None
    with pytest.raises(EventLoopUnavailable, match="uvloop is not installed"):
        loop_factory("uvloop")


def test_serve_refuses_uvloop_when_it_is_missing(tmp_path: Path) -> None:
    # A stand-in package that fails to import, first on the path: serve must exit 2
    # with one line, before connecting to anything.
    (tmp_path / "uvloop.py").write_text("raise ImportError('no uvloop here')\n")
    result = subprocess.run(
        [sys.executable, "-m", "worker", "serve", "--event-loop", "uvloop"],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{tmp_path}:{REPO}"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "uvloop is not installed" in result.stderr
    assert "Traceback" not in result.stderr

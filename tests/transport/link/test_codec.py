"""The fast frame codec is imported only when chosen, and anything wrong with it gives
pamqp's codec with one log line (worker/transport/link/codec.py); pamqp's own functions
are never replaced.

Each case runs in a fresh interpreter, as `serve` does: which modules are loaded, and
what a changed pamqp does to the import, are per process.
"""

import json
import subprocess
import sys
from typing import Any

import pytest

# Logs as serve does (JSON on stderr), runs the given lines, then prints what the test
# asks about as one JSON line on stdout.
PROBE = """
import json, sys
from worker.ops.logs import configure_logging
configure_logging("info", "json", sys.stderr)
{body}
import pamqp.frame
from worker.transport.link import codec
chosen = codec.choose({choice!r})
print(json.dumps({{
    "chosen": chosen.name,
    "frames_loaded": "worker.transport.link.frames" in sys.modules,
    "pamqp_marshal": pamqp.frame.marshal.__module__,
    "pamqp_unmarshal": pamqp.frame.unmarshal.__module__,
}}))
"""


def probe(choice: str, body: str = "") -> tuple[dict[str, Any], list[dict[str, Any]]]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(body=body, choice=choice)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    logs = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    assert len(logs) == len(result.stderr.splitlines()), result.stderr  # no traceback
    return json.loads(result.stdout), logs


def test_serve_imports_the_fast_codec_only_when_chosen() -> None:
    # What serve imports before it sets up the codec.
    imports = "import worker.commands.serve_cmd, worker.transport.consumer.worker"
    state, logs = probe("pamqp", imports)
    assert state == {
        "chosen": "pamqp",
        "frames_loaded": False,
        "pamqp_marshal": "pamqp.frame",
        "pamqp_unmarshal": "pamqp.frame",
    }
    assert logs == []

    state, logs = probe("fast", imports)
    assert state == {
        "chosen": "fast",
        "frames_loaded": True,
        "pamqp_marshal": "pamqp.frame",
        "pamqp_unmarshal": "pamqp.frame",
    }
    assert logs == []


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        # A pamqp release without a name the codec imports (aiormq, loaded first, keeps
        # its own reference).
        (
            "import worker.transport.link.codec, pamqp.frame\ndel pamqp.frame.FrameTypes",
            "ImportError",
        ),
        # One whose public API changed shape: the codec's import-time table fails.
        (
            "from pamqp import commands\ndel commands.Basic.Properties.flags['content_type']",
            "KeyError",
        ),
        # One that writes a frame differently: the self-check catches it.
        (
            "import pamqp.frame\n"
            "original = pamqp.frame.marshal\n"
            "pamqp.frame.marshal = lambda value, channel: original(value, channel) + "
            "(b'\\\\x00' if type(value).__name__ == 'Ack' else b'')",
            "differently",
        ),
    ],
)
def test_anything_wrong_with_the_fast_codec_falls_back_to_pamqp_in_one_line(
    change: str, reason: str
) -> None:
    state, logs = probe("fast", change)
    assert state["chosen"] == "pamqp"
    assert state["pamqp_unmarshal"] == "pamqp.frame"
    assert [log["event"] for log in logs] == ["amqp_codec_unavailable"]
    assert logs[0]["level"] == "warning"
    assert (logs[0]["wanted"], logs[0]["using"]) == ("fast", "pamqp")
    assert reason in logs[0]["reason"]

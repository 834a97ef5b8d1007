"""Which AMQP frame codec this process uses: pamqp's own, or the fast one (frames.py).

The fast codec is a stand-in for pamqp's frame functions, proven against the one pamqp
release pyproject.toml pins. It is imported only when chosen, so a pamqp that changed
cannot stop a worker running with pamqp's codec, and anything that goes wrong while it
is set up (an import error, a sample it writes or reads differently from pamqp) leaves
pamqp's codec in place with one log line, `amqp_codec_unavailable`: pamqp's codec is
always right, the fast one only quicker.
"""

import sys

from worker.ops.logs import get_logger
from worker.transport.settings import AmqpCodecName

_FRAMES = "worker.transport.link.frames"


def use(choice: AmqpCodecName) -> AmqpCodecName:
    """Set up the codec named by the setting; the name of the one in use."""
    if choice == "fast":
        reason = _install_fast()
        if reason is None:
            return "fast"
        get_logger(component="amqp_codec").warning(
            "amqp_codec_unavailable", wanted=choice, using="pamqp", reason=reason
        )
    _uninstall_fast()
    return "pamqp"


def _install_fast() -> str | None:
    """None once the fast codec is in place; else why it is not."""
    try:
        from worker.transport.link import frames

        if frames.install():
            return None
        return "it writes or reads a sample frame differently from this pamqp"
    # Whatever a changed pamqp makes the import or the self-check raise.
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def _uninstall_fast() -> None:
    # Only a codec imported earlier in this process can be in place.
    frames = sys.modules.get(_FRAMES)
    if frames is not None:
        frames.uninstall()

"""Which AMQP frame codec `serve`'s link uses: pamqp's own, or the fast one (frames.py).

The link calls the codec it is given (`amqp.wire.FrameCodec`); nothing in pamqp or
aiormq is replaced. The fast codec is proven against the one pamqp release the lock file
pins. It is imported only when chosen, so a pamqp that changed cannot stop a worker
running with pamqp's codec, and anything that goes wrong while it is set up (an import
error, a sample it writes or reads differently from pamqp) gives pamqp's codec with one
log line, `amqp_codec_unavailable`: pamqp's codec is always right, the fast one only
quicker.
"""

from worker.ops.logs import get_logger
from worker.transport.link.amqp.wire import PAMQP_CODEC, FrameCodec
from worker.transport.settings import AmqpCodecName


def choose(choice: AmqpCodecName) -> FrameCodec:
    """The codec named by the setting, or pamqp's if the fast one cannot be had."""
    if choice == "fast":
        codec, reason = _fast()
        if codec is not None:
            return codec
        get_logger(component="amqp_codec").warning(
            "amqp_codec_unavailable", wanted=choice, using="pamqp", reason=reason
        )
    return PAMQP_CODEC


def _fast() -> tuple[FrameCodec | None, str]:
    """The fast codec once its self-check passes; else None and why not."""
    try:
        from worker.transport.link import frames

        if frames.agrees_with_pamqp():
            return FrameCodec("fast", frames.marshal, frames.unmarshal), ""
        return None, "it writes or reads a sample frame differently from this pamqp"
    # Whatever a changed pamqp makes the import or the self-check raise.
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"

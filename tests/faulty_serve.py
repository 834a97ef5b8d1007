"""`prompt-worker serve` whose renders misbehave on request: the tests' way to make a
render that never ends or a bug in the render path, end to end, with nothing of it in
the production worker.

Run as `python -m tests.faulty_serve [serve's flags]` (the integration tests'
`start_worker(..., entry=FAULTY_SERVE)`). It is serve itself, rendering with
`FaultyRenderer`, on the event loop and in the render helper alike (the helper, a
spawned process, imports this module by name). A job whose body contains one of the
markers below misbehaves:

* `SLOW_RENDER`: the render computes for an hour (a busy loop), as a pathological job
  would;
* `HANDLER_BUG`: the render raises, as a bug outside the renderer's own guard would.
"""

import argparse
import sys
import time

from worker.commands import serve_cmd
from worker.render.renderer import Renderer
from worker.render.replies import RenderOutcome

FAULTY_SERVE = "tests.faulty_serve"
SLOW_RENDER = b"test-fault:slow-render"
HANDLER_BUG = b"test-fault:handler-bug"


class InjectedFault(RuntimeError):
    """The failure a `HANDLER_BUG` job asked for."""


class FaultyRenderer(Renderer):
    def render(self, body: bytes | str) -> RenderOutcome:
        data = body.encode() if isinstance(body, str) else body
        if SLOW_RENDER in data:
            until = time.monotonic() + 3600
            while time.monotonic() < until:
                pass
        if HANDLER_BUG in data:
            raise InjectedFault("injected handler bug")
        return super().render(body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="faulty-serve")
    serve_cmd.add_arguments(parser)
    return serve_cmd.run(parser.parse_args(argv), renderer_class=FaultyRenderer)


if __name__ == "__main__":
    sys.exit(main())

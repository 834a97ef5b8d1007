"""Where a render runs: the helper process beside the event loop (`offload`), the
render deadline, `serve --processes N` (`supervisor`), and tying a child's life to
its parent's."""

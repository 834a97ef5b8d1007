"""The data path: job bytes -> validated job -> masking -> prompt family -> reply bytes.

`renderer.Renderer` is its entry point; the queue consumer, `prompt-worker render` and
`rerender` all call it. Nothing here does I/O or knows about the transport.
"""

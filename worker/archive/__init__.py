"""The archive (SPEC §12, docs/ARCHIVE.md): every job `serve` answered, on record in a
RabbitMQ stream. `record` fixes the wire format of a record (writing and reading rely
on it); `recorder` is the worker's side that publishes them."""

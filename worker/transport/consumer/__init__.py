"""The consumer: the worker's link kept up (`link.ConsumerLink`), one delivery's path
from bytes to a published reply and a settlement (`delivery`), acknowledgements, the
in-flight bounds, refused replies as backpressure, and readiness."""

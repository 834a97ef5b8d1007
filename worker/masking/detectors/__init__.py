"""The built-in detectors, in the order they run.

One module per family of credential registers its detectors (`base.register`); this
table orders them. Order matters: exact formats (PEM blocks, JWTs, GitHub tokens) run
before the detectors that mask "the value after a key", so `Authorization: Bearer
eyJ...` counts as a JWT and its masked value is left alone.
"""

from worker.masking.detectors import (
    cards,
    cloud,
    command_line,
    formats,
    jwt,
    keyvalue,
    kubernetes_docker,
    pem_tokens,
    pii,
    urls,
    vendors,
)
from worker.masking.detectors.base import (
    DEFAULT_GROUPS,
    GROUPS,
    PII,
    REGISTERED,
    SECRETS,
    Anchor,
    Applied,
    Detector,
    Edit,
    Split,
    apply_edits,
)
from worker.masking.detectors.kubernetes_docker import is_basic_credentials

__all__ = [
    "BUILTIN",
    "BUILTIN_NAMES",
    "DEFAULT_GROUPS",
    "FAILED",
    "GROUPS",
    "PII",
    "RESERVED_NAMES",
    "SECRETS",
    "Anchor",
    "Applied",
    "Detector",
    "Edit",
    "Split",
    "apply_edits",
    "is_basic_credentials",
]

# The families, imported for their registrations.
FAMILIES = (
    pem_tokens,
    jwt,
    vendors,
    kubernetes_docker,
    cloud,
    keyvalue,
    formats,
    command_line,
    cards,
    urls,
    pii,
)

ORDER = (
    "private_key",
    "certificate",
    "kubeconfig",
    "kubernetes_secret",
    "docker_auth",
    *vendors.ORDER,
    "jwt",
    "aws_secret_access_key",
    "aws_access_key_id",
    "authorization",
    "cookie",
    "token",
    "api_key",
    "storage_credentials",
    "netrc",
    "pgpass",
    "sql_password",
    "password",
    "secret",
    "credentials",
    "encryption_key",
    "session_id",
    "command_line",
    "card_number",
    "url_credentials",
    "email",
)
if set(ORDER) != set(REGISTERED) or len(ORDER) != len(REGISTERED):
    raise RuntimeError("every registered detector has one place in ORDER")

BUILTIN: tuple[Detector, ...] = tuple(REGISTERED[name] for name in ORDER)
BUILTIN_NAMES = frozenset(ORDER)
# Keys of `meta.masked` that are not detectors; custom patterns may not take them.
FAILED = "masking_failed"
RESERVED_NAMES = BUILTIN_NAMES | {FAILED}

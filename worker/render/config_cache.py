"""worker.yaml as parsed before, read back without the YAML parser.

Importing PyYAML and parsing a small worker.yaml cost about 12 ms of every
`prompt-worker render` and `mask` run, around 5% of their start-up
(docs/PERFORMANCE.md, "Command start-up"). The parsed document is kept in the
on-disk cache of the masking databases (`worker.masking.db_cache`: same directory,
same switch, same damage checks), marshalled and named after a hash of the file's
text and of the interpreter (marshal's format is the interpreter's). A document that
marshal cannot hold exactly (dates, say) is not kept, and a file that is not valid
YAML never is: its error message always comes from the parser.
"""

import hashlib
import marshal
import sys
from typing import Any

from worker.masking import db_cache

_KIND = "config"


def _key(text: str) -> str:
    digest = hashlib.sha256(sys.version.encode())
    digest.update(text.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def load(text: str) -> tuple[bool, Any]:
    """(True, the document) when `text` was parsed before, else (False, None)."""
    payload = db_cache.load(_key(text), _KIND)
    if payload is None:
        return False, None
    try:
        return True, marshal.loads(payload)
    except (EOFError, ValueError, TypeError):
        return False, None


def store(text: str, document: Any) -> None:
    """Keep `document`, the parse of `text`, when marshal holds it exactly."""
    try:
        payload = marshal.dumps(document)
    except ValueError:  # e.g. a date: not kept, parsed again next time
        return
    db_cache.store(_key(text), payload, _KIND)

"""A `meta.warnings` entry for each member of a job the worker does not know.

The contract ignores unknown members so that producers can add fields before the
worker knows them (CONTRACT.md §2); a misspelt member ("tols" for "tools") is ignored
the same way, and would change the prompt with nothing to say so. The warning names
the member and the nearest known one; the job still renders.
"""

from typing import Any

from schemas.job import Job

KNOWN_MEMBERS = frozenset(Job.model_fields)
# A producer far ahead of the worker may add many members: a few are named, the rest
# counted, so the reply stays small.
MAX_NAMED = 10
_NAME_CHARS = 80


def unknown_member_warnings(data: dict[str, Any]) -> list[str]:
    """One sentence per top-level member of `data` that a job does not have, in order."""
    if KNOWN_MEMBERS.issuperset(data):  # every job but a few: one set operation
        return []
    unknown = [name for name in data if name not in KNOWN_MEMBERS]
    import difflib  # only a job with an unknown member needs it (start-up time)

    warnings = []
    for name in unknown[:MAX_NAMED]:
        shown = name if len(name) <= _NAME_CHARS else name[: _NAME_CHARS - 1] + "…"
        close = difflib.get_close_matches(name, KNOWN_MEMBERS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        warnings.append(f"unknown member {shown!r} of the job is ignored{hint}")
    if len(unknown) > MAX_NAMED:
        warnings.append(f"{len(unknown) - MAX_NAMED} more unknown members are ignored")
    return warnings

"""Drift: how a re-rendered message list compares with what was sent before.

`same` when the messages are equal (role and content, byte for byte), `changed` when the
job rendered to something else, `error` when it did not render at all. For a changed
job, `message_diff` gives one unified diff per message that differs, for a human to read.
"""

import difflib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SAME = "same"
CHANGED = "changed"
ERROR = "error"

DIFF_SUFFIX = ".diff"
# `<input line, 9 digits>-<job id>.diff`: sorts in input order; only these are ours to clear.
_DIFF_NAME = re.compile(r"^\d{9}-[A-Za-z0-9._-]*\.diff$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def classify(ok: bool, messages: Any, prior: list[dict[str, str]] | None) -> str:
    """Drift of a reply (`ok`, its `messages`) from the `prior` messages of its line."""
    if not ok or prior is None:
        return ERROR
    return SAME if messages == prior else CHANGED


def split_keeping_ends(text: str) -> list[str]:
    """The lines of `text`, each with its newline (the last one may have none)."""
    # Split on "\n" only (str.splitlines would also cut at \r, \x0c, \u2028, ...), keeping
    # the ends so a lost or added trailing newline shows up in the diff.
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _label(side: str, index: int, message: dict[str, str] | None) -> str:
    role = message["role"] if message is not None else "absent"
    return f"{side}/messages[{index}] ({role})"


def message_diff(before: Sequence[dict[str, str]], after: Sequence[dict[str, str]]) -> str:
    """One unified diff per message that differs between `before` and `after`."""
    out = []
    changed = 0
    for index in range(max(len(before), len(after))):
        old = before[index] if index < len(before) else None
        new = after[index] if index < len(after) else None
        if old == new:
            continue
        changed += 1
        old_label, new_label = _label("before", index, old), _label("after", index, new)
        if old is not None and new is not None and old["role"] != new["role"]:
            out.append(f"# messages[{index}]: role {old['role']} -> {new['role']}\n")
        diff = difflib.unified_diff(
            split_keeping_ends(old["content"]) if old is not None else [],
            split_keeping_ends(new["content"]) if new is not None else [],
            old_label,
            new_label,
        )
        for text in diff:
            out.append(text if text.endswith("\n") else text + "\n\\ No newline at end of file\n")
    out.insert(0, f"# {changed} of {max(len(before), len(after))} messages differ\n")
    return "".join(out)


def diff_file_name(line: int, job_id: str | None) -> str:
    safe = _UNSAFE.sub("_", job_id or "")[:80]
    return f"{line:09d}-{safe}{DIFF_SUFFIX}"


class DiffWriter:
    """Writes the first `limit` diffs (None: all) into `directory`, created on first use."""

    def __init__(self, directory: Path, limit: int | None, *, resume: bool) -> None:
        self.directory = directory
        self.limit = limit
        existing = self._ours() if directory.is_dir() else []
        if resume:
            # The first run wrote diffs for the first changed jobs; continue the count.
            self.written = len(existing)
        else:
            # Diffs of an earlier run of the same output would be mistaken for this one's.
            for path in existing:
                path.unlink()
            self.written = 0

    def _ours(self) -> list[Path]:
        return [p for p in self.directory.iterdir() if _DIFF_NAME.match(p.name)]

    def budget(self) -> int:
        """How many more diffs are wanted."""
        if self.limit is None:
            return 1 << 62
        return max(0, self.limit - self.written)

    def write(self, line: int, job_id: str | None, kind: str | None, diff: str) -> None:
        """Write the `diff` of the job on input `line`, under a header naming it."""
        if self.budget() <= 0:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        header = f"# job {job_id} (input line {line}, kind {kind})\n"
        path = self.directory / diff_file_name(line, job_id)
        path.write_text(header + diff, encoding="utf-8")
        self.written += 1

"""Line prefixes: what log collectors write before every line of what a program printed.

`docker compose logs` writes `web_1  | `, `kubectl logs --prefix` writes `[pod/x/c] `,
journald `Jun 01 08:00:00 host unit[42]: `, `kubectl logs --timestamps` and
`docker logs -t` an RFC 3339 time, a mail or chat quote `> `. A private key, a YAML
document or a JSON value printed over several lines then carries the prefix on each,
and a detector that reads across lines (a PEM block, a Secret manifest, a YAML block
scalar) no longer sees it as one. The masker strips the prefixes of such runs of lines,
masks what is left and maps the edits back (`worker.masking.masker`).
"""

import re
from dataclasses import dataclass

from worker.masking.text import lines

_TIME = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?[ \t]+"
_SYSLOG_TIME = r"[A-Z][a-z]{2}[ \t]+\d{1,2}[ \t]+\d\d:\d\d:\d\d[ \t]+"
# journald and syslog after their time: host, then the unit and its pid.
_UNIT = r"[\w.-]+[ \t]+[^\s:\[\]]+(?:\[\d+\])?:[ \t]"
_PREFIX = re.compile(
    rf"(?:(?:(?P<time>{_TIME})|(?P<syslog>{_SYSLOG_TIME}))(?P<unit>{_UNIT})?)?"
    r"(?:"
    r"(?P<compose>[A-Za-z0-9][\w.-]*[ \t]*\|[ \t]?)"
    r"|(?P<kubectl>\[[^\]\s]{1,253}\][ \t])"
    r")?"
    r"(?P<quote>(?:>[ \t]?)+)?"
)
# Each shape alone is a prefix, except a bare syslog time (without its unit) and a bare
# compose name (`ls | wc` is a pipe): those need a line of the same shape beside them.
_ALONE = ("time", "unit", "kubectl", "quote")


@dataclass(frozen=True, slots=True)
class Prefix:
    start: int  # where the line starts
    end: int  # where what the program printed starts
    shape: tuple[str, ...]  # the parts that matched, in order


def line_prefix(text: str, start: int, end: int) -> Prefix | None:
    """The prefix of the line `text[start:end]`, if it has one."""
    match = _PREFIX.match(text, start, end)
    if match is None or match.end() == start:
        return None
    shape = tuple(name for name, value in match.groupdict().items() if value)
    if shape == ("syslog",):
        return None
    return Prefix(start, match.end(), shape)


def prefix_end(text: str, start: int, end: int) -> int:
    """Where a line's content starts once a prefix that stands alone is skipped."""
    prefix = line_prefix(text, start, end)
    if prefix is None or not any(part in _ALONE for part in prefix.shape):
        return start
    return prefix.end


def prefixed_lines(text: str) -> list[Prefix]:
    """The prefixes of the lines of `text` that belong to a run: consecutive lines with a
    prefix of the same shape, at least two of them (or one, of a shape that stands
    alone and that holds more than a quote)."""
    found: list[Prefix] = []
    run: list[Prefix] = []

    def close() -> None:
        if len(run) > 1 or (
            run and run[0].shape != ("quote",) and any(p in _ALONE for p in run[0].shape)
        ):
            found.extend(run)
        run.clear()

    for start, end in lines(text):
        prefix = line_prefix(text, start, end)
        if prefix is None or (run and prefix.shape != run[-1].shape):
            close()
        if prefix is not None:
            run.append(prefix)
    close()
    return found

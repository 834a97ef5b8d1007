"""The edits of several detectors, one after another, as edits of the text they began on.

Each detector edits the text the one before it left; to carry what all of them did
back to another text (the lines of a log with their prefixes, see
`worker.masking.prefixes`), the log keeps every edit in the positions of the first
text. An edit that begins or ends inside an earlier edit's replacement is merged with
it: one edit of the first text, whose replacement is what the current text holds there.
"""

from dataclasses import dataclass

from worker.masking.detectors import Edit


@dataclass(slots=True)
class _Entry:
    start: int  # in the first text
    end: int
    at: int  # where its replacement stands in the current text
    replacement: str

    @property
    def at_end(self) -> int:
        return self.at + len(self.replacement)


class EditLog:
    def __init__(self) -> None:
        self._entries: list[_Entry] = []  # sorted, not overlapping

    def add(self, edits: list[Edit]) -> None:
        """Record `edits` (sorted, not overlapping, in the current text's positions),
        after which the current text is the one they made. Linear in both lists."""
        old = self._entries
        out: list[_Entry] = []
        index = 0
        offset = 0  # current - first-text position, after the old entries passed
        growth = 0  # new - current position, after the new edits passed
        entry: _Entry | None = None  # the edit being built
        source: _Entry | None = None  # an old entry whose replacement goes on after it
        resume = 0  # where (current positions) the rest of `source`'s replacement starts

        def close() -> None:
            if entry is not None:
                if source is not None:
                    entry.replacement += source.replacement[resume - source.at :]
                out.append(entry)

        for start, end, replacement in edits:
            if entry is not None and source is not None and start < source.at_end:
                # Inside the same earlier replacement: one edit with the one before.
                entry.replacement += source.replacement[resume - source.at : start - source.at]
                entry.replacement += replacement
            else:
                close()
                while index < len(old) and old[index].at_end <= start:
                    passed = old[index]
                    offset = passed.at_end - passed.end
                    passed.at += growth
                    out.append(passed)
                    index += 1
                source = None
                if index < len(old) and old[index].at < start:
                    source = old[index]  # begins inside an earlier replacement
                    index += 1
                    offset = source.at_end - source.end
                    entry = _Entry(
                        source.start,
                        source.end,
                        source.at + growth,
                        source.replacement[: start - source.at] + replacement,
                    )
                else:
                    entry = _Entry(start - offset, start - offset, start + growth, replacement)
            if source is None or end > source.at_end:
                source = None
                while index < len(old) and old[index].at < end:
                    absorbed = old[index]
                    index += 1
                    offset = absorbed.at_end - absorbed.end
                    entry.end = max(entry.end, absorbed.end)
                    if absorbed.at_end > end:
                        source = absorbed  # ends inside an earlier replacement
                if source is None:
                    entry.end = max(entry.end, end - offset)
            resume = end
            growth += len(replacement) - (end - start)
        close()
        for rest in old[index:]:
            rest.at += growth
            out.append(rest)
        self._entries = out

    def edits(self) -> list[Edit]:
        """Every edit recorded, in the first text's positions."""
        return [(e.start, e.end, e.replacement) for e in self._entries]

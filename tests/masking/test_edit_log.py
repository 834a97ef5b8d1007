"""The edit log (worker/masking/edit_log.py) against a model that tracks, for every
character of the current text, which characters of the first text it stands for."""

import itertools
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.masking.detectors import Edit, apply_edits
from worker.masking.edit_log import EditLog


@dataclass(frozen=True)
class Origin:
    """What a character of the current text stands for: a first-text character kept
    (`edit` None), or a character of the replacement written by edit number `edit`
    over the first text's `start:end`."""

    start: int
    end: int
    edit: int | None = None


def _edits(draw: st.DrawFn, size: int) -> list[Edit]:
    """Sorted, non-overlapping, non-empty edits of a text of `size` characters."""
    cuts = sorted(draw(st.sets(st.integers(0, size), max_size=6)))
    edits = []
    for start, end in zip(cuts[::2], cuts[1::2], strict=False):
        if end > start:
            edits.append((start, end, draw(st.sampled_from(["[M]", "[MASKED_X]", "#"]))))
    return edits


@st.composite
def rounds(draw: st.DrawFn) -> tuple[str, list[list[Edit]]]:
    text = draw(st.text(alphabet="abcdef\n", min_size=1, max_size=40))
    size = len(text)
    result = []
    for _ in range(draw(st.integers(1, 4))):
        edits = _edits(draw, size)
        size += sum(len(r) - (e - s) for s, e, r in edits)
        result.append(edits)
    return text, result


def _inside_a_replacement(origins: list[Origin], pos: int) -> bool:
    return (
        0 < pos < len(origins)
        and origins[pos - 1] == origins[pos] is not None
        and (origins[pos].edit is not None)
    )


@settings(max_examples=1000, deadline=None)
@given(rounds())
def test_the_log_maps_every_edit_back_to_the_first_text(
    case: tuple[str, list[list[Edit]]],
) -> None:
    first, all_rounds = case
    text = first
    origins = [Origin(i, i + 1) for i in range(len(first))]
    log = EditLog()
    clean = True  # no edit began or ended inside an earlier replacement
    number = 0
    for edits in all_rounds:
        applied = apply_edits(text, edits)
        log.add(applied.edits)
        model: list[Origin] = []
        last = 0
        for start, end, replacement in applied.edits:
            clean = clean and not (
                _inside_a_replacement(origins, start) or _inside_a_replacement(origins, end)
            )
            model.extend(origins[last:start])
            covered = origins[start:end]
            span = Origin(min(o.start for o in covered), max(o.end for o in covered), number)
            number += 1
            model.extend([span] * len(replacement))
            last = end
        model.extend(origins[last:])
        origins, text = model, applied.text
    kept = log.edits()
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(kept))  # sorted, apart
    # The first text's characters outside the log's edits are those no edit replaced.
    untouched = {o.start for o in origins if o.edit is None}
    outside = {i for i in range(len(first)) if not any(s <= i < e for s, e, _ in kept)}
    assert outside == untouched
    # The log's edits make the same text from the first one.
    assert apply_edits(first, kept).text == text
    if clean:  # and edits that never cut into a replacement are kept as they were
        assert len(kept) == len({o.edit for o in origins if o.edit is not None})

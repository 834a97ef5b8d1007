"""Fitting a job's messages into its budget (CONTRACT.md §11).

The order of work keeps the common cases cheap and the large ones linear:

1. **Fits by size.** A bound that needs no tokenizing (characters for `estimate`, UTF-8
   bytes for tiktoken) at or under the budget: the messages go out untouched.
2. **Whole items.** The plan's lists are cut in tiers, least important first (oldest
   chat exchanges, then events, conclusions last), the last item of every list kept.
   The prompt with every cuttable item gone (the skeleton) is counted once; then items
   are counted newest first, only until the room left is used up, so the material of a
   huge session that is left out anyway is never tokenized. Cuts are rounded up to
   block boundaries: a block is about 1/`BLOCK_SHARE` of the budget, measured in
   characters from the start of its list, so its boundaries stay where they are while
   a session grows and consecutive renders keep their prefix (provider prompt caches)
   until a new block has to go. That is the `"tight"` policy; under `"cache"` (the
   default) cuts are rounded up to the end of a *step* instead, a share of the budget
   (steps.py), so that a growing session starts a new cut rarely.
3. **Middles.** When every cuttable item is gone and the prompt is still too large, the
   longest remaining texts are shortened to a common size (water-filling), their
   beginning and end kept; under `"cache"` the level and the middles cut move in steps
   too, so that a text growing at its end keeps its beginning and marker.
4. **Cannot fit.** With every text shortened to nothing, still too large: `OverBudget`.

Each candidate prompt is counted exactly before it is accepted, so a prompt that goes
out always fits; item counts only guide the choice. With cl100k_base the count of a
candidate reuses the counts of the items it keeps (pieces.py: exact, because they are
joined at line seams), so a kept item is tokenized once, not once to choose the cut and
again to verify it.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from schemas.budget import DEFAULT_POLICY, Policy
from schemas.job import Job
from worker.families.budget import ListSection, Path, Plan
from worker.render.budget import markers, steps
from worker.render.budget.edits import get_at, set_at
from worker.render.budget.meta import Elision, Fitted, OverBudget
from worker.render.budget.pieces import PieceCounter
from worker.render.budget.tokenizers import Tokenizer

Messages = list[dict[str, str]]
Build = Callable[[Job], Messages]

# A block, the unit of whole-item cuts, is about this fraction of the budget: a larger
# one keeps prefixes longer, a smaller one wastes less of the budget (docs/BUDGETS.md).
BLOCK_SHARE = 8
# Characters per token used to size blocks in characters (stable as a session grows,
# whatever the tokenizer); TARSy's estimate.
CHARS_PER_TOKEN = 4
# Tokens an item's framing (headings, separators) adds to its text, for the guide counts.
ITEM_FRAMING = 8
# Tokens that joining two texts may save at their seam (a merge across it), so that a
# sum of separately counted pieces stays a floor under the count of the whole.
SEAM_TOKENS = 2
# How many shortened candidates are tried before every text is cut to nothing.
MIDDLE_ROUNDS = 8


@dataclass(slots=True)
class _Tier:
    """The cuttable items of one list that go at the same stage, oldest first."""

    section: ListSection
    indexes: list[int]  # positions in the list
    chars: list[int]  # size of each item's text
    starts: list[int] = field(default_factory=list)  # chars before each item in the tier

    def __post_init__(self) -> None:
        total = 0
        for size in self.chars:
            self.starts.append(total)
            total += size

    def cut_counts(self, block_chars: int) -> list[int]:
        """The cut counts that end on a block boundary, ascending (the last is all)."""
        counts = [
            k
            for k in range(1, len(self.indexes))
            if self.starts[k] // block_chars != self.starts[k - 1] // block_chars
        ]
        counts.append(len(self.indexes))
        return counts


@dataclass(slots=True)
class _Slot:
    """A text a middle cut may shorten."""

    name: str
    path: Path
    text: str
    tokens: int = 0


class Trimmer:
    def __init__(
        self,
        job: Job,
        build: Build,
        plan: Plan,
        limit: int,
        tokenizer: Tokenizer,
        block_share: int = BLOCK_SHARE,
        policy: Policy = DEFAULT_POLICY,
    ) -> None:
        self.job = job
        self.tight = policy == "tight"
        self.build = build
        self.plan = plan
        self.limit = limit
        self.tokenizer = tokenizer
        self.block_chars = max(1, limit * CHARS_PER_TOKEN // block_share)
        self.lists: dict[str, list[Any]] = {}
        for section in plan.lists:
            items = get_at(job, section.path)
            if items:
                self.lists[section.name] = list(items)
        self.tiers = self._tiers()
        # Guide counts of items, by (section name, index); counted lazily, newest first.
        self.item_tokens: dict[tuple[str, int], int] = {}
        # Characters and tokens (less framing) of the items counted so far.
        self._counted_chars = 0
        self._counted_tokens = 0
        self.counter = PieceCounter(tokenizer)
        # Each message's count in the prompt `_size` counted last.
        self.last_counts: list[int] = []
        # Set by `_minimal_cuts` for the steps of "cache": the prompt's size by the guide
        # counts with the fewest items cut, and the room of the cuttable material (the
        # budget less the skeleton without its most recent items).
        self._used_at_minimal = float(limit)
        self._item_room = limit
        self._steps: dict[int, int] = {}  # each tier's step, in characters

    def _tiers(self) -> list[_Tier]:
        first: list[_Tier] = []
        last: list[_Tier] = []
        for section in self.plan.lists:
            items = self.lists.get(section.name)
            if not items:
                continue
            removable = range(len(items) - 1)  # the most recent item is always kept
            for tiers, wanted in ((first, False), (last, True)):
                indexes = [i for i in removable if section.last_resort(items[i]) is wanted]
                if indexes:
                    chars = [len(section.piece(items[i])) for i in indexes]
                    tiers.append(_Tier(section, indexes, chars))
        return first + last

    # -- whole items ---------------------------------------------------------------

    def _item_tokens(self, tier: _Tier, position: int) -> int:
        key = (tier.section.name, tier.indexes[position])
        tokens = self.item_tokens.get(key)
        if tokens is None:
            item = self.lists[tier.section.name][tier.indexes[position]]
            counted = self._count_item(tier.section, item)
            tokens = self.item_tokens[key] = counted + ITEM_FRAMING
            self._counted_chars += tier.chars[position]
            self._counted_tokens += counted
        return tokens

    def _ratio(self) -> float:
        """Tokens per character of the items counted so far, to size the uncounted."""
        if self._counted_chars == 0:
            return 1 / CHARS_PER_TOKEN
        return self._counted_tokens / self._counted_chars

    def _count_item(self, section: ListSection, item: Any) -> int:
        """The exact count of the item's piece, its texts' bodies kept for `_size`."""
        parts = section.parts(item)
        if parts is None:
            return self.counter.count(section.piece(item))
        return self.counter.count_joined(parts)

    def _size(self, messages: Messages, job: Job) -> int:
        """The exact size of `messages`, built from `job`, reusing the counts of the
        job's items counted before."""
        groups = []
        for _, path in self.plan.texts:
            text = get_at(job, path)
            if isinstance(text, str):
                groups.append([text])
        for section in self.plan.lists:
            items = get_at(job, section.path)
            if items:
                group: list[str] = []
                for item in items:
                    parts = section.parts(item)
                    group.extend([section.piece(item)] if parts is None else parts)
                groups.append(group)
        self.last_counts = self.counter.message_counts(messages, groups)
        return sum(self.last_counts)

    def _cut_job(self, cuts: list[int], placeholder: bool = False) -> tuple[Job, list[Elision]]:
        """The job with the first `cuts[t]` items of tier t left out, a marker in place."""
        removed: dict[str, list[tuple[_Tier, int]]] = {}
        for tier, count in zip(self.tiers, cuts, strict=True):
            for position in range(count):
                removed.setdefault(tier.section.name, []).append((tier, position))
        ratio = None if placeholder else self._ratio()
        job = self.job
        elisions: list[Elision] = []
        for section in self.plan.lists:
            gone = removed.get(section.name)
            if not gone:
                continue
            items = self.lists[section.name]
            chars = sum(tier.chars[position] for tier, position in gone)
            tokens = 0
            for tier, position in gone:
                counted = self.item_tokens.get((section.name, tier.indexes[position]))
                if counted is not None:
                    tokens += counted - ITEM_FRAMING
                else:
                    assert ratio is not None or placeholder
                    tokens += round(tier.chars[position] * (ratio or 0))
            indexes = {tier.indexes[position] for tier, position in gone}
            if placeholder:
                text = markers.items_left_out(
                    markers.PLACEHOLDER_COUNT, section.noun, markers.PLACEHOLDER_CHARS
                )
            else:
                text = markers.items_left_out(len(indexes), section.noun, chars)
            first = min(indexes)
            kept: list[Any] = []
            for i, item in enumerate(items):
                if i == first:
                    kept.append(section.marker(text))
                if i not in indexes:
                    kept.append(item)
            job = set_at(job, section.path, kept)
            elisions.append(Elision(section.name, len(indexes), chars, tokens))
        return job, elisions

    def _minimal_cuts(self) -> tuple[list[int] | None, bool]:
        """The fewest items to leave out by the guide counts (None when all of them fit),
        and whether the guide counts alone prove the whole prompt is over the budget
        (else only counting it can tell)."""
        skeleton, _ = self._cut_job([len(t.indexes) for t in self.tiers], placeholder=True)
        # The most recent items and the texts stay in the skeleton: counted as pieces,
        # they are tokenized once for the skeleton and every candidate.
        newest = 0
        for section in self.plan.lists:
            items = self.lists.get(section.name)
            if items:
                newest += self._count_item(section, items[-1])
        self._count_texts()
        fixed = self._size(self.build(skeleton), skeleton)
        room = self.limit - fixed
        self._item_room = room + newest
        # What the whole prompt takes at least: the skeleton less its markers, plus every
        # item counted so far less what joining texts may save at their seams.
        floor = fixed - self._placeholder_tokens()
        cuts: list[int] | None = None
        for t in reversed(range(len(self.tiers))):
            tier = self.tiers[t]
            for position in reversed(range(len(tier.indexes))):
                tokens = self._item_tokens(tier, position)
                floor += tokens - ITEM_FRAMING - SEAM_TOKENS
                if cuts is None and tokens > room:
                    self._used_at_minimal = self.limit - room
                    cuts = [0] * len(self.tiers)
                    cuts[t] = position + 1
                    for earlier in range(t):
                        cuts[earlier] = len(self.tiers[earlier].indexes)
                room -= tokens
                if cuts is not None and floor > self.limit:
                    return cuts, True
        return cuts, False

    def _count_texts(self) -> None:
        """Counts the texts a middle cut may shorten as pieces: each is then tokenized
        once for every prompt that holds it and for its shortening."""
        for _, path in self.plan.texts:
            text = get_at(self.job, path)
            if isinstance(text, str):
                self.counter.count(text)

    def _placeholder_tokens(self) -> int:
        """Tokens of the skeleton's markers, with their framing."""
        sections = {tier.section.name: tier.section for tier in self.tiers}
        return sum(
            self.tokenizer.count(
                markers.items_left_out(
                    markers.PLACEHOLDER_COUNT, section.noun, markers.PLACEHOLDER_CHARS
                )
            )
            + ITEM_FRAMING
            for section in sections.values()
        )

    def _round_up(self, cuts: list[int]) -> list[int]:
        """Cuts extended to the block boundary at or after each tier's cut."""
        rounded = []
        for tier, count in zip(self.tiers, cuts, strict=True):
            if count == 0:
                rounded.append(0)
            else:
                rounded.append(next(k for k in tier.cut_counts(self.block_chars) if k >= count))
        return rounded

    def _cut_more(self, cuts: list[int], tokens: int) -> list[int] | None:
        """Cuts that leave out at least `tokens` more (by the guide counts), block by
        block; None when every item is already out."""
        cuts = list(cuts)
        freed = 0
        for t, tier in enumerate(self.tiers):
            for count in tier.cut_counts(self.block_chars):
                if count <= cuts[t]:
                    continue
                freed += sum(self._item_tokens(tier, p) for p in range(cuts[t], count))
                cuts[t] = count
                if freed >= tokens:
                    return cuts
        return cuts if freed else None

    # -- steps ("cache") -------------------------------------------------------------

    def _step(self, t: int) -> int:
        """Tier t's step in characters, sized by its oldest items' tokens per character."""
        step = self._steps.get(t)
        if step is None:
            tier = self.tiers[t]
            chars = tokens = 0
            for position, size in enumerate(tier.chars):
                tokens += self._item_tokens(tier, position) - ITEM_FRAMING
                chars += size
                if chars >= steps.SAMPLE_CHARS:
                    break
            ratio = chars / tokens if tokens > 0 else CHARS_PER_TOKEN
            step = self._steps[t] = steps.step_chars(self.limit, self._item_room, ratio)
        return step

    def _guess(self, tier: _Tier, position: int) -> float:
        """An item's tokens: its count when counted, else scaled from its characters
        (items beyond the cut are never tokenized)."""
        counted = self.item_tokens.get((tier.section.name, tier.indexes[position]))
        if counted is not None:
            return counted
        return tier.chars[position] * self._ratio() + ITEM_FRAMING

    def _step_up(self, cuts: list[int], used: float) -> list[int]:
        """Cuts extended to the end of a step of the tier cut partly (steps.choose_cut);
        `used`: the prompt's tokens with `cuts`, by the guide counts."""
        cuts = list(cuts)
        for t, tier in enumerate(self.tiers):
            if 0 < cuts[t] < len(tier.indexes):
                cuts[t] = steps.choose_cut(
                    tier.starts,
                    cuts[t],
                    self._step(t),
                    used,
                    self.limit,
                    partial(self._guess, tier),
                )
                break
        return cuts

    def _step_more(self, cuts: list[int], tokens: int, size: int) -> list[int] | None:
        """Cuts that leave out at least `tokens` more than `cuts` (by the guide counts),
        then up to the end of a step; `size`: the prompt's tokens with `cuts`. None when
        every item is already out."""
        cuts = list(cuts)
        freed = 0
        for t, tier in enumerate(self.tiers):
            while cuts[t] < len(tier.indexes):
                freed += self._item_tokens(tier, cuts[t])
                cuts[t] += 1
                if freed >= tokens:
                    return self._step_up(cuts, size - freed)
        return cuts if freed else None

    def _first_cut(self, cuts: list[int]) -> list[int]:
        """The fewest items to cut (`_minimal_cuts`), rounded by the policy."""
        return self._round_up(cuts) if self.tight else self._step_up(cuts, self._used_at_minimal)

    # -- the whole ------------------------------------------------------------------

    def fit(self, messages: Messages) -> Fitted | OverBudget:
        """`messages` (the job's, whole) fitted; the caller has found no bound under the
        budget that proves them to fit without counting."""
        cuts: list[int] | None = None
        over = False
        if self.tiers:
            cuts, over = self._minimal_cuts()
        else:
            self._count_texts()
        if not over:
            size = self._size(messages, self.job)
            if size <= self.limit:
                return Fitted(messages, size, job=self.job, message_tokens=self.last_counts)
            if not self.tiers:
                return self._fit_middles(self.job, [], size)
            if cuts is None:
                # Over by the exact count alone: the oldest item goes first.
                none = [0] * len(self.tiers)
                if self.tight:
                    cuts = self._round_up([1, *none[1:]])
                else:
                    cuts = self._step_more(none, size - self.limit, size)
                    assert cuts is not None  # there are items to cut
            else:
                cuts = self._first_cut(cuts)
        else:
            assert cuts is not None  # proven over means some cut was found
            cuts = self._first_cut(cuts)
        while True:
            job, elisions = self._cut_job(cuts)
            candidate = self.build(job)
            size = self._size(candidate, job)
            if size <= self.limit:
                return Fitted(
                    candidate, size, elisions=elisions, job=job, message_tokens=self.last_counts
                )
            if self.tight:
                more = self._cut_more(cuts, size - self.limit)
            else:
                more = self._step_more(cuts, size - self.limit, size)
            if more is None:
                return self._fit_middles(job, elisions, size)
            cuts = more

    # -- middles --------------------------------------------------------------------

    def _slots(self, job: Job) -> list[_Slot]:
        slots: list[_Slot] = []
        for name, path in self.plan.texts:
            text = get_at(job, path)
            if isinstance(text, str) and text:
                slots.append(_Slot(name, path, text))
        for section in self.plan.lists:
            # Markers are not shortened: only items of the job as received.
            original = {id(item): i for i, item in enumerate(self.lists.get(section.name, ()))}
            for index, item in enumerate(get_at(job, section.path) or ()):
                number = original.get(id(item))
                if number is None:
                    continue
                for sub, text in section.texts(item):
                    if text:
                        path = (*section.path, index, *sub)
                        slots.append(_Slot(f"{section.name}[{number}]", path, text))
        for slot in slots:
            slot.tokens = self.counter.count(slot.text)
        return slots

    def _shorten(
        self, job: Job, slots: list[_Slot], cap: int, marker_tokens: int
    ) -> tuple[Job, list[Elision]]:
        elisions = []
        for slot in slots:
            if slot.tokens <= cap + marker_tokens:
                continue  # its marker would cost what the cut saves
            length = len(slot.text)
            if self.tight:
                keep = length * cap // slot.tokens
                head = (keep + 1) // 2
                gone = length - keep
                tokens = slot.tokens - cap
            else:
                window = steps.middle_window(
                    length, slot.tokens, cap, self._head_ratio(slot.text), self.limit
                )
                if window is None:
                    continue
                head, gone = window
                tokens = round(slot.tokens * gone / length)
            middle = markers.middle_left_out(gone)
            text = slot.text[:head] + middle + slot.text[head + gone :]
            job = set_at(job, slot.path, text)
            elisions.append(Elision(slot.name, 1, gone, tokens))
        return job, elisions

    def _head_ratio(self, text: str) -> float:
        """Characters per token of a text's beginning, which a text growing at its end
        keeps."""
        sample = text[: steps.SAMPLE_CHARS]
        tokens = self.counter.count(sample)
        return len(sample) / tokens if tokens else CHARS_PER_TOKEN

    def _level(self, slots: list[_Slot], excess: int, marker_tokens: int) -> int | None:
        """The water level: under "cache" on a grid, so that it stays put as a session
        grows."""
        cap = _water_level(slots, excess, marker_tokens)
        if cap is None or self.tight:
            return cap
        grid = steps.cap_step(self.limit)
        return cap - cap % grid if cap >= grid else cap

    def _fit_middles(self, job: Job, elisions: list[Elision], size: int) -> Fitted | OverBudget:
        slots = self._slots(job)
        marker_tokens = self.tokenizer.count(markers.middle_left_out(markers.PLACEHOLDER_CHARS))
        excess = size - self.limit
        for _ in range(MIDDLE_ROUNDS):
            cap = self._level(slots, excess, marker_tokens)
            if cap is None:
                break
            shortened, cut = self._shorten(job, slots, cap, marker_tokens)
            candidate = self.build(shortened)
            new_size = self._size(candidate, shortened)
            if new_size <= self.limit:
                return Fitted(
                    candidate,
                    new_size,
                    elisions=elisions + cut,
                    job=shortened,
                    message_tokens=self.last_counts,
                )
            excess += new_size - self.limit
        shortened, cut = self._shorten(job, slots, 0, marker_tokens)
        candidate = self.build(shortened)
        new_size = self._size(candidate, shortened)
        if new_size <= self.limit:
            return Fitted(
                candidate,
                new_size,
                elisions=elisions + cut,
                job=shortened,
                message_tokens=self.last_counts,
            )
        return OverBudget(required=new_size, allowed=self.limit)


def _water_level(slots: list[_Slot], excess: int, marker_tokens: int) -> int | None:
    """The largest size (tokens) to shorten every longer text to, so that at least
    `excess` tokens go, each shortened text paying for its marker; None if no size
    does it."""

    def freed(cap: int) -> int:
        return sum(s.tokens - cap - marker_tokens for s in slots if s.tokens > cap + marker_tokens)

    if not slots or freed(0) < excess:
        return None
    low, high = 0, max(s.tokens for s in slots)
    while low < high:
        middle = (low + high + 1) // 2
        if freed(middle) >= excess:
            low = middle
        else:
            high = middle - 1
    return low

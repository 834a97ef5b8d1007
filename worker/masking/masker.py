"""The masking stage applied to every outside text of a job before it is rendered.

`Masker.from_config(cfg)` once at start-up, then `mask_job(job) -> (job, counts)` per
job. The common case is a job with no secret: one prefilter pass over all its texts
finds no anchor, and the very same Job object comes back. Only texts holding an anchor
run the detectors it gates, starting from the anchor positions the prefilter found,
and only changed fields are copied.

Fail closed: when a detector raises on some text, the whole field is replaced by a
redaction notice and the failure is logged with the detector and the field path only,
never the text.
"""

import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from types import UnionType
from typing import Any, Union, get_args, get_origin

import structlog
from pydantic import BaseModel

from schemas.job import Job
from worker.masking import prefilter as prefilters
from worker.masking.config import CustomPattern, MaskingConfig
from worker.masking.detectors import (
    BUILTIN,
    FAILED,
    Anchor,
    Detector,
    edits_result,
    is_basic_credentials,
)
from worker.masking.fields import DATA, all_paths
from worker.masking.keyvalue import (
    normalise_key,
    owns_api_key,
    owns_aws_secret,
    owns_password,
    owns_private_key,
    owns_secret,
    owns_token,
)
from worker.masking.prefilter import Hits
from worker.masking.text import MASK_PREFIX, TextView, is_placeholder

log = structlog.get_logger(__name__)

REDACTION_NOTICE = "[MASKED_FIELD: masking failed, content withheld]"
# A detector's output feeds the next one; rounds repeat until nothing changes, so
# masking is idempotent. Real text settles in one round; the cap bounds odd input.
_MAX_ROUNDS = 4

# Keys whose string value is a credential in structured data, by the detector that
# owns them (the same rules as `key: value` in text).
_KEY_RULES = (
    ("aws_secret_access_key", owns_aws_secret, "[MASKED_AWS_SECRET_ACCESS_KEY]"),
    ("password", owns_password, "[MASKED_PASSWORD]"),
    ("secret", owns_secret, "[MASKED_SECRET]"),
    ("api_key", owns_api_key, "[MASKED_API_KEY]"),
    ("token", owns_token, "[MASKED_TOKEN]"),
    ("private_key", owns_private_key, "[MASKED_PRIVATE_KEY]"),
)
_KEY_SHAPE = re.compile(r"[A-Za-z0-9_.-]+")


def custom_detector(pattern: CustomPattern) -> Detector:
    compiled = pattern.compiled()
    replacement = pattern.replacement
    group: str | int = "secret" if "secret" in compiled.groupindex else 0

    def apply(view: TextView) -> tuple[str, int]:
        edits = []
        for match in compiled.finditer(view.text):
            start, end = match.span(group)
            if end > start and not view.text.startswith(MASK_PREFIX, start):
                edits.append((start, end, replacement))
        return edits_result(view, edits)

    anchors = tuple(Anchor(a, caseless=pattern.ignore_case) for a in pattern.anchors)
    return Detector(pattern.name, "custom", replacement, anchors, apply)


class MaskingFailure(Exception):
    """A detector raised; carries which one so the caller can log it."""

    def __init__(self, detector: str) -> None:
        super().__init__(detector)
        self.detector = detector


@dataclass(frozen=True, slots=True)
class _Step:
    name: str
    each: bool  # walk every item of a list


@dataclass(frozen=True, slots=True)
class _Path:
    text: str
    steps: tuple[_Step, ...]
    data: bool  # a JSON value rather than a string
    # Whether the model lets the last step be None. Most text fields are plain `str`;
    # checking a list of event contents for None compares every string with None.
    leaf_optional: bool = True


def _parse_path(path: str, data: bool) -> _Path:
    steps = tuple(_Step(part.removesuffix("[]"), part.endswith("[]")) for part in path.split("."))
    return _Path(path, steps, data, _leaf_optional(steps))


def _non_none(annotation: Any) -> tuple[Any, bool]:
    """The annotation without `None`, and whether it admitted None."""
    args = get_args(annotation)
    if get_origin(annotation) in (Union, UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else Union[tuple(rest)]), True  # noqa: UP007
    return annotation, False


def _leaf_optional(steps: tuple[_Step, ...]) -> bool:
    """Whether the model allows None at the end of `steps`; True when unsure."""
    model: Any = Job
    optional = True
    for step in steps:
        fields = getattr(model, "model_fields", None)
        if not isinstance(fields, dict) or step.name not in fields:
            return True
        annotation, optional = _non_none(fields[step.name].annotation)
        if step.each:
            if get_origin(annotation) is not list:
                return True
            annotation, optional = _non_none(get_args(annotation)[0])
        model = annotation
    return optional


# A leaf: which path, the list indexes on the way there, and its value.
_Leaf = tuple[_Path, tuple[int, ...], Any]

# A run of texts: its path, the list indexes before the last list, where the run
# starts in the text list, and whether its items are the items of that last list.
_Group = tuple[_Path, tuple[int, ...], int, bool]


class Masker:
    def __init__(self, config: MaskingConfig, *, engine: str = "auto") -> None:
        self.config = config
        detectors = [
            d for d in BUILTIN if d.group in config.groups and d.name not in config.disabled
        ]
        detectors.extend(custom_detector(p) for p in config.patterns)
        self.detectors: tuple[Detector, ...] = tuple(detectors)
        self._enabled_names = frozenset(d.name for d in detectors)
        anchors: list[Anchor] = []
        anchor_ids: dict[Anchor, int] = {}
        gated: dict[int, list[int]] = {}
        self._always: tuple[int, ...] = tuple(i for i, d in enumerate(detectors) if not d.anchors)
        for index, detector in enumerate(detectors):
            for anchor in detector.anchors:
                literal = anchor.literal.lower() if anchor.caseless else anchor.literal
                key = Anchor(literal, anchor.caseless, anchor.pattern, anchor.split)
                if key not in anchor_ids:
                    anchor_ids[key] = len(anchors)
                    anchors.append(key)
                gated.setdefault(anchor_ids[key], []).append(index)
        self._gated = {a: tuple(ds) for a, ds in gated.items()}
        self._all_anchors: Hits = dict.fromkeys(self._gated)
        # Positions of caseless literal anchors are what `TextView.find_all` returns.
        self._caseless_literal = {
            i: a.literal for i, a in enumerate(anchors) if a.caseless and a.pattern is None
        }
        # The distinct anchors, by the ids the prefilter reports.
        self.anchors: tuple[Anchor, ...] = tuple(anchors)
        self.prefilter: prefilters.Prefilter = prefilters.build(anchors, engine)
        paths = [_parse_path(path, shape is DATA) for path, shape in all_paths()]
        self._text_paths = tuple(p for p in paths if not p.data)
        self._data_paths = tuple(p for p in paths if p.data)
        by_root: dict[str, list[_Collector]] = {}
        for path in self._text_paths:
            by_root.setdefault(path.steps[0].name, []).append(_collector(path))
        self._text_roots = tuple((root, tuple(cs)) for root, cs in by_root.items())

    @classmethod
    def from_config(cls, config: MaskingConfig) -> "Masker":
        return cls(config)

    # -- text ---------------------------------------------------------------------

    def _detectors_for(self, hits: Hits) -> list[int]:
        if len(hits) == 1 and not self._always:
            return list(self._gated[next(iter(hits))])
        chosen = set(self._always)
        for anchor in hits:
            chosen.update(self._gated[anchor])
        return sorted(chosen)

    def _view(self, text: str, hits: Hits) -> TextView:
        known = {
            self._caseless_literal[a]: positions
            for a, positions in hits.items()
            if positions is not None and a in self._caseless_literal
        }
        return TextView(text, known)

    def _run(
        self, text: str, hits: Hits | None, counts: dict[str, int], *, ungated: bool = False
    ) -> str:
        """Mask one text. Raises MaskingFailure naming the detector that failed.

        Detectors run in their fixed order; each runs when its anchor is in the text as
        it is at its turn (after a change the text is scanned again), so the result is
        the same as running every detector. Rounds repeat until one changes nothing.
        """
        for _ in range(_MAX_ROUNDS):
            if ungated:
                hits = self._all_anchors
            elif hits is None:
                hits = self.prefilter.scan([text]).get(0, {})
            selected = self._detectors_for(hits) if hits else list(self._always)
            if not selected:
                return text
            changed = False
            view = self._view(text, hits)
            position = 0
            while position < len(selected):
                index = selected[position]
                position += 1
                detector = self.detectors[index]
                try:
                    masked, count = detector.apply(view)
                except Exception as exc:
                    raise MaskingFailure(detector.name) from exc
                if not count:
                    continue
                counts[detector.name] = counts.get(detector.name, 0) + count
                changed = True
                if ungated:
                    view = TextView(masked)
                    continue
                # The masked text may hold another detector's anchor, or no longer
                # hold one: decide the rest of this round on the new text.
                hits = self.prefilter.scan([masked]).get(0, {})
                view = self._view(masked, hits)
                rest = self._detectors_for(hits) if hits else list(self._always)
                selected = [i for i in rest if i > index]
                position = 0
            if not changed:
                return text
            text = view.text
            hits = None  # the next round looks at the masked text afresh
        return text

    def _guarded(self, text: str, hits: Hits | None, counts: Counter[str], where: str) -> str:
        # Counted apart so a field that fails half-way contributes only its failure.
        local: dict[str, int] = {}
        try:
            masked = self._run(text, hits, local)
        except MaskingFailure as failure:
            log.error("masking_failed", detector=failure.detector, field=where)
            counts[FAILED] += 1
            return REDACTION_NOTICE
        for name, count in local.items():
            counts[name] += count
        return masked

    def mask_text(
        self, text: str, counts: Counter[str] | None = None, *, ungated: bool = False
    ) -> str:
        """`text` with every secret masked (the same object when there is none).

        Fails closed: returns the redaction notice when a detector raises. `ungated`
        runs every detector whatever the prefilter says: slower, and by design the same
        result, which the tests check.
        """
        tally: Counter[str] = Counter() if counts is None else counts
        if not ungated:
            return self._guarded(text, None, tally, "text")
        local: dict[str, int] = {}
        try:
            masked = self._run(text, None, local, ungated=True)
        except MaskingFailure as failure:
            log.error("masking_failed", detector=failure.detector, field="text")
            tally[FAILED] += 1
            return REDACTION_NOTICE
        tally.update(local)
        return masked

    def mask_texts(self, texts: Sequence[str]) -> tuple[list[str], dict[str, int]]:
        """Mask several independent texts with one prefilter pass."""
        counts: Counter[str] = Counter()
        found = self.prefilter.scan(texts)
        masked = list(texts)
        indexes = range(len(texts)) if self._always else found
        for index in indexes:
            masked[index] = self._guarded(
                texts[index], found.get(index, {}), counts, f"text[{index}]"
            )
        return masked, dict(counts)

    # -- structured values ----------------------------------------------------------

    def mask_data(self, value: Any, counts: Counter[str], where: str = "value") -> Any:
        """A JSON value with its strings masked; keys and other types kept.

        Returns the same object when nothing changed.
        """
        if isinstance(value, str):
            return self._guarded(value, None, counts, where)
        if isinstance(value, dict):
            return self._mask_mapping(value, counts, where)
        if isinstance(value, list):
            items = [self.mask_data(item, counts, f"{where}[{i}]") for i, item in enumerate(value)]
            if any(new is not old for new, old in zip(items, value, strict=True)):
                return items
            return value
        return value

    def _mask_mapping(self, value: dict[Any, Any], counts: Counter[str], where: str) -> Any:
        is_secret = "kubernetes_secret" in self._enabled_names and value.get("kind") == "Secret"
        changed = False
        result: dict[Any, Any] = {}
        for key, item in value.items():
            path = f"{where}.{key}"
            new = item
            if is_secret and key in ("data", "stringData") and isinstance(item, dict):
                new = self._mask_secret_data(item, counts)
            elif isinstance(item, str) and isinstance(key, str):
                by_key = self._credential_by_key(key, item)
                if by_key is not None:
                    name, replacement = by_key
                    counts[name] += 1
                    new = replacement
                else:
                    new = self._guarded(item, None, counts, path)
            else:
                new = self.mask_data(item, counts, path)
            if new is not item:
                changed = True
            result[key] = new
        return result if changed else value

    def _mask_secret_data(self, data: dict[Any, Any], counts: Counter[str]) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        for key, item in data.items():
            if isinstance(item, str) and item and not item.startswith(MASK_PREFIX):
                counts["kubernetes_secret"] += 1
                result[key] = "[MASKED_SECRET_VALUE]"
            else:
                result[key] = item
        return result if result != data else data

    def _credential_by_key(self, key: str, value: str) -> tuple[str, str] | None:
        if value.startswith(MASK_PREFIX) or is_placeholder(value):
            return None
        if not _KEY_SHAPE.fullmatch(key):
            return None
        if key == "auth" and "docker_auth" in self._enabled_names and is_basic_credentials(value):
            return "docker_auth", "[MASKED_CREDENTIALS]"
        norm = normalise_key(key)
        for name, owns, replacement in _KEY_RULES:
            if name in self._enabled_names and owns(key, norm):
                return name, replacement
        return None

    # -- jobs -----------------------------------------------------------------------

    def _leaves(self, job: Job, paths: Sequence[_Path]) -> list[_Leaf]:
        """Every leaf of `paths` in `job`, path by path, list items in order."""
        leaves: list[_Leaf] = []
        for path in paths:
            frontier: list[tuple[Any, tuple[int, ...]]] = [(job, ())]
            for step in path.steps:
                following: list[tuple[Any, tuple[int, ...]]] = []
                for obj, indexes in frontier:
                    value = getattr(obj, step.name, None)
                    if value is None:
                        continue
                    if step.each:
                        following.extend(
                            (item, (*indexes, i))
                            for i, item in enumerate(value)
                            if item is not None
                        )
                    else:
                        following.append((value, indexes))
                frontier = following
                if not frontier:
                    break
            leaves.extend((path, indexes, value) for value, indexes in frontier)
        return leaves

    def _texts(self, job: Job) -> tuple[list[str], list[_Group]]:
        """The strings of every text path, and where each run of them came from.

        The hot path of every job: a list of events becomes one list comprehension and
        one group record rather than a record per item.
        """
        texts: list[str] = []
        groups: list[_Group] = []
        for root_name, collectors in self._text_roots:
            root = getattr(job, root_name)
            if root is not None:
                for collect in collectors:
                    collect(root, texts, groups)
        return texts, groups

    def mask_job(self, job: Job) -> tuple[Job, dict[str, int]]:
        counts: Counter[str] = Counter()
        replacements: list[tuple[_Path, tuple[int, ...], Any]] = []
        data_paths = [p for p in self._data_paths if getattr(job, p.steps[0].name) is not None]
        if data_paths:
            for path, indexes, value in self._leaves(job, data_paths):
                masked = self.mask_data(value, counts, _format_path(path.text, indexes))
                if masked is not value:
                    replacements.append((path, indexes, masked))
        texts, groups = self._texts(job)
        found = self.prefilter.scan(texts) if texts else {}
        selected = range(len(texts)) if self._always else found
        if selected:
            starts = [group[2] for group in groups]
            for index in selected:
                value = texts[index]
                if not value:
                    continue
                path, prefix, start, each = groups[bisect_right(starts, index) - 1]
                indexes = (*prefix, index - start) if each else prefix
                where = _format_path(path.text, indexes)
                masked = self._guarded(value, found.get(index, {}), counts, where)
                if masked is not value:
                    replacements.append((path, indexes, masked))
        if not replacements:
            return job, dict(counts)
        updated: BaseModel = job
        for path, indexes, new in replacements:
            updated = _replace(updated, path.steps, 0, indexes, new)
        assert isinstance(updated, Job)
        return updated, dict(counts)


# Appends the strings of one text path under its root payload to `texts`, and where
# each run of them came from to `groups`.
_Collector = Callable[[Any, list[str], list[_Group]], None]


def _collector(path: _Path) -> _Collector:
    """`_collect` for one path, specialised to its shape once: the shapes of the text
    paths are few (a field, a field of each item of a list, the same one list deeper),
    and walking a job's texts is on every job's path. Other shapes use `_collect`."""
    steps = path.steps[1:]
    shape = tuple(step.each for step in steps)
    optional = path.leaf_optional

    def strings(values: list[Any]) -> list[Any]:
        if optional and None in values:
            return [v if isinstance(v, str) else "" for v in values]
        return values

    if shape == (False,):
        name = steps[0].name

        def field(root: Any, texts: list[str], groups: list[_Group]) -> None:
            value = getattr(root, name, None)
            if isinstance(value, str):
                groups.append((path, (), len(texts), False))
                texts.append(value)

        return field
    if shape == (True, False):
        items_name, leaf = steps[0].name, attrgetter(steps[1].name)

        def each_item(root: Any, texts: list[str], groups: list[_Group]) -> None:
            items = getattr(root, items_name, None)
            if items is not None:
                groups.append((path, (), len(texts), True))
                texts.extend(strings(list(map(leaf, items))))

        return each_item
    if shape == (True, True, False):
        outer_name, inner, leaf = (
            steps[0].name,
            attrgetter(steps[1].name),
            attrgetter(steps[2].name),
        )

        def each_item_of_each(root: Any, texts: list[str], groups: list[_Group]) -> None:
            for i, item in enumerate(getattr(root, outer_name, None) or ()):
                items = inner(item) if item is not None else None
                if items is not None:
                    groups.append((path, (i,), len(texts), True))
                    texts.extend(strings(list(map(leaf, items))))

        return each_item_of_each

    def generic(root: Any, texts: list[str], groups: list[_Group]) -> None:
        _collect(root, path, 1, (), texts, groups)

    return generic


def _collect(
    obj: Any,
    path: _Path,
    depth: int,
    prefix: tuple[int, ...],
    texts: list[str],
    groups: list[_Group],
) -> None:
    """Append the strings under `obj` (the value of step depth-1) to `texts`."""
    steps = path.steps
    last = len(steps) - 1
    if depth > last:
        if isinstance(obj, str):
            groups.append((path, prefix, len(texts), False))
            texts.append(obj)
        return
    step = steps[depth]
    value = getattr(obj, step.name, None)
    if value is None:
        return
    if not step.each:
        _collect(value, path, depth + 1, prefix, texts, groups)
        return
    if depth == last:
        groups.append((path, prefix, len(texts), True))
        texts.extend(v if isinstance(v, str) else "" for v in value)
    elif depth + 1 == last and not steps[last].each:
        # A list of models and one text field of each: the common case (events).
        values = list(map(attrgetter(steps[last].name), value))
        if path.leaf_optional and None in values:
            values = [v if isinstance(v, str) else "" for v in values]
        groups.append((path, prefix, len(texts), True))
        texts.extend(values)
    else:
        for i, item in enumerate(value):
            if item is not None:
                _collect(item, path, depth + 1, (*prefix, i), texts, groups)


def _replace(
    obj: Any, steps: tuple[_Step, ...], depth: int, indexes: tuple[int, ...], new: Any
) -> Any:
    step = steps[depth]
    last = depth == len(steps) - 1
    value = getattr(obj, step.name)
    if step.each:
        items = list(value)
        i = indexes[0]
        items[i] = new if last else _replace(items[i], steps, depth + 1, indexes[1:], new)
        replacement: Any = items
    else:
        replacement = new if last else _replace(value, steps, depth + 1, indexes, new)
    return obj.model_copy(update={step.name: replacement})


def _format_path(path: str, indexes: tuple[int, ...]) -> str:
    parts = path.split("[]")
    out = [parts[0]]
    for i, rest in enumerate(parts[1:]):
        out.append(f"[{indexes[i]}]" if i < len(indexes) else "[]")
        out.append(rest)
    return "".join(out)

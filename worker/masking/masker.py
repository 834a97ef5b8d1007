"""The masking stage applied to every outside text of a job before it is rendered.

`Masker.from_config(cfg)` once at start-up, then `mask_payload(data) -> counts` per
job, on the JSON object orjson parsed and before it is validated. The common case is a
job with no secret: one prefilter pass over all its texts finds no anchor, and nothing
is written. Only texts holding an anchor run the detectors it gates, starting from the
anchor positions the prefilter found, and a masked text replaces the value in its
object.

Fail closed: when a detector raises on some text, the whole field is replaced by a
redaction notice and the failure is logged with the detector and the field path only,
never the text.
"""

import re
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable
from typing import Any

from worker.masking import log
from worker.masking import prefilter as prefilters
from worker.masking.config import CustomPattern, MaskingConfig
from worker.masking.detectors import (
    BUILTIN,
    FAILED,
    Anchor,
    Detector,
    Edit,
    apply_edits,
    is_basic_credentials,
    vocabulary,
)
from worker.masking.detectors.kubernetes_docker import mask_secret_data
from worker.masking.detectors.values import is_reference
from worker.masking.edit_log import EditLog
from worker.masking.fields import DATA, all_paths
from worker.masking.paths import (
    Run,
    TextPath,
    compile_collection,
    format_path,
    object_at,
    parse_path,
)
from worker.masking.prefilter import Hits
from worker.masking.prefixes import prefixed_lines
from worker.masking.text import MASK_PREFIX, TextView, is_placeholder

REDACTION_NOTICE = "[MASKED_FIELD: masking failed, content withheld]"
# A detector's output feeds the next one; rounds repeat until nothing changes, so
# masking is idempotent. Real text settles in one round; the cap bounds odd input.
_MAX_ROUNDS = 4

# Keys whose string value is a credential in structured data, by the detector that
# owns them (the same words as `key: value` in text).
_KEY_RULES = (
    ("aws_secret_access_key", vocabulary.AWS_SECRET),
    ("password", vocabulary.PASSWORD),
    ("secret", vocabulary.SECRET),
    ("api_key", vocabulary.API_KEY),
    ("token", vocabulary.TOKEN),
    ("private_key", vocabulary.PRIVATE_KEY),
    ("cookie", vocabulary.COOKIE),
    ("storage_credentials", vocabulary.STORAGE_KEY),
    ("credentials", vocabulary.CREDENTIALS),
    ("encryption_key", vocabulary.ENCRYPTION_KEY),
    ("session_id", vocabulary.SESSION),
)
_KEY_SHAPE = re.compile(r"[A-Za-z0-9_.-]+")
# Which rule owns a key depends on the key alone: remembered per Masker, since
# producers send the same keys job after job; cleared when this many are known.
_KEY_RULES_MEMO = 4096


def _not_a_credential(value: str) -> bool:
    """An already masked value or a placeholder (empty, a reference, a structure...)."""
    return value.startswith(MASK_PREFIX) or is_placeholder(value)


def custom_detector(pattern: CustomPattern) -> Detector:
    compiled = pattern.compiled()
    replacement = pattern.replacement
    group: str | int = "secret" if "secret" in compiled.groupindex else 0

    def apply(view: TextView) -> list[Edit]:
        edits: list[Edit] = []
        for start, end in compiled.spans(view.text, group):
            if end > start and not view.text.startswith(MASK_PREFIX, start):
                edits.append((start, end, replacement))
        return edits

    anchors = tuple(Anchor(a, caseless=pattern.ignore_case) for a in pattern.anchors)
    return Detector(pattern.name, "custom", replacement, anchors, apply)


class MaskingFailure(Exception):
    """A detector raised; carries which one so the caller can log it."""

    def __init__(self, detector: str) -> None:
        super().__init__(detector)
        self.detector = detector


class Masker:
    def __init__(self, config: MaskingConfig, *, engine: str | None = None) -> None:
        """`engine` overrides `config.engine` (the tests and benchmarks compare them)."""
        self.config = config
        detectors = [
            d for d in BUILTIN if d.group in config.groups and d.name not in config.disabled
        ]
        detectors.extend(custom_detector(p) for p in config.patterns)
        self.detectors: tuple[Detector, ...] = tuple(detectors)
        self._enabled_names = frozenset(d.name for d in detectors)
        self._key_rules: dict[str, tuple[str, vocabulary.KeyValueRule] | None] = {}
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
        self.prefilter: prefilters.Prefilter = prefilters.build(anchors, engine or config.engine)
        paths = [parse_path(path, shape is DATA) for path, shape in all_paths()]
        self._text_paths = tuple(p for p in paths if not p.data)
        self._data_paths = tuple(p for p in paths if p.data)
        # Structured values are found by `object_at`, which walks objects only.
        assert not any(step.each for p in self._data_paths for step in p.steps), self._data_paths
        self._collect = compile_collection(self._text_paths)
        # Per payload: the names between it and each value's key, and the path.
        data_by_root: dict[str, list[tuple[tuple[str, ...], str, TextPath]]] = {}
        for path in self._data_paths:
            *between, name = (step.name for step in path.steps[1:])
            data_by_root.setdefault(path.steps[0].name, []).append((tuple(between), name, path))
        self._data_roots = tuple((root, tuple(ps)) for root, ps in data_by_root.items())

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
        self,
        text: str,
        hits: Hits | None,
        counts: dict[str, int],
        *,
        ungated: bool = False,
        log: EditLog | None = None,
    ) -> str:
        """Mask one text. Raises MaskingFailure naming the detector that failed.

        Detectors run in their fixed order; each runs when its anchor is in the text as
        it is at its turn (after a change the text is scanned again), so the result is
        the same as running every detector. Rounds repeat until one changes nothing.
        First, lines that carry a log prefix are masked without it (`_through_prefixes`).
        `log`, when given, records every edit in the positions of `text`.
        """
        if log is None:
            if ungated:
                hits = self._all_anchors
            elif hits is None:
                hits = self.prefilter.scan([text]).get(0, {})
            if hits:
                masked = self._through_prefixes(text, counts, ungated)
                if masked is not text:
                    text, hits = masked, None
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
                    applied = apply_edits(view.text, detector.apply(view))
                except Exception as exc:
                    raise MaskingFailure(detector.name) from exc
                if not applied.count:
                    continue
                masked = applied.text
                counts[detector.name] = counts.get(detector.name, 0) + applied.count
                changed = True
                if log is not None:
                    log.add(applied.edits)
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

    def _through_prefixes(self, text: str, counts: dict[str, int], ungated: bool) -> str:
        """`text` with what its prefixed lines hold masked as if they had no prefix: a
        PEM block, a YAML document or a JSON value printed through `docker compose
        logs` carries `web_1  | ` on every line (`worker.masking.prefixes`)."""
        if "\n" not in text:
            return text
        prefixes = prefixed_lines(text)
        if not prefixes:
            return text
        parts: list[str] = []
        cuts: list[int] = []  # where, in the text without prefixes, each prefix stood
        removed: list[int] = []  # how much was removed up to and with each prefix
        last = total = 0
        for prefix in prefixes:
            parts.append(text[last : prefix.start])
            cuts.append(prefix.start - total)
            total += prefix.end - prefix.start
            removed.append(total)
            last = prefix.end
        parts.append(text[last:])
        stripped = "".join(parts)
        log = EditLog()
        masked = self._run(stripped, None, counts, ungated=ungated, log=log)
        if masked is stripped:
            return text

        def at(pos: int, start: bool) -> int:
            # An edit starting where a line's prefix was keeps the prefix; one ending
            # there ends before it.
            index = (bisect_right if start else bisect_left)(cuts, pos) - 1
            return pos + (removed[index] if index >= 0 else 0)

        edits = [(at(s, True), at(e, False), r) for s, e, r in log.edits()]
        return apply_edits(text, edits).text

    def _guarded(self, text: str, hits: Hits | None, counts: Counter[str], where: str) -> str:
        # Counted apart so a field that fails half-way contributes only its failure.
        local: dict[str, int] = {}
        try:
            masked = self._run(text, hits, local)
        except MaskingFailure as failure:
            log.event("error", "masking_failed", __name__, detector=failure.detector, field=where)
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
            log.event("error", "masking_failed", __name__, detector=failure.detector, field="text")
            tally[FAILED] += 1
            return REDACTION_NOTICE
        tally.update(local)
        return masked

    # -- structured values ----------------------------------------------------------

    def mask_data(
        self,
        value: Any,
        counts: Counter[str],
        where: str = "value",
        hits_of: dict[int, Hits] | None = None,
    ) -> Any:
        """A JSON value with its strings masked; keys and other types kept.

        Returns the same object when nothing changed. `hits_of` holds, by `id`, what
        one prefilter pass over the value's strings found (`string_leaves`); a string
        not in it is scanned on its own.
        """
        if isinstance(value, str):
            return self._mask_leaf(value, hits_of, counts, where)
        if isinstance(value, dict):
            return self._mask_mapping(value, counts, where, hits_of)
        if isinstance(value, list):
            items = [
                self.mask_data(item, counts, f"{where}[{i}]", hits_of)
                for i, item in enumerate(value)
            ]
            if any(new is not old for new, old in zip(items, value, strict=True)):
                return items
            return value
        return value

    def _mask_mapping(
        self,
        value: dict[Any, Any],
        counts: Counter[str],
        where: str,
        hits_of: dict[int, Hits] | None,
    ) -> Any:
        is_secret = "kubernetes_secret" in self._enabled_names and value.get("kind") == "Secret"
        result: dict[Any, Any] | None = None  # a copy, made at the first change
        for key, item in value.items():
            new: Any
            if is_secret and key in ("data", "stringData") and isinstance(item, dict):
                new, masked = mask_secret_data(item)
                if masked:
                    counts["kubernetes_secret"] += masked
            elif key == "auths" and isinstance(item, dict) and "docker_auth" in self._enabled_names:
                new = self._mask_registry_auths(item, counts, f"{where}.{key}", hits_of)
            elif isinstance(item, str) and isinstance(key, str):
                by_key = self._credential_by_key(key, item)
                if by_key is not None:
                    name, replacement = by_key
                    counts[name] += 1
                    new = replacement
                else:
                    new = self._mask_leaf(item, hits_of, counts, f"{where}.{key}")
            else:
                new = self.mask_data(item, counts, f"{where}.{key}", hits_of)
            if new is not item:
                if result is None:
                    result = dict(value)
                result[key] = new
        return value if result is None else result

    def _mask_leaf(
        self, text: str, hits_of: dict[int, Hits] | None, counts: Counter[str], where: str
    ) -> str:
        """A string of a structured value, masked with what the one pass found in it."""
        if hits_of is None:
            return self._guarded(text, None, counts, where)
        hits = hits_of.get(id(text))  # None: not in the pass, so scanned on its own
        if hits is not None and not hits and not self._always:
            return text  # no anchor, and no detector runs without one
        return self._guarded(text, hits, counts, where)

    def _mask_registry_auths(
        self,
        auths: dict[Any, Any],
        counts: Counter[str],
        where: str,
        hits_of: dict[int, Hits] | None,
    ) -> dict[Any, Any]:
        """The `auths` of a Docker config: each registry's `auth` is a credential
        whatever it decodes to; the rest of an entry is masked as any value."""
        result: dict[Any, Any] | None = None
        for registry, entry in auths.items():
            new = entry
            if isinstance(entry, dict):
                auth = entry.get("auth")
                if isinstance(auth, str) and not _not_a_credential(auth):
                    counts["docker_auth"] += 1
                    new = {**entry, "auth": "[MASKED_CREDENTIALS]"}
                new = self.mask_data(new, counts, f"{where}.{registry}", hits_of)
            else:
                new = self.mask_data(entry, counts, f"{where}.{registry}", hits_of)
            if new is not entry:
                if result is None:
                    result = dict(auths)
                result[registry] = new
        return auths if result is None else result

    def _credential_by_key(self, key: str, value: str) -> tuple[str, str] | None:
        """The detector and replacement owning `value` by its key alone, if any."""
        if (
            key == "auth"
            and "docker_auth" in self._enabled_names
            and is_basic_credentials(value)
            and not _not_a_credential(value)
        ):
            return "docker_auth", "[MASKED_CREDENTIALS]"
        try:
            owner = self._key_rules[key]
        except KeyError:
            owner = self._key_rule(key)
            if len(self._key_rules) >= _KEY_RULES_MEMO:  # keys are producer data
                self._key_rules.clear()
            self._key_rules[key] = owner
        if owner is None or _not_a_credential(value):
            return None
        name, rule = owner
        if vocabulary.is_counter(key, value) or (
            vocabulary.path_is_reference(rule, vocabulary.normalise_key(key))
            and is_reference(value, 0, len(value))
        ):
            return None
        return name, rule.replacement

    def _key_rule(self, key: str) -> tuple[str, vocabulary.KeyValueRule] | None:
        if not _KEY_SHAPE.fullmatch(key):
            return None
        norm = vocabulary.normalise_key(key)
        for name, rule in _KEY_RULES:
            if name in self._enabled_names and rule.owns(key, norm):
                return name, rule
        return None

    def hits_by_id(self, leaves: list[str]) -> dict[int, Hits]:
        """One prefilter pass over `leaves`: what it found in each, by the string's id
        (the strings stay alive in their value while `mask_data` uses this)."""
        hits_of: dict[int, Hits] = {id(leaf): {} for leaf in leaves}
        for index, hits in self.prefilter.scan(leaves).items():
            hits_of[id(leaves[index])] = hits
        return hits_of

    def string_leaves(self, value: Any) -> list[str]:
        """Every string `mask_data` could look at in `value` (dict values and list
        items, at any depth), for one prefilter pass over all of them."""
        leaves: list[str] = []
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                leaves.append(item)
            elif isinstance(item, dict):
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)
        return leaves

    # -- jobs -----------------------------------------------------------------------

    def mask_payload(self, data: Any) -> dict[str, int]:
        """Mask the outside-world texts of a parsed job (its JSON object) in place.

        Runs before validation, on the values orjson just made: cheaper to walk than
        models, still in cache, and a masked value is written into its dict rather
        than copied into new models. Any JSON is accepted: what the models would not
        accept is skipped or masked as far as it goes, and the job then fails
        validation anyway. Returns the counts by detector; empty, and `data`
        untouched, when nothing was masked.
        """
        if type(data) is not dict:
            return {}
        # Built only for a job with something to look at: most jobs have nothing.
        counts: Counter[str] | None = None
        # Structured values (legacy alert data, histories): one pass over all their
        # strings first, where a scan per string cost most of a legacy job.
        values: list[tuple[dict[str, Any], str, Any, TextPath]] = []
        for root_name, paths in self._data_roots:
            root = data.get(root_name)
            if type(root) is not dict:
                continue
            for between, name, path in paths:
                holder = object_at(root, between)
                value = holder.get(name) if holder is not None else None
                if holder is not None and value is not None:
                    values.append((holder, name, value, path))
        if values:
            counts = Counter()
            leaves = [leaf for _, _, value, _ in values for leaf in self.string_leaves(value)]
            hits_of = self.hits_by_id(leaves)
            for holder, name, value, path in values:
                masked = self.mask_data(value, counts, path.text, hits_of)
                if masked is not value:
                    holder[name] = masked
        texts, runs = self.collect_texts(data)
        if texts:
            try:
                found = self.prefilter.scan(texts)
            except TypeError:  # a non-string where text belongs: an invalid job
                texts = [text if type(text) is str else "" for text in texts]
                found = self.prefilter.scan(texts)
            selected = range(len(texts)) if self._always else found
            if selected:
                counts = Counter() if counts is None else counts
                self._mask_runs(texts, runs, found, selected, counts)
        return dict(counts) if counts else {}

    def collect_texts(self, data: dict[str, Any]) -> tuple[list[Any], list[Run]]:
        """The values at the text paths of a parsed job, and where each run of them is.

        A value that is not a string where the models want one is kept as it is (the
        scan then fails on it and it is masked as no text)."""
        texts: list[Any] = []
        runs: list[Run] = []
        self._collect(data, texts, runs)
        return texts, runs

    def _mask_runs(
        self,
        texts: list[str],
        runs: list[Run],
        found: dict[int, Hits],
        selected: Iterable[int],
        counts: Counter[str],
    ) -> None:
        starts = [run[0] for run in runs]
        for index in selected:
            value = texts[index]
            if not value:
                continue
            start, holder, key, each, path, prefix = runs[bisect_right(starts, index) - 1]
            offset = index - start
            where = format_path(path.text, (*prefix, offset) if each else prefix)
            masked = self._guarded(value, found.get(index, {}), counts, where)
            if masked is value:
                continue
            if not each:
                holder[key] = masked
            elif key is None:
                holder[offset] = masked
            else:
                holder[offset][key] = masked

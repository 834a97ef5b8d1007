"""The JSON paths of a job's outside texts, compiled into one function that collects them.

`worker.masking.fields` lists the paths (`session.alert_data`, `history[].content`, ...);
`compile_collection` turns them into straight-line code the masker runs on every job's
parsed JSON, and `walk` is the generic walker that code must agree with.
"""

from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from typing import Any


@dataclass(frozen=True, slots=True)
class Step:
    name: str
    each: bool  # walk every item of a list


@dataclass(frozen=True, slots=True)
class TextPath:
    text: str
    steps: tuple[Step, ...]
    data: bool  # a JSON value rather than a string


def parse_path(path: str, data: bool) -> TextPath:
    steps = tuple(Step(part.removesuffix("[]"), part.endswith("[]")) for part in path.split("."))
    return TextPath(path, steps, data)


# A run of texts found in a job's JSON: where it starts in the list of texts, what
# holds its texts (a dict, or a list holding one text per item), the key of each text
# in its holder (None: the list items are the texts), whether the run is a list's
# items, its path, and the list indexes on the way (for the field named in logs).
Run = tuple[int, Any, str | None, bool, TextPath, tuple[int, ...]]
# Appends the texts of one path under its payload (a JSON object) and their runs.
Collector = Callable[[dict[str, Any], list[Any], list[Run]], None]


def object_at(obj: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any] | None:
    """The object reached from `obj` through the keys `names`, if the JSON has one."""
    for name in names:
        value = obj.get(name)
        if type(value) is not dict:
            return None
        obj = value
    return obj


def _values(items: list[Any], key: str, get: Callable[[Any], Any]) -> list[Any]:
    """`item[key]` of each item: None where an item is no object holding the key."""
    try:
        return list(map(get, items))
    except (KeyError, TypeError):  # not what the models allow: the job is invalid
        return [item.get(key) if type(item) is dict else None for item in items]


def _collector(path: TextPath) -> Collector:
    """The collector of a text path of a shape `compile_collection` does not inline: the
    same list one level deeper (specialised here), or any other (`walk`)."""
    steps = path.steps[1:]
    shape = tuple(step.each for step in steps)
    names = [step.name for step in steps]

    if shape == (True, True, False):
        outer_name, inner_name, key = names
        get = itemgetter(key)

        def each_item_of_each(root: dict[str, Any], texts: list[Any], runs: list[Run]) -> None:
            outer = root.get(outer_name)
            if type(outer) is not list:
                return
            for i, item in enumerate(outer):
                items = item.get(inner_name) if type(item) is dict else None
                if type(items) is list and items:
                    runs.append((len(texts), items, key, True, path, (i,)))
                    texts.extend(_values(items, key, get))

        return each_item_of_each

    def generic(root: dict[str, Any], texts: list[Any], runs: list[Run]) -> None:
        walk(root, path, 1, (), texts, runs)

    return generic


def compile_collection(paths: tuple[TextPath, ...]) -> Collector:
    """One function collecting the texts of every text path from a job's JSON object,
    as straight-line code: each root looked up once, each field a `get` and a type
    check, no call per path. Walking the paths with a collector each cost about a
    quarter of masking a typical job that holds nothing to mask. The generated code
    finds what the generic walker `walk` finds, in the same order (a test compares
    them); the rare shapes it does not inline call their `_collector`."""
    namespace: dict[str, Any] = {"_values": _values}
    lines = ["def collect(data, texts, runs):"]
    by_root: dict[str, list[tuple[int, TextPath]]] = {}
    for number, path in enumerate(paths):
        by_root.setdefault(path.steps[0].name, []).append((number, path))
        namespace[f"P{number}"] = path
    for root_name, numbered in by_root.items():
        lines.append(f"    r = data.get({root_name!r})")
        lines.append("    if type(r) is dict:")
        for number, path in numbered:
            steps = path.steps[1:]
            shape = tuple(step.each for step in steps)
            names = [step.name for step in steps]
            if not any(shape):
                *between, name = names
                holder, indent = "r", "        "
                for depth, step_name in enumerate(between):
                    lines.append(f"{indent}h{depth} = {holder}.get({step_name!r})")
                    lines.append(f"{indent}if type(h{depth}) is dict:")
                    holder, indent = f"h{depth}", indent + "    "
                lines += [
                    f"{indent}v = {holder}.get({name!r})",
                    f"{indent}if type(v) is str:",
                    f"{indent}    runs.append((len(texts), {holder}, {name!r}, False, P{number}, ()))",
                    f"{indent}    texts.append(v)",
                ]
            elif shape == (True, False):
                items_name, key = names
                namespace[f"G{number}"] = itemgetter(key)
                lines += [
                    f"        items = r.get({items_name!r})",
                    "        if type(items) is list and items:",
                    f"            runs.append((len(texts), items, {key!r}, True, P{number}, ()))",
                    f"            texts.extend(_values(items, {key!r}, G{number}))",
                ]
            else:
                namespace[f"C{number}"] = _collector(path)
                lines.append(f"        C{number}(r, texts, runs)")
    if len(lines) == 1:
        lines.append("    return None")
    exec(
        compile("\n".join(lines), f"<masking text collection of {len(paths)} paths>", "exec"),
        namespace,
    )
    collect: Collector = namespace["collect"]
    return collect


def walk(
    obj: Any, path: TextPath, depth: int, prefix: tuple[int, ...], texts: list[Any], runs: list[Run]
) -> None:
    """Any text path: the texts under `obj`, the JSON value reached by step depth-1."""
    if type(obj) is not dict:
        return
    step = path.steps[depth]
    last = depth == len(path.steps) - 1
    value = obj.get(step.name)
    if not step.each:
        if not last:
            walk(value, path, depth + 1, prefix, texts, runs)
        elif type(value) is str:
            runs.append((len(texts), obj, step.name, False, path, prefix))
            texts.append(value)
        return
    if type(value) is not list:
        return
    if last:  # a list of texts
        runs.append((len(texts), value, None, True, path, prefix))
        texts.extend(value)
        return
    for i, item in enumerate(value):
        walk(item, path, depth + 1, (*prefix, i), texts, runs)


def format_path(path: str, indexes: tuple[int, ...]) -> str:
    parts = path.split("[]")
    out = [parts[0]]
    for i, rest in enumerate(parts[1:]):
        out.append(f"[{indexes[i]}]" if i < len(indexes) else "[]")
        out.append(rest)
    return "".join(out)

"""The import graph of `worker/` and `schemas/`: one way down, no cycles.

Every import statement of every module is read with `ast` (function-local and
TYPE_CHECKING imports included, since they are where cycles hide), and three rules
are checked:

* `schemas/` (the wire contract) imports nothing from `worker/`;
* no module reaches itself through its imports;
* imports point down the layers below (README.md, "Layout"); packages of one layer
  do not import each other, and inside `families/` one family never imports another
  (what they share lives at the top of `families/`).
"""

from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from tests.architecture import (
    ImportGraph,
    find_cycle,
    layer_violations,
    read_import_graph,
)

REPO = Path(__file__).resolve().parent.parent

# Top to bottom. A module may import its own package and anything in a lower layer.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("worker.__main__",),
    ("worker.cli",),
    ("worker.commands",),
    ("worker.rerender",),
    ("worker.transport",),
    ("worker.archive",),
    ("worker.render",),
    ("worker.families", "worker.masking"),
    ("worker.ops",),
    ("worker.errors", "worker"),
    ("schemas",),
)
# Inside families/: each of these is one family; the other modules are shared.
FAMILIES = (
    "worker.families.tarsy",
    "worker.families.legacy",
    "worker.families.skill",
    "worker.families.system_prompt",
)

# Inside transport/: the consumer stands on the link and the render processes; the
# producers on the link; the link and the processes on neither.
TRANSPORT_ROOMS = (
    ("worker.transport.consumer", "worker.transport.producers"),
    ("worker.transport.processes", "worker.transport.link"),
)

# Inside masking/detectors/: one module per family of credential. What they share lives
# in `base` (the detector, its anchors, the table), `keys`, `layout` and `entries`
# (finding key-value pairs), `values` (where a value ends) and `vocabulary` (which keys
# name a credential).
DETECTOR_FAMILIES = tuple(
    f"worker.masking.detectors.{family}"
    for family in (
        "keyvalue",
        "pem_tokens",
        "jwt",
        "vendors",
        "urls",
        "cloud",
        "kubernetes_docker",
        "formats",
        "command_line",
        "cards",
        "pii",
    )
)


@pytest.fixture(scope="module")
def graph() -> ImportGraph:
    return read_import_graph(REPO, ("worker", "schemas"))


def test_the_graph_is_read_from_the_real_tree(graph: ImportGraph) -> None:
    # Guards the other tests against passing on an empty or misread graph.
    assert len(graph) > 80
    assert "worker.render.decode" in graph["worker.render.renderer"]
    assert "worker.families" in graph["worker.render.renderer"]
    assert "schemas.job" in graph["worker.render.decode"]


def test_schemas_import_nothing_from_worker(graph: ImportGraph) -> None:
    offenders = {
        module: sorted(target for target in targets if target.split(".")[0] == "worker")
        for module, targets in graph.items()
        if module.split(".")[0] == "schemas"
    }
    assert {module: found for module, found in offenders.items() if found} == {}


def test_there_is_no_import_cycle(graph: ImportGraph) -> None:
    assert find_cycle(graph) is None


def test_imports_point_down_the_layers(graph: ImportGraph) -> None:
    assert layer_violations(graph, LAYERS) == []


def test_families_do_not_import_each_other(graph: ImportGraph) -> None:
    assert layer_violations(graph, (FAMILIES,)) == []


def test_the_renderer_names_no_family(graph: ImportGraph) -> None:
    # It reaches them through the families' registry (worker.families): which family
    # builds a kind, and each family's start-up from its own section of the config.
    imported = graph["worker.render.renderer"]
    assert "worker.families" in imported
    named = sorted(
        target
        for target in imported
        if any(target == family or target.startswith(family + ".") for family in FAMILIES)
    )
    assert named == []


def test_transport_rooms_point_one_way(graph: ImportGraph) -> None:
    rooms = [room for layer in TRANSPORT_ROOMS for room in layer]
    assert all(any(module.startswith(room + ".") for module in graph) for room in rooms)
    assert layer_violations(graph, TRANSPORT_ROOMS) == []


def test_detector_families_do_not_import_each_other(graph: ImportGraph) -> None:
    assert all(family in graph for family in DETECTOR_FAMILIES)
    assert layer_violations(graph, (DETECTOR_FAMILIES,)) == []


def test_every_module_is_in_a_layer(graph: ImportGraph) -> None:
    roots = [root for layer in LAYERS for root in layer]
    unplaced = [
        module
        for module in graph
        if not any(module == root or module.startswith(root + ".") for root in roots)
    ]
    assert unplaced == []


# -- the checks themselves can fail --------------------------------------------------


def _graph(edges: Mapping[str, Iterable[str]]) -> ImportGraph:
    return {module: set(targets) for module, targets in edges.items()}


def test_a_cycle_is_found_and_shown() -> None:
    graph = _graph({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    cycle = find_cycle(graph)
    assert cycle is not None
    assert cycle[0] == cycle[-1]
    assert set(cycle) == {"a", "b", "c"}
    assert find_cycle(_graph({"a": {"b"}, "b": set(), "c": {"a", "b"}})) is None


def test_an_upward_or_sideways_import_is_a_violation() -> None:
    layers = (("top",), ("mid.x", "mid.y"), ("low",))
    graph = _graph(
        {
            "top.cmd": {"mid.x.a", "low"},
            "mid.x.a": {"mid.x.b", "low", "top.cmd", "mid.y.c"},
            "mid.x.b": set(),
            "mid.y.c": set(),
            "low": set(),
        }
    )
    assert layer_violations(graph, layers) == [
        "mid.x.a -> mid.y.c (sideways)",
        "mid.x.a -> top.cmd (upward)",
    ]


def test_imports_are_read_with_function_local_ones(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from pkg import low\n")
    (package / "low.py").write_text("def f() -> None:\n    from pkg.sub import thing\n")
    (package / "sub" / "thing.py").write_text("import pkg.low\nfrom . import other\n")
    (package / "sub" / "other.py").write_text("import json\n")
    graph = read_import_graph(tmp_path, ("pkg",))
    assert graph == {
        "pkg": set(),
        "pkg.low": {"pkg.sub.thing"},
        "pkg.sub": {"pkg.low"},
        "pkg.sub.other": set(),
        "pkg.sub.thing": {"pkg.low", "pkg.sub.other"},
    }

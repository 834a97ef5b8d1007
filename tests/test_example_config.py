"""examples/worker.yaml shows every section of the configuration, and loads; and
docs/CONFIGURATION.md names every key of every section."""

from tests.data import REPO
from worker.render.config import _SECTIONS, WorkerConfig, load_config
from worker.render.renderer import Renderer

EXAMPLE = REPO / "examples" / "worker.yaml"
REFERENCE = REPO / "docs" / "CONFIGURATION.md"


def test_the_example_holds_every_section_and_a_worker_starts_on_it() -> None:
    import yaml

    written = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    assert set(written) == set(WorkerConfig.model_fields)
    config = load_config(EXAMPLE)
    # Each section is there with content, not only named.
    assert config.mcp_servers and config.masking.patterns
    assert config.prompts and config.contributors and config.templates_dir is not None
    renderer = Renderer(config)
    job = b'{"job_id": "j", "kind": "react", "stage": {"mcp_servers": ["kubernetes-server"]}}'
    outcome = renderer.render(job)
    assert outcome.ok
    assert outcome.messages is not None
    assert (
        "## kubernetes-server Instructions\n\nFor Kubernetes work:"
        in outcome.messages[0]["content"]
    )


def test_the_reference_names_every_key_of_every_section() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    for model in _SECTIONS.values():
        for key in model.model_fields:
            assert f"`{key}`" in text or f".{key}`" in text, (model.__name__, key)

"""What the README's examples use, read from the README itself."""

from tests.data import REPO


def render_example_config() -> str:
    """The `--config` path of the README's `prompt-worker render` example."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = [part.split("```", 1)[0] for part in readme.split("```sh")[1:]]
    example = next(block for block in blocks if "prompt-worker render" in block)
    return example.split("--config", 1)[1].split()[0]

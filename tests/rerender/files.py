"""Input files and output records of the rerender tests."""

from pathlib import Path
from typing import Any

import orjson

from tests.data import CONFORMANCE

CONFIG = str(CONFORMANCE / "worker.yaml")
CONFORMANCE_FILES = (CONFORMANCE / "cases.jsonl", CONFORMANCE / "families.jsonl")


def conformance_lines() -> list[str]:
    lines: list[str] = []
    for path in CONFORMANCE_FILES:
        lines += [line for line in path.read_text(encoding="utf-8").splitlines() if line]
    return lines


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def records(path: Path) -> list[dict[str, Any] | None]:
    """Output line by output line: the record, or None for an empty line."""
    return [orjson.loads(line) if line else None for line in path.read_bytes().splitlines()]

"""Where the suite's data lives, and how to read it."""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TESTS = Path(__file__).parent
REPO = TESTS.parent
CONFORMANCE = TESTS / "conformance"
BENCH_JOBS = TESTS / "bench_jobs"
SEED_000_KINDS = frozenset(
    {
        "react",
        "native_thinking",
        "synthesis",
        "forced_conclusion",
        "mcp_summarization",
        "executive_summary",
    }
)


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)

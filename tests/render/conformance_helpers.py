"""Assertion helpers that show where two renderings part, not just that they do."""

import difflib
from typing import Any


def assert_same_messages(
    actual: list[dict[str, str]] | None, expected: list[dict[str, Any]]
) -> None:
    assert actual is not None, "no messages rendered"
    assert [m["role"] for m in actual] == [m["role"] for m in expected]
    for index, (got, want) in enumerate(zip(actual, expected, strict=True)):
        if got["content"] != want["content"]:
            diff = "".join(
                difflib.unified_diff(
                    want["content"].splitlines(keepends=True),
                    got["content"].splitlines(keepends=True),
                    "expected",
                    "rendered",
                )
            )
            raise AssertionError(f"message {index} ({want['role']}) differs:\n{diff}")

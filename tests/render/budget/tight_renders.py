"""Renders of generated sessions under budgets, pinned: what `"tight"` must keep giving.

`tight_renders.jsonl` holds, for every case below, what the worker replied when the file
was made: the SHA-256 of the reply's messages and its `meta.budget` (or the error code).
A case is a session of sessions.py at one size, a budget (a share of the session's
largest render) and a tokenizer. The file was made by the code of commit 8c1a1b7, from
before budgets had a policy, whose trimming `"policy": "tight"` promises to keep
(CONTRACT.md §11): that commit's tree with this module and sessions.py copied in,

    repo=$PWD && mkdir /tmp/before && git archive 8c1a1b7 | tar -x -C /tmp/before
    cp tests/render/budget/{sessions,tight_renders}.py /tmp/before/tests/render/budget/
    (cd /tmp/before && "$repo/.venv/bin/python" -m tests.render.budget.tight_renders) \
        > tests/render/budget/tight_renders.jsonl

and this tree makes the same with `--policy tight`.
"""

import argparse
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from tests.render.budget.sessions import SHAPES, Shape, budget_for
from worker.render.renderer import Renderer

PINNED = Path(__file__).with_name("tight_renders.jsonl")
PIN_SHARES = (0.01, 0.05, 0.25, 0.45, 0.7, 0.95)


def _sizes(shape: Shape) -> list[int]:
    span = shape.last - shape.first
    return sorted({shape.first, shape.first + span // 3, shape.first + 2 * span // 3, shape.last})


def cases() -> Iterator[tuple[Shape, int, float, str]]:
    for shape in SHAPES:
        for items in _sizes(shape):
            for share in PIN_SHARES:
                for tokenizer in ("estimate", "cl100k_base"):
                    yield shape, items, share, tokenizer
        for share in (0.25, 0.7):
            yield shape, shape.last, share, "o200k_base"


def record(reply: dict[str, Any]) -> dict[str, Any]:
    """What is pinned of a reply."""
    if reply["status"] != "ok":
        return {"status": reply["status"], "code": reply["error"]["code"]}
    digest = hashlib.sha256(orjson.dumps(reply["messages"])).hexdigest()
    return {"status": "ok", "messages_sha256": digest, "budget": reply["meta"]["budget"]}


def job_of(shape: Shape, items: int, limit: int, tokenizer: str, policy: str | None) -> bytes:
    budget: dict[str, Any] = {"max_prompt_tokens": limit, "tokenizer": tokenizer}
    if policy is not None:
        budget["policy"] = policy
    return orjson.dumps({"budget": budget, **shape.job(items)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", help="the budget's policy (none: the field is left out)")
    args = parser.parse_args()
    renderer = Renderer()
    limits: dict[tuple[str, float, str], int] = {}
    for shape, items, share, tokenizer in cases():
        key = (shape.name, share, tokenizer)
        if key not in limits:
            limits[key] = budget_for(renderer, shape, share, tokenizer)
        limit = limits[key]
        body = job_of(shape, items, limit, tokenizer, args.policy)
        reply = orjson.loads(renderer.render(body).body)
        case = {"shape": shape.name, "items": items, "limit": limit, "tokenizer": tokenizer}
        print(json.dumps({**case, **record(reply)}, ensure_ascii=False))


if __name__ == "__main__":
    main()

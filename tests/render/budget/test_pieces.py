"""Counting prompts from pieces (worker/render/budget/pieces.py): exact, by cl100k_base
and o200k_base.

The speed of a trimmed render rests on one property of both encodings, that counts add
up across a line seam (a text ending in "\\n", then one starting with a visible
character other than "/").
These tests check that property against tiktoken itself over random texts, that it is
not a property of every seam (so the check has teeth), and that a prompt counted from
pieces, or a budgeted reply, is exactly what tiktoken counts from scratch.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from schemas.budget import Budget
from schemas.job import Job
from worker.families import FAMILIES
from worker.render.budget import Fitted, OverBudget, fit_to_budget, tokenizers
from worker.render.budget.pieces import PieceCounter, body_span, line_seam_at
from worker.render.renderer import Renderer

CL100K = tokenizers.get("cl100k_base")
O200K = tokenizers.get("o200k_base")
EXACT = (CL100K, O200K)
exact_tokenizer = st.sampled_from(EXACT)

# Characters that change how cl100k_base splits a text: newlines and other whitespace
# (Unicode ones too), letters, digits, punctuation, an apostrophe for the contractions,
# a combining mark, wide characters, a slash, separators Python and Unicode disagree on.
TRICKY = [
    "\n", "\n", "\r", "\t", " ", " ", "  ", "\u00a0", "\u2028", "\u3000", "\u0085", "\x1c",
    "a", "Z", "s", "ll", "é", "\u0301", "漢", "✅", "😀", "1", "23", ".", ",", "'", '"', ":",
    "/", "-", "#", "{", "}", "x y", "\n\n",
]  # fmt: skip
tricky_text = st.lists(st.sampled_from(TRICKY), max_size=12).map("".join)
visible = st.sampled_from([c[0] for c in TRICKY if not c[0].isspace() and c[0] != "/"])


def exact(text: str, tokenizer: tokenizers.Tokenizer = CL100K) -> int:
    assert isinstance(tokenizer, tokenizers.TiktokenTokenizer)
    return len(tokenizer.encoding.encode_ordinary(text))


def test_exact_encodings_add_up_at_line_seams_and_the_estimate_does_not() -> None:
    assert CL100K.line_seams and O200K.line_seams
    assert not tokenizers.get("estimate").line_seams


def test_a_slash_after_a_newline_is_no_line_seam() -> None:
    # o200k_base's ` ?[^\s\p{L}\p{N}]+[\r\n/]*` takes a newline's following "/" into
    # the chunk before it.
    assert not line_seam_at(".\n/", 2)
    assert exact(".\n/", O200K) != exact(".\n", O200K) + exact("/", O200K)


def test_another_splitting_expression_is_counted_whole() -> None:
    class Other:
        def encode_ordinary(self, text: str) -> list[int]:
            return [0] * len(text.split())

    other = tokenizers.TiktokenTokenizer("other", Other(), line_seams=False)
    assert not other.line_seams
    counter = PieceCounter(other)
    text = "one two\nthree four\nfive six\n" * 20
    assert counter.count(text) == 120
    assert counter.prompt([{"role": "user", "content": "x " + text}], [[text]]) == 121


@settings(max_examples=1500, deadline=None)
@given(left=tricky_text, first=visible, right=tricky_text, tokenizer=exact_tokenizer)
def test_counts_add_up_at_a_line_seam(
    left: str, first: str, right: str, tokenizer: tokenizers.Tokenizer
) -> None:
    left += "\n"
    right = first + right
    assert line_seam_at(left + right, len(left))
    assert exact(left + right, tokenizer) == exact(left, tokenizer) + exact(right, tokenizer)


def test_counts_do_not_add_up_at_every_seam() -> None:
    # What the line seam rule excludes does happen: a chunk across the seam, or a
    # whitespace run split differently once it is no longer at the end of the text.
    for left, right in [("a", "b"), ("x\n", "\ny"), ("a.\n", "\n"), ("1", "23"), ("x   ", "5")]:
        assert not line_seam_at(left + right, len(left))
        assert exact(left + right) != exact(left) + exact(right), (left, right)


@settings(max_examples=500, deadline=None)
@given(parts=st.lists(tricky_text, max_size=40), tokenizer=exact_tokenizer)
def test_a_text_counts_as_its_head_body_and_tail(
    parts: list[str], tokenizer: tokenizers.Tokenizer
) -> None:
    text = "\n".join(parts) * 8
    start, end = body_span(text)
    assume(start != end)
    assert line_seam_at(text, start) and line_seam_at(text, end)
    pieces = [text[:start], text[start:end], text[end:]]
    assert exact(text, tokenizer) == sum(exact(piece, tokenizer) for piece in pieces)
    assert PieceCounter(tokenizer).count(text) == exact(text, tokenizer)


texts = st.lists(tricky_text, min_size=1, max_size=25).map(lambda ls: "\n".join(ls) * 4)


@settings(max_examples=150, deadline=None)
@given(
    pieces=st.lists(texts, min_size=1, max_size=8),
    framing=st.lists(tricky_text, min_size=9, max_size=9),
    counted=st.lists(st.booleans(), min_size=8, max_size=8),
    order=st.permutations(range(8)),
    tokenizer=exact_tokenizer,
)
def test_a_prompt_counted_from_pieces_is_its_exact_count(
    pieces: list[str],
    framing: list[str],
    counted: list[bool],
    order: list[int],
    tokenizer: tokenizers.Tokenizer,
) -> None:
    # A prompt of texts in framing; some texts counted before, looked for in any order.
    content = framing[0] + "".join(p + f for p, f in zip(pieces, framing[1:], strict=False))
    counter = PieceCounter(tokenizer)
    for piece, was_counted in zip(pieces, counted, strict=False):
        if was_counted:
            counter.count(piece)
    group = [pieces[i] for i in order if i < len(pieces)]
    messages = [{"role": "system", "content": framing[-1]}, {"role": "user", "content": content}]
    expected = sum(exact(m["content"], tokenizer) for m in messages)
    assert counter.prompt(messages, [group, pieces]) == expected
    assert counter.prompt(messages) == expected


@settings(max_examples=150, deadline=None)
@given(
    parts=st.lists(texts, min_size=1, max_size=5),
    framing=st.lists(tricky_text, min_size=6, max_size=6),
    first=st.booleans(),
    tokenizer=exact_tokenizer,
)
def test_parts_joined_count_as_their_join_and_their_bodies_hold_apart(
    parts: list[str], framing: list[str], first: bool, tokenizer: tokenizers.Tokenizer
) -> None:
    # An exchange: counted joined (its question and answers as one piece), shown apart.
    counter = PieceCounter(tokenizer)
    if first:
        counter.count(parts[0])
    assert counter.count_joined(parts) == exact("".join(parts), tokenizer)
    assert counter.count_joined(parts) == exact("".join(parts), tokenizer)
    apart = framing[0] + "".join(p + f for p, f in zip(parts, framing[1:], strict=False))
    messages = [{"role": "user", "content": apart}]
    assert counter.prompt(messages, [parts]) == exact(apart, tokenizer)
    assert [counter.count(p) for p in parts] == [exact(p, tokenizer) for p in parts]


def test_a_part_that_recurs_in_a_join_keeps_each_body_its_own_count() -> None:
    # An exchange whose two answers are the same text, then a shorter one.
    same = "first line\n" + "kubectl get pods -n prod\n" * 20 + "last line"
    other = "head\n" + "OOMKilled 512Mi\n" * 8 + "tail"
    parts = ["why?", same, same, other]
    counter = PieceCounter(CL100K)
    assert counter.count_joined(parts) == exact("".join(parts))
    assert [counter.count(p) for p in parts] == [exact(p) for p in parts]
    apart = "**USER:**\n" + "\n\n**ASSISTANT:**\n".join(parts)
    assert counter.prompt([{"role": "user", "content": apart}], [parts]) == exact(apart)


# -- budgeted replies ----------------------------------------------------------------


class _WholeCounts:
    """An exact tokenizer counting every prompt whole: the trimmer as it was before
    pieces."""

    line_seams = False

    def __init__(self, inner: tokenizers.Tokenizer) -> None:
        self.inner = inner
        self.name = inner.name

    def count(self, text: str) -> int:
        return self.inner.count(text)

    def count_many(self, texts: Any) -> list[int]:
        return self.inner.count_many(texts)

    def at_most(self, text: str, tight: bool = False) -> int:
        return self.inner.at_most(text, tight)


@contextmanager
def _counting_whole(tokenizer: tokenizers.Tokenizer) -> Iterator[None]:
    tokenizers._loaded[tokenizer.name] = _WholeCounts(tokenizer)
    try:
        yield
    finally:
        tokenizers._loaded[tokenizer.name] = tokenizer


log_line = st.lists(
    st.sampled_from(["pod", "api-7f9c", "OOMKilled", "503", "ERR:", "漢字", "  ", "'s", "{", "}"]),
    min_size=1,
    max_size=10,
).map(" ".join)
log_text = st.lists(st.one_of(log_line, tricky_text), min_size=1, max_size=40).map("\n".join)
events = st.lists(
    st.fixed_dictionaries(
        {
            "event_type": st.sampled_from(["tool_result", "llm_thinking", "final_analysis"]),
            "content": log_text,
        }
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=120, deadline=None)
@given(
    stage_events=events,
    chat=st.booleans(),
    alert=log_text,
    percent=st.integers(min_value=1, max_value=100),
    tokenizer=exact_tokenizer,
)
def test_a_trimmed_prompt_is_exactly_counted_and_the_same_as_counted_whole(
    stage_events: list[dict[str, str]],
    chat: bool,
    alert: str,
    percent: int,
    tokenizer: tokenizers.Tokenizer,
) -> None:
    renderer = Renderer()
    body: dict[str, Any] = {
        "job_id": "pieces",
        "kind": "react",
        "session": {"alert_data": alert, "runbook_content": alert[::-1]},
        "tools": [{"name": "k8s.get_pods", "description": "List pods."}],
    }
    if chat:
        body["chat"] = {
            "user_question": "why?",
            "investigation_events": stage_events,
            "history": [
                {"user_question": e["content"], "messages": [{"role": "assistant", "content": a}]}
                for e, a in zip(
                    stage_events, [e["content"] for e in stage_events[1:]], strict=False
                )
            ],
        }
    else:
        body["stage"] = {"previous_stage_events": stage_events}
    job = Job.model_validate(body)

    def build(trimmed: Job) -> list[dict[str, str]]:
        result = FAMILIES[trimmed.kind].build(trimmed, renderer.context)
        return renderer.contributors.apply(trimmed, result.messages)

    messages = build(job)
    full = sum(exact(m["content"], tokenizer) for m in messages)
    budget = Budget(max_prompt_tokens=max(1, full * percent // 100), tokenizer=tokenizer.name)
    fitted = fit_to_budget(job, budget, messages, build)
    with _counting_whole(tokenizer):
        reference = fit_to_budget(job, budget, messages, build)
    if isinstance(fitted, OverBudget):
        assert reference == fitted
        return
    assert isinstance(fitted, Fitted) and isinstance(reference, Fitted)
    size = sum(exact(m["content"], tokenizer) for m in fitted.messages)
    assert size <= budget.max_prompt_tokens
    if fitted.counted:
        assert fitted.prompt_tokens == size
    assert orjson.dumps(fitted.messages) == orjson.dumps(reference.messages)
    assert fitted.meta(1, "x") == reference.meta(1, "x")

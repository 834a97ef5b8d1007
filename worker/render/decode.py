"""Job bytes to a validated `Job`: every byte-level trick of the data path, in one seam.

* orjson parses (the standard library re-reads the few bodies whose integers orjson
  cannot hold exactly for the families with Python semantics);
* a tool catalogue the worker has seen before is cut out of the bytes before parsing
  and its validated list reused (render/catalogue.py keeps them), so a producer that
  sends the same catalogue job after job pays for it once;
* that list is put into the validated job as the very object the memo holds, which is
  what lets a family keep the text it made of it (`RenderContext.tool_texts`).

The renderer calls `load_body`, masks the parsed data, then calls `validate_job`.
"""

import json
import secrets
from typing import Any

import orjson

from schemas.job import Job, Tool
from worker.render.catalogue import CATALOGUES
from worker.render.json_words import json_error_words
from worker.render.members import TOOL_SHAPE, members_known

# Stands in for a known tool catalogue cut out of a body before parsing. Random per
# process: finding it as the job's `tools` proves the cut was at the job's own key.
_CATALOGUE_PLACEHOLDER = f"known-tool-catalogue-{secrets.token_hex(16)}"
_CATALOGUE_PLACEHOLDER_JSON = orjson.dumps(_CATALOGUE_PLACEHOLDER)


def load_json(body: bytes | str) -> Any:
    """Parse a body with orjson. Raises ValueError.

    Integers beyond 64 bits are read as floats, as Go's decoder (the seed's) reads every
    number; lone surrogates are refused here rather than failing at serialisation.
    """
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ValueError(json_error_words(exc)) from None


# Families whose seeds define text with Python semantics (`str(value)`): for them an
# integer beyond 64 bits must stay an exact integer, which orjson cannot give.
_PYTHON_SEMANTICS_PAYLOADS = ("legacy", "skill_react", "skill_error_observation")
_WIDE = float(2**63)


def _holds_wide_float(value: Any) -> bool:
    """Whether `value` holds an integral float of 64+ bits: a wide integer orjson widened."""
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is float:
            if abs(item) >= _WIDE and item.is_integer():
                return True
        elif type(item) is dict:
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)
    return False


def _exact_integers(body: bytes | str, data: Any) -> Any:
    """`data`, re-read with the standard library when a Python-semantics payload holds a
    wide integer. Seed-000 jobs pay one dict lookup per payload name; legacy and skill
    jobs pay a walk over their payload (docs/PERFORMANCE.md, "The builder")."""
    if type(data) is not dict:
        return data
    for name in _PYTHON_SEMANTICS_PAYLOADS:
        payload = data.get(name)
        if payload is not None and _holds_wide_float(payload):
            try:
                return json.loads(body)
            except (ValueError, RecursionError):
                return data
    return data


def _load_without_catalogue(body: bytes) -> tuple[Any, list[Tool], bytes] | None:
    """The parsed body without its tool list, when the list is a known catalogue
    spelt as before and is the body's last member: the catalogue's bytes are cut out
    before parsing, the largest saving of the decode (docs/PERFORMANCE.md, "The
    builder"). None when the body ends with no known spelling as the job's own `tools`,
    or is not JSON (the caller parses it whole, for its own error message). The third
    member is the catalogue's JSON as the body spells it (the archive keeps it so)."""
    hit = CATALOGUES.locate(body)
    if hit is None:
        return None
    start, end, tools = hit
    view = memoryview(body)
    spliced = b"".join((view[:start], _CATALOGUE_PLACEHOLDER_JSON, view[end:]))
    try:
        data = load_json(spliced)
    except ValueError:
        return None
    # The cut was at the body's last member; only if that is the job's own `tools`
    # (and not, say, a key `x"tools` whose escaped quote looked like the key's) does
    # the job's `tools` hold the placeholder now.
    if type(data) is not dict or data.get("tools") != _CATALOGUE_PLACEHOLDER:
        return None
    data = _exact_integers(spliced, data)
    del data["tools"]
    return data, tools, body[start:end]


def load_body(body: bytes | str) -> tuple[Any, list[Tool] | None]:
    """The parsed body, and the validated tool list when the body spells a known
    catalogue (then the list is not in the returned data). Raises ValueError for a
    body that is not JSON."""
    data, tools, _ = load_body_spelt(body)
    return data, tools


def load_body_spelt(body: bytes | str) -> tuple[Any, list[Tool] | None, bytes | None]:
    """`load_body`, and the cut-out catalogue's JSON as the body spells it."""
    if isinstance(body, bytes):
        known = _load_without_catalogue(body)
        if known is not None:
            return known
    return _exact_integers(body, load_json(body)), None, None


def validate_job(data: Any, tools: list[Tool] | None = None, body: bytes | str = b"") -> Job:
    """`Job.model_validate`, reusing the validated list of a known catalogue: the
    one `load_body` cut out (`tools`), or one found by the list's JSON, in which case
    the memo learns how `body` spells it."""
    if tools is None:
        raw_tools = data.get("tools") if type(data) is dict else None
        if type(raw_tools) is not list or not raw_tools:
            return Job.model_validate(data)
        try:
            key = orjson.dumps(raw_tools)
        except orjson.JSONEncodeError:  # nested beyond orjson's limit: no memo for it
            return Job.model_validate(data)
        tools = CATALOGUES.tools(key)
        if tools is None:
            job = Job.model_validate(data)
            # A catalogue with a member no tool has is not kept: cut out of the next
            # body unparsed, it would go unchecked, and its warning be given only once.
            if members_known(raw_tools, TOOL_SHAPE):
                CATALOGUES.remember(key, job.tools)
            return job
        if isinstance(body, bytes):
            # Seen before, yet not found in the bytes: learn how this producer
            # spells it, so that its next job skips parsing it.
            CATALOGUES.learn_spelling(body, key)
        data = data.copy()
        del data["tools"]
    job = Job.model_validate(data)
    # What model_copy(update=...) does, in place: the job is new and not yet shared, and
    # copying its other fields would cost more than the catalogue saves on a small job
    # (docs/PERFORMANCE.md, "The builder"). The very list object is kept: the text memo keys on it.
    job.__dict__["tools"] = tools
    job.__pydantic_fields_set__.add("tools")
    return job

"""The drift page: one self-contained HTML file (`--html`), built from a run's files.

The page is `drift.html` with the style sheet, the script and the data put inside
it, so it opens from disk, from a CI artefact or an e-mail with no network at all. The
data is JSON in a `<script type="application/json">` element; everything in it that
came from jobs (ids, prompt text, error messages) is drawn by the script as text nodes,
never as markup. In the JSON, `<`, `>` and `&` are written as `\\u003c`-style escapes,
so no job text can close the element or open a comment, whatever it holds.
"""

import base64
import hashlib
import html
import os
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from worker.rerender.page.page_data import PageError, PageLimits, collect

_ASSETS = ("drift.html", "drift.css", "drift.js")
# The pages' shared <head> (security policy, title, style sheet), and its slot in a page.
_HEAD_ASSET, _HEAD = "head.html", "{{head}}"
# In a page and its head: where the generator, the title, the content security policy,
# the style sheet, the script and the data go.
_GENERATOR, _TITLE, _CSP = "{{generator}}", "{{title}}", "{{csp}}"
_CSS, _JS, _DATA = "/*{{css}}*/", "/*{{js}}*/", "{{data}}"
_JSON_ESCAPES = {
    b"<": b"\\u003c",
    b">": b"\\u003e",
    b"&": b"\\u0026",
    "\u2028".encode(): b"\\u2028",
    "\u2029".encode(): b"\\u2029",
}


def _asset(name: str) -> str:
    return (resources.files("worker.rerender.page") / name).read_text(encoding="utf-8")


def script_safe_json(data: Any) -> bytes:
    """`data` as JSON that can sit inside a <script> element as it is."""
    encoded = orjson.dumps(data)
    # These characters only occur inside JSON strings, where the escapes mean the same.
    for raw, escaped in _JSON_ESCAPES.items():
        encoded = encoded.replace(raw, escaped)
    return encoded


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


def content_security_policy(css: str, js: str) -> str:
    """No network at all, and no script or style but the page's own (by hash): even
    markup smuggled into the page could neither run nor load anything."""
    return (
        f"default-src 'none'; script-src '{_sha256(js)}'; style-src '{_sha256(css)}'; "
        "img-src data:; base-uri 'none'; form-action 'none'"
    )


def render_page(data: dict[str, Any]) -> bytes:
    """The whole HTML document for the page data `data` (see `page_data.collect`)."""
    title = f"Drift: {Path(data['input']).name} → {Path(data['output']).name}"
    return assemble(_ASSETS, "rerender", title, data)


def assemble(
    assets: tuple[str, str, str], generator: str, title: str, data: dict[str, Any]
) -> bytes:
    """A self-contained page: its HTML with the shared head, style sheet and script
    (files of this package), the command that made it (`generator`), its title and its
    data put in their slots."""
    page, css, js = (_asset(name) for name in assets)
    if page.count(_HEAD) != 1:
        raise AssertionError(f"page assets {assets}: slot {_HEAD} missing or repeated")
    page = page.replace(_HEAD, _asset(_HEAD_ASSET).rstrip("\n"))
    parts = {
        _GENERATOR: html.escape(generator),
        _TITLE: html.escape(title),
        _CSP: content_security_policy(css, js),
        _CSS: css,
        _JS: js,
    }
    for slot, text in parts.items():
        # Our own assets: each slot once, and no text that could end its element early.
        if page.count(slot) != 1 or _DATA in text or "</" in text:
            raise AssertionError(f"page assets {assets}: slot {slot} missing or misused")
        page = page.replace(slot, text)
    before, _, after = page.partition(_DATA)
    return before.encode() + script_safe_json(data) + after.encode()


@dataclass(frozen=True, slots=True)
class PageSummary:
    path: str
    size_bytes: int
    changes: int
    changed_jobs: int
    notes: list[str]


def write_page(
    input_path: str | Path,
    output_path: str | Path,
    html_path: str | Path,
    limits: PageLimits | None = None,
) -> PageSummary:
    """Build the page of the run that read `input_path` and wrote `output_path`.

    Written to a temporary file beside `html_path` and renamed over it: a reader never
    sees half a page, and a failure leaves an earlier page as it was.
    """
    data = collect(input_path, output_path, limits)
    content = render_page(data)
    target = Path(html_path)
    write_whole(target, content)
    return PageSummary(
        path=str(target),
        size_bytes=len(content),
        changes=len(data["changes"]),
        changed_jobs=data["totals"]["drift"]["changed"],
        notes=data["notes"],
    )


def write_whole(target: Path, content: bytes) -> None:
    """Written to a temporary file beside `target` and renamed over it; PageError."""
    try:
        fd, temporary = tempfile.mkstemp(
            prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or Path(".")
        )
    except OSError as exc:
        raise PageError(f"{target}: cannot write: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(content)
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        raise PageError(f"{target}: cannot write: {exc.strerror}") from None

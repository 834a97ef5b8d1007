"""The value-end rule (docs/MASKING.md, "Where a value ends"), as a property: for each
form a value is written in, a value drawn from every printable character but what ends
that form is masked whole: no four characters of it in a row survive.

Values the rules leave alone on purpose are not drawn: placeholders and references
(`$VAR`, `<password>`, `true`, `***`), and where a sentence may follow a key (`key:
value`, columns, cells) prose and status words and paths.
"""

import string
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from worker.masking.config import MaskingConfig
from worker.masking.detectors import BUILTIN
from worker.masking.detectors.values import is_reference, reads_as_prose
from worker.masking.masker import Masker
from worker.masking.text import is_placeholder

MASKER = Masker(MaskingConfig(), engine="python")
MARKERS = " ".join(d.replacement for d in BUILTIN) + " [MASKED_"
# Every printable character: ASCII's, a blank, and letters and marks beyond ASCII.
PRINTABLE = string.ascii_letters + string.digits + string.punctuation + " " + "éüñßøł€中ß"


@dataclass(frozen=True)
class ValueForm:
    name: str
    template: str  # `{}` is the value
    ends: str  # characters that end a value of this form
    sequences: tuple[str, ...] = ()  # and sequences of characters
    loose: bool = False  # a sentence may follow the key: prose is left alone
    trimmed: bool = False  # blanks around the value are not part of it
    check: Callable[[str], bool] = lambda value: True  # other values the form excludes

    def render(self, value: str) -> str:
        return self.template.replace("{}", value)


_JSON_BLANKS = ("\\n", "\\r", "\\t")
_WORD = ValueForm("key=value", "password={}", " ", (*_JSON_BLANKS, '\\"'))
FORMS = (
    _WORD,
    ValueForm("export", "export DB_PASSWORD={}", " ", (*_JSON_BLANKS, '\\"')),
    ValueForm(
        "YAML value",
        "db:\n  password: {}\n  user: app",
        "",
        (*_JSON_BLANKS, '\\"', " #"),
        loose=True,
        trimmed=True,
        check=lambda v: v.strip()[:1] not in ("|", ">"),
    ),
    ValueForm("JSON string", '{"user": "app", "password": "{}", "pool": 4}', '"', ("\\",)),
    ValueForm("single-quoted", "password: '{}'", "'", ("\\",)),
    ValueForm(
        "INI", "[db]\npassword = {}\nuser = app", "", (*_JSON_BLANKS, '\\"', " #"), trimmed=True
    ),
    ValueForm(
        "URL query",
        "GET https://h.example.com/cb?code=1&access_token={}&x=1 HTTP/1.1",
        " &;#\"'<>\\",
    ),
    ValueForm(
        "connection string field",
        "Server=db;Database=app;Pwd={};Encrypt=yes",
        " ;",
        (*_JSON_BLANKS, '\\"'),
        check=lambda v: not v.startswith("{"),
    ),
    ValueForm(
        "table cell",
        "| key | value |\n| password | {} |",
        "|",
        (*_JSON_BLANKS, '\\"'),
        loose=True,
        trimmed=True,
    ),
    ValueForm(
        "column",
        "USER        app\nPASSWORD    {}\nHOST        db",
        "\t",
        ("  ", *_JSON_BLANKS, '\\"'),
        loose=True,
        trimmed=True,
        # (A row of upper-case words is a table's header.)
        check=lambda v: not (v.replace(" ", "").replace("_", "").isalpha() and v.isupper()),
    ),
    ValueForm("XML element", "<db>\n  <password>{}</password>\n</db>", "<", trimmed=True),
    ValueForm(
        "flag",
        "pg_dump --password {} app",
        " \"'",
        (*_JSON_BLANKS, '\\"'),
        check=lambda v: not v.startswith("-"),
    ),
    ValueForm("mysql -p", "mysql -u root -p{} app", " \"'\\"),
    ValueForm("curl -u", "curl -u admin:{} https://h.example.com", " \"'\\"),
    ValueForm(
        "URL user information", "DATABASE_URL=postgres://app:{}@db.example.com/app", " /?#@\"'<>\\"
    ),
    ValueForm(".pgpass", "db.example.com:5432:app:app:{}", "\\"),
)


def values(form: ValueForm) -> st.SearchStrategy[str]:
    alphabet = "".join(c for c in PRINTABLE if c not in form.ends)
    return st.text(alphabet, min_size=4, max_size=40).filter(
        lambda v: not any(s in v for s in form.sequences)
    )


def windows(value: str) -> set[str]:
    return {value[i : i + 4] for i in range(len(value) - 3)}


def left_alone(form: ValueForm, value: str) -> bool:
    """Whether the rules leave `value` alone on purpose in `form`."""
    judged = value.strip() if form.trimmed else value
    if not judged or is_placeholder(judged) or not form.check(judged):
        return True
    if judged[0] in "\"'":
        return True  # a value starting with a quote is a quoted value: it ends at its quote
    if form.loose and (
        reads_as_prose(judged, 0, len(judged)) or is_reference(judged, 0, len(judged))
    ):
        return True
    return judged.lower() == "password"  # code passing a variable: `password=password`


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f.name)
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(data=st.data())
def test_a_value_is_masked_whole(form: ValueForm, data: st.DataObject) -> None:
    value = data.draw(values(form), label="value")
    assume(not left_alone(form, value))
    text = form.render(value)
    masked = MASKER.mask_text(text)
    background = form.render("") + MARKERS
    survived = {w for w in windows(value.strip()) if w in masked and w not in background}
    assert not survived, masked

"""Texts built to make secret masking slow: each family repeats what some detector keys
on (its keywords with each kind of separator, unterminated quotes, PEM headers without
an end, URLs with many `:` and `@`, nested brackets) or holds one long run of what a
detector reads through. Used by tests/masking/test_linear_time.py and
bench/bench_masking_adversarial.py.

A family is a name and a function from a size in characters to a text of about that
size, so the same shape can be rendered small and large.
"""

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    name: str
    build: Callable[[int], str]

    def text(self, size: int) -> str:
        return self.build(size)


def repeated(unit: str) -> Callable[[int], str]:
    return lambda size: unit * max(1, size // len(unit))


def run(prefix: str, unit: str, suffix: str = "") -> Callable[[int], str]:
    """`prefix`, then `unit` repeated to the size, then `suffix`: one long run."""
    return lambda size: prefix + unit * max(1, (size - len(prefix)) // len(unit)) + suffix


def nested(open_: str, close: str) -> Callable[[int], str]:
    return lambda size: open_ * (size // (2 * len(open_))) + close * (size // (2 * len(close)))


# Keywords of the key-value detectors (password, secret, token, api_key, AWS secret,
# storage keys, cookie) with every separator and quoting they accept.
_KEYS = (
    "password",
    "DB_PASSWORD",
    "secret",
    "client_secret",
    "token",
    "access_token",
    "api_key",
    "X-API-Key",
    "aws_secret_access_key",
    "AccountKey",
    "SharedAccessKey",
    "Cookie",
    "credentials",
    "ENCRYPTION_KEY",
    "session_id",
)
_SEPARATORS = (": ", "=", ":", " = ", ': "', "='", '=\\"', '": "', '\\": \\"', ":\t")

# Shapes of the other detectors, repeated.
_UNITS = (
    # prose that mentions a keyword before a colon (the case)
    "the secret: rotation failed; ",
    "password: ",
    "password: ${X} ",
    "password: *** ",
    "password: a.password ",
    "password: x #",
    "--token ",
    "--db-password ",
    "export TOKEN=",
    '-H "X-Auth-Token: ',
    "curl -H 'Cookie: ",
    "- name: DB_PASSWORD\n  value: ",
    "name: X_TOKEN, value: ",
    # headers
    "Authorization: ",
    "authorization:",
    "Authorization: Digest a ",
    "Authorization: Bearer ",
    "Bearer ",
    "Cookie: a=",
    "Cookie: cookie=a=b; ",
    "Set-Cookie: sid=a; Path=/; ",
    # .netrc and cloud storage
    "machine h login u password ",
    "machine h login ",
    "default login u password ",
    "SharedAccessSignature=",
    "SharedAccessSignature=sv=1&sig=",
    "&sig=",
    "?X-Amz-Signature=",
    # Docker configs
    '"auth":"',
    '"auth": "dXNlcjpwYXNz',
    '"auths":{',
    '{"auths":{"r":{"auth":"',
    # Kubernetes
    "kind: Secret\n",
    "kind: Secret\ndata:\n",
    'kind: Secret\n"',
    "data: {",
    '{"kind":"Secret","data":{"a":"',
    '\\"kind\\":\\"Secret\\",\\"data\\":{\\"a\\":\\"',
    "client-key-data: ",
    "certificate-authority-data:",
    # tokens of a known shape
    "eyJ",
    "eyJa",
    "eyJhbGciOi.",
    "ghp_",
    "github_pat_",
    "xoxb-",
    "xapp-1-",
    "hooks.slack.com/services/",
    "AKIA",
    "sha256~",
    # PEM headers without an end
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----BEGIN CERTIFICATE-----\n",
    "-----BEGIN ",
    "Proc-Type: ",
    # URLs with many `:` and `@`
    "://",
    "a://b:c@",
    ":@",
    "@",
    "https://user:",
    # e-mail addresses (pii)
    "x@",
    "a.b@c.",
)

FAMILIES: tuple[Family, ...] = (
    *(Family(f"repeat {k + s!r}", repeated(k + s)) for k in _KEYS for s in _SEPARATORS),
    *(Family(f"repeat {unit!r}", repeated(unit)) for unit in _UNITS),
    # one long run of what a detector reads through
    Family("run of key characters after eyJ", run("eyJ", "a")),
    Family("run of key characters after a key", run("password", "a")),
    Family("run of blanks after a key", run("password: ", " ", "x")),
    Family("long value after a key", run("password: ", "a")),
    Family("run of blanks in a Secret's YAML key", run("kind: Secret\na", " ", "b")),
    Family("flow mapping of a Secret, unclosed", run("kind: Secret\ndata: {", "a")),
    Family("unterminated JSON string of escaped quotes", run('{"kind":"Secret"}\n"', '\\"')),
    Family("unterminated quote after a key", run('password: "', "a\\'")),
    Family("PEM body without an end", run("-----BEGIN RSA PRIVATE KEY-----\n", "A")),
    Family("URL with many colons", run("https://", "a:")),
    Family("URL with many at signs", run("https://u:", "a@")),
    Family("digest header to a long line end", run("Authorization: Digest ", "a ")),
    Family("run of dashes", run("--", "-", "token x")),
    Family("run of backslashes", run("password=", "\\")),
    Family("run of quotes", repeated('"')),
    Family("run of escaped line breaks", run("password: x", "\\n")),
    Family("blank lines after nested Secrets", lambda size: _nested_secrets(size)),
    # nested brackets
    Family("nested square brackets", nested("[", "]")),
    Family("nested braces", nested("{", "}")),
    Family("nested JSON objects", nested('{"a":', "}")),
    Family("nested Secret data maps", nested('{"kind":"Secret","data":{"a":', "}}")),
)


def _nested_secrets(size: int) -> str:
    """`kind: Secret` mappings nested ever deeper, then blank lines: each mapping's walk
    must not pass the blank lines again."""
    lines = []
    total = 0
    depth = 0
    while total < size // 2:
        line = " " * depth + "kind: Secret\n"
        lines.append(line)
        total += len(line)
        depth += 1
    return "".join(lines) + "\n" * (size - total)

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
# storage keys, cookie) with every separator and quoting they accept; the keywords and
# separators of issue 42 with a few of the others each.
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
_MORE_KEYS = (
    "Pwd",
    "Passwort",
    "contraseña",
    "mot de passe",
    "PRIVATE_KEY",
    "spring.datasource.password",
)
_MORE_SEPARATORS = ("\t", "   ", " | ", "：", " '", " ", ":\n  ")
_PAIRS = (
    *((k, s) for k in _KEYS for s in _SEPARATORS),
    *((k, s) for k in _MORE_KEYS for s in (": ", "=", " ")),
    *((k, s) for k in ("password", "secret", "token") for s in _MORE_SEPARATORS),
)

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
    # keys anywhere, by every form (issue 42)
    "the db password: x ",
    "the password is Ab1-x2 ",
    "password is ",
    "web_1  | password: ",
    "| password | x ",
    "| password | x |\n|---|\n",
    "password: |\n  ",
    "password: |\n",
    "password: >-\n ",
    "password:\n",
    "password:\n  x\n",
    "- value: x\n  name: DB_PASSWORD\n",
    "- value: x\n  name: DB_PASSWORD",
    '{"value": "x", "name": "DB_PASSWORD"} ',
    '{"value": "{',
    "<password>",
    "<password>x",
    "<name>a.password</name>",
    "<name>a.password</name><value>",
    '<add key="Password" value="',
    '<entry key="password">',
    ";Pwd={",
    "Pwd=x;",
    "spring.datasource.password ",
    "requirepass ",
    "max_token=",
    "tests: pass=42 ",
    "PASSWORD = N'",
    "password 'x",
    "password=password) ",
    "a_password Ab1 ",
    "DB_PASSWORD   Opaque   ",
    "Password: must be at least ",
    '"Env": ["DB_PASSWORD=',
    # line prefixes
    "web_1  | -----BEGIN RSA PRIVATE KEY-----\n",
    "web_1  | a\n",
    "[pod/x] password: |\n",
    "> kind: Secret\n> data:\n>   a: b\n",
    "Jun 01 08:00:00 h u[1]: x\n",
    "2026-06-01T08:00:00Z password: ",
    # command lines
    "mysql -p",
    "mysql ",
    "docker login -p ",
    "curl -u a:",
    "curl -u ",
    "redis-cli -a ",
    "sshpass -p ",
    "-passin pass:",
    "--from-literal=a=",
    "--from-literal '",
    "sqlplus a/b@",
    "rabbitmqctl add_user a ",
    "htpasswd -b f u ",
    "smbclient -U a%",
    "vault login ",
    "mysql \\\n",
    # file formats
    "machine h password p login ",
    "machine h password ",
    "a:5432:b:c:",
    "*:*:",
    "IDENTIFIED BY ",
    "identified by '",
    "PASSWORD('",
    # URLs
    "a:b@c ",
    "app:p@",
    "a:@b@",
    "https:\\/\\/u:p@",
    "https%3A%2F%2Fu%3Ap%40",
    "%3a%2f%2f",
    # vendor tokens
    "glpat-",
    "sk_live_",
    "sk-proj-",
    "sk-ant-api03-",
    "AIza",
    "ya29.",
    "1//0",
    "npm_",
    "pypi-AgE",
    "SG.abcdefghijklmnop",
    "hf_",
    "hvs.",
    "123456789:AAabcdefghijklmnopqrstuvwxyz0123456 ",
    "discord.com/api/webhooks/1/",
    "1Q~",
    "SK0123456789abcdef0123456789abcdef",
    "shpat_",
    "dop_v1_",
    "dckr_pat_",
    "glsa_",
    "ATATT3",
    "lin_api_",
    "PMAK-",
    "sntryu_",
    "NRAK-",
    "dapi0123456789abcdef0123456789abcdef",
    "dp.st.",
    "pul-",
    "HRKU-",
    "AKCp",
    "sk.eyJ",
    "AGE-SECRET-KEY-1",
    "a.atlasv1.",
    "key-0123456789abcdef0123456789abcdef",
    "pplx-",
    # JWTs in every shape, AWS secrets by context, Digest, PEM in base64, PuTTY
    "eyAi",
    "ewog",
    "eyJabcd.efgh.\n",
    "eyJabcdefg\n",
    "AKIAIOSFODNN7ABCDEFG,",
    "AKIAIOSFODNN7ABCDEFG ",
    "Secret Access Key [x]: ",
    "Authorization: Digest response=",
    'Authorization: Digest response="',
    "LS0tLS1CRUdJTi",
    "Private-Lines: 9\n",
    # Kubernetes flow style, card numbers (pii)
    "{kind: Secret, data: {a: ",
    "kind: Secret, ",
    "{kind: Secret ",
    "4111 1111 1111 1111 ",
    "4111111111111111",
    "4111 ",
)

FAMILIES: tuple[Family, ...] = (
    *(Family(f"repeat {k + s!r}", repeated(k + s)) for k, s in _PAIRS),
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
    Family("nested block scalars", lambda size: _nested_blocks(size)),
    Family("run of key characters after a program", run("mysql", "a")),
    Family("run of programs' names", run("", "mysql")),
    Family("run of words after a program", run("docker ", "a ")),
    Family("run of token characters after a header", run("eyAi", "a")),
    Family("wrapped lines of a token", run("eyJ", "aaaa\n")),
    Family("run of a user name's characters before @", run("", "a", ":b@c")),
    Family("one word of many colons and at signs", run("a", ":@")),
    Family("run of blanks before a key", run(" ", " ", "password: x")),
    Family("run of list markers before keys", run("- ", "- ", "password: x password: y")),
    Family("run of blanks after a table's bar", run("| password | x |\n", " ")),
    Family("long JSON string of keys", run('{"log": "', "password=a ", '"}')),
    Family("run of digits", run("4", "1")),
    Family("run of prefixed lines", repeated("web_1  | password: x\n")),
    Family("run of quotes after a key", run("password=", '\\"')),
    # nested brackets
    Family("nested square brackets", nested("[", "]")),
    Family("nested braces", nested("{", "}")),
    Family("nested JSON objects", nested('{"a":', "}")),
    Family("nested Secret data maps", nested('{"kind":"Secret","data":{"a":', "}}")),
)


def _nested_blocks(size: int) -> str:
    """Block scalars nested ever deeper, each holding a placeholder: no block is read
    again for each key inside it."""
    lines = []
    total = 0
    depth = 0
    while total < size:
        line = " " * depth + "password: |\n" + " " * (depth + 1) + "${X}\n"
        lines.append(line)
        total += len(line)
        depth += 1
    return "".join(lines)


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

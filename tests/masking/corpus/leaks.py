"""The leak corpus (issue 42): text an SRE pipeline carries, with a credential in it.

One case per row of the issue's table (punctuation in values, log prefixes, keys in the
middle of a line, YAML blocks, key names, Java properties and Kubernetes env, command
lines, URLs and connection strings, vendor tokens, tokens in pieces) and per vendor
family of docs/MASKING.md. Each case draws its secret at random in the credential's
shape (hypothesis), so no test holds a fixed value a detector could have been written
around; `render` puts it in the text. Every secret must be masked whole: no four
characters of it in a row survive (tests/masking/test_leaks.py).
"""

import base64
import json
import string
from collections.abc import Callable
from dataclasses import dataclass

from hypothesis import strategies as st

ALNUM = string.ascii_letters + string.digits
B64URL = ALNUM + "_-"
B64 = ALNUM + "+/"
HEX = "0123456789abcdef"
# The marks a password may hold; values below exclude what ends their form.
MARKS = "&;<>(),]@+!#%^*-_=.~/?:|[{}$'\""


def chars(alphabet: str, size: int, most: int | None = None) -> st.SearchStrategy[str]:
    """`size` to `most` characters of `alphabet`, drawn at random the way a credential's
    are: from the system's randomness, not hypothesis' own strings, which lean to runs
    of one character that no generator of credentials makes (tests/masking/
    test_value_forms.py draws those)."""
    return st.builds(
        lambda rand, n: "".join(rand.choice(alphabet) for _ in range(n)),
        st.randoms(use_true_random=True),
        st.integers(size, size if most is None else most),
    )


def password(
    alphabet: str = ALNUM + MARKS, size: int = 12, most: int = 24
) -> st.SearchStrategy[str]:
    """A password of `alphabet`: it starts with a letter (a value starting with `$`, `<`,
    `{` reads as a reference) and holds a digit, so it reads as no word."""
    return st.builds(
        lambda first, digit, rest: first + digit + rest,
        st.sampled_from(string.ascii_letters),
        st.sampled_from(string.digits),
        chars(alphabet, size - 2, most - 2),
    )


def token(prefix: str, alphabet: str, size: int, most: int | None = None) -> st.SearchStrategy[str]:
    return chars(alphabet, size, most).map(lambda body: prefix + body)


def card_number() -> st.SearchStrategy[str]:
    """A Visa or Mastercard number that passes the Luhn check, in groups of four."""

    def complete(body: str) -> str:
        total = 0
        for index, char in enumerate(reversed(body)):
            value = int(char) * (2 if index % 2 == 0 else 1)
            total += value - 9 if value > 9 else value
        digits = body + str((10 - total % 10) % 10)
        return " ".join(digits[i : i + 4] for i in range(0, 16, 4))

    return st.sampled_from(["4", "51", "52", "53", "54", "55"]).flatmap(
        lambda first: chars("0123456789", 15 - len(first)).map(lambda rest: complete(first + rest))
    )


def pem_body() -> st.SearchStrategy[str]:
    """The base64 lines of a key: 64 characters each, a shorter last one."""
    return st.builds(
        lambda lines, last: "\n".join([*lines, last]),
        st.lists(chars(B64, 64), min_size=2, max_size=4),
        chars(B64, 16, 40),
    )


def jwt(
    header: dict[str, str] | None = None, *, spaced: bool = False, parts: int = 3
) -> st.SearchStrategy[str]:
    """A JWT (or a JWE with five parts) with random claims and signature."""

    def encode(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).decode().rstrip("=")

    head = header or {"alg": "HS256", "typ": "JWT"}
    text = json.dumps(head, indent=1 if spaced else None)
    first = encode(text.encode())

    def build(claims: str, rest: list[str]) -> str:
        body = encode(json.dumps({"sub": claims, "iat": 1717228800}).encode())
        return ".".join([first, body if parts == 3 else "", *rest][:parts])

    return st.builds(
        build, chars(ALNUM, 8, 16), st.lists(chars(B64URL, 22, 43), min_size=3, max_size=3)
    )


@dataclass(frozen=True)
class Leak:
    id: str
    row: str  # the table row, or the vendor family
    render: Callable[[str], str]  # the text holding the secret
    secret: st.SearchStrategy[str]
    detector: str  # the `meta.masked` key that counts it
    groups: tuple[str, ...] = ("secrets",)


def around(template: str) -> Callable[[str], str]:
    return lambda secret: template.replace("{S}", secret)


def prefixed(prefix: str, template: str) -> Callable[[str], str]:
    """`template` with the secret in it, every line of it carrying `prefix`."""
    return lambda secret: "\n".join(
        prefix + line for line in template.replace("{S}", secret).split("\n")
    )


NO_BLANK = ALNUM + MARKS.replace("'", "").replace('"', "")  # to whitespace
NO_QUOTE = ALNUM + MARKS.replace('"', "") + " "
NO_SINGLE = ALNUM + MARKS.replace("'", "") + " "
NO_SEMICOLON = ALNUM + MARKS.replace(";", "").replace("'", "").replace('"', "")
NO_BAR = ALNUM + MARKS.replace("|", "") + " "
NO_TAG = ALNUM + MARKS.replace("<", "")
URL_SAFE = ALNUM + "!$&()*+,;=-._~"  # what a URL's user information holds unencoded

_PEM = "-----BEGIN EC PRIVATE KEY-----\n{S}\n-----END EC PRIVATE KEY-----"

LEAKS: tuple[Leak, ...] = (
    # -- punctuation inside a value --------------------------------------------------
    Leak("punct-password", "punctuation", around("password={S}"), password(NO_BLANK), "password"),
    Leak(
        "punct-client-secret",
        "punctuation",
        around("client_secret={S} grant_type=client_credentials"),
        password(NO_BLANK),
        "secret",
    ),
    Leak(
        "punct-json",
        "punctuation",
        around('{"user": "app", "password": "{S}", "host": "db"}'),
        password(NO_QUOTE.replace("\\", "")),
        "password",
    ),
    Leak(
        "punct-yaml-single",
        "punctuation",
        around("db:\n  password: '{S}'\n  user: app"),
        password(NO_SINGLE),
        "password",
    ),
    Leak(
        "punct-shell-double",
        "punctuation",
        around('export DB_PASSWORD="{S}"'),
        password(NO_QUOTE.replace("\\", "").replace("$", "").replace("`", "")),
        "password",
    ),
    # -- a PEM key (and a YAML document) whose lines carry a prefix --------------------
    Leak("pem-compose", "line prefixes", prefixed("web_1  | ", _PEM), pem_body(), "private_key"),
    Leak(
        "pem-kubectl",
        "line prefixes",
        prefixed("[pod/api-7d9f8c6b5-m4n7q/app] ", _PEM),
        pem_body(),
        "private_key",
    ),
    Leak(
        "pem-journald",
        "line prefixes",
        prefixed("Jun 01 08:14:22 node-3 api[4711]: ", _PEM),
        pem_body(),
        "private_key",
    ),
    Leak(
        "pem-timestamps",
        "line prefixes",
        prefixed("2026-06-01T08:14:22.123456789Z ", _PEM),
        pem_body(),
        "private_key",
    ),
    Leak("pem-quoted", "line prefixes", prefixed("> ", _PEM), pem_body(), "private_key"),
    Leak(
        "yaml-secret-compose",
        "line prefixes",
        prefixed("worker-1  | ", "apiVersion: v1\nkind: Secret\ndata:\n  conn: {S}\ntype: Opaque"),
        chars(B64, 24, 40),
        "kubernetes_secret",
    ),
    Leak(
        "yaml-block-kubectl",
        "line prefixes",
        prefixed("[pod/api/app] ", "config:\n  password: |\n    {S}\n  user: app"),
        password(NO_BLANK + " "),
        "password",
    ),
    # -- keys that do not start their line ---------------------------------------------
    Leak(
        "key-after-compose",
        "keys anywhere",
        around("web_1  | password: {S}"),
        password(NO_BLANK),
        "password",
    ),
    Leak(
        "key-after-log-prefix",
        "keys anywhere",
        around("2026-06-01 08:14:22,123 INFO config dump: password: {S} pool=10"),
        password(NO_BLANK),
        "password",
    ),
    Leak(
        "key-in-sentence",
        "keys anywhere",
        around("@oncall the db password: {S} (rotate later)"),
        password(NO_BLANK),
        "password",
    ),
    Leak(
        "key-said-in-sentence",
        "keys anywhere",
        around("fyi the db password is {S} (rotate it after the incident)"),
        password(NO_BLANK),
        "password",
    ),
    Leak(
        "key-table-cell",
        "keys anywhere",
        around("| name | value |\n|---|---|\n| password | {S} |"),
        password(NO_BAR),
        "password",
    ),
    Leak(
        "key-tab",
        "keys anywhere",
        around("user\tapp\npassword\t{S}\nhost\tdb"),
        password(NO_BLANK + " "),
        "password",
    ),
    Leak(
        "key-columns",
        "keys anywhere",
        around("DB_USER       app\nDB_PASSWORD   {S}\nDB_HOST       db"),
        password(NO_BLANK),
        "password",
    ),
    Leak(
        "key-fullwidth",
        "keys anywhere",
        around("密码 / Password：{S}"),
        password(NO_BLANK),
        "password",
    ),
    Leak(
        "key-in-json-string",
        "keys anywhere",
        around('{"Env": ["PATH=/usr/bin", "DB_PASSWORD={S}"]}'),
        password(NO_BLANK),
        "password",
    ),
    # -- YAML blocks and values on the next line -----------------------------------------
    Leak(
        "yaml-block",
        "yaml blocks",
        around("db:\n  password: |\n    {S}\n  user: app"),
        password(NO_BLANK + " "),
        "password",
    ),
    Leak(
        "yaml-folded",
        "yaml blocks",
        around("password: >-\n  {S}\nuser: app"),
        password(NO_BLANK + " "),
        "password",
    ),
    Leak(
        "yaml-next-line",
        "yaml blocks",
        around("secret:\n    {S}\nuser: app"),
        password(NO_BLANK.replace(":", "")),  # ending with `:`, it would be a key
        "secret",
    ),
    Leak(
        "chat-next-line",
        "yaml blocks",
        around("here is the token:\n{S}\nthanks"),
        password(NO_BLANK),
        "token",
    ),
    # -- key names beyond a suffix list ---------------------------------------------------
    Leak(
        "odbc-pwd",
        "key names",
        around("Driver={ODBC Driver 18};Server=db;Uid=app;Pwd={S};Encrypt=yes"),
        password(NO_SEMICOLON.replace("{", "")),
        "password",
    ),
    Leak(
        "secret-key-base", "key names", around("SECRET_KEY_BASE={S}"), password(NO_BLANK), "secret"
    ),
    Leak(
        "private-key-var", "key names", around("PRIVATE_KEY={S}"), password(NO_BLANK), "private_key"
    ),
    Leak(
        "encryption-key",
        "key names",
        around("ENCRYPTION_KEY={S}"),
        password(NO_BLANK),
        "encryption_key",
    ),
    # Azure DevOps' personal access tokens: 52 characters of lower-case base32, no
    # prefix; only the key's name tells them.
    Leak(
        "azure-devops-pat",
        "key names",
        around("AZURE_DEVOPS_PAT: {S}"),
        chars("abcdefghijklmnopqrstuvwxyz234567", 52),
        "token",
    ),
    Leak("github-pat-var", "key names", around("export GH_PAT={S}"), password(NO_BLANK), "token"),
    Leak(
        "signing-key",
        "key names",
        around("jwt:\n  signing_key: {S}\n  ttl: 3600"),
        password(NO_BLANK),
        "encryption_key",
    ),
    Leak("passwort", "key names", around("Passwort={S}"), password(NO_BLANK), "password"),
    Leak("kennwort", "key names", around("Kennwort: {S}"), password(NO_BLANK), "password"),
    Leak("contrasena", "key names", around("contraseña: {S}"), password(NO_BLANK), "password"),
    Leak("mot-de-passe", "key names", around("Mot de passe : {S}"), password(NO_BLANK), "password"),
    Leak("wachtwoord", "key names", around("wachtwoord={S}"), password(NO_BLANK), "password"),
    Leak("senha", "key names", around("senha: {S}"), password(NO_BLANK), "password"),
    Leak("haslo", "key names", around("hasło: {S}"), password(NO_BLANK), "password"),
    Leak(
        "password-confirm",
        "key names",
        around("new_password_confirm={S}"),
        password(NO_BLANK),
        "password",
    ),
    Leak("short-pw", "key names", around("smtp.pw={S}"), password(NO_BLANK), "password"),
    Leak(
        "credentials-json",
        "key names",
        around('{"credentials": "{S}", "region": "eu-west-1"}'),
        password(NO_QUOTE.replace("\\", "")),
        "credentials",
    ),
    Leak(
        "session-id",
        "key names",
        around("GET /cart session_id={S} user=4711"),
        password(NO_BLANK),
        "session_id",
    ),
    Leak(
        "jsessionid",
        "key names",
        around("Set-Cookie-less fallback: /cart;jsessionid={S}"),
        password(NO_BLANK.replace(";", "").replace("?", "").replace("#", "")),
        "session_id",
    ),
    # -- Java properties, Kubernetes env -----------------------------------------------
    Leak(
        "java-properties",
        "java properties and env",
        around("spring.datasource.url=jdbc:postgresql://db/app\nspring.datasource.password {S}"),
        password(NO_BLANK + " "),
        "password",
    ),
    Leak(
        "env-value-before-name",
        "java properties and env",
        around("env:\n- value: {S}\n  name: DB_PASSWORD"),
        password(NO_BLANK),
        "password",
    ),
    Leak(
        "env-value-after-name",
        "java properties and env",
        around("env:\n- name: DB_PASSWORD\n  value: {S}\n- name: LOG_LEVEL"),
        password(NO_BLANK),
        "password",
    ),
    Leak(
        "env-json-before-name",
        "java properties and env",
        around('{"value": "{S}", "name": "API_TOKEN"}'),
        password(NO_QUOTE.replace("\\", "")),
        "token",
    ),
    Leak(
        "secret-flow-style",
        "java properties and env",
        around("{apiVersion: v1, kind: Secret, metadata: {name: db}, data: {conn: {S}}}"),
        chars(B64, 24, 40),
        "kubernetes_secret",
    ),
    # -- command lines -------------------------------------------------------------------
    Leak(
        "mysql-p",
        "command lines",
        around("mysql -h db -u root -p{S} payments"),
        password(NO_BLANK),
        "command_line",
    ),
    Leak(
        "pgpassword",
        "command lines",
        around("PGPASSWORD={S} psql -h db -U app payments"),
        password(NO_BLANK),
        "password",
    ),
    Leak(
        "docker-login",
        "command lines",
        around("docker login -u ci -p {S} registry.example.com"),
        password(NO_BLANK),
        "command_line",
    ),
    Leak(
        "docker-login-long",
        "command lines",
        around("docker login --username ci --password {S} ghcr.io"),
        password(NO_BLANK),
        "password",
    ),
    Leak(
        "redis-cli",
        "command lines",
        around("redis-cli -h cache -a '{S}' ping"),
        password(NO_SINGLE.replace(" ", "")),
        "command_line",
    ),
    Leak(
        "curl-user",
        "command lines",
        around("curl -u admin:{S} https://api.example.com/health"),
        password(NO_BLANK),
        "command_line",
    ),
    Leak(
        "sshpass",
        "command lines",
        around("sshpass -p '{S}' ssh ops@bastion"),
        password(NO_SINGLE.replace(" ", "")),
        "command_line",
    ),
    Leak(
        "openssl-passin",
        "command lines",
        around("openssl rsa -in key.pem -passin pass:{S} -out plain.pem"),
        password(NO_BLANK),
        "password",
    ),
    Leak(
        "keytool",
        "command lines",
        around("keytool -importkeystore -srcstorepass {S} -deststorepass {S} -noprompt"),
        password(NO_BLANK),
        "password",
    ),
    Leak(
        "sqlcmd",
        "command lines",
        around("sqlcmd -S db -U sa -P {S} -Q 'select 1'"),
        password(NO_BLANK),
        "command_line",
    ),
    Leak(
        "kubectl-from-literal",
        "command lines",
        around("kubectl create secret generic db --from-literal=conn={S} -n prod"),
        password(NO_BLANK),
        "command_line",
    ),
    # -- URLs and connection strings ------------------------------------------------------
    Leak(
        "url-no-scheme",
        "urls and connection strings",
        around("connecting to app:{S}@db:3306 failed"),
        password(URL_SAFE),
        "url_credentials",
    ),
    Leak(
        "url-json-escaped",
        "urls and connection strings",
        around('{"remote": "https:\\/\\/deploy:{S}@git.example.com\\/x.git"}'),
        password(URL_SAFE),
        "url_credentials",
    ),
    Leak(
        "url-percent-encoded",
        "urls and connection strings",
        around("next=https%3A%2F%2Fops%3A{S}%40grafana.example.com%2Fd%2Fx&y=1"),
        password(ALNUM + "-._~"),
        "url_credentials",
    ),
    Leak(
        "url-scheme",
        "urls and connection strings",
        around("DATABASE_URL=postgres://app:{S}@db.prod:5432/payments"),
        password(URL_SAFE),
        "url_credentials",
    ),
    Leak(
        "pgpass",
        "urls and connection strings",
        around("db.prod.internal:5432:payments:app:{S}"),
        password(NO_BLANK),
        "pgpass",
    ),
    Leak(
        "sql-alter-role",
        "urls and connection strings",
        around("ALTER ROLE app WITH LOGIN PASSWORD '{S}';"),
        password(NO_SINGLE),
        "password",
    ),
    Leak(
        "sql-identified-by",
        "urls and connection strings",
        around("CREATE USER 'app'@'%' IDENTIFIED BY '{S}';"),
        password(NO_SINGLE),
        "sql_password",
    ),
    Leak(
        "xml-element",
        "urls and connection strings",
        around("<datasource>\n  <password>{S}</password>\n</datasource>"),
        password(NO_TAG),
        "password",
    ),
    Leak(
        "xml-hadoop",
        "urls and connection strings",
        around("<property>\n  <name>fs.s3a.secret.key</name>\n  <value>{S}</value>\n</property>"),
        password(NO_TAG),
        "secret",
    ),
    Leak(
        "requirepass",
        "urls and connection strings",
        around("# redis.conf\nrequirepass {S}\nmaxmemory 2gb"),
        password(NO_BLANK),
        "password",
    ),
    Leak(
        "netrc-any-order",
        "urls and connection strings",
        around("machine api.example.com password {S} login ops"),
        password(NO_BLANK.replace('"', "")),
        "netrc",
    ),
    # -- vendor tokens ---------------------------------------------------------------------
    Leak(
        "gitlab",
        "GitLab",
        around("GITLAB_TOKEN={S}"),
        token("glpat-", B64URL, 20, 26),
        "gitlab_token",
    ),
    Leak(
        "gitlab-runner",
        "GitLab",
        around("runner registered with {S}"),
        token("glrt-", B64URL, 20, 26),
        "gitlab_token",
    ),
    Leak(
        "stripe",
        "Stripe",
        around("stripe.api_key = '{S}'"),
        token("sk_live_", ALNUM, 24, 99),
        "stripe_key",
    ),
    Leak(
        "stripe-webhook", "Stripe", around("whsec: {S}"), token("whsec_", ALNUM, 32), "stripe_key"
    ),
    Leak(
        "openai",
        "OpenAI",
        around("OPENAI_API_KEY={S}"),
        token("sk-proj-", B64URL, 40, 156),
        "openai_key",
    ),
    Leak(
        "anthropic",
        "Anthropic",
        around("x-api-key: {S}"),
        token("sk-ant-api03-", B64URL, 93, 95),
        "anthropic_key",
    ),
    Leak(
        "google-api-key",
        "Google API keys",
        around("https://maps.googleapis.com/maps/api/geocode/json?key={S}"),
        token("AIza", B64URL, 35),
        "google_api_key",
    ),
    Leak(
        "google-oauth",
        "Google OAuth",
        around("Bearer {S}"),
        token("ya29.", B64URL + ".", 60, 160),
        "google_oauth_token",
    ),
    Leak(
        "google-refresh",
        "Google OAuth",
        around("refresh token 1//0{S}"),
        chars(B64URL, 40, 100),
        "google_oauth_token",
    ),
    Leak(
        "npm",
        "npm",
        around("//registry.npmjs.org/:_authToken={S}"),
        token("npm_", ALNUM, 36),
        "npm_token",
    ),
    Leak(
        "pypi",
        "PyPI",
        around("password = {S}"),
        token("pypi-AgEIcHlwaS5vcmc", B64URL, 60, 120),
        "pypi_token",
    ),
    Leak(
        "sendgrid",
        "SendGrid",
        around("SENDGRID {S}"),
        st.builds(lambda a, b: f"SG.{a}.{b}", chars(B64URL, 22), chars(B64URL, 43)),
        "sendgrid_key",
    ),
    Leak(
        "huggingface",
        "Hugging Face",
        around("HF_TOKEN {S} loaded"),
        token("hf_", ALNUM, 34),
        "huggingface_token",
    ),
    Leak(
        "vault",
        "HashiCorp Vault",
        around("vault token {S} renewed"),
        token("hvs.", B64URL, 90, 120),
        "vault_token",
    ),
    Leak(
        "telegram",
        "Telegram bot tokens",
        around("https://api.telegram.org/bot{S}/sendMessage"),
        st.builds(lambda d, b: f"{d}:AA{b}", chars("0123456789", 9, 10), chars(B64URL, 33)),
        "telegram_bot_token",
    ),
    Leak(
        "discord",
        "Discord webhooks",
        around("https://discord.com/api/webhooks/123456789012345678/{S}"),
        chars(B64URL, 68),
        "discord_webhook",
    ),
    Leak(
        "azure",
        "Azure AD client secrets",
        around("AZURE_CLIENT_SECRET {S}"),
        st.builds(
            lambda a, d, b: f"{a}{d}Q~{b}",
            chars(ALNUM, 3),
            chars("0123456789", 1),
            chars(ALNUM + "_~.-", 34),
        ),
        "azure_client_secret",
    ),
    Leak(
        "azure-storage",
        "Azure storage",
        around(
            "DefaultEndpointsProtocol=https;AccountName=x;AccountKey={S};EndpointSuffix=core.windows.net"
        ),
        chars(B64, 86).map(lambda s: s + "=="),
        "storage_credentials",
    ),
    Leak("twilio", "Twilio API keys", around("twilio key {S}"), token("SK", HEX, 32), "twilio_key"),
    Leak("datadog", "Datadog", around("DD_API_KEY={S}"), chars(HEX, 32), "api_key"),
    Leak(
        "datadog-app",
        "Datadog",
        around("curl -H 'DD-APPLICATION-KEY: {S}' https://api.datadoghq.com"),
        chars(HEX, 40),
        "api_key",
    ),
    Leak(
        "shopify",
        "Shopify",
        around("X-Shopify-Access-Token {S}"),
        token("shpat_", HEX, 32),
        "shopify_token",
    ),
    Leak(
        "github",
        "GitHub",
        around("git clone https://{S}@github.com/org/repo"),
        token("ghp_", ALNUM, 36),
        "github_token",
    ),
    Leak(
        "slack",
        "Slack",
        around("SLACK_BOT {S}"),
        token("xoxb-", ALNUM + "-", 40, 60),
        "slack_token",
    ),
    Leak(
        "digitalocean",
        "DigitalOcean",
        around("doctl auth init -t {S}"),
        token("dop_v1_", HEX, 64),
        "digitalocean_token",
    ),
    Leak(
        "dockerhub",
        "Docker Hub",
        around("DOCKER_PAT {S}"),
        token("dckr_pat_", B64URL, 27),
        "dockerhub_token",
    ),
    Leak(
        "grafana",
        "Grafana",
        around("GRAFANA_SA {S}"),
        st.builds(lambda a, b: f"glsa_{a}_{b}", chars(ALNUM, 32), chars("0123456789abcdef", 8)),
        "grafana_token",
    ),
    Leak(
        "atlassian",
        "Atlassian",
        around("JIRA {S}"),
        token("ATATT3", B64URL + "=", 180, 190),
        "atlassian_token",
    ),
    Leak("linear", "Linear", around("LINEAR {S}"), token("lin_api_", ALNUM, 40), "linear_key"),
    Leak(
        "postman",
        "Postman",
        around("postman {S}"),
        st.builds(lambda a, b: f"PMAK-{a}-{b}", chars(HEX, 24), chars(HEX, 34)),
        "postman_key",
    ),
    Leak("sentry", "Sentry", around("SENTRY {S}"), token("sntryu_", HEX, 64), "sentry_token"),
    Leak(
        "newrelic",
        "New Relic",
        around("NR {S}"),
        token("NRAK-", string.ascii_uppercase + string.digits, 27),
        "newrelic_key",
    ),
    Leak(
        "databricks",
        "Databricks",
        around("DATABRICKS {S}"),
        token("dapi", HEX, 32),
        "databricks_token",
    ),
    Leak("doppler", "Doppler", around("DOPPLER {S}"), token("dp.st.", ALNUM, 43), "doppler_token"),
    Leak("pulumi", "Pulumi", around("PULUMI {S}"), token("pul-", HEX, 40), "pulumi_token"),
    Leak("heroku", "Heroku", around("HEROKU {S}"), token("HRKU-AA", B64URL, 58), "heroku_key"),
    Leak(
        "jfrog",
        "JFrog Artifactory",
        around("ARTIFACTORY {S}"),
        token("AKCp", ALNUM, 69),
        "jfrog_token",
    ),
    Leak(
        "mapbox",
        "Mapbox",
        around("MAPBOX {S}"),
        token("sk.eyJ1Ijoi", B64URL + ".", 60, 80),
        "mapbox_token",
    ),
    Leak(
        "age",
        "age",
        around("# created: 2026\n{S}"),
        token("AGE-SECRET-KEY-1", "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58),
        "age_secret_key",
    ),
    Leak(
        "terraform",
        "Terraform Cloud",
        around('token = "{S}"'),
        st.builds(lambda a, b: f"{a}.atlasv1.{b}", chars(ALNUM, 14), chars(B64URL, 67)),
        "terraform_token",
    ),
    Leak("mailgun", "Mailgun", around("MAILGUN {S}"), token("key-", HEX, 32), "mailgun_key"),
    Leak("perplexity", "others", around("PPLX {S}"), token("pplx-", ALNUM, 48), "vendor_token"),
    Leak(
        "openshift",
        "OpenShift",
        around("oc login --token={S}"),
        token("sha256~", B64URL, 43),
        "token",
    ),
    Leak(
        "aws-key-id",
        "AWS",
        around("aws_access_key_id: {S}"),
        token("AKIA", string.ascii_uppercase + "234567", 16),
        "aws_access_key_id",
    ),
    Leak(
        "aws-secret-after-space",
        "AWS",
        around("aws configure set aws_secret_access_key {S}"),
        password(B64, 40, 40),
        "aws_secret_access_key",
    ),
    Leak(
        "aws-secret-csv",
        "AWS",
        around("Access key ID,Secret access key\nAKIAIOSFODNN7ABCDEFG,{S}"),
        password(B64, 40, 40),
        "aws_secret_access_key",
    ),
    Leak(
        "aws-secret-prompt",
        "AWS",
        around("AWS Secret Access Key [****************EKEY]: {S}"),
        password(B64, 40, 40),
        "aws_secret_access_key",
    ),
    # -- tokens in pieces ------------------------------------------------------------------
    Leak("jwt", "tokens in pieces", around("Authorization: Bearer {S}"), jwt(), "jwt"),
    Leak(
        "jwe",
        "tokens in pieces",
        around("id_token={S}"),
        jwt({"alg": "dir", "enc": "A256GCM"}, parts=5),
        "jwt",
    ),
    Leak(
        "jwt-spaced-header",
        "tokens in pieces",
        around("token {S} expired"),
        jwt(spaced=True),
        "jwt",
    ),
    Leak(
        "jwt-wrapped",
        "tokens in pieces",
        lambda s: (
            "cookie dump:\n" + "\n".join(s[i : i + 40] for i in range(0, len(s), 40)) + "\nend"
        ),
        jwt(),
        "jwt",
    ),
    Leak(
        "digest",
        "tokens in pieces",
        around(
            'Authorization: Digest username="bob", realm="api", nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093", uri="/x", response="{S}", opaque="5ccc"'
        ),
        chars(HEX, 32),
        "authorization",
    ),
    Leak(
        "card",
        "card numbers",
        around("charge failed for card {S} (expired)"),
        card_number(),
        "card_number",
        ("secrets", "pii"),
    ),
)

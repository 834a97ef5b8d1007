"""Which keys name a credential: the vocabulary of the key-value detectors.

A key names a credential when, less qualifiers at its end (`new_password_confirm`,
`password_b64`), it ends with a word of a family: `DB_PASSWORD`, `client_secret`,
`X-API-Key`, `spring.datasource.password`, `Passwort`, `mot de passe`. Keys about a
credential rather than holding one end with another word and are left alone:
`password_policy`, `secretName`, `token_expiry`, `max_tokens`. Shared by the key-value
detectors (in text) and by the masker (keys of structured data); docs/MASKING.md lists
the words.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass

# (raw key, normalised key) -> bool
Classifier = Callable[[str, str], bool]

_SEPARATORS = str.maketrans("", "", "_-. ")
_WORD_BREAK = re.compile(r"[_\-. ]+|(?<=[a-z0-9])(?=[A-Z])")


def normalise_key(key: str) -> str:
    return key.lower().translate(_SEPARATORS)


def key_words(key: str) -> list[str]:
    """`new_password_confirm` -> [new, password, confirm]; camelCase splits too."""
    return [word.lower() for word in _WORD_BREAK.split(key.strip("-_. ")) if word]


# Words after the credential's own that leave it a credential: `password_confirm`,
# `secret_value`, `token2`.
_QUALIFIERS = frozenset(
    [
        "confirm",
        "confirmation",
        "again",
        "repeat",
        "retype",
        "verify",
        "verification",
        "value",
        "val",
        "plain",
        "plaintext",
        "raw",
        "b64",
        "base64",
        "hex",
        "enc",
        "encoded",
        "encrypted",
        "hash",
        "hashed",
        "str",
        "string",
        "old",
        "new",
        "current",
        "prev",
        "previous",
        "next",
    ]
)
# First words of keys that count something: `max_token`, `num_tokens`, `token_count`
# ends otherwise anyway.
_QUANTITIES = frozenset(["max", "min", "num", "n", "total", "count", "limit", "per", "avg"])


def _base_words(key: str) -> list[str] | None:
    """The key's words less trailing qualifiers, or None when it counts something."""
    words = key_words(key)
    if not words or words[0] in _QUANTITIES:
        return None
    while len(words) > 1 and (words[-1] in _QUALIFIERS or words[-1].isdigit()):
        words.pop()
    return words


def _base(key: str) -> str | None:
    """The normalised key less trailing qualifiers, or None when it counts something."""
    words = _base_words(key)
    if words is None:
        return None
    base = "".join(words)
    stripped = base.rstrip("0123456789")  # `password2`
    return stripped or base


@dataclass(frozen=True, slots=True)
class KeyValueRule:
    """Which keys a detector owns and what their values become."""

    keywords: tuple[str, ...]  # lower-case; every owned key contains one
    owns: Classifier  # (raw key, normalised key) -> bool
    replacement: str


def _suffix_rule(suffixes: tuple[str, ...], *, unless: tuple[str, ...] = ()) -> Classifier:
    def owns(key: str, norm: str) -> bool:
        base = _base(key)
        return base is not None and base.endswith(suffixes) and not base.endswith(unless)

    return owns


# -- passwords ------------------------------------------------------------------------

# English and the common European spellings; `pass` and `pw` alone or as the last part
# of a key (`DB_PASS`, `smtp.pw`), `pwd` but not the shell's working directory.
PASSWORD_WORDS = (
    "password",
    "passwd",
    "passphrase",
    "passcode",
    "passwort",  # de
    "kennwort",  # de
    "contraseña",  # es
    "contrasena",
    "motdepasse",  # fr: mot de passe
    "wachtwoord",  # nl
    "senha",  # pt
    "hasło",  # pl
    "haslo",
    "parola",  # it, ro
    "lösenord",  # sv
    "losenord",
    "passord",  # no
    "adgangskode",  # da
    "salasana",  # fi
    "heslo",  # cs, sk
    "jelszó",  # hu
    "jelszo",
    "пароль",  # ru, uk
    "storepass",  # keytool
    "keypass",
    "requirepass",  # redis.conf
    "masterauth",
)
_PASSWORD_KEYWORDS = (
    "pass",
    "pwd",
    "pw",
    "kennwort",
    "contrase",
    "wachtwoord",
    "senha",
    "hasło",
    "haslo",
    "parola",
    "senord",
    "adgangskode",
    "salasana",
    "heslo",
    "jelsz",
    "пароль",
    "Пароль",
    "ПАРОЛЬ",
    "masterauth",
    "mot de passe",
)
_SHORT_PASSWORDS = ("pass", "pw")


def owns_password(key: str, norm: str) -> bool:
    base = _base(key)
    if base is None:
        return False
    if base.endswith(PASSWORD_WORDS):
        return True
    if base.endswith("pwd"):
        return True  # `PWD=/home/app`, the shell's working directory, is a path
    words = key_words(key)
    return bool(words) and words[-1] in _SHORT_PASSWORDS


def is_counter(key: str, value: str) -> bool:
    """`tests: pass=42`: a bare `pass` (or `pw`) holding a number counts test results."""
    return key.lstrip("-").lower() in _SHORT_PASSWORDS and value.rstrip(",;.)").isdigit()


# -- secrets, tokens, keys --------------------------------------------------------------

SECRET_WORDS = (
    "secret",
    "secretkey",
    "secretkeybase",  # Rails
    "secretid",  # Vault AppRole
    "geheimnis",  # de
    "geheim",  # de, nl
    "secreto",  # es
    "segreto",  # it
    "segredo",  # pt
    "sekret",  # pl
)
AWS_SECRET_WORDS = ("secretaccesskey", "awssecretkey", "awssecret")
_PAGINATION = ("nexttoken", "pagetoken", "continuetoken", "continuationtoken", "synctoken")

owns_aws_secret = _suffix_rule(AWS_SECRET_WORDS)
owns_secret = _suffix_rule(SECRET_WORDS, unless=AWS_SECRET_WORDS)
_owns_token_word = _suffix_rule(("token", "jeton"), unless=_PAGINATION)


def _names_a_pat(key: str) -> bool:
    """`GITHUB_PAT`, `azure-devops-pat`, `GL_PAT_2`: a personal access token under a key
    of its own name (Azure DevOps' tokens carry no prefix a vendor detector could see).
    A bare `pat` is left alone: it is a name in chat."""
    words = _base_words(key)
    return words is not None and len(words) > 1 and words[-1] == "pat"


def owns_token(key: str, norm: str) -> bool:
    return _owns_token_word(key, norm) or _names_a_pat(key)


# `api_token` ends with "token": the token detector masks it. Datadog's application
# keys, Azure API Management's subscription keys, New Relic's license keys are API keys.
API_KEY_WORDS = ("apikey", "appkey", "applicationkey", "subscriptionkey", "licensekey")
owns_api_key = _suffix_rule(API_KEY_WORDS)
owns_private_key = _suffix_rule(("privatekey",))
CREDENTIALS_WORDS = ("credential", "credentials", "creds")
owns_credentials = _suffix_rule(CREDENTIALS_WORDS)
ENCRYPTION_KEY_WORDS = (
    "encryptionkey",
    "encryptkey",
    "decryptionkey",
    "decryptkey",
    "cryptokey",
    "cryptkey",
    "signingkey",
    "signkey",
    "masterkey",
    "hmackey",
    "hmacsecret",
    "cipherkey",
    "aeskey",
)
owns_encryption_key = _suffix_rule(ENCRYPTION_KEY_WORDS)
SESSION_WORDS = ("sessionid", "sessid", "sessionkey")
owns_session = _suffix_rule(SESSION_WORDS)
# Azure Storage and Service Bus connection strings (`AccountKey=`, `SharedAccessKey=`);
# `SharedAccessKeyName` names the key and stays.
owns_storage_key = _suffix_rule(("accountkey", "sharedaccesskey"))
owns_cookie = _suffix_rule(("cookie",))


PASSWORD = KeyValueRule(_PASSWORD_KEYWORDS, owns_password, "[MASKED_PASSWORD]")
SECRET = KeyValueRule(
    ("secret", "secret key", "geheim", "secreto", "segreto", "segredo", "sekret"),
    owns_secret,
    "[MASKED_SECRET]",
)
AWS_SECRET = KeyValueRule(
    ("secret", "secret access key"), owns_aws_secret, "[MASKED_AWS_SECRET_ACCESS_KEY]"
)
TOKEN = KeyValueRule(("token", "jeton", "_pat", "-pat", ".pat"), owns_token, "[MASKED_TOKEN]")
API_KEY = KeyValueRule(
    (
        "api_key",
        "apikey",
        "api-key",
        "api key",
        "app_key",
        "appkey",
        "app-key",
        "application_key",
        "application-key",
        "applicationkey",
        "subscription-key",
        "subscription_key",
        "subscriptionkey",
        "license_key",
        "license-key",
        "licensekey",
    ),
    owns_api_key,
    "[MASKED_API_KEY]",
)
PRIVATE_KEY = KeyValueRule(
    ("private_key", "privatekey", "private-key", "private key"),
    owns_private_key,
    "[MASKED_PRIVATE_KEY]",
)
CREDENTIALS = KeyValueRule(("credential", "creds"), owns_credentials, "[MASKED_CREDENTIALS]")
ENCRYPTION_KEY = KeyValueRule(
    (
        "crypt",
        "encryption key",
        "signing",
        "signing key",
        "sign_key",
        "signkey",
        "master",
        "master key",
        "hmac",
        "cipher",
        "aes_key",
        "aeskey",
        "aes-key",
    ),
    owns_encryption_key,
    "[MASKED_KEY]",
)
SESSION = KeyValueRule(("session", "session id", "sessid"), owns_session, "[MASKED_SESSION]")
STORAGE_KEY = KeyValueRule(
    ("accountkey", "account_key", "account-key", "sharedaccesskey"),
    owns_storage_key,
    "[MASKED_ACCOUNT_KEY]",
)
COOKIE = KeyValueRule(("cookie",), owns_cookie, "[MASKED_COOKIE]")

# Families whose values are often where the credential is kept (a key file, a
# credentials file): a path there is a reference, not the credential. So is the value
# of `PWD` (the shell's working directory, not ODBC's `Pwd=`).
PATH_VALUED = (PRIVATE_KEY, CREDENTIALS, ENCRYPTION_KEY)


def path_is_reference(rule: KeyValueRule, norm: str) -> bool:
    return rule in PATH_VALUED or norm in ("pwd", "oldpwd")

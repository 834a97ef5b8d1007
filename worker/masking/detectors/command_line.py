"""Passwords handed to command-line tools: `mysql -pS3cr`, `docker login -p S3cr`,
`redis-cli -a S3cr`, `curl -u admin:S3cr`, `sshpass -p S3cr`, `openssl ... -passin
pass:S3cr`, `sqlcmd -P S3cr`, `kubectl create secret ... --from-literal=conn=S3cr`...

Long flags named after a credential (`--password x`, `-storepass x`, `PGPASSWORD=x psql`)
are keys, found by the key-value detectors; this family knows the short flags, which
mean a password only after their own command (`-p` is a port to `docker run` and a
database to `mysql -p db`). A command's arguments are read as shell words, to the end
of its line and the lines it continues onto with `\\`.
"""

import re
from bisect import bisect_left
from dataclasses import dataclass

from worker.masking.detectors.base import SECRETS, Anchor, Detector, Edit, register
from worker.masking.text import MASK_PREFIX, TextView, is_placeholder_span, occurrences

REPLACEMENT = "[MASKED_PASSWORD]"


@dataclass(frozen=True, slots=True)
class Command:
    names: tuple[str, ...]  # the program, as the last part of a word (`/usr/bin/mysql`)
    # Flags whose argument is a password, attached (`-pS3cr`) or after a blank.
    flags: tuple[str, ...] = ()
    # Flags whose argument is a password only when attached (`mysql -p db` prompts).
    attached: tuple[str, ...] = ()
    # Flags taking `user<sep>password` (`curl -u admin:S3cr`), and the separator.
    user_flags: tuple[str, ...] = ()
    user_separator: str = ":"
    # A word that must follow the program for the flags to mean a password (`login`).
    subcommand: tuple[str, ...] = ()
    # Which word after the subcommand, by subcommand, is the password (`rabbitmqctl
    # add_user u S3cr`: the second).
    positional: tuple[tuple[str, int], ...] = ()
    # A bare argument `user/password@db` (`sqlplus scott/S3cr@orcl`).
    slash_login: bool = False


COMMANDS = (
    Command(
        (
            "mysql",
            "mysqldump",
            "mysqladmin",
            "mysqlimport",
            "mysqlcheck",
            "mysqlsh",
            "mysqlshow",
            "mariadb",
            "mariadb-dump",
            "mariadb-admin",
        ),
        attached=("-p",),
    ),
    Command(
        ("docker", "podman", "nerdctl", "buildah", "skopeo", "oras", "crane", "helm"),
        flags=("-p",),
        subcommand=("login",),
    ),
    Command(("az",), flags=("-p",), subcommand=("login",)),
    Command(("redis-cli", "valkey-cli", "keydb-cli"), flags=("-a",)),
    Command(("curl",), user_flags=("-u", "--user", "-U", "--proxy-user")),
    Command(("sshpass",), flags=("-p",)),
    Command(("sqlcmd", "osql"), flags=("-P",)),
    Command(
        (
            "mongo",
            "mongosh",
            "mongodump",
            "mongorestore",
            "mongoexport",
            "mongoimport",
            "mongostat",
            "mongotop",
        ),
        flags=("-p",),
    ),
    Command(
        (
            "ldapsearch",
            "ldapmodify",
            "ldapadd",
            "ldapdelete",
            "ldappasswd",
            "ldapwhoami",
            "ldapcompare",
            "ldapmodrdn",
        ),
        flags=("-w",),
    ),
    Command(("keytool", "jarsigner"), flags=("-new",)),
    Command(("smbclient", "rpcclient", "smbmap", "smbget"), user_flags=("-U",), user_separator="%"),
    Command(("lftp",), user_flags=("-u",), user_separator=","),
    Command(
        ("htpasswd",),
        subcommand=("-b", "-bc", "-cb", "-bB", "-Bb", "-nb", "-bn", "-nbB"),
        positional=(("-b", 3), ("-bc", 3), ("-cb", 3), ("-bB", 3), ("-Bb", 3)),
    ),
    Command(
        ("rabbitmqctl",),
        subcommand=("add_user", "change_password"),
        positional=(("add_user", 2), ("change_password", 2)),
    ),
    Command(("rabbitmqadmin",), flags=("-p",)),
    Command(("ipmitool",), flags=("-P",)),
    Command(("pscp", "plink", "psftp"), flags=("-pw",)),
    Command(("ssh-keygen",), flags=("-N", "-P")),
    Command(("snmpwalk", "snmpget", "snmpset", "snmpbulkwalk", "snmptrap"), flags=("-A", "-X")),
    Command(("sqlplus", "expdp", "impdp", "sqlldr"), slash_login=True),
    Command(("vault",), subcommand=("login",), positional=(("login", 1),)),
)
# What the prefilter looks for, one literal per program or family of programs (`mysql`
# finds `mysqldump` too; `az` only as `az login`). Case matters: commands are lower-case.
ANCHORS = (
    "mysql",
    "mariadb",
    "docker",
    "podman",
    "nerdctl",
    "buildah",
    "skopeo",
    "oras",
    "crane",
    "helm",
    "az login",
    "redis-cli",
    "valkey-cli",
    "keydb-cli",
    "curl",
    "sshpass",
    "sqlcmd",
    "osql",
    "mongo",
    "ldap",
    "keytool",
    "jarsigner",
    "smbclient",
    "rpcclient",
    "smbmap",
    "smbget",
    "lftp",
    "htpasswd",
    "rabbitmqctl",
    "rabbitmqadmin",
    "ipmitool",
    "pscp",
    "plink",
    "psftp",
    "ssh-keygen",
    "snmp",
    "sqlplus",
    "expdp",
    "impdp",
    "sqlldr",
    "vault",
)
_BY_NAME = {name: command for command in COMMANDS for name in command.names}

# A shell word: quoted parts and escapes kept together; a quote left open runs on.
_WORD = re.compile(r"""(?:"(?:[^"\\]|\\.)*"?|'[^']*'?|\\.|[^\s"'\\])+""", re.DOTALL)
_COMMAND_START = frozenset(" \t\n\r\"'`(|;&=/")
_COMMAND_END = frozenset("\"'`);|&")
_LINE_BREAK = re.compile(r"\r?\n|\\n")
_CONTINUED_LINES = 12
# Arguments looked at after a program's name: a bounded read per occurrence, so a line
# naming a program a thousand times is read once for its words, not once per name.
_MAX_ARGUMENTS = 64
# `openssl ... -passin pass:S3cr` (-passout, -pass, -password take `pass:` too).
_OPENSSL_PASS = re.compile(r"-pass(?:in|out|word)?[ \t=]+[\"']?pass:(?P<value>[^\s\"']+)")
_FROM_LITERAL = re.compile(r"--from-literal(?:=|[ \t]+)(?P<quote>[\"']?)[^=\s\"']+=")
_SLASH_LOGIN = re.compile(r"[^/\s@\"']+/(?P<value>[^@\s\"']+)(?:@|$)")
_OPTION = re.compile(r"[A-Za-z_][\w.-]*=")


def _line_words(view: TextView, pos: int) -> list[tuple[int, int]]:
    """The shell words of the line holding `pos` and of the lines it continues onto
    with `\\`: read once per line, whatever number of programs it names."""
    line = view.line_start(pos)
    cache = view.cache.setdefault("shell_words", {})
    assert isinstance(cache, dict)
    words = cache.get(line)
    if words is None:
        text = view.text
        end = view.line_end(line)
        for _ in range(_CONTINUED_LINES):
            if end <= line or text[end - 1] != "\\":
                break
            brk = _LINE_BREAK.match(text, end)
            if brk is None:
                break
            end = view.line_end(brk.end())
        words = cache[line] = [m.span() for m in _WORD.finditer(text, line, end)]
    return words


def _unquoted(text: str, start: int, end: int) -> tuple[int, int]:
    """The inside of a quoted word (`'S3cr'`, `"S3cr"`)."""
    if end - start >= 2 and text[start] in "\"'" and text[end - 1] == text[start]:
        return start + 1, end - 1
    if end > start and text[start] in "\"'":
        return start + 1, end
    return start, end


def _subcommand_index(text: str, command: Command, words: list[tuple[int, int]]) -> int:
    for index, (start, end) in enumerate(words[:8]):
        if text[start:end] in command.subcommand:
            return index
    return -1


def _command_edits(
    text: str, command: Command, words: list[tuple[int, int]]
) -> list[tuple[int, int]]:
    """The spans of the passwords among a program's arguments."""
    spans: list[tuple[int, int]] = []
    if command.subcommand:
        index = _subcommand_index(text, command, words)
        if index < 0:
            return []
        position = dict(command.positional).get(text[slice(*words[index])], 0)
        if position:
            spans.extend(_positional(text, words[index + 1 :], position))
    for index, (start, end) in enumerate(words):
        word = text[start:end]
        following = words[index + 1] if index + 1 < len(words) else None
        for flag in command.flags + command.attached:
            if not word.startswith(flag):
                continue
            if len(word) > len(flag):
                rest = word[len(flag)]
                if flag in command.attached or rest not in "-=":
                    value_start = start + len(flag) + (rest == "=")
                    spans.append(_unquoted(text, value_start, end))
            elif flag in command.flags and following is not None:
                spans.append(_unquoted(text, *following))
            break
        for flag in command.user_flags:
            if word == flag and following is not None:
                spans.extend(_user_password(text, *_unquoted(text, *following), command))
            elif word.startswith(flag + "=") or (len(flag) == 2 and word.startswith(flag)):
                skip = len(flag) + word.startswith(flag + "=")
                if start + skip < end:
                    spans.extend(_user_password(text, *_unquoted(text, start + skip, end), command))
        if command.slash_login:
            login = _SLASH_LOGIN.match(text, *_unquoted(text, start, end))
            if login is not None:
                spans.append(login.span("value"))
    return spans


def _positional(text: str, words: list[tuple[int, int]], position: int) -> list[tuple[int, int]]:
    """The `position`-th word that is neither a flag nor an option (`name=value`)."""
    seen = 0
    for start, end in words:
        if text.startswith("-", start) or _OPTION.match(text, start, end):
            continue
        seen += 1
        if seen == position:
            return [_unquoted(text, start, end)]
    return []


def _user_password(text: str, start: int, end: int, command: Command) -> list[tuple[int, int]]:
    """The password of `user:password`; the user when the password is empty (an API key
    used as the user name: `curl -u sk_live_...:`)."""
    separator = text.find(command.user_separator, start, end)
    if separator < 0:
        return []
    if separator + 1 < end:
        return [(separator + 1, end)]
    return [(start, separator)]


def _program(text: str, pos: int) -> tuple[Command, int] | None:
    """The program whose name holds `pos`, and where its name ends."""
    start = pos
    while start > 0 and text[start - 1] not in _COMMAND_START:
        start -= 1
    end = pos
    while end < len(text) and not text[end].isspace() and text[end] not in _COMMAND_END:
        end += 1
    command = _BY_NAME.get(text[start:end].rsplit("/", 1)[-1])
    return (command, end) if command is not None else None


def _from_literal(view: TextView) -> list[tuple[int, int]]:
    """`--from-literal=key=S3cr`, `--from-literal 'key=S3cr et'`: the value."""
    text = view.text
    spans = []
    read_to = 0
    for match in _FROM_LITERAL.finditer(text):
        start = match.end()
        if match.start() < read_to:
            continue  # inside the value of the one before
        read_to = view.line_end(start)
        quote = match.group("quote")
        if quote:
            end = text.find(quote, start, view.line_end(start))
            spans.append((start, end if end >= 0 else view.line_end(start)))
        else:
            word = _WORD.match(text, start)
            if word is not None:
                spans.append(_unquoted(text, *word.span()))
                read_to = word.end()
    return spans


def _command_line(view: TextView) -> list[Edit]:
    text = view.text
    spans: list[tuple[int, int]] = []
    for pos in sorted(p for literal in ANCHORS for p in occurrences(text, literal)):
        if pos > 0 and text[pos - 1] not in _COMMAND_START:
            continue  # inside a word: no program's name starts there
        found = _program(text, pos)
        if found is None:
            continue
        command, name_end = found
        words = _line_words(view, pos)
        first = bisect_left(words, (name_end, name_end))
        spans.extend(_command_edits(text, command, words[first : first + _MAX_ARGUMENTS]))
    if "pass:" in text:
        spans.extend(m.span("value") for m in _OPENSSL_PASS.finditer(text))
    if "--from-literal" in text:
        spans.extend(_from_literal(view))
    return [
        (start, end, REPLACEMENT)
        for start, end in spans
        if end > start
        and not text.startswith(MASK_PREFIX, start)
        and not is_placeholder_span(view, start, end)
    ]


register(
    Detector(
        "command_line",
        SECRETS,
        REPLACEMENT,
        (
            *(Anchor(name, caseless=False) for name in ANCHORS),
            Anchor("pass:", caseless=False, pattern=r"-pass(?:in|out|word)?[ \t=]+[\"']?pass:"),
            Anchor("--from-literal", caseless=False),
        ),
        _command_line,
    ),
)

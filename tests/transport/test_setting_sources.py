"""Each setting remembers where its value came from (flag, variable, file variable or
default), so that a message about it names what the operator actually set: credentials
the broker refuses are fixed where they were given, not in a variable nobody set."""

from pathlib import Path

import pytest
from aiormq.exceptions import ProbableAuthenticationError

from tests.transport.test_settings import parse
from worker.transport.link.broker_failures import (
    ConnectFailed,
    connect_failure,
    refused_detail,
    where_credentials_are,
)
from worker.transport.settings import (
    SOURCES_ENV,
    Settings,
    SettingsError,
    from_env,
    without_settings,
)

URL = "amqp://worker:s3cret@broker.internal:5672/prod"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "amqp-url"
    path.write_text(URL + "\n")
    return path


def test_each_value_names_the_flag_or_variable_it_came_from(secret: Path) -> None:
    settings = parse(
        ["--amqp-url-file", str(secret), "--prefetch", "9"],
        {"PROMPT_WORKER_PREFETCH": "3", "PROMPT_WORKER_REQUEST_QUEUE": "jobs"},
    )
    assert settings.source_of("amqp_url") == "--amqp-url-file"
    assert settings.source_of("prefetch") == "--prefetch"
    assert settings.source_of("request_queue") == "PROMPT_WORKER_REQUEST_QUEUE"
    assert settings.source_of("reply_queue") is None  # its default
    assert parse(["--amqp-url", URL]).source_of("amqp_url") == "--amqp-url"
    assert from_env({"PROMPT_WORKER_AMQP_URL": URL}).source_of("amqp_url") == (
        "PROMPT_WORKER_AMQP_URL"
    )
    from_file = from_env({"PROMPT_WORKER_AMQP_URL_FILE": str(secret)})
    assert from_file.source_of("amqp_url") == "PROMPT_WORKER_AMQP_URL_FILE"
    assert from_env({}).source_of("amqp_url") is None


def test_settings_made_in_code_have_defaults_as_sources() -> None:
    assert Settings(prefetch=3).source_of("prefetch") is None


@pytest.mark.parametrize(
    ("argv", "env_from_secret"),
    [
        (["--amqp-url", URL], False),
        (["--amqp-url-file", "SECRET"], False),
        ([], True),
    ],
)
def test_the_supervisors_processes_keep_the_sources(
    secret: Path, argv: list[str], env_from_secret: bool
) -> None:
    argv = [str(secret) if word == "SECRET" else word for word in argv]
    env = {"PROMPT_WORKER_AMQP_URL_FILE": str(secret)} if env_from_secret else {}
    settings = parse([*argv, "--processes", "2"], env)
    # What a worker process sees: the parent's environment less its settings, plus the
    # settings the supervisor passes on.
    child = from_env({**without_settings({**env, "HOME": "/h"}), **settings.to_env()})
    assert child == settings
    assert child.source_of("amqp_url") == settings.source_of("amqp_url")
    assert child.source_of("processes") == "--processes"


def test_the_sources_variable_names_only_a_settings_own_flags() -> None:
    env = {"PROMPT_WORKER_PREFETCH": "5", SOURCES_ENV: "prefetch=anything,nope=--prefetch"}
    assert from_env(env).source_of("prefetch") == "PROMPT_WORKER_PREFETCH"
    assert SOURCES_ENV not in without_settings({SOURCES_ENV: "prefetch=--prefetch"})


def test_a_bad_value_passed_on_by_the_supervisor_names_the_flag() -> None:
    # Values are checked before the supervisor passes them on; this is what a child
    # would say should one be damaged on the way.
    env = {"PROMPT_WORKER_PREFETCH": "0", SOURCES_ENV: "prefetch=--prefetch"}
    with pytest.raises(SettingsError, match=r"^--prefetch: must be between 1"):
        from_env(env)


@pytest.mark.parametrize(
    ("source", "place"),
    [
        ("--amqp-url", "--amqp-url"),
        ("PROMPT_WORKER_AMQP_URL", "PROMPT_WORKER_AMQP_URL"),
        ("--amqp-url-file", "the file named by --amqp-url-file"),
        ("PROMPT_WORKER_AMQP_URL_FILE", "the file named by PROMPT_WORKER_AMQP_URL_FILE"),
        (None, "the default URL (guest); set --amqp-url or PROMPT_WORKER_AMQP_URL(_FILE)"),
    ],
)
def test_refused_credentials_are_fixed_where_they_were_given(
    source: str | None, place: str
) -> None:
    assert where_credentials_are(source) == place


def test_a_commands_refusal_names_the_setting(secret: Path) -> None:
    settings = from_env({"PROMPT_WORKER_AMQP_URL_FILE": str(secret)})
    refused = ConnectFailed(["broker.internal:5672"], ProbableAuthenticationError("ACCESS_REFUSED"))
    message = connect_failure(
        "unused", refused, fix_in=where_credentials_are(settings.source_of("amqp_url"))
    )
    assert message == (
        "access refused by the broker at broker.internal:5672: check the user name and "
        "password in the file named by PROMPT_WORKER_AMQP_URL_FILE"
    )
    assert "PROMPT_WORKER_AMQP_URL " not in message and "s3cret" not in message


def test_serves_refusal_line_names_the_setting() -> None:
    settings = parse(["--amqp-url", URL])
    assert refused_detail(settings.source_of("amqp_url")) == (
        "not retried: fix the credentials in --amqp-url"
    )

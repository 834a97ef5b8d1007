"""Settings of `prompt-worker serve`: flags over environment over defaults, clear errors."""

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from worker.transport.link.topology import (
    DEFAULT_DEAD_LETTER,
    DEFAULT_REPLY_QUEUE,
    DEFAULT_REQUEST_QUEUE,
)
from worker.transport.settings import (
    DEFAULT_AMQP_URL,
    SETTINGS,
    Settings,
    SettingsError,
    add_arguments,
    from_args,
    from_env,
    resolve,
)

REPO = Path(__file__).resolve().parents[2]

# The names the deployment (Helm values, compose file, docs) relies on.
REQUIRED_ENV = {
    "PROMPT_WORKER_AMQP_URL",
    "PROMPT_WORKER_REQUEST_QUEUE",
    "PROMPT_WORKER_REPLY_QUEUE",
    "PROMPT_WORKER_DEAD_LETTER_QUEUE",
    "PROMPT_WORKER_PREFETCH",
    "PROMPT_WORKER_MAX_MESSAGE_BYTES",
    "PROMPT_WORKER_CONFIG",
    "PROMPT_WORKER_HTTP_PORT",
    "PROMPT_WORKER_LOG_LEVEL",
    "PROMPT_WORKER_LOG_FORMAT",
}


def parse(argv: list[str], env: dict[str, str] | None = None) -> Settings:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return from_args(parser.parse_args(argv), env or {})


def test_defaults() -> None:
    settings = from_env({})
    assert settings.amqp_url == DEFAULT_AMQP_URL == "amqp://guest:guest@127.0.0.1:5672/"
    assert settings.request_queue == DEFAULT_REQUEST_QUEUE == "build-prompt"
    assert settings.reply_queue == DEFAULT_REPLY_QUEUE == "build-prompt.replies"
    assert settings.dead_letter_queue == DEFAULT_DEAD_LETTER == "build-prompt.dead"
    assert settings.max_message_bytes == 32 * 1024 * 1024
    assert settings.log_format is None
    assert settings.processes == 1
    assert settings.event_loop == "auto"


def test_every_documented_variable_exists() -> None:
    assert {spec.env for spec in SETTINGS} >= REQUIRED_ENV


def test_environment_is_read() -> None:
    settings = from_env(
        {
            "PROMPT_WORKER_AMQP_URL": "amqps://u:p@rabbit.example:5671/prod",
            "PROMPT_WORKER_REQUEST_QUEUE": "jobs",
            "PROMPT_WORKER_REPLY_QUEUE": "jobs.replies",
            "PROMPT_WORKER_DEAD_LETTER_QUEUE": "jobs.dead",
            "PROMPT_WORKER_PREFETCH": "16",
            "PROMPT_WORKER_MAX_MESSAGE_BYTES": "1_000_000",
            "PROMPT_WORKER_CONFIG": "/etc/worker.yaml",
            "PROMPT_WORKER_HTTP_PORT": "0",
            "PROMPT_WORKER_LOG_LEVEL": "DEBUG",
            "PROMPT_WORKER_LOG_FORMAT": "console",
            "PROMPT_WORKER_EVENT_LOOP": "AsyncIO",
        }
    )
    assert settings.amqp_url == "amqps://u:p@rabbit.example:5671/prod"
    assert (settings.request_queue, settings.reply_queue) == ("jobs", "jobs.replies")
    assert settings.dead_letter_queue == "jobs.dead"
    assert settings.topology.dead_letter_exchange == "jobs.dead"
    assert settings.prefetch == 16
    assert settings.max_message_bytes == 1_000_000
    assert settings.config_path == "/etc/worker.yaml"
    assert settings.http_port == 0
    assert settings.log_level == "debug"
    assert settings.log_format == "console"
    assert settings.event_loop == "asyncio"


def test_flags_win_over_environment() -> None:
    env = {"PROMPT_WORKER_PREFETCH": "16", "PROMPT_WORKER_REQUEST_QUEUE": "from-env"}
    settings = parse(["--prefetch", "8"], env)
    assert settings.prefetch == 8
    # A variable without a flag still applies.
    assert settings.request_queue == "from-env"


def test_an_empty_config_variable_means_no_config() -> None:
    assert from_env({"PROMPT_WORKER_CONFIG": ""}).config_path is None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PROMPT_WORKER_PREFETCH": "many"}, "PROMPT_WORKER_PREFETCH: expected an integer"),
        ({"PROMPT_WORKER_PREFETCH": "0"}, "PROMPT_WORKER_PREFETCH: must be between 1"),
        ({"PROMPT_WORKER_HTTP_PORT": "70000"}, "PROMPT_WORKER_HTTP_PORT"),
        ({"PROMPT_WORKER_AMQP_URL": "http://x/"}, "PROMPT_WORKER_AMQP_URL: expected amqp://"),
        ({"PROMPT_WORKER_LOG_FORMAT": "xml"}, "expected one of json, console"),
        ({"PROMPT_WORKER_LOG_LEVEL": "loud"}, "PROMPT_WORKER_LOG_LEVEL"),
        ({"PROMPT_WORKER_REQUEST_QUEUE": ""}, "non-empty"),
        ({"PROMPT_WORKER_REPLY_QUEUE": "amq.gen-x"}, "reserved"),
        ({"PROMPT_WORKER_MAX_MESSAGE_BYTES": "-1"}, "at least 1"),
        ({"PROMPT_WORKER_REPLY_QUEUE": "build-prompt"}, "three different names"),
        ({"PROMPT_WORKER_EVENT_LOOP": "trio"}, "expected one of auto, uvloop, asyncio"),
    ],
)
def test_bad_values_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message.replace("(", r"\(")):
        from_env(env)


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(SettingsError) as raised:
        resolve({"prefetch": "x"}, {"PROMPT_WORKER_HTTP_PORT": "y"})
    assert "--prefetch" in str(raised.value)
    assert "PROMPT_WORKER_HTTP_PORT" in str(raised.value)


def test_settings_round_trip_through_the_environment() -> None:
    # How the supervisor hands settings to its worker processes.
    settings = parse(
        [
            *("--prefetch", "7", "--request-queue", "q"),
            *("--shutdown-timeout", "3.5", "--event-loop", "uvloop"),
        ]
    )
    assert from_env(settings.to_env()) == settings


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--prefetch", "zero"], {}, "--prefetch: expected an integer"),
        ([], {"PROMPT_WORKER_LOG_FORMAT": "yaml"}, "PROMPT_WORKER_LOG_FORMAT"),
        (["--config", "/nonexistent/worker.yaml"], {}, "configuration error"),
    ],
)
def test_serve_exits_2_with_one_clear_line(
    args: list[str], env: dict[str, str], expected: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "worker", "serve", *args],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert expected in result.stderr
    assert "Traceback" not in result.stderr

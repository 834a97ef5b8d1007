"""Secrets from files (`PROMPT_WORKER_AMQP_URL_FILE`, `--amqp-url-file`) and the TLS
settings' checks: what a deployment that mounts its secrets can rely on."""

from pathlib import Path

import pytest

from tests.tls_certs import make_authority
from tests.transport.test_settings import parse
from worker.transport.link.tls import TlsFiles
from worker.transport.settings import SettingsError, from_env, resolve, without_settings

URL = "amqp://worker:s3cret-Pa55@broker.internal:5672/prod"


@pytest.mark.parametrize("ending", ["", "\n", "\r\n"])
def test_the_url_is_read_from_a_file_without_its_final_newline(tmp_path: Path, ending: str) -> None:
    secret = tmp_path / "amqp-url"
    secret.write_text(URL + ending)
    assert from_env({"PROMPT_WORKER_AMQP_URL_FILE": str(secret)}).amqp_url == URL
    assert parse(["--amqp-url-file", str(secret)]).amqp_url == URL


def test_only_one_final_newline_is_taken(tmp_path: Path) -> None:
    secret = tmp_path / "amqp-url"
    secret.write_text(URL + "\n\n")
    with pytest.raises(SettingsError, match="PROMPT_WORKER_AMQP_URL_FILE"):
        from_env({"PROMPT_WORKER_AMQP_URL_FILE": str(secret)})


def test_value_and_file_together_are_an_error(tmp_path: Path) -> None:
    secret = tmp_path / "amqp-url"
    secret.write_text(URL)
    with pytest.raises(
        SettingsError, match="PROMPT_WORKER_AMQP_URL and PROMPT_WORKER_AMQP_URL_FILE"
    ):
        from_env({"PROMPT_WORKER_AMQP_URL": URL, "PROMPT_WORKER_AMQP_URL_FILE": str(secret)})
    with pytest.raises(SettingsError, match="--amqp-url and --amqp-url-file"):
        parse(["--amqp-url", URL, "--amqp-url-file", str(secret)])


def test_the_command_line_wins_over_an_environment_file(tmp_path: Path) -> None:
    secret = tmp_path / "amqp-url"
    secret.write_text(URL)
    flag_url = "amqp://other@flag-host/"
    assert (
        parse(["--amqp-url", flag_url], {"PROMPT_WORKER_AMQP_URL_FILE": str(secret)}).amqp_url
        == flag_url
    )


def test_an_unreadable_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(SettingsError, match=f"PROMPT_WORKER_AMQP_URL_FILE: cannot read {missing}"):
        from_env({"PROMPT_WORKER_AMQP_URL_FILE": str(missing)})


@pytest.mark.parametrize(
    "bad",
    [
        "http://worker:s3cret-Pa55@broker/",
        "amqp://worker:s3cret-Pa55@/",
        "amqp://worker:s3cret-Pa55@[broker/",
        "s3cret-Pa55",
    ],
)
def test_a_bad_url_is_described_never_quoted(tmp_path: Path, bad: str) -> None:
    secret = tmp_path / "amqp-url"
    secret.write_text(bad)
    for env in ({"PROMPT_WORKER_AMQP_URL": bad}, {"PROMPT_WORKER_AMQP_URL_FILE": str(secret)}):
        with pytest.raises(SettingsError) as raised:
            from_env(env)
        assert "s3cret-Pa55" not in str(raised.value)
        assert "expected amqp://" in str(raised.value)


def test_settings_from_a_file_are_passed_on_as_the_file(tmp_path: Path) -> None:
    # How the supervisor starts its worker processes: the value stays out of their
    # environment, and the variables they inherit do not clash with the ones it sets.
    secret = tmp_path / "amqp-url"
    secret.write_text(URL)
    settings = parse(["--amqp-url-file", str(secret), "--prefetch", "9"])
    env = settings.to_env()
    assert env["PROMPT_WORKER_AMQP_URL_FILE"] == str(secret)
    assert "PROMPT_WORKER_AMQP_URL" not in env
    assert not any(URL in value for value in env.values())
    inherited = {
        "PROMPT_WORKER_AMQP_URL": "amqp://old@x/",
        "PROMPT_WORKER_PREFETCH": "1",
        "HOME": "/h",
    }
    child = {**without_settings(inherited), **env}
    assert child["HOME"] == "/h"
    assert from_env(child) == settings


def test_tls_files_need_an_amqps_url(tmp_path: Path) -> None:
    ca = make_authority(tmp_path, "ca")
    with pytest.raises(SettingsError, match="amqps://"):
        from_env({"PROMPT_WORKER_TLS_CA_FILE": str(ca.cert)})
    settings = from_env(
        {"PROMPT_WORKER_TLS_CA_FILE": str(ca.cert), "PROMPT_WORKER_AMQP_URL": "amqps://u:p@h/"}
    )
    assert settings.tls == TlsFiles(ca_file=str(ca.cert))


def test_unusable_tls_files_are_start_up_errors(tmp_path: Path) -> None:
    ca = make_authority(tmp_path, "ca")
    client = ca.issue(tmp_path, "client", "me", client=True)
    amqps = {"PROMPT_WORKER_AMQP_URL": "amqps://h/"}
    cases = [
        ({"PROMPT_WORKER_TLS_CA_FILE": str(tmp_path / "missing.pem")}, "cannot load the CA file"),
        ({"PROMPT_WORKER_TLS_CA_FILE": str(client.key)}, "cannot load the CA file"),
        ({"PROMPT_WORKER_TLS_KEY_FILE": str(client.key)}, "needs its certificate file"),
        (
            {
                "PROMPT_WORKER_TLS_CERT_FILE": str(client.cert),
                "PROMPT_WORKER_TLS_KEY_FILE": str(ca.key),
            },
            "cannot load the client certificate",
        ),
    ]
    for env, message in cases:
        with pytest.raises(SettingsError, match=message):
            resolve({}, {**amqps, **env})
    both = {
        "PROMPT_WORKER_TLS_CERT_FILE": str(client.cert),
        "PROMPT_WORKER_TLS_KEY_FILE": str(client.key),
    }
    assert from_env({**amqps, **both}).tls.cert_file == str(client.cert)

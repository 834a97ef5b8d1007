"""deploy/docker-compose.yml and the files it mounts, checked without a Docker engine.

`docker compose up` cannot run here, so these tests pin what would break it: every
mounted file exists, the services reach each other by the names and ports the configs
use, the broker's boot-time user can log in with the URL the workers are given, the
workers' environment is made of real serve settings, Grafana's datasource is the one
the dashboard selects, and (when promtool is installed) Prometheus accepts its config
and the alert rules pass their unit tests.
"""

import base64
import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests.unavailable import tool
from worker.transport import settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "docker-compose.yml"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    return loaded


def bind_mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Container path -> host path of the service's bind mounts (named volumes left out)."""
    mounts = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            mounts[target] = (DEPLOY / source).resolve()
    return mounts


def read_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_one_file_brings_up_the_whole_stack(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == {"rabbitmq", "worker", "prometheus", "grafana"}
    worker = compose["services"]["worker"]
    assert worker["deploy"]["replicas"] == 2
    assert (DEPLOY / worker["build"]["context"] / worker["build"]["dockerfile"]).is_file()
    assert worker["depends_on"]["rabbitmq"]["condition"] == "service_healthy"
    assert "healthcheck" in compose["services"]["rabbitmq"]
    # Two replicas cannot publish the same host port.
    assert "ports" not in worker


def test_every_bind_mount_exists(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for target, source in bind_mounts(service).items():
            assert source.exists(), f"{name}: {source} (mounted at {target}) is missing"


def test_broker_enables_management_and_prometheus(compose: dict[str, Any]) -> None:
    mounts = bind_mounts(compose["services"]["rabbitmq"])
    plugins = mounts["/etc/rabbitmq/enabled_plugins"].read_text(encoding="utf-8")
    assert "rabbitmq_management" in plugins and "rabbitmq_prometheus" in plugins
    assert plugins.strip().endswith("].")  # an Erlang term: the broker refuses anything else


def rabbitmq_conf(path: Path) -> dict[str, str]:
    """The `key = value` lines of a rabbitmq.conf (sysctl format)."""
    conf = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            conf[key.strip()] = value.strip()
    return conf


def test_broker_imports_the_topology_definitions_at_boot(compose: dict[str, Any]) -> None:
    mounts = bind_mounts(compose["services"]["rabbitmq"])
    (conf_file,) = [src for dst, src in mounts.items() if dst.startswith("/etc/rabbitmq/conf.d/")]
    conf = rabbitmq_conf(conf_file)
    assert conf["definitions.import_backend"] == "local_filesystem"
    directory = conf["definitions.local.path"]
    imported = sorted(target for target in mounts if target.startswith(directory + "/"))
    # Imported in file-name order: the user before the topology that needs the vhost.
    assert [mounts[target].name for target in imported] == ["10-users.json", "definitions.json"]


def rabbit_sha256(password: str, password_hash: str) -> bool:
    """RabbitMQ's rabbit_password_hashing_sha256: base64(salt + sha256(salt + password))."""
    raw = base64.b64decode(password_hash)
    salt, digest = raw[:4], raw[4:]
    return hashlib.sha256(salt + password.encode()).digest() == digest


def test_worker_credentials_match_the_boot_time_user(compose: dict[str, Any]) -> None:
    url = urlsplit(compose["services"]["worker"]["environment"]["PROMPT_WORKER_AMQP_URL"])
    assert url.hostname == "rabbitmq" and url.port == 5672
    users_file = DEPLOY / "rabbitmq" / "compose" / "10-users.json"
    users = json.loads(users_file.read_text(encoding="utf-8"))
    (user,) = [u for u in users["users"] if u["name"] == url.username]
    assert user["hashing_algorithm"] == "rabbit_password_hashing_sha256"
    assert url.password is not None and rabbit_sha256(url.password, user["password_hash"])
    assert not rabbit_sha256(url.password + "x", user["password_hash"])
    vhost = url.path[1:] or "/"
    (grant,) = [p for p in users["permissions"] if p["user"] == url.username]
    assert grant["vhost"] == vhost and grant["read"] == grant["write"] == ".*"


def test_worker_environment_is_accepted_by_serve(compose: dict[str, Any]) -> None:
    env = compose["services"]["worker"]["environment"]
    assert set(env) <= {spec.env for spec in settings.SETTINGS}
    resolved = settings.from_env(env)
    worker = compose["services"]["worker"]
    grace = int(worker["stop_grace_period"].rstrip("s"))
    assert grace > resolved.shutdown_timeout
    config_mount = bind_mounts(worker)
    assert "/etc/prompt-worker/worker.yaml" in config_mount  # PROMPT_WORKER_CONFIG of the image


def test_prometheus_scrapes_workers_and_broker(compose: dict[str, Any]) -> None:
    prometheus = read_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    jobs = {job["job_name"]: job for job in prometheus["scrape_configs"]}
    (dns,) = jobs["prompt-worker"]["dns_sd_configs"]
    assert dns["names"] == ["worker"] and dns["port"] == settings.DEFAULT_HTTP_PORT
    assert "PROMPT_WORKER_HTTP_PORT" not in compose["services"]["worker"]["environment"]
    broker_conf = rabbitmq_conf(DEPLOY / "rabbitmq" / "compose" / "rabbitmq.conf")
    assert broker_conf["prometheus.tcp.port"] == "15692"
    for name in ("rabbitmq", "rabbitmq-queues"):
        targets = jobs[name]["static_configs"][0]["targets"]
        assert targets == ["rabbitmq:15692"]
    detailed = jobs["rabbitmq-queues"]
    assert detailed["metrics_path"] == "/metrics/detailed"
    assert {"queue_coarse_metrics", "queue_consumer_count"} <= set(detailed["params"]["family"])
    mounts = bind_mounts(compose["services"]["prometheus"])
    for rule_file in prometheus["rule_files"]:
        assert rule_file in mounts


def test_grafana_provisions_the_datasource_the_dashboard_selects(compose: dict[str, Any]) -> None:
    mounts = bind_mounts(compose["services"]["grafana"])
    provisioning = mounts["/etc/grafana/provisioning"]
    (datasource,) = read_yaml(provisioning / "datasources" / "prometheus.yml")["datasources"]
    assert datasource["url"] == "http://prometheus:9090"
    dashboard = json.loads((DEPLOY / "grafana" / "build-prompt-worker.json").read_text())
    variable = next(v for v in dashboard["templating"]["list"] if v["name"] == "datasource")
    assert variable["current"]["value"] == datasource["uid"]
    (provider,) = read_yaml(provisioning / "dashboards" / "build-prompt-worker.yml")["providers"]
    folder = provider["options"]["path"]
    assert any(
        target.startswith(folder + "/") and source.name == "build-prompt-worker.json"
        for target, source in mounts.items()
    )


# --- promtool (scripts/ensure-promtool puts it in the venv; or set PROMTOOL) ----------


def promtool() -> str:
    return tool("promtool", "scripts/ensure-promtool installs it (or set PROMTOOL)", "PROMTOOL")


def run_promtool(*args: str, cwd: Path) -> None:
    result = subprocess.run(
        [promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_accepts_config_and_rules(tmp_path: Path) -> None:
    config = read_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    # The config names the rule file by its path inside the container.
    config["rule_files"] = [str(DEPLOY / "prometheus" / "alerts.yml")]
    local = tmp_path / "prometheus.yml"
    local.write_text(yaml.safe_dump(config))
    run_promtool("check", "config", str(local), cwd=tmp_path)
    run_promtool("check", "rules", "alerts.yml", cwd=DEPLOY / "prometheus")


def test_alert_rules_pass_their_unit_tests() -> None:
    run_promtool("test", "rules", "alerts.test.yml", cwd=DEPLOY / "prometheus")

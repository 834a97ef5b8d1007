"""deploy/k8s: schema-valid manifests that agree with each other and with the worker.

Core kinds are validated offline with kubernetes-validate. Its schema set has no CRDs,
so ServiceMonitor, PrometheusRule, ScaledObject and TriggerAuthentication are checked
here for the fields their operators require. The rest pins the cross-references that
break silently in a cluster: selectors, port names, probe paths, the config mount, the
drain time against the grace period, the KEDA queue against the worker's queue.
"""

import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.deploy.docker_env import built_image, docker, image_config
from worker.render.config import parse_config
from worker.transport import settings
from worker.transport.link import topology

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
CORE_KINDS = {"ConfigMap", "Deployment", "Service", "PodDisruptionBudget"}
CRD_API = {
    "ServiceMonitor": "monitoring.coreos.com/v1",
    "PrometheusRule": "monitoring.coreos.com/v1",
    "ScaledObject": "keda.sh/v1alpha1",
    "TriggerAuthentication": "keda.sh/v1alpha1",
}
SELECTOR = {
    "app.kubernetes.io/name": "build-prompt-worker",
    "app.kubernetes.io/component": "worker",
}
SETTING_ENVS = {spec.env for spec in settings.SETTINGS} | {
    spec.file_env for spec in settings.SETTINGS if spec.secret
}


def manifest_files() -> list[Path]:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text(encoding="utf-8"))
    return [K8S / name for name in kustomization["resources"]]


def load_all() -> dict[str, dict[str, Any]]:
    """Every resource of the kustomization, by kind (one of each kind here)."""
    by_kind: dict[str, dict[str, Any]] = {}
    for path in manifest_files():
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            assert doc["kind"] not in by_kind, f"second {doc['kind']} in {path.name}"
            by_kind[doc["kind"]] = doc
    return by_kind


@pytest.fixture(scope="module")
def res() -> dict[str, dict[str, Any]]:
    return load_all()


def container(res: dict[str, dict[str, Any]]) -> dict[str, Any]:
    containers = res["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    result: dict[str, Any] = containers[0]
    return result


def env_of(res: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in container(res).get("env", [])}


def test_kustomization_lists_every_manifest_in_the_directory() -> None:
    listed = {path.name for path in manifest_files()}
    present = {path.name for path in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


def test_every_kind_is_present(res: dict[str, dict[str, Any]]) -> None:
    assert set(res) == CORE_KINDS | set(CRD_API)


@pytest.mark.parametrize("kind", sorted(CORE_KINDS))
def test_core_manifests_pass_kubernetes_validate_strict(
    res: dict[str, dict[str, Any]], kind: str
) -> None:
    version = kubernetes_validate.latest_version()
    kubernetes_validate.validate(res[kind], version, strict=True)


def test_kubernetes_validate_rejects_a_broken_deployment(res: dict[str, dict[str, Any]]) -> None:
    # The validator really checks these files: a typo'd field fails strict validation.
    broken = yaml.safe_load(yaml.safe_dump(res["Deployment"]))
    broken["spec"]["template"]["spec"]["terminationGracePeriod"] = 40
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, kubernetes_validate.latest_version(), strict=True)


@pytest.mark.parametrize("kind", sorted(CRD_API))
def test_custom_resources_have_api_version_kind_and_name(
    res: dict[str, dict[str, Any]], kind: str
) -> None:
    doc = res[kind]
    assert doc["apiVersion"] == CRD_API[kind]
    assert doc["metadata"]["name"]
    assert isinstance(doc["spec"], dict)


def test_selectors_agree(res: dict[str, dict[str, Any]]) -> None:
    deployment = res["Deployment"]["spec"]
    assert deployment["selector"]["matchLabels"] == SELECTOR
    pod_labels = deployment["template"]["metadata"]["labels"]
    assert SELECTOR.items() <= pod_labels.items()
    assert res["Service"]["spec"]["selector"] == SELECTOR
    assert res["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"] == SELECTOR
    service_labels = res["Service"]["metadata"]["labels"]
    monitor_selector = res["ServiceMonitor"]["spec"]["selector"]["matchLabels"]
    assert monitor_selector.items() <= service_labels.items()


def test_metrics_path_from_service_monitor_to_container(res: dict[str, dict[str, Any]]) -> None:
    ports = {p["name"]: p for p in res["Service"]["spec"]["ports"]}
    container_ports = {p["name"]: p["containerPort"] for p in container(res)["ports"]}
    (endpoint,) = res["ServiceMonitor"]["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    service_port = ports[endpoint["port"]]
    assert service_port["targetPort"] in container_ports
    http_port = container_ports[service_port["targetPort"]]
    assert env_of(res)["PROMPT_WORKER_HTTP_PORT"]["value"] == str(http_port)
    # The alert rules select the worker's scrape job by the Service's name.
    assert res["Service"]["metadata"]["name"] == "prompt-worker"


def test_probes_use_health_and_readiness_endpoints(res: dict[str, dict[str, Any]]) -> None:
    c = container(res)
    container_ports = {p["name"] for p in c["ports"]}
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"]["port"] in container_ports


def test_resources_and_non_root(res: dict[str, dict[str, Any]]) -> None:
    c = container(res)
    assert {"cpu", "memory"} <= c["resources"]["requests"].keys()
    assert "memory" in c["resources"]["limits"]
    pod = res["Deployment"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False


def test_grace_period_outlasts_the_drain(res: dict[str, dict[str, Any]]) -> None:
    env = env_of(res)
    drain = float(
        env["PROMPT_WORKER_SHUTDOWN_TIMEOUT"]["value"]
        if "PROMPT_WORKER_SHUTDOWN_TIMEOUT" in env
        else settings.DEFAULT_SHUTDOWN_TIMEOUT
    )
    grace = res["Deployment"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    # Margin for closing the connection after the last in-flight job is confirmed.
    assert grace >= drain + 5


def test_environment_is_made_of_serve_settings(res: dict[str, dict[str, Any]]) -> None:
    env = env_of(res)
    assert set(env) <= SETTING_ENVS
    assert "PROMPT_WORKER_AMQP_URL" not in env, "the broker URL holds credentials: mount it"
    plain = {
        name: item["value"]
        for name, item in env.items()
        if "value" in item and name != "PROMPT_WORKER_AMQP_URL_FILE"
    }
    # The values must be ones `prompt-worker serve` accepts.
    settings.resolve({}, {**plain, "PROMPT_WORKER_AMQP_URL": "amqp://u:p@broker:5672/"})


def test_the_broker_url_is_read_from_the_mounted_secret(res: dict[str, dict[str, Any]]) -> None:
    url_path = Path(env_of(res)["PROMPT_WORKER_AMQP_URL_FILE"]["value"])
    pod = res["Deployment"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mount = {m["mountPath"]: m for m in container(res)["volumeMounts"]}[str(url_path.parent)]
    assert mount["readOnly"] is True
    secret = volumes[mount["name"]]["secret"]
    items = {item["path"]: item["key"] for item in secret["items"]}
    # The same secret and key KEDA reads the URL from.
    (keda,) = res["TriggerAuthentication"]["spec"]["secretTargetRef"]
    assert (secret["secretName"], items[url_path.name]) == (keda["name"], keda["key"])
    # Readable by the worker's group only (YAML 0440 is the integer 288).
    assert secret["defaultMode"] == 0o440
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]


def test_config_map_is_mounted_where_the_worker_reads_it(res: dict[str, dict[str, Any]]) -> None:
    config_path = Path(env_of(res)["PROMPT_WORKER_CONFIG"]["value"])
    pod = res["Deployment"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container(res)["volumeMounts"]}
    mount = mounts[str(config_path.parent)]
    config_map = volumes[mount["name"]]["configMap"]["name"]
    assert config_map == res["ConfigMap"]["metadata"]["name"]
    assert config_path.name in res["ConfigMap"]["data"]


def test_config_map_holds_a_valid_worker_yaml(res: dict[str, dict[str, Any]]) -> None:
    text = res["ConfigMap"]["data"]["worker.yaml"]
    config = parse_config(yaml.safe_load(text), "configmap.yaml:worker.yaml")
    assert config.mcp_servers, "the example registry should show at least one server"


def test_keda_scales_the_deployment_on_the_request_queue(res: dict[str, dict[str, Any]]) -> None:
    spec = res["ScaledObject"]["spec"]
    assert spec["scaleTargetRef"]["name"] == res["Deployment"]["metadata"]["name"]
    assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "rabbitmq"
    env = env_of(res)
    request_queue = env.get("PROMPT_WORKER_REQUEST_QUEUE", {}).get(
        "value", topology.DEFAULT_REQUEST_QUEUE
    )
    assert trigger["metadata"]["queueName"] == request_queue
    assert trigger["metadata"]["mode"] == "QueueLength"
    assert int(trigger["metadata"]["value"]) > 0
    # KEDA connects with the same secret as the workers.
    auth = res["TriggerAuthentication"]
    assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
    (ref,) = auth["spec"]["secretTargetRef"]
    assert ref["parameter"] == "host"
    # ... the secret the workers mount (test_the_broker_url_is_read_from_the_mounted_secret).


def test_disruption_budget_leaves_a_consumer(res: dict[str, dict[str, Any]]) -> None:
    pdb = res["PodDisruptionBudget"]["spec"]
    min_replicas = res["ScaledObject"]["spec"]["minReplicaCount"]
    assert 1 <= pdb["minAvailable"] < min_replicas  # drains can still proceed


def test_prometheus_rule_is_in_sync_with_alerts_yml(res: dict[str, dict[str, Any]]) -> None:
    alerts = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())
    assert res["PrometheusRule"]["spec"]["groups"] == alerts["groups"]
    check = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "sync-prometheus-rule.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr


# --- against the built image (docker_env.py: skips without an engine, fails in CI) ---


@pytest.mark.slow
@pytest.mark.timeout(1200)  # a cold first build of the image takes minutes
def test_manifests_match_the_built_image(res: dict[str, dict[str, Any]]) -> None:
    """What the Deployment assumes about the image is what the image is: its entrypoint
    (no command override needed), its user, its port and where it reads its config. The
    read-only root filesystem and dropped capabilities it asks for are the locked-down
    run mode of test_image.py."""
    image = built_image()
    config = image_config(image)
    c = container(res)
    pod = res["Deployment"]["spec"]["template"]["spec"]
    env = {name: item["value"] for name, item in env_of(res).items() if "value" in item}
    image_env: dict[str, str] = dict(item.split("=", 1) for item in config["Env"])

    # The image's own entrypoint runs `serve`, with the manifest's args if any.
    assert config["Entrypoint"] == ["prompt-worker", "serve"]
    assert "command" not in c
    uid, gid = (int(part) for part in config["User"].split(":"))
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (uid, gid)
    exposed = {int(port.split("/")[0]) for port in config["ExposedPorts"]}
    assert {port["containerPort"] for port in c["ports"]} == exposed
    assert int(env.get("PROMPT_WORKER_HTTP_PORT", image_env["PROMPT_WORKER_HTTP_PORT"])) in exposed
    assert (
        env.get("PROMPT_WORKER_CONFIG", image_env["PROMPT_WORKER_CONFIG"])
        == image_env["PROMPT_WORKER_CONFIG"]
    )
    # The manifest's tag is the version the image's worker reports.
    version = docker("run", "--rm", "--entrypoint", "prompt-worker", image, "--version")
    assert c["image"].rsplit(":", 1)[1] == version.split()[-1]

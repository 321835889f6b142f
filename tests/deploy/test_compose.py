"""docker-compose.yml, validated offline: compose's own schema check plus the stack's wiring.

`docker-compose config -q` (Debian's docker-compose package) validates against the compose schema
without a Docker engine. The other checks read the YAML (PyYAML resolves the `<<` merges) and
prove what the schema cannot: each proxy points at its own engine's port, the GPU engines carry the
flags the proxy's adapters rely on, Prometheus scrapes every proxy and engine, Grafana gets the
generated dashboards, and no secret value is written in the file.
"""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from tests.deploy.conftest import REPO_ROOT, require_tool

COMPOSE = REPO_ROOT / "docker-compose.yml"
PROM_CONFIG = REPO_ROOT / "deploy" / "compose" / "prometheus.yml"
SECRETISH = re.compile(r"TOKEN|PASSWORD|SECRET|API_KEY", re.I)
REQUIRED_FLAGS = {
    "vllm": (
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",
        "--kv-events-config",
        "--scheduling-policy=priority",
    ),
    "vllm-offload": (
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",
        "--kv-events-config",
        "--kv-offloading-size",
        "--kv-offloading-backend=native",
        "--scheduling-policy=priority",
    ),
    "sglang": (
        "--enable-metrics",
        "--enable-cache-report",
        "--enable-priority-scheduling",
        "--radix-eviction-policy=priority",
    ),
}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def services_in(compose: dict, profile: str | None) -> set[str]:
    """Services `docker compose [--profile P] up` starts: those without profiles, plus P's."""
    return {
        name
        for name, svc in compose["services"].items()
        if not svc.get("profiles") or (profile is not None and profile in svc["profiles"])
    }


def _command(svc: dict) -> list[str]:
    cmd = svc.get("command", [])
    return cmd.split() if isinstance(cmd, str) else [str(c) for c in cmd]


def _port(args: list[str], flag: str = "--port") -> str | None:
    for i, arg in enumerate(args):
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
    return None


@pytest.mark.parametrize("profiles", [[], ["vllm"], ["sglang"], ["vllm", "sglang"], ["vllm-offload"]])
def test_docker_compose_config_validates(profiles):
    exe = require_tool("docker-compose", "Debian package `docker-compose`; add it to .ci/run")
    args = [exe, "-f", str(COMPOSE)]
    for p in profiles:
        args += ["--profile", p]
    done = subprocess.run(args + ["config", "-q"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_default_profile_runs_the_simulated_engine_without_gpu(compose):
    default = services_in(compose, None)
    assert default == {"sim-engine", "proxy", "prometheus", "grafana"}
    for name in default:
        assert "deploy" not in compose["services"][name], f"{name} must not reserve a GPU"
    assert _command(compose["services"]["sim-engine"])[0] == "sim-engine"


@pytest.mark.parametrize(
    "engine, proxy",
    [
        ("sim-engine", "proxy"),
        ("vllm", "proxy-vllm"),
        ("sglang", "proxy-sglang"),
        ("vllm-offload", "proxy-vllm-offload"),
    ],
)
def test_each_proxy_points_at_its_own_engine(compose, engine, proxy):
    svc = compose["services"][proxy]
    env = svc["environment"]
    port = _port(_command(compose["services"][engine])) or "8000"
    assert env["CACHESCOUT_UPSTREAM_URL"] == f"http://{engine}:{port}"
    assert env["CACHESCOUT_PORT"] == "9000" and _command(svc) == ["serve"]
    assert svc.get("profiles") == compose["services"][engine].get("profiles"), "proxy and engine share a profile"
    assert all(p.startswith("127.0.0.1:") for p in svc["ports"]), "host ports bind loopback only"


@pytest.mark.parametrize("engine", ["vllm", "sglang", "vllm-offload"])
def test_gpu_engines_have_the_adapter_flags(compose, engine):
    svc = compose["services"][engine]
    assert svc["profiles"] == [engine]
    args = _command(svc)
    for flag in REQUIRED_FLAGS[engine]:
        assert any(a == flag or a.startswith(flag + "=") for a in args), f"{engine} lacks {flag}"
    devices = svc["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]


@pytest.mark.parametrize("engine", ["vllm", "vllm-offload"])
def test_vllm_priority_scheduling_turns_the_proxys_slack_lane_on(compose, engine):
    """vLLM's V1 engine cannot be asked its policy without dev mode: the proxy is told (docs/live.md)."""
    assert "--scheduling-policy=priority" in _command(compose["services"][engine])
    env = compose["services"][f"proxy-{engine}"]["environment"]
    assert env["CACHESCOUT_ENGINE_PRIORITY_SCHEDULING"] == "on"


@pytest.mark.parametrize("engine", ["vllm", "vllm-offload"])
def test_vllm_kv_events_match_the_proxy_subscription(compose, engine):
    args = _command(compose["services"][engine])
    config = next(a.split("=", 1)[1] for a in args if a.startswith("--kv-events-config="))
    events = yaml.safe_load(config)  # JSON is YAML
    assert events["enable_kv_cache_events"] is True and events["publisher"] == "zmq"
    port = events["endpoint"].rsplit(":", 1)[1]
    env = compose["services"][f"proxy-{engine}"]["environment"]
    assert env["CACHESCOUT_KV_EVENTS_ENDPOINT"] == f"tcp://{engine}:{port}"


def test_no_secret_values_in_the_file(compose):
    for name, svc in compose["services"].items():
        env = svc.get("environment") or {}
        items = env.items() if isinstance(env, dict) else (e.partition("=")[::2] for e in env)
        for key, value in items:
            if SECRETISH.search(key):
                assert value in (None, ""), f"{name}: {key} must be passed through, not written here"


def test_prometheus_scrapes_every_proxy_and_engine(compose):
    config = yaml.safe_load(PROM_CONFIG.read_text())
    targets = {t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    for name, svc in compose["services"].items():
        if name.startswith("proxy"):
            assert f"{name}:9000" in targets
        elif name in ("sim-engine", "vllm", "sglang", "vllm-offload"):
            port = _port(_command(svc)) or "8000"
            assert f"{name}:{port}" in targets
    assert (
        "./deploy/compose/prometheus.yml:/etc/prometheus/prometheus.yml:ro"
        in compose["services"]["prometheus"]["volumes"]
    )


def test_promtool_accepts_the_prometheus_config():
    promtool = require_tool("promtool", "Debian package `prometheus`; .ci/run installs it")
    done = subprocess.run(
        [promtool, "check", "config", "--syntax-only", str(PROM_CONFIG)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_grafana_is_provisioned_with_the_generated_dashboards(compose):
    volumes = compose["services"]["grafana"]["volumes"]
    mounts = dict(v.split(":")[:2] for v in volumes if v.startswith("./"))
    for host in mounts:
        assert (REPO_ROOT / host).exists(), host
    dash_dir = mounts["./dashboards"]
    prov = REPO_ROOT / "deploy/compose/grafana/provisioning"
    provider = yaml.safe_load((prov / "dashboards/cachescout.yml").read_text())["providers"][0]
    assert provider["options"]["path"] == dash_dir
    assert list((REPO_ROOT / "dashboards").glob("*.json")), "generated dashboards are committed"
    datasource = yaml.safe_load((prov / "datasources/prometheus.yml").read_text())["datasources"][0]
    assert datasource["type"] == "prometheus" and datasource["isDefault"] is True
    assert datasource["url"] == "http://prometheus:9090"
    scrape = yaml.safe_load(PROM_CONFIG.read_text())["global"]["scrape_interval"]
    assert datasource["jsonData"]["timeInterval"] == scrape, "$__rate_interval needs the scrape interval"

"""Every CACHESCOUT_* variable the deploy files set names a real Settings field.

pydantic-settings ignores unknown variables (`extra="ignore"`), so a misspelt name in a compose
file or ConfigMap would silently fall back to the default (e.g. no KV events). Read the names from
the real `proxy.settings.Settings`, never a copy.
"""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from proxy.settings import Settings
from tests.deploy.conftest import REPO_ROOT, require_tool

KNOWN = {f"CACHESCOUT_{name.upper()}" for name in Settings.model_fields}
NAME = re.compile(r"\bCACHESCOUT_[A-Z0-9_]+\b")


def test_dockerfile_env_names():
    used = set(NAME.findall((REPO_ROOT / "Dockerfile").read_text()))
    assert used and used <= KNOWN, used - KNOWN


def test_compose_env_names():
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    used = {
        key
        for svc in compose["services"].values()
        for key in (svc.get("environment") or {})
        if key.startswith("CACHESCOUT_")
    }
    assert "CACHESCOUT_UPSTREAM_URL" in used and used <= KNOWN, used - KNOWN


@pytest.mark.parametrize(
    "path", ["base", "overlays/vllm", "overlays/sglang", "overlays/vllm-plain-sidecar", "overlays/vllm-offload"]
)
def test_kubernetes_env_names(path):
    kubectl = require_tool("kubectl", "needed for `kubectl kustomize`")
    out = subprocess.run(
        [kubectl, "kustomize", str(REPO_ROOT / "deploy" / path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    used = set()
    for doc in yaml.safe_load_all(out):
        if doc and doc["kind"] == "ConfigMap":
            used |= set(doc["data"])
        if doc and doc["kind"] == "Deployment":
            spec = doc["spec"]["template"]["spec"]
            for c in spec.get("initContainers", []) + spec["containers"]:
                used |= {e["name"] for e in c.get("env", []) if e["name"].startswith("CACHESCOUT_")}
    assert "CACHESCOUT_UPSTREAM_URL" in used and used <= KNOWN, used - KNOWN


def _docs_text() -> str:
    return "\n".join(p.read_text() for p in sorted((REPO_ROOT / "docs").glob("*.md")))


def test_every_setting_is_documented():
    """Each Settings field has a --help description and is named in the docs (as `name` or
    `CACHESCOUT_NAME`): a setting nobody can find is a setting nobody can use."""
    docs = _docs_text()
    missing = []
    for name, field in Settings.model_fields.items():
        env = f"CACHESCOUT_{name.upper()}"
        if not (field.description or "").strip():
            missing.append(f"{name}: no description")
        if f"`{name}`" not in docs and env not in docs and f"_{name.upper()}`" not in docs:
            missing.append(f"{name}: not in docs/*.md")
    assert not missing, missing


def test_every_policy_config_field_is_documented():
    from dataclasses import fields

    from proxy.core.config import PolicyConfig

    docs = _docs_text()
    assert [f.name for f in fields(PolicyConfig) if f"`{f.name}`" not in docs] == []

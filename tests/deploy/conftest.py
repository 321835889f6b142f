"""Fixtures for the deploy tests: repo paths, the generated dashboards, external tools.

Tests that need an external tool (kubectl, hadolint, docker-compose, promtool, prometheus) skip
with the tool's name and how to install it, so a skip is never mistaken for a pass.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def require_tool(name: str, how: str) -> str:
    """Absolute path of an executable, or skip the test saying how to get it."""
    path = shutil.which(name)
    if path is None:
        venv_path = REPO_ROOT / ".venv" / "bin" / name
        path = str(venv_path) if venv_path.exists() else None
    if path is None:
        pytest.skip(f"{name} not installed ({how})")
    return path


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def dashboards() -> dict[str, dict]:
    """The committed dashboard JSON files, by uid."""
    found = {}
    for path in sorted((REPO_ROOT / "dashboards").glob("*.json")):
        data = json.loads(path.read_text())
        found[data["uid"]] = data
    return found


def panel_targets(dashboard: dict):
    """(panel, target) for every query of every non-row panel."""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        for target in panel.get("targets", []):
            yield panel, target

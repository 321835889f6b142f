"""Fixtures for the replay tests: the shared Mooncake traces (skipped when absent) and small streams."""

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TRACES = REPO_ROOT.parent / "shared" / "traces"


def trace_path(name: str) -> Path:
    path = TRACES / name
    if not path.is_file():
        pytest.skip(f"{path} is absent: the Mooncake reference checks need ../shared/traces next to the repo")
    return path


@pytest.fixture(scope="session")
def mooncake_conversation():
    from proxy.replay.traces import load_trace

    return load_trace(trace_path("conversation_trace.jsonl"))


@pytest.fixture(scope="session")
def mooncake_synthetic():
    from proxy.replay.traces import load_trace

    return load_trace(trace_path("synthetic_trace.jsonl"))

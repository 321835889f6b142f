"""`child_on_free_port` re-picks a port when the child could not bind it, and only then.

Why: the router fleet's vllm-router once exited with "Address already in use" in CI (its port was
free when picked, and taken before it bound); one lost race must not fail a test run."""

from __future__ import annotations

import sys

import pytest

from proxy.harness.child_process import child_on_free_port

SERVE = (
    "import http.server, sys; http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])),"
    " http.server.SimpleHTTPRequestHandler).serve_forever()"
)
BIND_FAILS = "import sys; print('OSError: [Errno 98] Address already in use'); sys.exit(1)"
OTHER_FAILS = "import sys; print('config error'); sys.exit(2)"


def test_a_child_that_could_not_bind_is_started_again_on_another_port():
    ports: list[int] = []

    def make(port: int) -> tuple[list[str], str]:
        ports.append(port)
        code = BIND_FAILS if len(ports) == 1 else SERVE
        return [sys.executable, "-c", code, str(port)], f"http://127.0.0.1:{port}/"

    with child_on_free_port(make, timeout=20) as (proc, port):
        assert proc.poll() is None
        assert port == ports[-1]
    assert len(ports) == 2
    assert proc.poll() is not None  # stopped on exit


def test_other_failures_and_the_last_attempt_raise():
    calls: list[int] = []

    def other(port: int) -> tuple[list[str], str]:
        calls.append(port)
        return [sys.executable, "-c", OTHER_FAILS], f"http://127.0.0.1:{port}/"

    with pytest.raises(RuntimeError, match="config error"), child_on_free_port(other, timeout=20):
        pass
    assert len(calls) == 1

    def always(port: int) -> tuple[list[str], str]:
        calls.append(port)
        return [sys.executable, "-c", BIND_FAILS], f"http://127.0.0.1:{port}/"

    calls.clear()
    with (
        pytest.raises(RuntimeError, match="Address already in use"),
        child_on_free_port(always, attempts=3, timeout=20),
    ):
        pass
    assert len(calls) == 3

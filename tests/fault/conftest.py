"""Fault suite fixtures: a hostile engine and the real `cachescout serve`, each its own process.

Separate processes so the proxy's RSS can be read from /proc and its log checked for tracebacks;
loopback only; every process is stopped by its PID.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from proxy.harness.child_process import child_process, free_port

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ADMIN = "fault-admin"
GOOD = {"authorization": "Bearer good"}


@dataclass
class Proxy:
    url: str
    pid: int
    log: Path

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def state(self) -> dict:
        return httpx.get(self.url + "/debug/state", headers={"x-admin-token": ADMIN}, timeout=30).json()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def upstream(waiting: int = 0) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with child_process(
        [sys.executable, str(HERE / "hostile_upstream.py"), "--port", str(port), "--waiting", str(waiting)],
        url + "/health",
    ):
        yield url


@contextlib.contextmanager
def proxy(
    upstream_url: str, tmp_path: Path, *sets: str, engine: str = "none", log_level: str = "warning"
) -> Iterator[Proxy]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / f"proxy-{port}.log"
    cmd = [
        sys.executable,
        "-m",
        "proxy.cli",
        "serve",
        "--upstream",
        upstream_url,
        "--port",
        str(port),
        "--log-level",
        log_level,
        "--set",
        f"engine={engine}",
        "--set",
        f"admin_token={ADMIN}",
        "--set",
        "scrape_interval=0.2",
    ]
    for s in sets:
        cmd += ["--set", s]
    with child_process(cmd, url + "/livez", cwd=ROOT, log_path=log, timeout=60) as proc:
        yield Proxy(url, proc.pid, log)


@pytest.fixture
def engine_url() -> Iterator[str]:
    with upstream() as url:
        yield url


PROBE = r"""
import json, sys, time, urllib.request
url, stop_file = sys.argv[1], sys.argv[2]
import os
lat = []
while not os.path.exists(stop_file):
    t0 = time.perf_counter()
    urllib.request.urlopen(url + "/livez", timeout=30).read()
    lat.append(time.perf_counter() - t0)
    time.sleep(0.01)
print(json.dumps(lat))
"""


@contextlib.contextmanager
def livez_probe(url: str, tmp_path: Path) -> Iterator[list[float]]:
    """Polls `/livez` every 10 ms from its own process (so the load generator's GIL does not count),
    until the block exits; the yielded list is filled with the latencies (seconds) then."""
    import json
    import subprocess
    import time as _time

    stop_file = tmp_path / f"probe-stop-{_time.monotonic_ns()}"
    proc = subprocess.Popen([sys.executable, "-c", PROBE, url, str(stop_file)], stdout=subprocess.PIPE, text=True)
    lat: list[float] = []
    try:
        _time.sleep(0.3)
        yield lat
    finally:
        stop_file.touch()
        out, _ = proc.communicate(timeout=60)
        lat.extend(json.loads(out or "[]"))

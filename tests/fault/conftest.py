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

from proxy.child_process import child_process, free_port

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
    with child_process([sys.executable, str(HERE / "hostile_upstream.py"), "--port", str(port),
                        "--waiting", str(waiting)], url + "/health"):
        yield url


@contextlib.contextmanager
def proxy(upstream_url: str, tmp_path: Path, *sets: str, engine: str = "none") -> Iterator[Proxy]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / f"proxy-{port}.log"
    cmd = [sys.executable, "-m", "proxy.cli", "serve", "--upstream", upstream_url, "--port", str(port),
           "--log-level", "warning", "--set", f"engine={engine}", "--set", f"admin_token={ADMIN}",
           "--set", "scrape_interval=0.2"]
    for s in sets:
        cmd += ["--set", s]
    with child_process(cmd, url + "/livez", cwd=ROOT, log_path=log, timeout=60) as proc:
        yield Proxy(url, proc.pid, log)


@pytest.fixture
def engine_url() -> Iterator[str]:
    with upstream() as url:
        yield url

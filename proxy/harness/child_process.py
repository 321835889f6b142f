"""Child processes on loopback: a free port, a readiness wait, and a start-wait-stop context.

Why one module: the demo, the socket tests and the Prometheus integration test all start real
engines and proxies as separate interpreters (as in production) and must never leave one running.
Output goes to a file, never an unread pipe (a chatty child would block on a full pipe), and its
tail is put into the error when the child dies or never becomes ready.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago on `host` (the OS picks it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_ready(
    url: str, proc: subprocess.Popen, timeout: float = 30.0, ready: Callable[[int], bool] = lambda status: status == 200
) -> None:
    """Poll `url` until `ready(status)`; RuntimeError if `proc` exits first or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: process exited with {proc.returncode}")
        try:
            if ready(httpx.get(url, timeout=1.0).status_code):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up within {timeout:.0f}s")


def stop(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `grace_s`; always reaps the child."""
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@contextlib.contextmanager
def child_process(
    cmd: list[str],
    ready_url: str,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    log_path: Path | None = None,
    timeout: float = 30.0,
    ready: Callable[[int], bool] = lambda status: status == 200,
) -> Iterator[subprocess.Popen]:
    """Start `cmd`, wait until `ready_url` answers, yield the process, stop it by its PID on exit.

    stdout and stderr go to `log_path` (kept) or a temporary file (dropped)."""
    with contextlib.ExitStack() as files:
        log = (
            files.enter_context(open(log_path, "w+"))
            if log_path is not None
            else files.enter_context(tempfile.TemporaryFile(mode="w+"))
        )
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            try:
                wait_ready(ready_url, proc, timeout, ready)
            except RuntimeError as exc:
                log.seek(0)
                tail = log.read()
                raise RuntimeError(f"{exc} ({' '.join(cmd[:4])} …):\n{tail[-3000:]}") from None
            yield proc
        finally:
            stop(proc)


ADDRESS_IN_USE = "address already in use"


@contextlib.contextmanager
def child_on_free_port(
    make: Callable[[int], tuple[list[str], str]], *, attempts: int = 3, **kwargs: Any
) -> Iterator[tuple[subprocess.Popen, int]]:
    """`child_process` on a port picked by `free_port`, picked again when the child could not bind.

    Why: a port is only free when `free_port` looks; before the child binds it, any process on the
    machine (the child itself, connecting out to its workers) may take it as an ephemeral port.
    `make(port)` gives the command and its readiness URL; extra ports it picks are re-picked too.
    Any other failure is raised at once. Yields the process and the port it listens on."""
    for attempt in range(attempts):
        port = free_port()
        cmd, ready_url = make(port)
        stack = contextlib.ExitStack()
        try:
            proc = stack.enter_context(child_process(cmd, ready_url, **kwargs))
        except RuntimeError as exc:
            if ADDRESS_IN_USE in str(exc).lower() and attempt + 1 < attempts:
                continue
            raise
        with stack:
            yield proc, port
        return


def sim_proxy_command(python: str, port: int, upstream: str, sets: tuple[str, ...] = ()) -> list[str]:
    """`cachescout serve` in front of a simulated engine, as the demo and the router fleet start it:
    the sim adapter, scrapes every 0.5 s and plans every 0.1 s (short runs), plus ``--set`` items."""
    cmd = [python, "-m", "proxy.cli", "serve", "--upstream", upstream, "--port", str(port)]
    cmd += ["--log-level", "warning", "--set", "engine=sim", "--set", "scrape_interval=0.5"]
    cmd += ["--set", "policy_plan_interval=0.1"]
    for item in sets:
        cmd += ["--set", item]
    return cmd

"""Every dashboard query, evaluated by a real Prometheus that scraped a real proxy and engine.

The stack, all on 127.0.0.1 with free ports, started and stopped by this module:
  - `cachescout sim-engine --eviction priority` (exports the vLLM metric names and, in priority
    mode, the SGLang ones; a small cache so the policy has something to protect),
  - `cachescout serve` in front of it (policy on), driven by the project's multi-agent workload,
  - a second `cachescout serve` whose upstream is a closed port (real 502s, so the upstream-error
    series carry data),
  - `prometheus` (Debian package) with a temporary config and storage, scraping every second.
Then each dashboard target is sent to Prometheus's HTTP query API with `$__rate_interval`
replaced by a window that covers the run. A query must parse and return at least one series. The
only exemption is a query that needs an engine metric the simulated engine does not export (listed
in dashboards/engine_metrics.py, e.g. SGLang's TTFT histogram); such queries are reported in a
warning, and must still parse.

Skips only when the `prometheus` binary is missing. `pytest -s` prints every query's values.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import shutil
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dashboards.engine_metrics import engine_metric_names
from dashboards.promql import metric_names
from proxy.harness.child_process import child_process, free_port
from tests.deploy.conftest import REPO_ROOT, panel_targets

pytestmark = [pytest.mark.prometheus, pytest.mark.sockets, pytest.mark.slow]

SCRAPE_S = 1


def process(args: list[str], ready_url: str, log: Path, timeout: float = 45.0):
    """A real process on loopback, its output kept in `log` for the failure message."""
    return child_process(args, ready_url, cwd=REPO_ROOT, log_path=log, timeout=timeout)


def cachescout(*args: str) -> list[str]:
    return [sys.executable, "-m", "proxy.cli", *args]


def prometheus_config(proxies: list[str], engines: list[str]) -> str:
    def job(name: str, targets: list[str]) -> str:
        quoted = ", ".join(f'"{t}"' for t in targets)
        return f"  - job_name: {name}\n    static_configs:\n      - targets: [{quoted}]\n"

    return (
        f"global:\n  scrape_interval: {SCRAPE_S}s\n  evaluation_interval: {SCRAPE_S}s\n"
        f"scrape_configs:\n{job('cachescout', proxies)}{job('engine', engines)}"
    )


def query(base: str, expr: str, at: float) -> dict:
    response = httpx.get(f"{base}/api/v1/query", params={"query": expr, "time": f"{at:.3f}"}, timeout=10.0)
    return response.json()


def targets_report(base: str) -> str:
    """Scrape health of every target, for failure messages."""
    targets = httpx.get(f"{base}/api/v1/targets", timeout=10.0).json()["data"]["activeTargets"]
    return "targets: " + "; ".join(f"{t['scrapeUrl']} {t['health']} {t['lastError']}" for t in targets)


def wait_for_scrapes(base: str, targets: int, after: float, timeout: float = 30.0) -> None:
    """Block until all `targets` have been scraped successfully after the moment `after`.

    Prometheus applies new target sets on a 5 s tick, so the first scrapes come a few seconds after
    it reports ready; the workload must not start before them or its start is never recorded."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = query(base, "timestamp(up == 1)", time.time()).get("data", {}).get("result", [])
        if len(result) == targets and all(float(r["value"][1]) > after for r in result):
            return
        time.sleep(0.3)
    raise AssertionError(f"Prometheus did not scrape all {targets} targets within {timeout}s: {targets_report(base)}")


def wait_for_settled_series(proxy: str, quiet_s: float = 2.0, timeout: float = 15.0) -> float:
    """After the workload, the executor may still finish actions and create new labelled series
    (`cachescout_actions_total{...}` is counted when an action ends). Poll the proxy's own /metrics
    until its set of series has not changed for `quiet_s`; return when it last changed."""

    def series() -> frozenset[str]:
        text = httpx.get(f"{proxy}/metrics", timeout=5.0).text
        return frozenset(line.rsplit(" ", 1)[0] for line in text.splitlines() if line and not line.startswith("#"))

    last, changed = series(), time.time()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and time.time() - changed < quiet_s:
        time.sleep(0.25)
        now = series()
        if now != last:
            last, changed = now, time.time()
    return changed


def run_workload(proxy_url: str, model: str) -> int:
    """The project's multi-agent driver (selector group chat with tool calls), kept small, then one
    follow-up turn per agent: the agents coming back is what turns the proxy's warmups and touches
    into real hits, so the conversion series carry data."""
    from proxy.harness.workload import DemoSpec, build_agents
    from proxy.harness.workload import run_workload as drive

    spec = DemoSpec(
        sessions=8,
        concurrency=4,
        steps=(4, 6),
        anchor_words=(300, 400),
        max_tokens=16,
        tool_seconds=(0.02, 0.08),
        seed=11,
    )
    result = asyncio.run(drive(proxy_url, spec, model=model))
    assert result.records, "the workload sent no successful request"
    sent = len(result.records)
    # one runtime hint, so the hint panels (kinds/outcomes, source standing) carry data
    hint = httpx.post(
        f"{proxy_url}/v1/cachescout/hints",
        timeout=10.0,
        json={"hints": [{"type": "tool_started", "session_id": "prom-hint", "expected_duration_ms": 50}]},
    )
    assert hint.status_code == 200, hint.text
    time.sleep(1.0)  # let the planner act on the last turns before the agents return
    for agent in build_agents(spec):
        body: dict = {
            "model": model,
            "max_tokens": 4,
            "temperature": 0,
            "user": f"follow-up-{agent.name}",
            "messages": [
                {"role": "system", "content": agent.system},
                {"role": "user", "content": "One more thing: summarise your last step."},
            ],
        }
        if agent.tools:
            body["tools"] = list(agent.tools)
        response = httpx.post(f"{proxy_url}/v1/chat/completions", json=body, timeout=30.0)
        assert response.status_code == 200, response.text
        sent += 1
    return sent


@pytest.fixture(scope="module")
def scraped_stack(tmp_path_factory) -> Iterator[dict]:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.skip("prometheus binary not installed (Debian package `prometheus`; .ci/run installs it)")
    tmp = tmp_path_factory.mktemp("prom-stack")
    engine_port, proxy_port, dead_proxy_port, prom_port = (free_port() for _ in range(4))
    closed_port = free_port()  # nothing listens there: the second proxy's upstream
    engine = f"http://127.0.0.1:{engine_port}"
    proxy = f"http://127.0.0.1:{proxy_port}"
    dead_proxy = f"http://127.0.0.1:{dead_proxy_port}"
    prom = f"http://127.0.0.1:{prom_port}"
    (tmp / "prometheus.yml").write_text(
        prometheus_config([f"127.0.0.1:{proxy_port}", f"127.0.0.1:{dead_proxy_port}"], [f"127.0.0.1:{engine_port}"])
    )

    with contextlib.ExitStack() as stack:
        stack.enter_context(
            process(
                cachescout(
                    "sim-engine",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(engine_port),
                    "--eviction",
                    "priority",
                    "--capacity-blocks",
                    "200",
                    "--speed",
                    "20",
                    "--tool-call-share",
                    "0.3",
                ),
                f"{engine}/health",
                tmp / "sim.log",
            )
        )
        stack.enter_context(
            process(
                cachescout(
                    "serve",
                    "--upstream",
                    engine,
                    "--port",
                    str(proxy_port),
                    "--log-level",
                    "warning",
                    "--set",
                    "engine=sim",
                    "--set",
                    "scrape_interval=1",
                    "--set",
                    "readiness_cache_seconds=0",
                ),
                f"{proxy}/livez",
                tmp / "proxy.log",
            )
        )
        stack.enter_context(
            process(
                cachescout(
                    "serve",
                    "--upstream",
                    f"http://127.0.0.1:{closed_port}",
                    "--port",
                    str(dead_proxy_port),
                    "--log-level",
                    "warning",
                    "--no-policy",
                    "--connect-timeout",
                    "1",
                ),
                f"{dead_proxy}/livez",
                tmp / "dead-proxy.log",
            )
        )
        stack.enter_context(
            process(
                [
                    prometheus,
                    f"--config.file={tmp / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp / 'data'}",
                    f"--web.listen-address=127.0.0.1:{prom_port}",
                    "--log.level=warn",
                ],
                f"{prom}/-/ready",
                tmp / "prometheus.log",
            )
        )

        wait_for_scrapes(prom, targets=3, after=0.0)
        started = time.time()
        model = httpx.get(f"{engine}/v1/models", timeout=5.0).json()["data"][0]["id"]
        requests = run_workload(proxy, model)
        for _ in range(3):  # real 502s through the proxy whose engine is down
            response = httpx.post(
                f"{dead_proxy}/v1/chat/completions",
                timeout=10.0,
                json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
            )
            assert response.status_code == 502, response.text
        settled = wait_for_settled_series(proxy)
        # rate() needs two samples of a series: wait for two scrapes after the last series was born.
        wait_for_scrapes(prom, targets=3, after=settled + 2.2 * SCRAPE_S)
        engine_series = {
            line.split("{")[0].split(" ")[0]
            for line in httpx.get(f"{engine}/metrics", timeout=5.0).text.splitlines()
            if line and not line.startswith("#")
        }
        yield {
            "prom": prom,
            "window_s": math.ceil(time.time() - started) + 5,
            "at": time.time(),
            "requests": requests,
            "engine_series": engine_series,
            "proxy_instance": f"127.0.0.1:{proxy_port}",
        }


def _labels(metric: dict) -> str:
    return ",".join(v for k, v in metric.items() if k not in ("job", "instance", "__name__"))


def test_every_dashboard_query_returns_data(scraped_stack, dashboards):
    prom, at = scraped_stack["prom"], scraped_stack["at"]
    window = f"{scraped_stack['window_s']}s"
    known_engine = engine_metric_names()
    failures, exempt, evaluated = [], [], 0
    for uid, dash in dashboards.items():
        for panel, target in panel_targets(dash):
            expr = target["expr"].replace("$__rate_interval", window)
            data = query(prom, expr, at)
            evaluated += 1
            where = f"{uid} / {panel['title']} / {target['legendFormat']}: {expr}"
            if data.get("status") != "success":
                failures.append(f"{where}: {data.get('errorType')}: {data.get('error')}")
                continue
            if data["data"]["result"]:
                shown = "; ".join(
                    f"{_labels(r['metric'])}={float(r['value'][1]):.4g}" for r in data["data"]["result"][:4]
                )
                print(f"{uid[11:]:8} | {panel['title'][:40]:40} | {target['legendFormat'][:24]:24} | {shown}")
                continue
            missing = {n for n in metric_names(expr) if n in known_engine and n not in scraped_stack["engine_series"]}
            if missing:
                exempt.append(f"{where} (sim engine does not export {sorted(missing)})")
            else:
                failures.append(f"{where}: no data")
    assert evaluated >= 20
    assert not failures, (
        "dashboard queries failing against a real Prometheus:\n" + "\n".join(failures) + "\n" + targets_report(prom)
    )
    if exempt:
        warnings.warn("queries not checkable against the simulated engine:\n" + "\n".join(exempt), stacklevel=1)


def test_token_counts_flow_through_prometheus(scraped_stack):
    """The hit ratio the overview charts is real: the workload reuses agent anchors, so some of its
    prompt tokens were cached, and the requests counter saw every workload request."""
    prom, at, window = scraped_stack["prom"], scraped_stack["at"], f"{scraped_stack['window_s']}s"
    prompt = query(prom, f"sum(increase(cachescout_prompt_tokens_total[{window}]))", at)["data"]["result"]
    cached = query(prom, f"sum(increase(cachescout_cached_prompt_tokens_total[{window}]))", at)["data"]["result"]
    assert prompt and float(prompt[0]["value"][1]) > 0
    assert cached and 0 < float(cached[0]["value"][1]) < float(prompt[0]["value"][1]) * 1.5
    # Every workload request is counted once, in some status class. (Not necessarily 2xx: a client
    # that closes its stream right after `[DONE]` can beat the proxy's end of response, which the
    # forwarder then counts as a client disconnect.)
    selector = f'route="/v1/chat/completions",instance="{scraped_stack["proxy_instance"]}"'
    by_class = query(prom, f"sum by (code_class) (cachescout_requests_total{{{selector}}})", at)
    counts = {r["metric"]["code_class"]: float(r["value"][1]) for r in by_class["data"]["result"]}
    assert sum(counts.values()) >= scraped_stack["requests"], counts
    assert counts["2xx"] >= 0.8 * scraped_stack["requests"], counts
    errors = query(prom, 'sum(cachescout_upstream_errors_total{kind="connect"})', at)
    assert float(errors["data"]["result"][0]["value"][1]) >= 3

"""Dashboards as code: committed JSON is fresh, every query is well-formed and every metric exists.

The metric check reads the real definitions (a fresh `ProxyMetrics`) and the known engine metric
list, never a copy, so renaming a metric in the proxy breaks this test instead of the dashboards.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from dashboards import generate
from dashboards.engine_metrics import engine_metric_names
from dashboards.promql import label_names, metric_names
from tests.deploy.conftest import REPO_ROOT, panel_targets, require_tool

HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


def proxy_series() -> dict[str, generate.ProxyMetric]:
    series = {}
    for metric in generate.proxy_metrics():
        series[metric.name] = metric
        if metric.type == "histogram":
            for suffix in HISTOGRAM_SERIES:
                series[metric.name + suffix] = metric
    return series


def test_generated_files_are_fresh():
    stale = generate.stale_files()
    assert not stale, f"stale generated files {stale}: run `python dashboards/generate.py`"


def test_check_mode_runs_as_a_script():
    done = subprocess.run(
        [sys.executable, "dashboards/generate.py", "--check"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_check_mode_detects_a_stale_dashboard(tmp_path, monkeypatch):
    monkeypatch.setattr(generate, "DASHBOARD_DIR", tmp_path)
    monkeypatch.setattr(generate, "DOC_PATH", tmp_path / "absent.md")
    assert generate.main(["--check"]) == 1  # nothing written yet
    assert generate.main([]) == 0
    assert generate.main(["--check"]) == 0
    path = next(tmp_path.glob("*.json"))
    path.write_text(path.read_text().replace("$__rate_interval", "5m", 1))
    assert generate.main(["--check"]) == 1


def test_both_dashboards_exist(dashboards):
    assert set(dashboards) == {"cachescout-overview", "cachescout-policy"}


def test_every_panel_uses_the_datasource_variable(dashboards):
    for uid, dash in dashboards.items():
        names = [v["name"] for v in dash["templating"]["list"] if v["type"] == "datasource"]
        assert names == ["datasource"], uid
        for panel in dash["panels"]:
            if panel["type"] == "row":
                continue
            assert panel["datasource"]["uid"] == "${datasource}", (uid, panel["title"])
            assert panel["targets"], (uid, panel["title"])
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == "${datasource}", (uid, panel["title"])


def test_every_range_uses_rate_interval(dashboards):
    for uid, dash in dashboards.items():
        for panel, target in panel_targets(dash):
            ranges = re.findall(r"\[([^\]]*)\]", target["expr"])
            if "rate(" in target["expr"]:
                assert ranges, f"{uid}/{panel['title']}: rate without a range: {target['expr']!r}"
            assert all(r == "$__rate_interval" for r in ranges), (uid, panel["title"], target["expr"])


def test_every_queried_metric_is_defined(dashboards):
    proxy = proxy_series()
    engine = engine_metric_names()
    unknown = set()
    for uid, dash in dashboards.items():
        for panel, target in panel_targets(dash):
            names = metric_names(target["expr"])
            assert names, (uid, panel["title"], target["expr"])
            unknown |= {(uid, panel["title"], n) for n in names if n not in proxy and n not in engine}
    assert not unknown, f"metrics neither defined by ProxyMetrics nor known engine metrics: {sorted(unknown)}"


def test_labels_of_proxy_queries_exist(dashboards):
    proxy = proxy_series()
    for uid, dash in dashboards.items():
        for panel, target in panel_targets(dash):
            names = metric_names(target["expr"])
            if not names <= set(proxy):
                continue  # engine metrics: label sets vary by engine version
            allowed = {"job", "instance", "le"} | {lbl for n in names for lbl in proxy[n].labels}
            assert label_names(target["expr"]) <= allowed, (uid, panel["title"], target["expr"])


def test_every_proxy_metric_is_charted(dashboards):
    charted = set()
    for dash in dashboards.values():
        for _, target in panel_targets(dash):
            charted |= metric_names(target["expr"])
    proxy = proxy_series()
    charted_bases = {proxy[n].name for n in charted if n in proxy}
    missing = {m.name for m in generate.proxy_metrics()} - charted_bases
    assert not missing, f"add a panel for {sorted(missing)} in dashboards/definitions.py"


def test_panel_layout(dashboards):
    for uid, dash in dashboards.items():
        ids = [p["id"] for p in dash["panels"]]
        assert len(ids) == len(set(ids)), uid
        for panel in dash["panels"]:
            pos = panel["gridPos"]
            assert pos["x"] + pos["w"] <= 24, (uid, panel["title"])
            if panel["type"] != "row":
                assert panel["description"].strip(), (uid, panel["title"])


@pytest.mark.parametrize(
    "expr, names, labels",
    [
        (
            "sum by (kind, reason) (rate(cachescout_actions_total[$__rate_interval]))",
            {"cachescout_actions_total"},
            {"kind", "reason"},
        ),
        (
            "histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))",
            {"vllm:time_to_first_token_seconds_bucket"},
            {"le"},
        ),
        (
            'sum(rate(a_total{outcome="hit",x=~"by(y)"}[1m])) / ignoring(x) sum(rate(b_total[1m])) * 1e3',
            {"a_total", "b_total"},
            {"outcome", "x"},
        ),
        ("topk(10, max(foo) or on() vector(0)) > bool 0.5", {"foo"}, set()),
    ],
)
def test_promql_lexer(expr, names, labels):
    assert metric_names(expr) == names
    assert label_names(expr) == labels


def test_promtool_parses_every_query(dashboards, tmp_path):
    """Offline parse of every query by Prometheus's own parser (recording rules of each expr)."""
    promtool = require_tool("promtool", "Debian package `prometheus`; .ci/run installs it")
    lines = ["groups:", "- name: dashboards", "  rules:"]
    for uid, dash in dashboards.items():
        for i, (_, target) in enumerate(panel_targets(dash)):
            expr = target["expr"].replace("$__rate_interval", "1m")
            lines += [f"  - record: check:{uid.replace('-', '_')}:{i}", f"    expr: {expr!r}"]
    rules = tmp_path / "rules.yml"
    rules.write_text("\n".join(lines) + "\n")
    done = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr

#!/usr/bin/env python3
"""Render the Grafana dashboards (and the generated doc tables) from dashboards/definitions.py.

    python dashboards/generate.py           # rewrite dashboards/*.json and docs/metrics.md tables
    python dashboards/generate.py --check   # exit 1 if any of them is stale (CI)

Why generated: see definitions.py. The doc tables (metrics: name, type, meaning; panels: the
question each answers) are rendered from the live metric definitions in
`proxy.observability.metrics.ProxyMetrics` and from the panel definitions, so the docs cannot drift
from the code either. Output is deterministic (sorted keys, stable panel ids) so `--check` is exact.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # run as a script: make `dashboards.*` and `proxy.*` importable
    sys.path.insert(0, str(REPO_ROOT))

from dashboards.definitions import DASHBOARDS, Dashboard, Panel  # noqa: E402
from dashboards.engine_metrics import KNOWN_ENGINE_METRICS  # noqa: E402

DASHBOARD_DIR = REPO_ROOT / "dashboards"
DOC_PATH = REPO_ROOT / "docs" / "metrics.md"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 39
PANEL_WIDTH, PANEL_HEIGHT, GRID_WIDTH = 12, 8, 24


@dataclass(frozen=True, slots=True)
class ProxyMetric:
    name: str  # series name as queried (counters with `_total`)
    type: str
    labels: tuple[str, ...]
    help: str


def proxy_metrics() -> list[ProxyMetric]:
    """Every metric ProxyMetrics defines, read from a fresh instance (the real definitions)."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics import MetricWrapperBase

    from proxy.observability.metrics import ProxyMetrics

    instance = ProxyMetrics(CollectorRegistry())
    found = []
    for value in vars(instance).values():
        if isinstance(value, MetricWrapperBase):
            name = value._name + ("_total" if value._type == "counter" else "")
            found.append(ProxyMetric(name, value._type, tuple(value._labelnames), value._documentation))
    return sorted(found, key=lambda m: m.name)


def dashboard_path(dashboard: Dashboard) -> Path:
    return DASHBOARD_DIR / f"{dashboard.uid}.json"


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict:
    defaults: dict = {"unit": panel.unit}
    if panel.min is not None:
        defaults["min"] = panel.min
    if panel.max is not None:
        defaults["max"] = panel.max
    body: dict = {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.question,
        "datasource": DATASOURCE,
        "gridPos": {"h": PANEL_HEIGHT, "w": PANEL_WIDTH, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "targets": [
            {
                "datasource": DATASOURCE,
                "expr": t.expr,
                "legendFormat": t.legend,
                "range": True,
                "refId": chr(ord("A") + i),
            }
            for i, t in enumerate(panel.targets)
        ],
    }
    if panel.kind == "timeseries":
        body["options"] = {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "none"},
        }
    else:
        body["options"] = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "area",
            "textMode": "auto",
        }
    return body


def render(dashboard: Dashboard) -> dict:
    """The Grafana dashboard JSON model (importable, and provisionable from a file)."""
    panels: list[dict] = []
    next_id, y = 1, 0
    for row in dashboard.rows:
        panels.append(
            {
                "id": next_id,
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": y},
                "panels": [],
            }
        )
        next_id, y = next_id + 1, y + 1
        for i, panel in enumerate(row.panels):
            x = (i % 2) * PANEL_WIDTH
            panels.append(_panel_json(panel, next_id, x, y))
            next_id += 1
            if x or i == len(row.panels) - 1:
                y += PANEL_HEIGHT
    return {
        "uid": dashboard.uid,
        "title": dashboard.title,
        "description": dashboard.description,
        "tags": ["cachescout"],
        "editable": True,
        "graphTooltip": 1,
        "refresh": "10s",
        "schemaVersion": SCHEMA_VERSION,
        "time": {"from": "now-1h", "to": "now"},
        "timezone": "browser",
        "version": 1,
        "annotations": {"list": []},
        "links": [],
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                    "refresh": 1,
                    "regex": "",
                    "options": [],
                }
            ]
        },
        "panels": panels,
    }


def dump(data: dict) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def metrics_table() -> str:
    lines = ["| metric | type | labels | meaning |", "| --- | --- | --- | --- |"]
    for m in proxy_metrics():
        lines.append(f"| `{m.name}` | {m.type} | {', '.join(m.labels) or '—'} | {m.help} |")
    lines += [
        "",
        "Engine metrics the dashboards also read (exported by the engine, not the proxy):",
        "",
        "| metric | type | engine | meaning | needs |",
        "| --- | --- | --- | --- | --- |",
    ]
    for e in KNOWN_ENGINE_METRICS:
        lines.append(f"| `{e.name}` | {e.type} | {e.engine} | {e.meaning} | {e.needs or 'on by default'} |")
    return "\n".join(lines)


def panels_table() -> str:
    lines = []
    for dashboard in DASHBOARDS:
        lines += [
            f"**{dashboard.title}** (`dashboards/{dashboard.uid}.json`): {dashboard.description}",
            "",
            "| panel | what it answers |",
            "| --- | --- |",
        ]
        for row in dashboard.rows:
            for panel in row.panels:
                lines.append(f"| {row.title} / {panel.title} | {panel.question} |")
        lines.append("")
    return "\n".join(lines).rstrip()


def splice(doc: str, block: str, content: str) -> str:
    """Replace the text between `<!-- BEGIN GENERATED: block -->` and its END marker."""
    begin, end = f"<!-- BEGIN GENERATED: {block} -->", f"<!-- END GENERATED: {block} -->"
    start, stop = doc.find(begin), doc.find(end)
    if start < 0 or stop < start:
        raise SystemExit(f"{DOC_PATH}: missing markers {begin} ... {end}")
    return doc[: start + len(begin)] + "\n" + content + "\n" + doc[stop:]


def expected_files() -> dict[Path, str]:
    files = {dashboard_path(d): dump(render(d)) for d in DASHBOARDS}
    if DOC_PATH.exists():
        doc = DOC_PATH.read_text()
        doc = splice(doc, "metrics", metrics_table())
        files[DOC_PATH] = splice(doc, "panels", panels_table())
    return files


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def stale_files() -> list[Path]:
    return [p for p, text in expected_files().items() if not p.exists() or p.read_text() != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if generated files are stale; write nothing")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files()
        for path in stale:
            print(f"stale: {_shown(path)} (run: python dashboards/generate.py)", file=sys.stderr)
        return 1 if stale else 0
    for path, text in expected_files().items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {_shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

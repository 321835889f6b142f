"""Grafana dashboards as code: definitions.py (panels), generate.py (renders JSON, --check)."""

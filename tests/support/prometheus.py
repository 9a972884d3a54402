"""The repo's monitoring files (deploy/prometheus: scrape configs and alert rules;
deploy/grafana: dashboards) as the monitoring tests read them, and the Prometheus they run
(``deploy.prometheus_server``; the ``prometheus_tools`` fixture is in tests/conftest.py)."""

from __future__ import annotations

import json
import os

from deploy.grafana import dashboards
from tests.support import ROOT

PROMETHEUS_DIR = os.path.join(ROOT, "deploy", "prometheus")
GRAFANA_DIR = os.path.join(ROOT, "deploy", "grafana")
RATE_INTERVAL = "10s"  # what Grafana's $__rate_interval is at a 1 s scrape interval


def dashboard_files() -> dict[str, dict]:
    loaded = {}
    for name in dashboards.FILES.values():
        with open(os.path.join(GRAFANA_DIR, name), encoding="utf-8") as f:
            loaded[name] = json.load(f)
    return loaded

"""Production configs, dashboards and alert rules (``deploy/``), with a real Prometheus."""

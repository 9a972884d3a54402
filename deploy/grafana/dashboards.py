"""The four Grafana dashboards, written as data and rendered to JSON.

``python -m deploy.grafana.dashboards`` rewrites ``deploy/grafana/*.json``;
``--check`` fails when a JSON file differs from what this module renders (a test runs it).
Panels are laid out left to right in rows of 24 grid units. Every query is PromQL over the
families of ``node.metrics``; ``tests/deploy/test_metrics_prometheus.py`` runs each one against a
real Prometheus scraping a real node.

Variables: ``datasource`` (a Prometheus data source), ``broker_group`` and ``node`` (both
multi-select, "All" = ``.*``). Queries use ``$__rate_interval``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'broker_group=~"$broker_group", node=~"$node"'  # the selector every query carries
RATE = "$__rate_interval"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    instant: bool = False


@dataclass(frozen=True)
class Panel:
    title: str
    queries: tuple[Query, ...]
    kind: str = "timeseries"  # timeseries | stat | table
    unit: str = "short"
    width: int = 12
    height: int = 8
    description: str = ""
    stack: bool = False


@dataclass
class Dashboard:
    uid: str
    title: str
    description: str
    panels: list[Panel] = field(default_factory=list)


def q(expr: str, legend: str = "", instant: bool = False) -> Query:
    return Query(" ".join(expr.split()), legend, instant)


def ts(title, *queries, unit="short", width=12, description="", stack=False) -> Panel:
    return Panel(title, queries, "timeseries", unit, width, 8, description, stack)


def stat(title, *queries, unit="short", width=4, description="") -> Panel:
    return Panel(title, queries, "stat", unit, width, 4, description)


def table(title, *queries, width=12, description="") -> Panel:
    return Panel(title, queries, "table", "short", width, 8, description)


NO_MASTER = f"""
(sum by (broker_group) (ferrymq_broker_role{{role="master", {SEL}}})
 or sum by (broker_group) (up{{job="ferrymq", {SEL}}}) * 0) < 1"""

OVERVIEW = Dashboard(
    "ferrymq-overview",
    "ferrymq / Cluster overview",
    "Nodes, masters, traffic, latency, lag and disk of the whole cluster.",
    [
        stat("Nodes up", q(f'sum(up{{job="ferrymq", {SEL}}})')),
        stat("Nodes down", q(f'count(up{{job="ferrymq", {SEL}}} == 0) or vector(0)')),
        stat(
            "Broker groups without master",
            q(f"count({NO_MASTER}) or vector(0)"),
            description="Groups where no node reports the master role.",
        ),
        stat(
            "Messages in / s",
            q(f"sum(rate(rocketmq_messages_in_total{{{SEL}}}[{RATE}]))"),
            unit="ops",
        ),
        stat("Consumer lag (messages)", q(f"sum(rocketmq_group_diff{{{SEL}}})")),
        stat(
            "Raft term",
            q(f"max(ferrymq_raft_term{{{SEL}}})"),
            description="Needs Raft routing (routing/).",
        ),
        ts(
            "Messages in and out / s by broker group",
            q(
                f"sum by (broker_group) (rate(rocketmq_messages_in_total{{{SEL}}}[{RATE}]))",
                "in {{broker_group}}",
            ),
            q(
                f"sum by (broker_group) (rate(rocketmq_messages_out_total{{{SEL}}}[{RATE}]))",
                "out {{broker_group}}",
            ),
            unit="ops",
        ),
        ts(
            "Send latency p99 by status",
            q(
                "histogram_quantile(0.99, sum by (le, status) "
                f"(rate(ferrymq_send_latency_seconds_bucket{{{SEL}}}[{RATE}])))",
                "{{status}}",
            ),
            unit="s",
        ),
        ts(
            "Master role by node",
            q(f'ferrymq_broker_role{{role="master", {SEL}}}', "{{node}} ({{broker_group}})"),
            description="1 while the node is its group's master.",
        ),
        ts(
            "Consumer lag by group and topic",
            q(f"sum by (group, topic) (rocketmq_group_diff{{{SEL}}})", "{{group}} / {{topic}}"),
        ),
        ts(
            "Disk usage by node",
            q(f"rocketmq_brokeruntime_commitlog_disk_ratio{{{SEL}}}", "{{node}}"),
            q(f"max(ferrymq_disk_high_water_ratio{{{SEL}}})", "high water"),
            unit="percentunit",
        ),
        ts(
            "Replication lag by slave",
            q(f"rocketmq_broker_commitlog_diff{{{SEL}}}", "{{broker_group}} → {{slave}}"),
            unit="bytes",
            description="Needs replication (ha/).",
        ),
        ts(
            "Raft leader",
            q(f"ferrymq_raft_is_leader{{{SEL}}} == 1", "{{node}}"),
            description="Needs Raft routing (routing/).",
        ),
        ts(
            "Process CPU by node",
            q(f'rate(process_cpu_seconds_total{{job="ferrymq", {SEL}}}[{RATE}])', "{{node}}"),
            unit="percentunit",
        ),
    ],
)

REPLICATION = Dashboard(
    "ferrymq-replication",
    "ferrymq / Broker groups and replication",
    "Roles, epochs, in-sync sets, replication lag and Raft routing state per broker group.",
    [
        stat("Broker groups without master", q(f"count({NO_MASTER}) or vector(0)"), width=6),
        stat(
            "Smallest in-sync set",
            q(f"min(ferrymq_insync_replicas{{{SEL}}})"),
            width=6,
        ),
        stat(
            "Raft leaders",
            q(f"sum(ferrymq_raft_is_leader{{{SEL}}})"),
            width=6,
            description="Needs Raft routing (routing/); 1 when healthy.",
        ),
        stat(
            "Raft commit index",
            q(f"max(ferrymq_raft_commit_index{{{SEL}}})"),
            width=6,
            description="Needs Raft routing (routing/).",
        ),
        ts(
            "Role by node",
            q(f'ferrymq_broker_role{{role="master", {SEL}}}', "{{node}} master"),
            description="1 = master, 0 = slave.",
        ),
        ts("Epoch by node", q(f"ferrymq_broker_epoch{{{SEL}}}", "{{node}}")),
        ts(
            "In-sync set by broker group",
            q(
                f"min by (broker_group) (ferrymq_insync_replicas{{{SEL}}})",
                "{{broker_group}} in sync",
            ),
            q(
                f"max by (broker_group) (ferrymq_insync_replicas_min{{{SEL}}})",
                "{{broker_group}} minimum",
            ),
            q(
                f"max by (broker_group) (ferrymq_broker_group_replicas{{{SEL}}})",
                "{{broker_group}} replicas",
            ),
        ),
        ts(
            "Replication lag by slave",
            q(f"rocketmq_broker_commitlog_diff{{{SEL}}}", "{{broker_group}} → {{slave}}"),
            unit="bytes",
            description="Needs replication (ha/).",
        ),
        ts(
            "Replication lag growth",
            q(f"deriv(rocketmq_broker_commitlog_diff{{{SEL}}}[5m])", "{{slave}}"),
            unit="Bps",
            description="Needs replication (ha/). Above 0 for long: the slave falls behind.",
        ),
        ts(
            "CommitLog max offset by node",
            q(f"rocketmq_brokeruntime_commitlog_maxoffset{{{SEL}}}", "{{node}}"),
            unit="bytes",
        ),
        ts(
            "Written but not confirmed by the in-sync set",
            q(
                f"rocketmq_brokeruntime_commitlog_maxoffset{{{SEL}}} "
                f"- ferrymq_commitlog_confirmed_offset{{{SEL}}}",
                "{{node}}",
            ),
            unit="bytes",
        ),
        ts(
            "Write throughput by node",
            q(f"sum by (node) (rate(rocketmq_throughput_in_total{{{SEL}}}[{RATE}]))", "{{node}}"),
            unit="Bps",
        ),
        ts(
            "Raft term and commit index",
            q(f"ferrymq_raft_term{{{SEL}}}", "term {{node}}"),
            q(f"ferrymq_raft_commit_index{{{SEL}}}", "commit {{node}}"),
            description="Needs Raft routing (routing/).",
        ),
    ],
)

TOPICS = Dashboard(
    "ferrymq-topics",
    "ferrymq / Topics and consumer groups",
    "Traffic by topic, consumption by group, lag per queue, in-flight and dead letters.",
    [
        ts(
            "Messages in / s by topic",
            q(f"sum by (topic) (rate(rocketmq_messages_in_total{{{SEL}}}[{RATE}]))", "{{topic}}"),
            unit="ops",
        ),
        ts(
            "Bytes in / s by topic",
            q(
                f"sum by (topic) (rate(rocketmq_throughput_in_total{{{SEL}}}[{RATE}]))",
                "{{topic}}",
            ),
            unit="Bps",
        ),
        ts(
            "Average message size by topic",
            q(
                f"sum by (topic) (rate(rocketmq_throughput_in_total{{{SEL}}}[{RATE}])) "
                f"/ sum by (topic) (rate(rocketmq_messages_in_total{{{SEL}}}[{RATE}]))",
                "{{topic}}",
            ),
            unit="bytes",
        ),
        ts(
            "Messages stored / s by topic (all write paths)",
            q(f"sum by (topic) (rate(rocketmq_producer_offset{{{SEL}}}[{RATE}]))", "{{topic}}"),
            unit="ops",
        ),
        ts(
            "Messages out / s by group and topic",
            q(
                f"sum by (group, topic) (rate(rocketmq_messages_out_total{{{SEL}}}[{RATE}]))",
                "{{group}} / {{topic}}",
            ),
            unit="ops",
        ),
        ts(
            "Bytes out / s by group",
            q(
                f"sum by (group) (rate(rocketmq_throughput_out_total{{{SEL}}}[{RATE}]))",
                "{{group}}",
            ),
            unit="Bps",
        ),
        ts(
            "Consumer lag by group and topic",
            q(f"sum by (group, topic) (rocketmq_group_diff{{{SEL}}})", "{{group}} / {{topic}}"),
        ),
        table(
            "Consumer lag per queue",
            q(
                f"sum by (group, topic, queue_id) (rocketmq_group_diff{{{SEL}}})",
                instant=True,
            ),
        ),
        ts(
            "In flight (POP) by group and topic",
            q(
                f"sum by (group, topic) (rocketmq_consumer_inflight_messages{{{SEL}}})",
                "{{group}} / {{topic}}",
            ),
        ),
        ts(
            "Dead-letter queue by group",
            q(f"sum by (group) (ferrymq_dlq_messages{{{SEL}}})", "held {{group}}"),
            q(
                f"sum by (group) (rate(rocketmq_topic_dlq_offset{{{SEL}}}[{RATE}]))",
                "new / s {{group}}",
            ),
        ),
        ts(
            "Online consumers by group",
            q(f"sum by (group) (rocketmq_consumer_connections{{{SEL}}})", "{{group}}"),
        ),
        ts(
            "Topics and groups",
            q(f"max(rocketmq_topic_number{{{SEL}}})", "topics"),
            q(f"max(rocketmq_consumer_group_number{{{SEL}}})", "groups"),
        ),
    ],
)

STORAGE = Dashboard(
    "ferrymq-storage",
    "ferrymq / Storage and node resources",
    "CommitLog offsets, dispatch and flush backlog, disk, RPC latency and process resources.",
    [
        ts(
            "CommitLog offsets",
            q(f"rocketmq_brokeruntime_commitlog_minoffset{{{SEL}}}", "min {{node}}"),
            q(f"rocketmq_brokeruntime_commitlog_maxoffset{{{SEL}}}", "max {{node}}"),
            q(f"ferrymq_commitlog_flushed_offset{{{SEL}}}", "flushed {{node}}"),
            q(f"ferrymq_commitlog_confirmed_offset{{{SEL}}}", "confirmed {{node}}"),
            unit="bytes",
        ),
        ts(
            "Dispatch and flush backlog",
            q(f"rocketmq_storage_dispatch_behind_bytes{{{SEL}}}", "dispatch {{node}}"),
            q(f"rocketmq_storage_flush_behind_bytes{{{SEL}}}", "flush {{node}}"),
            unit="bytes",
        ),
        ts(
            "Disk usage vs high water",
            q(f"rocketmq_brokeruntime_commitlog_disk_ratio{{{SEL}}}", "{{node}}"),
            q(f"ferrymq_disk_high_water_ratio{{{SEL}}}", "high water {{node}}"),
            unit="percentunit",
        ),
        ts(
            "Free disk and segments",
            q(f"ferrymq_disk_free_bytes{{{SEL}}}", "free {{node}}"),
            unit="bytes",
        ),
        ts(
            "CommitLog segments",
            q(f"ferrymq_commitlog_segments{{{SEL}}}", "{{node}}"),
        ),
        ts(
            "RPC latency p99 by method (no long polls)",
            q(
                "histogram_quantile(0.99, sum by (le, method) (rate(rocketmq_rpc_latency_seconds_"
                f'bucket{{method!~"PullMessage|ReceiveMessage", {SEL}}}[{RATE}])))',
                "{{method}}",
            ),
            unit="s",
        ),
        ts(
            "RPCs / s by method and code",
            q(
                "sum by (method, code) "
                f"(rate(rocketmq_rpc_latency_seconds_count{{{SEL}}}[{RATE}]))",
                "{{method}} {{code}}",
            ),
            unit="reqps",
        ),
        ts(
            "Send latency p50 / p99",
            q(
                "histogram_quantile(0.5, sum by (le) "
                f"(rate(ferrymq_send_latency_seconds_bucket{{{SEL}}}[{RATE}])))",
                "p50",
            ),
            q(
                "histogram_quantile(0.99, sum by (le) "
                f"(rate(ferrymq_send_latency_seconds_bucket{{{SEL}}}[{RATE}])))",
                "p99",
            ),
            unit="s",
        ),
        ts(
            "Resident memory by node",
            q(f'process_resident_memory_bytes{{job="ferrymq", {SEL}}}', "{{node}}"),
            unit="bytes",
        ),
        ts(
            "CPU by node",
            q(f'rate(process_cpu_seconds_total{{job="ferrymq", {SEL}}}[{RATE}])', "{{node}}"),
            unit="percentunit",
        ),
        ts(
            "Open file descriptors by node",
            q(f'process_open_fds{{job="ferrymq", {SEL}}}', "{{node}}"),
        ),
        ts(
            "Python GC collections / s",
            q(
                "sum by (node) "
                f'(rate(python_gc_collections_total{{job="ferrymq", {SEL}}}[{RATE}]))',
                "{{node}}",
            ),
            unit="ops",
        ),
    ],
)

DASHBOARDS = (OVERVIEW, REPLICATION, TOPICS, STORAGE)
FILES = {
    "ferrymq-overview": "cluster-overview.json",
    "ferrymq-replication": "broker-groups-replication.json",
    "ferrymq-topics": "topics-consumer-groups.json",
    "ferrymq-storage": "storage.json",
}


def _variable(name: str, label: str) -> dict:
    query = f"label_values(ferrymq_node_info, {name})"
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "definition": query,
        "query": {"query": query, "refId": name},
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    }


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict:
    targets = []
    for index, query in enumerate(panel.queries):
        target = {
            "datasource": DATASOURCE,
            "refId": chr(ord("A") + index),
            "expr": query.expr,
            "legendFormat": query.legend or "__auto",
            "range": not (query.instant or panel.kind == "stat"),
            "instant": query.instant or panel.kind == "stat",
        }
        if panel.kind == "table":
            target["format"] = "table"
        targets.append(target)
    body: dict = {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "targets": targets,
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
    }
    if panel.kind == "timeseries":
        body["fieldConfig"]["defaults"]["custom"] = {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 10,
            "showPoints": "never",
            "stacking": {"mode": "normal" if panel.stack else "none"},
        }
        body["options"] = {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    elif panel.kind == "stat":
        body["options"] = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "none",
            "textMode": "auto",
        }
    else:
        body["options"] = {"showHeader": True}
        body["transformations"] = [{"id": "organize", "options": {"excludeByName": {"Time": True}}}]
    return body


def render(dashboard: Dashboard) -> dict:
    panels = []
    x = y = row_height = 0
    for panel_id, panel in enumerate(dashboard.panels, start=1):
        if x + panel.width > 24:
            x, y, row_height = 0, y + row_height, 0
        panels.append(_panel_json(panel, panel_id, x, y))
        x += panel.width
        row_height = max(row_height, panel.height)
    return {
        "uid": dashboard.uid,
        "title": dashboard.title,
        "description": dashboard.description,
        "tags": ["ferrymq"],
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "timezone": "browser",
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "graphTooltip": 1,
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                },
                _variable("broker_group", "Broker group"),
                _variable("node", "Node"),
            ]
        },
        "annotations": {"list": []},
        "panels": panels,
    }


def rendered_files() -> dict[str, str]:
    return {
        FILES[d.uid]: json.dumps(render(d), indent=2, ensure_ascii=False) + "\n" for d in DASHBOARDS
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write or check deploy/grafana/*.json")
    parser.add_argument("--check", action="store_true", help="fail when a file is stale")
    args = parser.parse_args(argv)
    stale = []
    for name, text in rendered_files().items():
        path = os.path.join(HERE, name)
        current = None
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                current = f.read()
        if current != text:
            stale.append(name)
            if not args.check:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
    if args.check and stale:
        print(f"stale: {', '.join(stale)}; run python -m deploy.grafana.dashboards")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

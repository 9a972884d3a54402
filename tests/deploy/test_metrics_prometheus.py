"""Monitoring with a real Prometheus scraping real nodes under load (docs/architecture.md,
"Metrics").

Prometheus comes from the Debian package, installed here when missing (the test command
runs as root); it runs as a child process with a temp config and storage on a free port,
scraping every second, never as the system service. Two nodes, each its own broker group,
are scraped through a configuration generated from their ``cluster.json``; node-1 carries
a steady load of sends, pulls, POP receives and dead letters.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time

import pytest
import yaml

from deploy.grafana import dashboards
from deploy.local_stack import (
    DLQ_GROUP,
    POP_GROUP,
    PULL_GROUP,
    TOPIC,
    Load,
    prepare,
    start_node,
    write_cluster_json,
)
from deploy.prometheus import scrape_config
from deploy.prometheus_server import PrometheusServer
from deploy.render_dashboard import render, substitute
from ferrymq.client import Admin, Message, Producer, PullConsumer
from node.metrics import FAMILIES
from tests.support import ROOT
from tests.support.prometheus import GRAFANA_DIR, PROMETHEUS_DIR, RATE_INTERVAL, dashboard_files

DEADLINE_S = 45.0

# Panels that can only show data on a broker group with slaves, each with the reason. The
# test below asserts that exactly these return nothing on standalone nodes and that they
# are exactly the panels whose queries read a family only a master with slaves exports
# (FAMILIES.needs). On a 3-node cluster every panel has data (test_metrics_cluster.py).
CLUSTER_ONLY = {
    ("ferrymq-overview", "Replication lag by slave"): "lag per slave: a master with slaves",
    ("ferrymq-replication", "Replication lag by slave"): "lag per slave: a master with slaves",
    ("ferrymq-replication", "Replication lag growth"): "lag per slave: a master with slaves",
}


def families_in(expr: str) -> set[str]:
    names = set(re.findall(r"\b(?:rocketmq|ferrymq|process|python)_[a-z0-9_]+", expr))
    return {re.sub(r"_(bucket|count|sum)$", "", n) for n in names}


@pytest.fixture(scope="module")
def stack(prometheus_tools, tmp_path_factory):
    directory = tmp_path_factory.mktemp("monitoring")
    nodes = [
        start_node(str(directory / "node-1"), "node-1", "group-1"),
        start_node(str(directory / "node-2"), "node-2", "group-2"),
    ]
    for node in nodes:
        prepare(node.grpc)
    cluster = str(directory / "cluster.json")
    write_cluster_json(cluster, nodes)
    generated = subprocess.run(
        [sys.executable, "-m", "deploy.prometheus.scrape_config", cluster, "--interval", "1s"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    with open(os.path.join(PROMETHEUS_DIR, "alerts.yml"), encoding="utf-8") as f:
        rules = f.read()
    server = PrometheusServer.start(
        generated, rule_files={"alerts.yml": rules}, directory=str(directory / "prometheus")
    )
    load = Load(nodes[0].grpc).start()
    try:
        yield {"nodes": nodes, "prometheus": server, "load": load, "config": generated}
    finally:
        load.stop()
        server.stop()
        for node in nodes:
            node.stop()


def test_promtool_accepts_configs_rules_and_rule_tests(prometheus_tools, tmp_path):
    _, promtool = prometheus_tools

    def check(*args: str, cwd: str = PROMETHEUS_DIR) -> None:
        done = subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr

    check("check", "rules", "alerts.yml")
    check("check", "config", "prometheus-3-nodes.yml")
    check("check", "config", "prometheus-6-nodes.yml")
    # Alert behaviour on synthetic series: a killed master, a group without nodes, disk,
    # Raft, growing lags and a log cut by recovery (deploy/prometheus/alerts_test.yml).
    check("test", "rules", "alerts_test.yml")
    with open(os.path.join(PROMETHEUS_DIR, "alerts.yml"), encoding="utf-8") as f:
        rules = yaml.safe_load(f)
    names = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    assert names == {
        "FerrymqNodeDown",
        "FerrymqNoMaster",
        "FerrymqGroupUnderReplicated",
        "FerrymqReplicaOutOfSync",
        "FerrymqReplicationLagGrowing",
        "FerrymqConsumerLagGrowing",
        "FerrymqDiskAboveHighWater",
        "FerrymqRaftNoLeader",
        "FerrymqCommitLogDamaged",
        "FerrymqCommitLogCorruptionFound",
    }
    known = {f.name for f in FAMILIES} | {"process_cpu_seconds_total"}
    for group in rules["groups"]:
        for rule in group["rules"]:
            assert families_in(rule["expr"]) <= known, rule["alert"]


def test_checked_in_files_are_what_the_generators_write():
    for nodes in (3, 6):
        path = os.path.join(PROMETHEUS_DIR, f"prometheus-{nodes}-nodes.yml")
        with open(path, encoding="utf-8") as f:
            assert f.read() == scrape_config.layout_file(nodes), path
    assert dashboards.main(["--check"]) == 0
    layout = yaml.safe_load(scrape_config.layout_file(6))
    groups = [c["labels"]["broker_group"] for c in layout["scrape_configs"][0]["static_configs"]]
    assert groups == ["group-1"] * 3 + ["group-2"] * 3


def test_generated_config_targets_every_node_of_cluster_json(stack, prometheus_tools):
    prometheus = stack["prometheus"]
    expected = {(n.id, n.group, n.metrics) for n in stack["nodes"]}
    up = prometheus.wait_for('up{job="ferrymq"} == 1', DEADLINE_S, lambda r: len(r) == 2)
    got = {(r["metric"]["node"], r["metric"]["broker_group"], r["metric"]["instance"]) for r in up}
    assert got == expected


def test_every_dashboard_query_returns_data(stack):
    prometheus = stack["prometheus"]
    # Enough history for rates over RATE_INTERVAL, with traffic of every kind in it.
    prometheus.wait_for(
        f"sum(rate(rocketmq_messages_out_total[{RATE_INTERVAL}])) > 0"
        f" and sum(rate(rocketmq_topic_dlq_offset[{RATE_INTERVAL}])) > 0"
        f" and min(count_over_time(up[{RATE_INTERVAL}])) >= 5",
        DEADLINE_S,
    )
    needs = {f.name for f in FAMILIES if f.needs}
    empty, fed_later, checked = set(), set(), 0
    for dashboard in dashboard_files().values():
        for panel in dashboard["panels"]:
            key = (dashboard["uid"], panel["title"])
            for target in panel["targets"]:
                expr = substitute(target["expr"], RATE_INTERVAL)
                assert "$" not in expr, expr
                if families_in(expr) & needs:
                    fed_later.add(key)
                result = prometheus.query(expr)
                checked += 1
                if not result:
                    empty.add(key)
                    continue
                values = [float(r["value"][1]) for r in result]
                assert any(not math.isnan(v) for v in values), (key, expr, result)
    assert checked > 50
    assert empty == set(CLUSTER_ONLY), "panels without data on standalone nodes"
    assert fed_later == set(CLUSTER_ONLY), "cluster-only panels must read replication/routing"
    assert not stack["load"].errors


def test_every_metric_a_dashboard_reads_is_exported():
    known = {f.name for f in FAMILIES} | {
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "python_gc_collections_total",
    }
    for dashboard in dashboard_files().values():
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                unknown = families_in(target["expr"]) - known
                assert not unknown, (panel["title"], unknown)


def test_alert_rules_load_and_only_the_lag_alert_goes_pending(stack):
    """Every rule evaluates without error; on healthy nodes only consumer lag alerts,
    because the load lets lag grow on purpose (real data through the real rule)."""
    prometheus = stack["prometheus"]
    deadline = time.monotonic() + DEADLINE_S
    while True:
        rules = [r for g in prometheus.api("rules")["groups"] for r in g["rules"]]
        lag = [r for r in rules if r["name"] == "FerrymqConsumerLagGrowing"]
        evaluated = rules and all(r.get("lastEvaluation", "").startswith("2") for r in rules)
        if evaluated and lag and lag[0]["state"] == "pending":
            break
        assert time.monotonic() < deadline, rules
        time.sleep(0.2)
    assert len(rules) == 10
    for rule in rules:
        assert rule["health"] == "ok", rule
        if rule["name"] != "FerrymqConsumerLagGrowing":
            assert rule["state"] == "inactive", rule
    pending = {(a["labels"]["broker_group"], a["labels"]["group"]) for a in lag[0]["alerts"]}
    assert pending <= {("group-1", g) for g in (PULL_GROUP, POP_GROUP, DLQ_GROUP)}
    assert pending


def test_prometheus_lag_agrees_with_admin(stack):
    """On the quiet node-2: send, consume part, then Prometheus must show Admin's lag."""
    node = stack["nodes"][1]
    with Producer(node.grpc) as producer:
        producer.send_batch([Message(TOPIC, b"%d" % i) for i in range(40)])
    with PullConsumer(node.grpc, PULL_GROUP, batch_size=7) as consumer:
        consumer.assign(TOPIC, [0, 1])
        consumer.poll(wait_s=0)
        consumer.commit()
    with Admin(node.grpc) as admin:
        progress = admin.group_progress(PULL_GROUP, TOPIC)
    expected = {str(q.queue_id): q.lag for q in progress}
    assert sum(expected.values()) > 0
    selector = f'rocketmq_group_diff{{node="node-2", group="{PULL_GROUP}", topic="{TOPIC}"}}'

    def agrees(result) -> bool:
        return {r["metric"]["queue_id"]: float(r["value"][1]) for r in result} == expected

    stack["prometheus"].wait_for(selector, DEADLINE_S, agrees)
    with Admin(node.grpc) as admin:
        _, queues = admin.describe_topic(TOPIC)
    stack["prometheus"].wait_for(
        f'rocketmq_producer_offset{{node="node-2", topic="{TOPIC}"}}',
        DEADLINE_S,
        lambda r: len(r) == 1 and float(r[0]["value"][1]) == sum(q.max_offset for q in queues),
    )


def test_killed_node_makes_no_master_pending_then_restart_clears_it(stack, tmp_path):
    """The standalone form of a master kill: group-2's only node dies, so group-2 has no
    master (and its node is down) until it is back; group-1 stays quiet throughout."""
    prometheus = stack["prometheus"]
    node = stack["nodes"][1]
    node.sigkill()

    def alerts() -> dict[tuple[str, str], str]:
        return {
            (a["labels"]["alertname"], a["labels"].get("broker_group", "")): a["state"]
            for a in prometheus.api("alerts")["alerts"]
        }

    deadline = time.monotonic() + DEADLINE_S
    while alerts().get(("FerrymqNoMaster", "group-2")) != "pending":
        assert time.monotonic() < deadline, alerts()
        time.sleep(0.2)
    state = alerts()
    assert state.get(("FerrymqNodeDown", "group-2")) == "pending"
    lag_only = {"FerrymqConsumerLagGrowing"}
    assert not [k for k in state if k[1] == "group-1" and k[0] not in lag_only], state
    grpc_port = int(node.grpc.rsplit(":", 1)[1])
    metrics_port = int(node.metrics.rsplit(":", 1)[1])
    restarted = start_node(
        node.data_dir, node.id, node.group, grpc_port=grpc_port, metrics_port=metrics_port
    )
    stack["nodes"][1] = restarted
    while [key for key in alerts() if key[1] == "group-2"]:
        assert time.monotonic() < deadline + DEADLINE_S, alerts()
        time.sleep(0.2)


def test_overview_dashboard_renders_from_prometheus(stack, tmp_path):
    with open(os.path.join(GRAFANA_DIR, "cluster-overview.json"), encoding="utf-8") as f:
        overview = json.load(f)
    out = str(tmp_path / "overview.png")
    end = time.time()
    shown = render(overview, stack["prometheus"], end - 60, end, out, RATE_INTERVAL)
    cluster_only = {title for uid, title in CLUSTER_ONLY if uid == "ferrymq-overview"}
    assert {t for t, n in shown.items() if n == 0} == cluster_only
    assert os.path.getsize(out) > 20_000

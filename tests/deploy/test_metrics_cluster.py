"""Monitoring of a real 3-node cluster (one broker group of three, SYNC replication, every
node a Raft voter) by a real Prometheus with the repo's alert rules
(docs/architecture.md, "Metrics").

The scrape configuration is generated from the cluster's ``cluster.json``; Prometheus
scrapes and evaluates every second. A load through all three addresses (Producer,
PullConsumer, SimpleConsumers) runs until the dashboard check is done. Then: metric values
against Admin, and a master kill with the alerts it must raise and clear.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time

import pytest

from deploy.local_stack import PULL_GROUP, TOPIC, Load, prepare
from deploy.prometheus.scrape_config import RULES_FILE
from deploy.prometheus_server import PrometheusServer
from deploy.render_dashboard import substitute
from ferrymq.client import Admin, Message, Producer, PullConsumer
from ferrymq.launcher.cluster import cluster_down, cluster_up, is_running, load_plan
from ferrymq.launcher.polling import until
from ferrymq.launcher.processes import signal_node
from tests.support import ROOT
from tests.support.prometheus import PROMETHEUS_DIR, RATE_INTERVAL, dashboard_files

DEADLINE_S = 45.0
GROUP = "group-1"
QUIET_TOPIC = "quiet"
QUIET_GROUP = "quiet-readers"
SETTINGS = {
    "store": {
        "commitlog_segment_bytes": 8 << 20,
        "consume_queue_entries_per_file": 10000,
        "index_slot_count": 10007,
        "index_entry_count": 40000,
    }
}
# Alerts that the load itself may raise on a healthy cluster (lag grows on purpose).
LOAD_ALERTS = {"FerrymqConsumerLagGrowing"}


@pytest.fixture(scope="module")
def cluster(prometheus_tools, tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("metrics-cluster") / "cluster")
    plan = cluster_up(directory, nodes=3, auto_ports=True, settings=SETTINGS)
    server = load = None
    try:
        access = ",".join(n.grpc for n in plan.nodes)
        prepare(access)
        config = subprocess.run(
            [
                sys.executable,
                "-m",
                "deploy.prometheus.scrape_config",
                os.path.join(directory, "cluster.json"),
                "--interval",
                "1s",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        with open(os.path.join(PROMETHEUS_DIR, RULES_FILE), encoding="utf-8") as f:
            rules = f.read()
        server = PrometheusServer.start(
            config,
            rule_files={RULES_FILE: rules},
            directory=os.path.join(os.path.dirname(directory), "prometheus"),
        )
        load = Load(access).start()
        yield {
            "directory": directory,
            "plan": plan,
            "access": access,
            "prometheus": server,
            "load": load,
        }
    finally:
        if load is not None:
            load.stop()
        if server is not None:
            server.stop()
        current = load_plan(directory)
        for node in current.nodes if current else ():
            if is_running(node, current):
                os.kill(node.pid, signal.SIGCONT)
        cluster_down(directory)


def test_every_dashboard_query_returns_data_on_a_cluster(cluster):
    """Every panel of every dashboard, replication lag by slave included: the master of a
    group of three exports a lag series per slave."""
    prometheus = cluster["prometheus"]
    started = time.monotonic()
    up = prometheus.wait_for('up{job="ferrymq"} == 1', DEADLINE_S, lambda r: len(r) == 3)
    assert {(r["metric"]["node"], r["metric"]["broker_group"]) for r in up} == {
        (n.id, n.group) for n in cluster["plan"].nodes
    }
    prometheus.wait_for(
        f"sum(rate(rocketmq_messages_out_total[{RATE_INTERVAL}])) > 0"
        f" and sum(rate(rocketmq_topic_dlq_offset[{RATE_INTERVAL}])) > 0"
        f" and count(rocketmq_broker_commitlog_diff) == 2"
        f" and min(count_over_time(up[{RATE_INTERVAL}])) >= 5",
        DEADLINE_S,
    )
    empty, checked = [], 0
    for dashboard in dashboard_files().values():
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                expr = substitute(target["expr"], RATE_INTERVAL)
                result = prometheus.query(expr)
                checked += 1
                if not result:
                    empty.append((dashboard["uid"], panel["title"], expr))
                    continue
                values = [float(r["value"][1]) for r in result]
                assert any(not math.isnan(v) for v in values), (panel["title"], expr, result)
    assert checked > 50
    assert not empty, "panels without data on a 3-node cluster"
    # Consumption families come from the master only: one series per queue, not three.
    lag = prometheus.query(f'rocketmq_group_diff{{group="{PULL_GROUP}", topic="{TOPIC}"}}')
    assert len(lag) == 4 and len({r["metric"]["node"] for r in lag}) == 1, lag
    assert not cluster["load"].errors, cluster["load"].errors[:3]
    print(f"dashboards: {checked} queries, all with data, {time.monotonic() - started:.1f} s")


def test_metrics_agree_with_admin(cluster):
    """Offsets, roles, epoch, in-sync set and lag as Prometheus holds them equal what
    Admin answers (ClusterStatus: heartbeat-reported, so polled until they agree)."""
    cluster["load"].stop()  # a quiet cluster: offsets stop moving
    prometheus, access = cluster["prometheus"], cluster["access"]
    with Admin(access) as admin:
        admin.create_topic(QUIET_TOPIC, queue_count=2)
        admin.create_group(QUIET_GROUP)
    with Producer(access) as producer:
        producer.send_batch([Message(QUIET_TOPIC, b"%d" % i) for i in range(40)])
    with PullConsumer(access, QUIET_GROUP, batch_size=7) as consumer:
        consumer.assign(QUIET_TOPIC, [0, 1])
        consumer.poll(wait_s=0)
        consumer.commit()

    def by_node(expr: str) -> dict[str, float]:
        return {r["metric"]["node"]: float(r["value"][1]) for r in prometheus.query(expr)}

    def agree():
        with Admin(access) as admin:
            status = admin.cluster_status()
            progress = admin.group_progress(QUIET_GROUP, QUIET_TOPIC)
        (group,) = [g for g in status.broker_groups if g.name == GROUP]
        ends = {n.id: n.max_offset for n in status.nodes}
        checks = {
            "max offsets": by_node("rocketmq_brokeruntime_commitlog_maxoffset") == ends,
            "all ends equal": len(set(ends.values())) == 1,
            "confirmed": by_node("ferrymq_commitlog_confirmed_offset") == ends,
            "master": by_node('ferrymq_broker_role{role="master"}')
            == {n: float(n == group.master) for n in ends},
            "epoch": by_node("ferrymq_broker_epoch") == {n: group.epoch for n in ends},
            "in sync": by_node("ferrymq_insync_replicas") == {n: len(group.in_sync) for n in ends},
            "replicas": by_node("ferrymq_broker_group_replicas") == {n: 3 for n in ends},
            "slave lag": {
                r["metric"]["slave"]: float(r["value"][1])
                for r in prometheus.query("rocketmq_broker_commitlog_diff")
            }
            == {n: 0 for n in ends if n != group.master},
            "consumer lag": {
                r["metric"]["queue_id"]: float(r["value"][1])
                for r in prometheus.query(
                    f'rocketmq_group_diff{{group="{QUIET_GROUP}", topic="{QUIET_TOPIC}"}}'
                )
            }
            == {str(q.queue_id): q.lag for q in progress},
            "raft leader": by_node("ferrymq_raft_is_leader")
            == {
                n.id: float(n.role == "voter" and _is_raft_leader(status, n))
                for n in cluster["plan"].nodes
            },
            "raft term": set(by_node("ferrymq_raft_term").values()) == {status.raft_term},
        }
        failed = sorted(k for k, ok in checks.items() if not ok)
        return (not failed and sum(q.lag for q in progress) > 0, failed)

    until(lambda: agree()[0], DEADLINE_S, "agreement of Prometheus with Admin")


def _is_raft_leader(status, node) -> bool:
    return status.raft_leader in (node.raft, node.id)


def alerts_of(prometheus) -> dict[tuple[str, str], str]:
    """(alert name, node or "") -> state, for the broker group's alerts not due to load."""
    return {
        (a["labels"]["alertname"], a["labels"].get("node", "")): a["state"]
        for a in prometheus.api("alerts")["alerts"]
        if a["labels"].get("broker_group", GROUP) == GROUP
        and a["labels"]["alertname"] not in LOAD_ALERTS
    }


def test_master_kill_raises_no_master_then_out_of_sync_until_the_set_refills(cluster):
    """kill -9 of the master, observed through the real rules (their ``for:`` durations
    are untouched: an alert is *pending* from the first evaluation its expression holds).

    - FerrymqNoMaster must be pending while no node of the group is master. Failover takes
      about a second, which can fall between two 1 s scrapes, so the test holds the window
      open: a second voter is paused (SIGSTOP) along with the kill, leaving no Raft
      majority to elect anyone; it is resumed once the alert is pending.
    - Then a slave is elected and FerrymqNoMaster clears. The in-sync set is now two of
      three: FerrymqReplicaOutOfSync goes pending. FerrymqGroupUnderReplicated must not:
      with min_insync_replicas=2 (the default) two in sync is enough, SYNC sends still
      succeed, and paging for it would be wrong.
    - The killed node is restarted, rejoins the in-sync set, and every alert of the group
      clears.
    """
    prometheus, access = cluster["prometheus"], cluster["access"]
    directory, plan = cluster["directory"], cluster["plan"]
    until(lambda: not alerts_of(prometheus), DEADLINE_S, "a quiet group before the kill")
    with Admin(access) as admin:
        (group,) = [g for g in admin.cluster_status().broker_groups if g.name == GROUP]
    master = next(n for n in plan.nodes if n.id == group.master)
    paused, survivor = [n for n in plan.nodes if n.id != master.id]
    t0 = time.monotonic()
    os.kill(master.pid, signal.SIGKILL)
    signal_node(paused.pid, signal.SIGSTOP)  # its routing host too: Raft loses a voter
    try:
        until(
            lambda: alerts_of(prometheus).get(("FerrymqNoMaster", "")) == "pending",
            DEADLINE_S,
            "FerrymqNoMaster pending",
        )
        no_master_s = time.monotonic() - t0
        state = alerts_of(prometheus)
        assert state.get(("FerrymqNodeDown", master.id)) == "pending", state
        assert ("FerrymqGroupUnderReplicated", "") not in state, state
    finally:
        signal_node(paused.pid, signal.SIGCONT)
    t1 = time.monotonic()

    def new_master() -> str:
        try:
            with Admin(survivor.grpc, timeout_s=2) as admin:
                status = admin.cluster_status()
        except Exception:  # routing still electing its leader
            return ""
        (g,) = [g for g in status.broker_groups if g.name == GROUP]
        return g.master if g.master and g.master != master.id else ""

    elected = until(new_master, DEADLINE_S, "a new master")
    elected_s = time.monotonic() - t1

    def after_failover():
        state = alerts_of(prometheus)
        return ("FerrymqNoMaster", "") not in state and state.get(
            ("FerrymqReplicaOutOfSync", "")
        ) == "pending"

    until(after_failover, DEADLINE_S, "NoMaster cleared and ReplicaOutOfSync pending")
    cleared_s = time.monotonic() - t1
    assert ("FerrymqGroupUnderReplicated", "") not in alerts_of(prometheus)
    role = prometheus.query('ferrymq_broker_role{role="master"} == 1')
    assert [r["metric"]["node"] for r in role] == [elected]
    t2 = time.monotonic()
    cluster_up(directory, nodes=3)  # restarts the killed node on its ports and data
    until(lambda: not alerts_of(prometheus), DEADLINE_S, "every alert of the group cleared")
    refilled_s = time.monotonic() - t2
    # The new master reports lag for both its slaves, the restarted one included.
    prometheus.wait_for(
        f'rocketmq_broker_commitlog_diff{{node="{elected}"}}',
        DEADLINE_S,
        lambda r: {x["metric"]["slave"] for x in r} == {n.id for n in plan.nodes} - {elected},
    )
    # Over the whole run the group never counted as under-replicated.
    history = prometheus.query('max_over_time(ALERTS{alertname="FerrymqGroupUnderReplicated"}[5m])')
    assert not history, history
    print(
        f"killed {master.id} (master), paused {paused.id}: NoMaster pending after"
        f" {no_master_s:.1f} s; {paused.id} resumed, {elected} master after"
        f" {elected_s:.1f} s, NoMaster cleared / ReplicaOutOfSync pending after"
        f" {cleared_s:.1f} s; {master.id} restarted, all clear after {refilled_s:.1f} s"
    )

"""bench.java_ceiling: the official Java 4.x client's windowed send reaches the no-op 4.x
broker (its routes, heartbeats and SEND_MESSAGE_V2, alone and relaying to two no-op
slaves) and a ferrymq node, and each run reports its rate and CPU by process; the
figures of a run are the medians of its rounds and the ratios of those."""

from __future__ import annotations

import pytest

from bench import java_ceiling
from tests.support import clients

pytestmark = pytest.mark.timeout(clients.INSTALL_TIMEOUT_S + 300)


def test_the_java_client_sends_through_the_no_op_broker_alone_and_relaying(tmp_path):
    for replicated in (False, True):
        with java_ceiling.noop(replicated) as target:
            run = java_ceiling.windowed_send(target, "NoopTopic", 600, str(tmp_path))
        assert run["msgs_per_s"] > 0
        assert run["cpu_us_per_msg_server"] > 0 and run["cpu_us_per_msg_client"] > 0
        # The relay copied every body to its slaves, which read and acknowledged it.
        assert (run["cpu_us_per_msg_slaves"] > 0) is replicated


def test_the_java_client_sends_to_one_ferrymq_node(tmp_path):
    with java_ceiling.ferrymq(1, ["CeilingTopic"]) as target:
        assert target.slaves == [] and target.server  # the node and its routing host
        run = java_ceiling.windowed_send(target, "CeilingTopic", 600, str(tmp_path))
    assert run["msgs_per_s"] > 0 and run["cpu_us_per_msg_server"] > 0


def test_a_run_reports_the_medians_of_its_rounds_and_their_ratios(monkeypatch):
    rates = {"noop": [10, 30, 20], "one_node": [5, 4, 6], "apache": [8, 2, 4]}
    calls, warmed = [], []

    class Started:
        def __init__(self, name, topics):
            self.name = name
            assert len(topics) == 4 and len(set(topics)) == 4  # fresh: each round, the warm-up

        def __enter__(self):
            return self.name

        def __exit__(self, *exc):
            return False

    def windowed_send(target, topic, count, home):
        if topic.endswith("WarmUp"):
            warmed.append(target)
            return {"msgs_per_s": 1000, "cpu_us_per_msg_server": 1000.0}  # counted nowhere
        calls.append(target)
        rate = rates.get(target, [1, 1, 1])[sum(1 for c in calls if c == target) - 1]
        return {"msgs_per_s": rate, "cpu_us_per_msg_server": 2.0 * rate}

    monkeypatch.setattr(java_ceiling, "started", Started)
    monkeypatch.setattr(java_ceiling, "windowed_send", windowed_send)

    figures = java_ceiling.measure(100, 3, list(java_ceiling.TARGETS))

    assert calls == [name for name in java_ceiling.TARGETS for _ in range(3)]  # in turn
    assert warmed == list(java_ceiling.TARGETS)  # each once, before its rounds
    assert figures["noop_windowed_send_msgs_per_s"] == 20
    assert figures["noop_cpu_us_per_msg_server"] == 40
    assert figures["one_node_noop_ratio"] == 0.25
    assert figures["one_node_apache_ratio"] == 1.25
    assert figures["sync_group_noop_replicated_ratio"] == 1.0
    calls.clear()
    only = java_ceiling.measure(100, 3, ["noop", "one_node"])
    assert calls == ["noop"] * 3 + ["one_node"] * 3
    assert only.keys().isdisjoint({"apache_windowed_send_msgs_per_s", "one_node_apache_ratio"})
    assert only["one_node_noop_ratio"] == 0.25

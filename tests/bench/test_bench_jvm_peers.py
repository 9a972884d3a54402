"""The JVM peers of bench.peers (Apache Kafka, Apache RocketMQ) without starting a JVM:
the configuration they generate, and a missing Java, Maven or artifact reported in one
line as the peer's reason for not being measured."""

from __future__ import annotations

import os
import stat

import pytest

from bench.peers import jvm, kafka_kraft, rocketmq_apache
from bench.peers.processes import ProcessRegistry
from bench.peers.run import PEERS, Settings, run_peer

ROOT = "/tmp/ferrymq-bench-test-root"


def test_kafka_nodes_are_combined_kraft_with_rf3_and_min_isr_2():
    nodes = [
        kafka_kraft.server_properties(i, [9101, 9102, 9103], [9201, 9202, 9203], ROOT)
        for i in range(3)
    ]
    for index, node in enumerate(nodes):
        assert node["process.roles"] == "broker,controller"
        assert node["node.id"] == str(index + 1)
        assert node["controller.quorum.voters"] == (
            "1@127.0.0.1:9201,2@127.0.0.1:9202,3@127.0.0.1:9203"
        )
        assert node["default.replication.factor"] == "3"
        assert node["offsets.topic.replication.factor"] == "3"
        assert node["min.insync.replicas"] == "2"
        assert node["unclean.leader.election.enable"] == "false"
        assert node["log.dirs"].startswith(ROOT + os.sep)
        assert f"127.0.0.1:{9101 + index}" in node["listeners"]
    assert len({node["log.dirs"] for node in nodes}) == 3
    rendered = kafka_kraft.render(nodes[0])
    assert "min.insync.replicas=2\n" in rendered


def test_one_kafka_node_alone_is_its_own_quorum_with_rf1():
    (node,) = [kafka_kraft.server_properties(0, [9101], [9201], ROOT)]
    assert node["controller.quorum.voters"] == "1@127.0.0.1:9201"
    assert node["default.replication.factor"] == "1"
    assert node["offsets.topic.replication.factor"] == "1"
    assert node["min.insync.replicas"] == "1"
    assert node["transaction.state.log.min.isr"] == "1"


def test_kafka_cluster_id_is_16_bytes_in_url_safe_base64():
    ids = {kafka_kraft.cluster_id() for _ in range(20)}
    assert len(ids) == 20
    assert all(len(i) == 22 and "=" not in i and "+" not in i and "/" not in i for i in ids)


def test_a_kafka_failure_says_what_its_log_says(tmp_path):
    """The logs go with the peer's temporary directory: a failure message carries the
    last ERROR line (else the last line) of the log, or why there is none."""
    log_path = tmp_path / "k1.log"
    log_path.write_text("INFO starting\nERROR Invalid cluster.id\nINFO stopped\n\n")
    assert kafka_kraft.last_news(str(log_path)) == "ERROR Invalid cluster.id"
    log_path.write_text("INFO starting\nINFO stopped\n")
    assert kafka_kraft.last_news(str(log_path)) == "INFO stopped"
    log_path.write_text("")
    assert kafka_kraft.last_news(str(log_path)) == "(empty)"
    assert kafka_kraft.last_news(str(tmp_path / "none.log")).startswith("(no log: ")


def test_rocketmq_brokers_are_one_group_in_controller_mode_acking_the_whole_sync_set():
    brokers = [
        rocketmq_apache.broker_properties(
            i, 10911 + 10 * i, 10912 + 10 * i, "127.0.0.1:9876", "127.0.0.1:9878", ROOT
        )
        for i in range(3)
    ]
    for broker in brokers:
        assert broker["brokerName"] == rocketmq_apache.GROUP
        assert broker["brokerId"] == "-1"
        assert broker["enableControllerMode"] == "true"
        assert broker["controllerAddr"] == "127.0.0.1:9878"
        assert broker["allAckInSyncStateSet"] == "true"
        assert broker["minInSyncReplicas"] == "1"
        assert broker["flushDiskType"] == "ASYNC_FLUSH"
        for key in ("storePathRootDir", "storePathCommitLog", "storePathEpochFile"):
            assert broker[key].startswith(ROOT + os.sep)
    assert len({b["storePathRootDir"] for b in brokers}) == 3
    controller = rocketmq_apache.namesrv_properties(9876, 9878, ROOT)
    assert controller["enableControllerInNamesrv"] == "true"
    assert controller["controllerDLegerPeers"] == "n0-127.0.0.1:9878"
    assert controller["controllerStorePath"].startswith(ROOT + os.sep)
    assert controller["enableElectUncleanMaster"] == "false"
    proxy = rocketmq_apache.proxy_config("127.0.0.1:9876", 8081, 8080)
    assert proxy["proxyMode"] == "cluster" and proxy["grpcServerPort"] == 8081


def test_jvm_processes_get_small_heaps_and_homes_under_the_temporary_directory():
    argv = jvm.java_argv(
        "/usr/bin/java",
        "/cache/lib",
        rocketmq_apache.MAIN["broker"],
        rocketmq_apache.HEAP_MB["broker"],
        ["-c", "broker.properties"],
        rocketmq_apache.home_properties(ROOT + "/b1"),
    )
    assert "-Xmx512m" in argv and "-Xms512m" in argv
    assert f"-Duser.home={ROOT}/b1" in argv
    assert argv[-3:] == [rocketmq_apache.MAIN["broker"], "-c", "broker.properties"]
    assert max(rocketmq_apache.HEAP_MB.values()) <= 512
    assert kafka_kraft.HEAP_MB <= 2048  # 10,000 partitions per broker in the topics part


def test_pom_lists_every_artifact():
    text = jvm.pom("rocketmq", rocketmq_apache.ARTIFACTS)
    for name in ("rocketmq-namesrv", "rocketmq-broker", "rocketmq-proxy", "rocketmq-controller"):
        assert f"<artifactId>{name}</artifactId><version>5.3.3</version>" in text


def fake_tool(directory, name: str, script: str) -> None:
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + script)
    os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)


def test_a_missing_java_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no java here
    with pytest.raises(jvm.JvmUnavailable) as raised:
        jvm.find_java()
    assert "\n" not in str(raised.value) and "java not found" in str(raised.value)


def test_an_unreachable_artifact_is_one_line(tmp_path, monkeypatch):
    fake_tool(
        tmp_path,
        "mvn",
        'echo "[INFO] Scanning for projects..."\n'
        'echo "[ERROR] Failed to execute goal on project kafka: Could not resolve '
        'dependencies: org.apache.kafka:kafka_2.13:jar:9.9.9 was not found"\n'
        'echo "[ERROR] -> [Help 1]"\nexit 1\n',
    )
    monkeypatch.setenv("PATH", str(tmp_path))
    artifact = jvm.Artifact("org.apache.kafka", "kafka_2.13", "9.9.9")
    with pytest.raises(jvm.JvmUnavailable) as raised:
        jvm.resolve("kafka", [artifact], cache=str(tmp_path / "cache"))
    message = str(raised.value)
    assert "\n" not in message
    assert "org.apache.kafka:kafka_2.13:9.9.9 not resolved" in message
    assert "was not found" in message
    assert not os.path.exists(tmp_path / "cache" / "kafka" / jvm.STAMP)


def test_resolved_artifacts_are_not_fetched_twice(tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    fake_tool(tmp_path, "mvn", f'echo run >> "{calls}"\nexit 0\n')
    monkeypatch.setenv("PATH", str(tmp_path))
    cache = str(tmp_path / "cache")
    lib = jvm.resolve("kafka", kafka_kraft.ARTIFACTS, cache=cache)
    assert jvm.resolve("kafka", kafka_kraft.ARTIFACTS, cache=cache) == lib
    assert calls.read_text() == "run\n"
    assert lib == os.path.join(cache, "kafka", "lib")


@pytest.mark.parametrize("name", ["kafka", "rocketmq", "rocketmq-shortest"])
def test_a_peer_without_java_is_reported_not_measured_in_one_line(name, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    spec = next(p for p in PEERS if p.name == name)
    found = run_peer(spec, Settings("smoke"), "")
    assert set(found) == set(spec.parts)  # every part it takes part in says why not
    if "workloads" in found:
        assert found["workloads"]["available"] is False
        assert "java not found" in found["workloads"]["unavailable_reason"]
    for part, figures in found.items():
        reason = figures["unavailable_reason"] if part == "workloads" else figures["error"]
        assert "java not found" in reason and "\n" not in reason


def test_registry_is_left_empty_after_a_jvm_peer_fails_to_start(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with ProcessRegistry("test", grace_s=1) as registry:
        with pytest.raises(jvm.JvmUnavailable):
            kafka_kraft.KafkaKraft().start(registry)
        assert registry.started == [] and registry.directories == []


def test_ferrymq_through_the_official_client_is_not_a_peer_in_the_ratios():
    from bench.peers import report
    from bench.peers.workloads import Figures

    peers = {
        "ferrymq": Figures("ferrymq", consume_msgs_per_s=100).to_json(),
        "ferrymq-official": Figures("ferrymq-official", consume_msgs_per_s=1000).to_json(),
        "rocketmq": Figures("rocketmq", consume_msgs_per_s=50).to_json(),
    }
    assert report.ratios(peers)["ratio_consume"]["best_peer"] == "rocketmq"
    assert report.ratios(peers)["ratio_consume"]["ratio"] == 2.0


class RecordingProducer:
    """confluent_kafka.Producer's calls that ``KafkaKraft`` makes: each produce is
    delivered at the next poll or flush."""

    made: list[RecordingProducer] = []

    def __init__(self, config: dict) -> None:
        self.config = config
        self.topics: list[str] = []
        self.waiting: list = []
        self.most_outstanding = 0
        RecordingProducer.made.append(self)

    def produce(self, topic: str, body: bytes, on_delivery) -> None:
        self.topics.append(topic)
        self.waiting.append(on_delivery)
        self.most_outstanding = max(self.most_outstanding, len(self.waiting))

    def poll(self, timeout: float) -> int:
        delivered, self.waiting = self.waiting, []
        for callback in delivered:
            callback(None, None)
        return len(delivered)

    def flush(self, timeout: float) -> int:
        self.poll(timeout)
        return 0


def test_kafka_spreads_over_topics_with_kafkas_ordinary_producer(monkeypatch):
    """The topics part once used the latency producer (linger 0, a million requests in
    flight): one request per message, each waiting for its replicas, 120 msgs/s over 1,000
    topics. It sends with Kafka's own defaults, the same 256 outstanding as the others."""
    monkeypatch.setattr(kafka_kraft, "Producer", RecordingProducer)
    RecordingProducer.made.clear()
    peer = kafka_kraft.KafkaKraft()
    names = ["Spread00000", "Spread00001", "Spread00002"]
    assert peer.spread_send(names, 600) > 0
    [producer] = RecordingProducer.made
    assert producer.config["acks"] == "all"
    assert producer.config["enable.idempotence"] is True
    assert producer.config["max.in.flight.requests.per.connection"] <= 5
    assert producer.config["linger.ms"] > 0
    assert producer.topics == names + names * 200  # one untimed each, then round-robin
    assert producer.most_outstanding == kafka_kraft.IN_FLIGHT


def test_kafkas_256_in_flight_sends_with_kafkas_ordinary_producer(monkeypatch):
    monkeypatch.setattr(kafka_kraft, "Producer", RecordingProducer)
    RecordingProducer.made.clear()
    peer = kafka_kraft.KafkaKraft()
    monkeypatch.setattr(peer, "_run", lambda workload: workload("bench1"))
    assert peer.inflight_send(1000, kafka_kraft.IN_FLIGHT) > 0
    [producer] = RecordingProducer.made
    assert {k: producer.config[k] for k in kafka_kraft.ORDINARY_PRODUCER} == (
        kafka_kraft.ORDINARY_PRODUCER
    )
    assert producer.topics == ["bench1"] * (kafka_kraft.WARMUP + 1000)
    assert producer.most_outstanding == kafka_kraft.IN_FLIGHT

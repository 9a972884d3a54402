"""Node metrics without Prometheus: families and labels, agreement with the Admin API, the
replication/routing provider interface, the HTTP endpoint, and a taken metrics port."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import grpc
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from deploy.local_stack import (
    DLQ_GROUP,
    POP_GROUP,
    PULL_GROUP,
    TOPIC,
    LocalNode,
    prepare,
    start_node,
)
from ferrymq.client import Admin, FerryError, Message, Producer, PullConsumer, SimpleConsumer
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2_grpc
from ha.status import ReplicationStatus
from node.config import load_node_config, parse_node_config
from node.consumer_offsets import ConsumerOffsets
from node.group_members import GroupMembers
from node.metrics import FAMILIES, NODE_LABELS, NodeMetrics, RoutingStatus
from node.pop_state import PopState
from node.topics import GroupConfig, TopicConfig, TopicTable
from store.config import StoreConfig
from store.message_store import MessageStore
from tests.support import ROOT
from tests.support.metrics import scrape, value
from tests.support.remoting_client import RemotingClient, send_v2

DEADLINE_S = 20.0


def exposed_name(family) -> str:
    # prometheus-client's parser names counter families without ``_total``.
    return family.name.removesuffix("_total") if family.kind == "counter" else family.name


@pytest.fixture(scope="module")
def metrics_node(tmp_path_factory):
    """A node as the monitoring stack starts it (``deploy.local_stack``), with its topic
    and groups."""
    started = start_node(str(tmp_path_factory.mktemp("metrics") / "node-1"), "node-1", "group-1")
    prepare(started.grpc)
    yield started
    started.stop()


@pytest.fixture(scope="module")
def traffic(metrics_node: LocalNode):
    """A fixed history: 10 batches of 20 sent; the pull group reads and commits 50, the POP
    group receives 12 and acks 6, the one-attempt group lets 4 go to its DLQ."""
    sent = pulled = popped = 0
    with RemotingClient(metrics_node.node.remoting) as client:  # the remoting families
        client.call(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"})
    with Producer(metrics_node.grpc) as producer:
        for batch in range(10):
            messages = [Message(TOPIC, b"m%03d-%02d" % (batch, i)) for i in range(20)]
            sent += len(producer.send_batch(messages))
    # No prefetch: a fetch sent ahead would count as delivered if the node served it
    # before the consumer closed, and the figures below must be exact.
    with PullConsumer(metrics_node.grpc, PULL_GROUP, batch_size=50, prefetch=False) as puller:
        puller.assign(TOPIC, [0])
        got = puller.poll(wait_s=0)
        pulled += len(got)
        puller.commit()
    with SimpleConsumer(metrics_node.grpc, POP_GROUP, TOPIC) as consumer:
        while popped < 12:
            received = consumer.receive(12 - popped, invisible_s=300, wait_s=1)
            for i, message in enumerate(received):
                if (popped + i) % 2 == 0:
                    consumer.ack(message)
            popped += len(received)
    dead = 0
    with (
        SimpleConsumer(metrics_node.grpc, DLQ_GROUP, TOPIC) as fragile,
        Admin(metrics_node.grpc) as admin,
    ):
        first = fragile.receive(4, invisible_s=1, wait_s=1)
        popped += len(first)
        deadline = time.monotonic() + DEADLINE_S
        # Once invisible again, the next receive dead-letters them (one attempt allowed).
        while dead < len(first):
            assert time.monotonic() < deadline, "messages did not reach the DLQ"
            popped += len(fragile.receive(4, invisible_s=300, wait_s=0.5))
            try:  # the DLQ topic is created by the first dead letter
                _, queues = admin.describe_topic(f"%DLQ%{DLQ_GROUP}")
            except FerryError:
                continue
            dead = sum(q.max_offset - q.min_offset for q in queues)
    return {"sent": sent, "delivered": pulled + popped, "dead": dead}


def test_every_family_is_exported_with_its_declared_labels(metrics_node, traffic):
    samples = scrape(metrics_node.metrics)
    for family in FAMILIES:
        name = exposed_name(family)
        if family.needs:
            # A standalone node has no slaves: no lag series, never a made-up value.
            assert name not in samples, f"{name} needs {family.needs}"
            continue
        assert samples.get(name), f"{name} is not exported"
        for sample in samples[name]:
            expected = {*NODE_LABELS, *family.labels}
            if sample.name.endswith("_bucket"):
                expected.add("le")
            assert set(sample.labels) == expected, (sample.name, sample.labels)
            assert (sample.labels["node"], sample.labels["broker_group"]) == ("node-1", "group-1")
    assert "process_resident_memory_bytes" in samples
    assert "python_gc_collections" in samples
    # A standalone node is its own master (first election: epoch 1), alone in sync, and
    # the only voter and leader of its routing.
    assert value(samples, "ferrymq_broker_role", role="master") == 1
    assert value(samples, "ferrymq_broker_role", role="slave") == 0
    assert value(samples, "ferrymq_broker_epoch") == 1
    assert value(samples, "ferrymq_insync_replicas") == 1
    assert value(samples, "ferrymq_raft_is_leader") == 1
    assert value(samples, "ferrymq_raft_voter") == 1


def test_metrics_agree_with_the_admin_api(metrics_node, traffic):
    samples = scrape(metrics_node.metrics)
    with Admin(metrics_node.grpc) as admin:
        for group in (PULL_GROUP, POP_GROUP, DLQ_GROUP):
            progress = admin.group_progress(group, TOPIC)
            for queue in progress:
                labels = {"group": group, "topic": TOPIC, "queue_id": str(queue.queue_id)}
                assert value(samples, "rocketmq_group_diff", **labels) == queue.lag, labels
                in_flight = value(samples, "rocketmq_consumer_inflight_messages", **labels)
                assert in_flight == queue.in_flight, labels
            consumed = sum(q.consumer_offset for q in progress)
            assert value(samples, "rocketmq_consumer_offset", group=group, topic=TOPIC) == consumed
        _, queues = admin.describe_topic(TOPIC)
        stored = sum(q.max_offset for q in queues)
        assert value(samples, "rocketmq_producer_offset", topic=TOPIC) == stored
        _, dlq_queues = admin.describe_topic(f"%DLQ%{DLQ_GROUP}")
        held = sum(q.max_offset - q.min_offset for q in dlq_queues)
        assert value(samples, "ferrymq_dlq_messages", group=DLQ_GROUP) == held == traffic["dead"]
        assert value(samples, "ferrymq_dlq_messages", group=PULL_GROUP) == 0
        assert value(samples, "rocketmq_topic_number") == len(admin.list_topics())
        assert value(samples, "rocketmq_consumer_group_number") == len(admin.list_groups())
    # Some lag and some in-flight state, so the equalities above compare real numbers.
    assert sum(s.value for s in samples["rocketmq_group_diff"]) > 0
    assert sum(s.value for s in samples["rocketmq_consumer_inflight_messages"]) > 0
    assert value(samples, "rocketmq_messages_in", topic=TOPIC) == traffic["sent"] == stored
    delivered = sum(s.value for s in samples["rocketmq_messages_out"] if s.name.endswith("_total"))
    assert delivered == traffic["delivered"]
    assert value(samples, "ferrymq_send_latency_seconds_count", status="OK") == 10
    # The SDK's sends, one request at a time on a node that needs no wait: every one
    # taken by the produce lane.
    assert value(samples, "ferrymq_produce_lane", outcome="taken") == 10
    assert value(samples, "ferrymq_produce_lane", outcome="declined") == 0
    # Requests as serialized: the bodies plus ids, timestamps and framing per message.
    body_bytes = traffic["sent"] * len(b"m000-00")
    stored_bytes = value(samples, "rocketmq_throughput_in", topic=TOPIC)
    assert body_bytes < stored_bytes < traffic["sent"] * 200


def test_lag_agrees_with_the_cli_json(metrics_node, traffic):
    """``ferrymq group progress --json``, what operators read, against the scrape."""
    samples = scrape(metrics_node.metrics)
    cli = [sys.executable, "-m", "ferrymq.cli", "group", "progress"]
    for group in (PULL_GROUP, POP_GROUP):
        answer = subprocess.run(
            [*cli, group, "--topic", TOPIC, "--server", metrics_node.grpc, "--json"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        for queue in json.loads(answer.stdout):
            labels = {"group": group, "topic": TOPIC, "queue_id": str(queue["queue_id"])}
            assert value(samples, "rocketmq_group_diff", **labels) == queue["lag"]
            assert (
                value(samples, "rocketmq_consumer_inflight_messages", **labels)
                == (queue["in_flight"])
            )


def test_unknown_names_never_become_labels(metrics_node, traffic):
    with grpc.insecure_channel(metrics_node.grpc) as channel:  # SendMessage itself, no route first
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        wire = pb.Message(
            topic=pb.Resource(name="no-such-topic"),
            body=b"x",
            system_properties=pb.SystemProperties(message_id="01", message_type=pb.NORMAL),
        )
        answer = stub.SendMessage(rpc.SendMessageRequest(messages=[wire]), timeout=10)
        assert answer.status.code == pb.TOPIC_NOT_FOUND
    # An unknown group with a legal name is created on first use (it is a group then);
    # one that cannot be created is refused and labels nothing.
    with (
        SimpleConsumer(metrics_node.grpc, "no-such.group", TOPIC) as consumer,
        pytest.raises(FerryError),
    ):
        consumer.receive(1, wait_s=0)
    samples = scrape(metrics_node.metrics)
    for family in samples.values():
        for sample in family:
            assert sample.labels.get("topic") != "no-such-topic", sample
            assert sample.labels.get("group") != "no-such.group", sample
    methods = {s.labels["method"] for s in samples["rocketmq_rpc_latency_seconds"]}
    assert {"SendMessage", "ReceiveMessage", "GroupProgress"} <= methods
    codes = {s.labels["status"] for s in samples["ferrymq_send_latency_seconds"]}
    assert codes == {"OK", "TOPIC_NOT_FOUND"}


def test_remoting_requests_are_counted_by_code_and_timed_and_connections_gauged(metrics_node):
    def requests(samples, request_code: str, response_code: str) -> float:
        return value(
            samples,
            "rocketmq_remoting_latency_seconds_count",
            request_code=request_code,
            response_code=response_code,
        )

    before = scrape(metrics_node.metrics)
    counts = {
        ("SEND_MESSAGE_V2", "SUCCESS"): 3,
        ("SEND_MESSAGE_V2", "TOPIC_NOT_EXIST"): 2,
        ("UNKNOWN", "REQUEST_CODE_NOT_SUPPORTED"): 2,
    }
    was = {key: _or_zero(requests, before, *key) for key in counts}
    with RemotingClient(metrics_node.node.remoting) as client:
        for i in range(3):
            assert send_v2(client, TOPIC, b"counted %d" % i).code == ResponseCode.SUCCESS
        for _ in range(2):
            assert send_v2(client, "no-such-topic", b"x").code == ResponseCode.TOPIC_NOT_EXIST
        for code in (777, 778):  # two unserved codes: one label, never their numbers
            assert client.call(code).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        with RemotingClient(metrics_node.node.remoting) as second:
            second.call(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"})
            during = scrape(metrics_node.metrics)
            assert value(during, "ferrymq_remoting_connections") == 2
    for key, added in counts.items():
        assert requests(during, *key) - was[key] == added, key
    assert not [
        s
        for s in during["rocketmq_remoting_latency_seconds"]
        if s.labels["request_code"] in ("777", "778")
    ]
    (all_sends,) = [
        s.value
        for s in during["rocketmq_remoting_latency_seconds"]
        if s.name.endswith("_bucket")
        and s.labels["le"] == "+Inf"
        and (s.labels["request_code"], s.labels["response_code"]) == ("SEND_MESSAGE_V2", "SUCCESS")
    ]
    assert all_sends == requests(during, "SEND_MESSAGE_V2", "SUCCESS")
    deadline = time.monotonic() + DEADLINE_S
    while value(scrape(metrics_node.metrics), "ferrymq_remoting_connections") != 0:
        assert time.monotonic() < deadline, "closed connections still gauged"
        time.sleep(0.05)


def _or_zero(read, samples, *labels) -> float:
    try:
        return read(samples, *labels)
    except AssertionError:  # no such series yet
        return 0.0


def test_http_endpoint_answers_only_metrics(metrics_node):
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(f"http://{metrics_node.metrics}/", timeout=5)
    assert error.value.code == 404
    request = urllib.request.Request(f"http://{metrics_node.metrics}/metrics", method="HEAD")
    with urllib.request.urlopen(request, timeout=5) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert answer.read() == b""


def test_a_scrape_that_names_samples_answers_those_alone(metrics_node, traffic):
    """``name[]``, as prometheus-client's own handlers take it: every family's series
    come back alone and whole, so each collector names what it serves (one that did not
    would be skipped)."""
    whole = scrape(metrics_node.metrics)
    for family in FAMILIES:
        if family.needs:
            continue
        name = exposed_name(family)
        series = {(s.name, tuple(sorted(s.labels.items()))) for s in whole[name]}
        asked = tuple(sorted({s.name for s in whole[name]}))
        alone = scrape(metrics_node.metrics, asked)
        assert set(alone) == {name}, (asked, set(alone))
        assert {(s.name, tuple(sorted(s.labels.items()))) for s in alone[name]} == series
    assert scrape(metrics_node.metrics, ("no_such_metric",)) == {}


def test_commitlog_offsets_match_the_data_directory(metrics_node, traffic):
    """Last in the module: stops the node, then opens its store to compare offsets."""
    samples = scrape(metrics_node.metrics)
    max_offset = value(samples, "rocketmq_brokeruntime_commitlog_maxoffset")
    assert value(samples, "ferrymq_commitlog_dispatched_offset") == max_offset
    assert value(samples, "rocketmq_storage_dispatch_behind_bytes") == 0
    assert value(samples, "ferrymq_commitlog_confirmed_offset") == max_offset
    assert 0 < value(samples, "rocketmq_brokeruntime_commitlog_disk_ratio") < 1
    metrics_node.stop()
    with open(os.path.join(metrics_node.data_dir, "node.toml"), encoding="utf-8") as f:
        effective = parse_node_config(f.read())  # the config the node ran with
    store = MessageStore.open(effective.store_config())
    try:
        assert store.commitlog.write_offset == max_offset
        assert store.commitlog.min_offset == value(
            samples, "rocketmq_brokeruntime_commitlog_minoffset"
        )
    finally:
        store.shutdown()


def test_replication_and_routing_feed_their_families(tmp_path):
    """The interface the replication and routing code will use: two status callables."""
    store = MessageStore.open(StoreConfig(str(tmp_path / "data"), commitlog_segment_bytes=8 << 20))
    try:
        topics = TopicTable([TopicConfig("orders", queue_count=2)], [GroupConfig("billing")])
        offsets, pop_state = ConsumerOffsets(store), PopState(store)
        metrics = NodeMetrics(
            "node-2", "group-1", store, topics, offsets, pop_state, GroupMembers()
        )
        metrics.replication_status = lambda: ReplicationStatus(
            role="slave",
            epoch=7,
            insync_replicas=2,
            min_insync_replicas=2,
            replicas=3,
            confirmed_offset=1234,
            slave_lag_bytes={"node-3": 4096},
        )
        metrics.routing_status = lambda: RoutingStatus(
            voter=True, leader="node-1", is_leader=False, term=5, commit_index=42
        )
        text = generate_latest(metrics.registry).decode()
        samples = {f.name: f.samples for f in text_string_to_metric_families(text)}
        assert value(samples, "ferrymq_broker_role", role="slave") == 1
        assert value(samples, "ferrymq_broker_role", role="master") == 0
        assert value(samples, "ferrymq_broker_epoch") == 7
        assert value(samples, "ferrymq_insync_replicas_min") == 2
        assert value(samples, "ferrymq_broker_group_replicas") == 3
        assert value(samples, "ferrymq_commitlog_confirmed_offset") == 1234
        assert value(samples, "rocketmq_broker_commitlog_diff", slave="node-3") == 4096
        assert value(samples, "ferrymq_raft_has_leader") == 1
        assert value(samples, "ferrymq_raft_is_leader") == 0
        assert value(samples, "ferrymq_raft_term") == 5
        assert value(samples, "ferrymq_raft_commit_index") == 42
        # Per-topic and per-group families come from the master only (no double counts).
        assert value(samples, "rocketmq_topic_number") == 1
        assert "rocketmq_producer_offset" not in samples
        assert "rocketmq_consumer_connections" not in samples
        metrics.replication_status = lambda: ReplicationStatus(role="master", replicas=3)
        text = generate_latest(metrics.registry).decode()
        samples = {f.name: f.samples for f in text_string_to_metric_families(text)}
        assert value(samples, "rocketmq_producer_offset", topic="orders") == 0
        assert "rocketmq_group_diff" not in samples  # nobody consumes yet
        assert value(samples, "ferrymq_metrics_collect_errors") == 0

        def broken() -> RoutingStatus:
            raise RuntimeError("routing bug")

        metrics.routing_status = broken  # the rest of the scrape still answers
        text = generate_latest(metrics.registry).decode()
        samples = {f.name: f.samples for f in text_string_to_metric_families(text)}
        assert value(samples, "ferrymq_metrics_collect_errors") == 1
        assert "ferrymq_raft_term" not in samples
        assert value(samples, "ferrymq_broker_group_replicas") == 3
    finally:
        store.shutdown()


def test_taken_metrics_port_leaves_the_node_serving(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = start_node(str(tmp_path / "node"), "node-9", "group-9", metrics_port=port)
        try:
            assert started.metrics == "off"
            with Admin(started.grpc) as admin:
                assert admin.list_topics() == []
        finally:
            started.stop()


def test_nodes_started_side_by_side_each_serve_their_own_metrics(nodes):
    """A node the launcher starts without a metrics port in its config asks the OS for one
    (``--metrics-port 0``), as it does for its remoting port: on 5557, the default, the
    second of two nodes served no /metrics (make test's workers start nodes side by side)."""
    assert load_node_config(None, metrics_port=0).ports.metrics == 0
    first, second = nodes(name="first"), nodes(name="second")
    assert first.metrics and second.metrics and first.metrics != second.metrics
    for node in (first, second):
        with urllib.request.urlopen(f"http://{node.metrics}/metrics", timeout=5) as answer:
            assert b"rocketmq_messages_in" in answer.read()

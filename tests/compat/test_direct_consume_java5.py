"""A stored message consumed directly by the official Java 5.x PushConsumer
(``rocketmq-client-java`` 5.2.0, unchanged) over its Telemetry stream
(``node/grpc/telemetry_verify.py``): the SDK's Admin asks the node holding the stream, the
node writes a ``verify_message_command``, the client's listener runs and its
``verify_message_result`` status comes back (OK: ``consumed``; FAILURE:
FAILED_TO_CONSUME_MESSAGE, ``failed``). The client is given every node; its stream is on
one of them, which the test finds as the console does: the nodes that do not hold it
answer CLIENT_NOT_MEMBER. Its listener sees nothing by ordinary delivery (it subscribes to
a tag the messages do not carry). The Go 5.x push consumer answers NOT_IMPLEMENTED, on a
new stream of its own."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from ferrymq.client import Admin, FerryError, Message, Producer
from ferrymq.launcher.polling import until
from tests.support import clients
from tests.support.cluster import client_cluster, stop_all
from tests.support.rpc import create_group, create_topic, stubs

pytestmark = pytest.mark.timeout(clients.INSTALL_TIMEOUT_S + 300)

TOPIC, GROUP, GO_GROUP = "jv-orders", "jv-verify", "jv-go"


@pytest.fixture(scope="module")
def java():
    return clients.required("java-grpc")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    made = client_cluster(str(tmp_path_factory.mktemp("java-verify") / "cluster"))
    channel, _, admin = stubs(made.address)
    try:
        create_topic(admin, TOPIC, queues=2)
        create_group(admin, GROUP)
        create_group(admin, GO_GROUP)
    finally:
        channel.close()
    yield made
    stop_all(made.plan)


def holder(cluster, client_id: str, message_id: str, group: str = GROUP):
    """The node holding the client's stream, and its first answer."""
    for node in cluster.plan.nodes:
        with Admin(node.grpc) as admin:
            try:
                return node, admin.consume_directly(group, TOPIC, message_id, client_id=client_id)
            except FerryError as error:
                if "CLIENT_NOT_MEMBER" not in str(error):
                    raise
    return None


def test_a_5x_push_consumer_consumes_a_stored_message_over_its_stream(java, cluster, tmp_path):
    with Producer(cluster.address) as producer:
        fine = producer.send(Message(TOPIC, b"direct", tag="stored"))
        poison = producer.send(Message(TOPIC, b"poison", tag="stored"))
    push = {
        "do": "push",
        "group": GROUP,
        "topic": TOPIC,
        "expression": "not-these",
        "fail": ["poison"],
        "expect": ["direct"],
        "deadline_s": 120,
    }
    spec = {"endpoints": cluster.endpoints, "steps": [push]}
    with ThreadPoolExecutor(1) as pool, Admin(cluster.address) as admin:
        running = pool.submit(clients.run, java, spec, tmp_path / "java", 240)
        (client_id,) = until(lambda: admin.group_members(GROUP), 90, "the Java consumer")
        node, consumed = until(
            lambda: holder(cluster, client_id, fine.message_id), 30, "the node of its stream"
        )
        with Admin(node.grpc) as there:
            failed = there.consume_directly(GROUP, TOPIC, poison.message_id)
        run = running.result()
    assert all(e["all_seen"] for e in run.of("push_waited")), run.explain()
    assert (consumed.outcome, consumed.client_answer, consumed.protocol) == (
        "consumed",
        "OK",
        "grpc",
    ), consumed
    assert (failed.outcome, failed.client_answer, failed.client_id) == (
        "failed",
        "FAILED_TO_CONSUME_MESSAGE",
        client_id,
    ), failed
    seen = {e["body"]: e for e in run.of("consumed")}
    assert set(seen) == {"direct", "poison"}, run.explain()  # nothing by ordinary delivery
    assert seen["direct"]["id"] == fine.message_id and seen["direct"]["topic"] == TOPIC


def test_the_go_5x_push_consumer_answers_not_implemented(cluster, tmp_path):
    """The Go 5.x client (rocketmq-clients/golang v5) answers every verify_message_command
    NOT_IMPLEMENTED, its push consumer's too: ``not_supported``, its listener not run."""
    go = clients.required("go-grpc")
    with Producer(cluster.address) as producer:
        sent = producer.send(Message(TOPIC, b"for go", tag="stored"))
    push = {
        "do": "push",
        "group": GO_GROUP,
        "topic": TOPIC,
        "expression": "not-these",
        "expect": ["never sent"],
        "deadline_s": 20,
    }
    spec = {"endpoints": cluster.endpoints, "steps": [push]}
    with ThreadPoolExecutor(1) as pool, Admin(cluster.address) as admin:
        running = pool.submit(clients.run, go, spec, tmp_path / "go", 120)
        (client_id,) = until(lambda: admin.group_members(GO_GROUP), 60, "the Go consumer")
        _, answered = until(
            lambda: holder(cluster, client_id, sent.message_id, GO_GROUP), 30, "its stream"
        )
        run = running.result()
    assert (answered.outcome, answered.client_answer) == ("not_supported", "NOT_IMPLEMENTED")
    assert run.of("consumed") == [], run.explain()

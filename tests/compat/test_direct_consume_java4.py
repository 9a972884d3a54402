"""A stored message consumed directly by the official Java 4.x DefaultMQPushConsumer (4.9.8,
unchanged) and the Go client's push consumer (rocketmq-client-go v2), as RocketMQ
Dashboard's "resend message" to a group does it (``node/services/direct_consume.py``): the
SDK's Admin asks the node, the node sends CONSUME_MESSAGE_DIRECTLY over the client's
connection, the client's listener runs on the message and its ConsumeMessageDirectlyResult
comes back to the Admin call.

The consumer subscribes with a tag the messages do not carry, so ordinary delivery gives it
nothing: what its listener sees came directly. One message it consumes (CR_SUCCESS:
``consumed``), one it fails (RECONSUME_LATER: CR_LATER, ``later``); nothing is stored, so
the group's position on the topic does not move."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from ferrymq.client import Admin, FerryError, Message, Producer
from ferrymq.launcher.polling import until
from tests.support import clients
from tests.support.cluster import stop_all
from tests.support.remoting_client import cluster_with_resources

pytestmark = pytest.mark.timeout(clients.INSTALL_TIMEOUT_S + 600)

TOPIC, GROUP = "jd-orders", "jd-verify"


@pytest.fixture(scope="module")
def java():
    return clients.required("java-remoting")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    directory = tmp_path_factory.mktemp("java-direct") / "cluster"
    made = cluster_with_resources(str(directory), "jd", ("orders",), ("verify",))
    yield made
    stop_all(made.plan)


@pytest.mark.parametrize("family", ["java-remoting", "go-remoting"])
def test_a_4x_push_consumer_consumes_a_stored_message_directly(family, cluster, tmp_path):
    """The Java 4.x DefaultMQPushConsumer and the Go client's push consumer (which answers
    CMResult's ordinal) alike."""
    driver = clients.required(family)
    with Producer(cluster.address) as producer:
        fine = producer.send(Message(TOPIC, b"direct", tag="stored"))
        poison = producer.send(Message(TOPIC, b"poison", tag="stored"))
    push = {
        "do": "push",
        "group": GROUP,
        "topic": TOPIC,
        "expression": "not-these",
        "fail": ["poison"],
        "fail_attempts": 1,
        "expect": ["direct"],
        "deadline_s": 120,
    }
    namesrv = cluster.namesrv if family == "java-remoting" else cluster.namesrv_list
    spec = {"namesrv": namesrv, "steps": [push]}
    with ThreadPoolExecutor(1) as pool, Admin(cluster.address) as admin:
        running = pool.submit(clients.run, driver, spec, tmp_path / "client", 300)
        (client_id,) = until(lambda: admin.group_members(GROUP), 90, "the consumer")
        consumed = admin.consume_directly(GROUP, TOPIC, fine.message_id)
        later = admin.consume_directly(GROUP, TOPIC, poison.message_id, client_id=client_id)
        with pytest.raises(FerryError, match="CLIENT_NOT_MEMBER"):
            admin.consume_directly(GROUP, TOPIC, fine.message_id, client_id="nobody@1")
        run = running.result()
    assert all(e["all_seen"] for e in run.of("push_waited")), run.explain()
    assert (consumed.outcome, consumed.client_answer) == ("consumed", "CR_SUCCESS"), consumed
    assert (consumed.client_id, consumed.protocol) == (client_id, "remoting")
    assert consumed.spent_ms >= 0 and consumed.topic == TOPIC
    assert (later.outcome, later.client_answer) == ("later", "CR_LATER"), later
    seen = {e["body"]: e for e in run.of("consumed")}
    assert set(seen) == {"direct", "poison"}, run.explain()  # nothing by ordinary delivery
    # The 4.x client decodes the record as RocketMQ's broker relays it: its offset message
    # id is the one the result names, the producer's id its UNIQ_KEY property.
    offset_id = seen["direct"]["id" if family == "java-remoting" else "offset_id"]
    assert offset_id == consumed.message_id and seen["direct"]["topic"] == TOPIC
    assert seen["direct"]["properties"]["UNIQ_KEY"] == fine.message_id


@pytest.fixture(scope="module")
def mqadmin():
    return clients.required("mqadmin")


def test_mqadmin_pushes_a_message_to_the_4x_push_consumer(java, mqadmin, cluster, tmp_path):
    """``mqadmin queryMsgById -g -d`` (rocketmq-tools 5.x): GET_CONSUMER_RUNNING_INFO passed
    on to the client (a push consumer?), then CONSUME_MESSAGE_DIRECTLY to the node that
    stores the message, which hands it to the client; mqadmin prints the client's result."""
    with Producer(cluster.address) as producer:
        sent = producer.send(Message(TOPIC, b"by mqadmin", tag="stored"))
    push = {
        "do": "push",
        "group": GROUP,
        "topic": TOPIC,
        "expression": "not-these",
        "expect": ["by mqadmin"],
        "deadline_s": 120,
    }
    spec = {"namesrv": cluster.namesrv, "steps": [push]}
    with ThreadPoolExecutor(1) as pool, Admin(cluster.address) as admin:
        (found,) = admin.query_by_id(sent.message_id, TOPIC)
        running = pool.submit(clients.run, java, spec, tmp_path / "java", 300)
        (client_id,) = until(lambda: admin.group_members(GROUP), 90, "the Java consumer")
        command = ["queryMsgById", "-t", TOPIC, "-i", found.offset_message_id]
        command += ["-g", GROUP, "-d", client_id]
        asked = {"namesrv": cluster.namesrv, "commands": [command]}
        tool = clients.run(mqadmin, asked, tmp_path / "mqadmin", 120, check_done=False)
        run = running.result()
    (said,) = tool.of("command")
    assert "consumeResult=CR_SUCCESS" in said["output"], tool.explain()
    assert all(e["all_seen"] for e in run.of("push_waited")), run.explain()
    (consumed,) = run.of("consumed")
    assert consumed["body"] == "by mqadmin" and consumed["id"] == found.offset_message_id

"""The official remoting client in its 5.x line (``rocketmq-client`` 5.5.0, the 4.x protocol),
unchanged, against a real ferrymq cluster of 3 nodes over their remoting ports
(``tests/compat/java/remoting5``; the rest of the 4.x matrix is
``test_compat_java_remoting.py``'s, on 4.9.8):

- a send and a push consumer; every request the client makes is served (its log names any
  the node answered as unknown: its DefaultLitePullConsumer pulls with LITE_PULL_MESSAGE,
  which the node once did not serve);
- **priority** (5.4): ``Message.setPriority`` to a PRIORITY topic of 4 queues puts each
  message on the queue its priority names (the last queue for a higher one); a POP receive
  through the other door takes the highest first;
- **recall** (5.3.2): a message sent with ``setDeliverTimeMs`` answers a recall handle;
  ``DefaultMQProducer.recallMessage`` cancels it before its time (a second recall is
  answered the same), and its twin arrives. A handle as Apache RocketMQ writes one (no MAC)
  is refused: ferrymq's handles are signed (docs/architecture.md).
"""

from __future__ import annotations

import pytest

from ferrymq.client import SimpleConsumer
from ferrymq.protocol.ferrymq import admin_pb2 as api
from tests.support import clients
from tests.support.cluster import client_cluster, stop_all, topic_everywhere
from tests.support.rpc import create_group, create_topic, stubs

pytestmark = pytest.mark.timeout(clients.INSTALL_TIMEOUT_S + 300)

PRIORITIES = [0, 3, 1, 2, 3, 7]
DELAY_MS = 15000


@pytest.fixture(scope="module")
def java():
    return clients.required("java-remoting5")


@pytest.fixture(scope="module")
def module_node(tmp_path_factory):
    cluster = client_cluster(str(tmp_path_factory.mktemp("java-remoting5") / "cluster"))
    channel, _, admin = stubs(cluster.address)
    try:
        create_topic(admin, "j5-priority", queues=4, message_type=api.PRIORITY)
        create_topic(admin, "j5-delay", queues=4, message_type=api.MESSAGE_TYPE_UNSPECIFIED)
        create_topic(admin, "j5-normal", queues=4, message_type=api.NORMAL)
        for group in ("j5-priority", "j5-delay", "j5-normal"):
            create_group(admin, group)
    finally:
        channel.close()
    for topic in ("j5-priority", "j5-delay", "j5-normal"):
        topic_everywhere(cluster.plan, topic)
    yield cluster
    stop_all(cluster.plan)


def test_java_5x_remoting_client_priority_and_recall(java, module_node, tmp_path):
    prioritized = [
        {"topic": "j5-priority", "body": f"m{i}-p{p}", "priority": p}
        for i, p in enumerate(PRIORITIES)
    ]
    normal = [{"topic": "j5-normal", "body": f"n-{i}", "keys": [f"k{i}"]} for i in range(6)]
    delayed = [
        {"topic": "j5-delay", "body": body, "deliver_in_ms": DELAY_MS} for body in ("gone", "kept")
    ]
    steps = [
        {"do": "produce", "group": "j5-producer", "messages": normal + prioritized + delayed},
        {"do": "recall", "topic": "j5-delay", "body": "kept", "unsigned": True},
        {"do": "recall", "topic": "j5-delay", "body": "gone"},
        {"do": "recall", "topic": "j5-delay", "body": "gone"},
        {
            "do": "pull",
            "group": "j5-delay",
            "topic": "j5-delay",
            "expect": ["kept"],
            "deadline_s": 60,
            "linger_s": 3,
        },
        {
            "do": "push",
            "group": "j5-normal",
            "topic": "j5-normal",
            "expect": [m["body"] for m in normal],
            "deadline_s": 60,
        },
    ]
    spec = {"namesrv": module_node.namesrv, "steps": steps}
    run = clients.run(java, spec, tmp_path / "home", 300)
    assert not run.of("step_failed") and not run.of("send_failed"), run.explain()
    sent = clients.first_of(run.of("sent"))
    # Every request this client made was served (it logs any the node refused as unknown).
    client_log = (tmp_path / "home/logs/rocketmqlogs/rocketmq_client.log").read_text()
    assert "not supported" not in client_log, client_log[-4000:]

    # A normal send and a push consumer, as the 4.x client's (test_compat_java_remoting.py).
    consumed = clients.first_of(run.of("consumed"))
    assert {e["body"]: e["id"] for e in consumed.values()} == {
        m["body"]: sent[m["body"]]["id"] for m in normal
    }
    assert all(e["all_seen"] for e in run.of("push_waited")), run.explain()

    # Priority: the queue is the priority, the last queue (3) for 7.
    assert [sent[m["body"]]["queue"] for m in prioritized] == [0, 3, 1, 2, 3, 3], run.explain()
    with SimpleConsumer(module_node.address, "j5-priority", "j5-priority") as consumer:
        got = consumer.receive(max_messages=16, invisible_s=30, wait_s=2)
    assert [m.queue_id for m in got] == [3, 3, 3, 2, 1, 0], got
    assert [m.body.decode() for m in got] == ["m1-p3", "m4-p3", "m5-p7", "m3-p2", "m2-p1", "m0-p0"]
    assert [m.priority for m in got] == [3, 3, 7, 2, 1, 0], got

    # Recall: each timer message's send answered a handle; the unsigned one is refused
    # (ILLEGAL_OPERATION); the signed one recalls "gone", and again (a client's retry is
    # answered the same); only "kept" arrives, not before its time.
    assert sent["gone"]["recall_handle"] and sent["kept"]["recall_handle"]
    refused_all = run.of("recall_failed")
    assert len(refused_all) == 1, run.explain()
    (refused,) = refused_all
    assert refused["body"] == "kept" and "CODE: 604" in refused["message"], refused
    assert "not one this cluster issued" in refused["message"], refused
    recalled = run.of("recalled")
    assert [e["id"] for e in recalled] == [sent["gone"]["id"]] * 2, run.explain()
    assert all(e["all_seen"] for e in run.of("pull_waited")), run.explain()
    pulled = run.of("pulled")
    assert [e["body"] for e in pulled] == ["kept"], pulled
    assert pulled[0]["id"] == sent["kept"]["id"]
    assert pulled[0]["at_ms"] >= sent["kept"]["at_ms"] + DELAY_MS, (pulled, sent["kept"])

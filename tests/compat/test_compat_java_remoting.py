"""The official Java 4.x client (``rocketmq-client`` 4.9.8), unchanged, against a real
ferrymq cluster of 3 nodes over their remoting ports: ``namesrvAddr`` names every node.

One driver run (``tests/compat/java/remoting4``, one JVM) does every step in turn:
DefaultMQProducer sync, async, oneway, batch, orderly (MessageQueueSelector) and with a
delay level; DefaultMQPushConsumer concurrently, orderly, with a delay-level message, a
concurrent consumer that fails a message (RECONSUME_LATER: retries through
``%RETRY%<group>``, then ``%DLQ%<group>``), an orderly one that suspends (local retries,
then DLQ), broadcasting with two instances; DefaultLitePullConsumer. The node's delay
levels are short (level 2 = 2 s, the others 1 s) so retries come back in a second.
"""

from __future__ import annotations

import pytest

from tests.support import clients
from tests.support.cluster import stop_all
from tests.support.remoting_client import cluster_with_resources, queue_records

pytestmark = pytest.mark.timeout(clients.INSTALL_TIMEOUT_S + 600)

TOPICS = ("kinds", "orderly", "delay", "retry", "oretry", "bcast", "lite")
GROUPS = ("kinds", "orderly", "delay", "retry", "oretry", "bcast", "lite")


@pytest.fixture(scope="module")
def java():
    return clients.required("java-remoting")


@pytest.fixture(scope="module")
def module_node(tmp_path_factory):
    """This module's 3 nodes: short delay levels, its topics and groups; the client is
    given every node as a NameServer, the test's checks read from the master."""
    directory = tmp_path_factory.mktemp("java-remoting") / "cluster"
    cluster = cluster_with_resources(str(directory), "j4", TOPICS, GROUPS)
    yield cluster
    stop_all(cluster.plan)


def test_java_4x_producer_and_consumers(java, module_node, tmp_path):
    kinds = [
        {
            "topic": "j4-kinds",
            "body": f"{mode}-{i}",
            "tags": f"Tag{i}",
            "keys": [f"k-{mode}-{i}", "shared"],
            "properties": {"color": f"c{i}", "unicode": "ü-✓"},
            "mode": mode,
        }
        for mode in ("sync", "async", "oneway")
        for i in range(2)
    ]
    orderly = [
        {"topic": "j4-orderly", "body": f"{key}-{i}", "order_key": key}
        for i in range(4)
        for key in ("order-a", "order-b")
    ]
    batch = [{"topic": "j4-kinds", "body": f"batch-{i}", "keys": [f"kb-{i}"]} for i in range(3)]
    others = (
        [{"topic": "j4-delay", "body": "delayed", "delay_level": 2}]
        + [{"topic": "j4-retry", "body": b, "keys": [b]} for b in ("r-ok", "r-poison")]
        + [
            {"topic": "j4-oretry", "body": f"o-{i}", "order_key": "one", "keys": [f"o-{i}"]}
            for i in range(3)
        ]
        + [{"topic": "j4-bcast", "body": f"b-{i}"} for i in range(3)]
        + [{"topic": "j4-lite", "body": f"l-{i}"} for i in range(5)]
    )
    steps = [
        {"do": "produce", "group": "j4-producer", "messages": kinds + orderly + others},
        {"do": "produce", "group": "j4-producer", "batch": True, "messages": batch},
        {
            "do": "push",
            "group": "j4-kinds",
            "topic": "j4-kinds",
            "expect": [m["body"] for m in kinds + batch],
            "deadline_s": 60,
        },
        {
            "do": "push",
            "group": "j4-orderly",
            "topic": "j4-orderly",
            "orderly": True,
            "expect": [m["body"] for m in orderly],
            "deadline_s": 60,
        },
        {"do": "push", "group": "j4-delay", "topic": "j4-delay", "expect": ["delayed"]},
        {
            "do": "push",
            "group": "j4-retry",
            "topic": "j4-retry",
            "max_reconsume": 2,
            "fail": ["r-poison"],
            "fail_attempts": 3,
            "expect": ["r-ok"],
            "deadline_s": 60,
            "linger_s": 2,
        },
        {
            "do": "push",
            "group": "j4-oretry",
            "topic": "j4-oretry",
            "orderly": True,
            "max_reconsume": 2,
            "fail": ["o-1"],
            "fail_attempts": 3,
            "expect": ["o-0", "o-2"],
            "deadline_s": 60,
            "linger_s": 2,
        },
        {
            "do": "push",
            "group": "j4-bcast",
            "topic": "j4-bcast",
            "broadcast": True,
            "instances": 2,
            "expect": [f"b-{i}" for i in range(3)],
        },
        {
            "do": "lite_pull",
            "group": "j4-lite",
            "topic": "j4-lite",
            "expect": [f"l-{i}" for i in range(5)],
        },
    ]
    spec = {"namesrv": module_node.namesrv, "steps": steps}
    run = clients.run(java, spec, tmp_path / "java-home", 600)
    assert not run.of("step_failed") and not run.of("send_failed"), run.explain()
    assert all(e["all_seen"] for e in run.of("push_waited") + run.of("pull_waited")), run.explain()
    sent, consumed = clients.first_of(run.of("sent")), run.of("consumed")
    got = clients.first_of(consumed)

    # Every way of sending: consumed with the id, tags, keys and properties it was sent with.
    for m in kinds:
        seen = got[m["body"]]
        assert seen["id"] == sent[m["body"]]["id"] and seen["tags"] == m["tags"], seen
        assert sorted(seen["keys"]) == sorted(m["keys"]), seen
        assert {k: seen["properties"][k] for k in m["properties"]} == m["properties"]
    batch_ids = {sent[m["body"]]["id"] for m in batch}
    assert len(batch_ids) == 3 and batch_ids == {got[m["body"]]["id"] for m in batch}

    # Orderly: one queue per key, consumed in the order sent.
    for key in ("order-a", "order-b"):
        bodies = [f"{key}-{i}" for i in range(4)]
        assert len({sent[b]["queue"] for b in bodies}) == 1
        assert [e["body"] for e in consumed if e["body"].startswith(key)] == bodies

    # Delay level 2 (2 s on this node): not consumed before.
    (delayed,) = [e for e in consumed if e["body"] == "delayed"]
    assert delayed["received_at"] - delayed["born_timestamp"] >= 1900, delayed
    assert delayed["topic"] == "j4-delay" and delayed["id"] == sent["delayed"]["id"]

    # Concurrently: RECONSUME_LATER retried through %RETRY%j4-retry (the client shows the
    # original topic and id), reconsumed 0, 1, 2 times, then dead-lettered.
    poison = [e for e in consumed if e["body"] == "r-poison"]
    assert [e["reconsume_times"] for e in poison] == [0, 1, 2], poison
    assert {e["topic"] for e in poison} == {"j4-retry"}
    assert {e["id"] for e in poison} == {sent["r-poison"]["id"]}
    for retried in poison[1:]:  # handed back by CONSUMER_SEND_MSG_BACK, not the client's resend
        assert retried["properties"]["REAL_TOPIC"] == "%RETRY%j4-retry", retried
        assert retried["properties"]["RETRY_TOPIC"] == "j4-retry", retried
        assert "MAX_RECONSUME_TIMES" not in retried["properties"], retried
    assert [e["body"] for e in consumed if e["body"] == "r-ok"] == ["r-ok"]
    dead = queue_records(module_node.remoting, "%DLQ%j4-retry", "j4-retry")
    assert [r.body for r in dead] == [b"r-poison"] and dead[0].reconsume_times == 3
    assert dead[0].properties["RETRY_TOPIC"] == "j4-retry"

    # Orderly: SUSPEND retried in place (order kept), then sent to the DLQ by the client.
    oretry = [e for e in consumed if e["topic"] == "j4-oretry"]
    assert [e["body"] for e in oretry if not e["failed"]] == ["o-0", "o-2"], oretry
    assert [e["body"] for e in oretry if e["failed"]] == ["o-1"] * 3, oretry
    assert [r.body for r in queue_records(module_node.remoting, "%DLQ%j4-oretry", "j4-oretry")] == [
        b"o-1"
    ]

    # Broadcasting: each of the two instances gets every message (offsets client-side).
    bcast = [e for e in consumed if e["topic"] == "j4-bcast"]
    instances = {e["instance"] for e in bcast}
    assert len(instances) == 2
    for name in instances:
        assert sorted(e["body"] for e in bcast if e["instance"] == name) == ["b-0", "b-1", "b-2"]

    # DefaultLitePullConsumer.
    assert sorted(e["body"] for e in run.of("pulled")) == [f"l-{i}" for i in range(5)]

"""A dead letter resent to its group (``node/services/dead_letter_resend.py``) reaches the
group's RocketMQ 4.x push consumer, the official Java client 4.9.8 unchanged (through the
``%RETRY%<group>`` copy it subscribes to), as a message of the topic it was sent to with its
message id and no reconsume times, and not the other group of the topic.

Two driver runs on a 3-node cluster with short delay levels: the first produces, lets the
group fail one message until the client dead-letters it, and lets the other group consume
both; the SDK's Admin resends the dead letter; the second run's consumers of both groups
then see what comes."""

from __future__ import annotations

import pytest

from ferrymq.client import Admin
from ferrymq.launcher.polling import until
from tests.support import clients
from tests.support.cluster import stop_all
from tests.support.remoting_client import cluster_with_resources

pytestmark = pytest.mark.timeout(clients.INSTALL_TIMEOUT_S + 600)

TOPIC, GROUP, OTHERS = "jr-orders", "jr-failing", "jr-others"


@pytest.fixture(scope="module")
def java():
    return clients.required("java-remoting")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    directory = tmp_path_factory.mktemp("java-resend") / "cluster"
    made = cluster_with_resources(str(directory), "jr", ("orders",), ("failing", "others"))
    yield made
    stop_all(made.plan)


def test_a_resent_dead_letter_reaches_the_groups_4x_push_consumer_only(java, cluster, tmp_path):
    first = [
        {
            "do": "produce",
            "group": "jr-producer",
            "messages": [
                {"topic": TOPIC, "body": body, "keys": [body]} for body in ("fine", "poison")
            ],
        },
        {
            "do": "push",
            "group": GROUP,
            "topic": TOPIC,
            "max_reconsume": 1,
            "fail": ["poison"],
            "fail_attempts": 2,
            "expect": ["fine"],
            "deadline_s": 60,
            "linger_s": 2,
        },
        {"do": "push", "group": OTHERS, "topic": TOPIC, "expect": ["fine", "poison"]},
    ]
    spec = {"namesrv": cluster.namesrv, "steps": first}
    run = clients.run(java, spec, tmp_path / "first", 300)
    assert all(e["all_seen"] for e in run.of("push_waited")), run.explain()
    sent = clients.first_of(run.of("sent"))

    with Admin(cluster.address) as admin:
        entries = until(lambda: admin.dead_letters(GROUP).entries, 30, "the dead letter")
        (dead,) = entries
        assert dead.message_id == sent["poison"]["id"] and dead.origin_topic == TOPIC
        assert admin.resend_dead_letters(GROUP, [dead.offset]).resent == (dead.offset,)

    second = [
        {"do": "push", "group": GROUP, "topic": TOPIC, "expect": ["poison"], "deadline_s": 60},
        {"do": "push", "group": OTHERS, "topic": TOPIC, "expect": [], "linger_s": 3},
    ]
    run = clients.run(java, {"namesrv": cluster.namesrv, "steps": second}, tmp_path / "second", 300)
    assert all(e["all_seen"] for e in run.of("push_waited")), run.explain()
    consumed = run.of("consumed")
    (again,) = consumed  # the group's consumer, once; the other group nothing
    assert again["body"] == "poison" and again["topic"] == TOPIC, again
    assert again["id"] == sent["poison"]["id"] and again["reconsume_times"] == 0, again
    assert again["keys"] == ["poison"] and again["properties"]["RETRY_TOPIC"] == TOPIC, again
    assert not any(k.startswith("DLQ_ORIGIN") for k in again["properties"]), again

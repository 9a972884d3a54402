"""``ali-ons`` 3.12.0 (npm, pure JavaScript), unchanged, against a real 3-node ferrymq cluster over
their remoting ports (every node a NameServer).

One driver run (``tests/compat/alions``): the producer with tags, keys, properties and a
delay level; push consumers of those, one whose handler throws for a message (retries
through ``%RETRY%<group>``, then ``%DLQ%<group>``), and a broadcasting pair. The node's
delay levels are short (level 2 = 2 s, the others 1 s).
"""

from __future__ import annotations

import pytest

from tests.support import clients
from tests.support.client_drivers import check_master_kill
from tests.support.cluster import stop_all
from tests.support.remoting_client import cluster_with_resources, queue_records

pytestmark = pytest.mark.timeout(clients.INSTALL_TIMEOUT_S + 600)

NAMES = ("kinds", "delay", "retry", "bcast")


@pytest.fixture(scope="module")
def alions():
    return clients.required("alions")


@pytest.fixture(scope="module")
def module_node(tmp_path_factory):
    """This module's 3 nodes: short delay levels, its topics and groups; the client is
    given every node as a NameServer, the test's checks read from the master."""
    directory = tmp_path_factory.mktemp("alions") / "cluster"
    cluster = cluster_with_resources(str(directory), "ons", NAMES, NAMES)
    yield cluster
    stop_all(cluster.plan)


def test_alions_producer_and_push_consumers(alions, module_node, tmp_path):
    kinds = [
        {
            "topic": "ons-kinds",
            "body": f"m-{i}",
            "tags": f"Tag{i}",
            "keys": [f"k-{i}", "shared"],
            "properties": {"color": f"c{i}"},
        }
        for i in range(3)
    ]
    steps = [
        {
            "do": "produce",
            "group": "ons-producer",
            "messages": kinds
            + [{"topic": "ons-delay", "body": "delayed", "delay_level": 2}]
            + [{"topic": "ons-retry", "body": b, "keys": [b]} for b in ("r-ok", "r-poison")]
            + [{"topic": "ons-bcast", "body": f"b-{i}"} for i in range(3)],
        },
        {"do": "push", "group": "ons-kinds", "topic": "ons-kinds", "expect": ["m-0", "m-1", "m-2"]},
        {"do": "push", "group": "ons-delay", "topic": "ons-delay", "expect": ["delayed"]},
        {
            "do": "push",
            "group": "ons-retry",
            "topic": "ons-retry",
            "max_reconsume": 2,
            "fail": ["r-poison"],
            "fail_attempts": 3,
            "expect": ["r-ok"],
            "deadline_s": 60,
            "linger_s": 2,
        },
        {
            "do": "push",
            "group": "ons-bcast",
            "topic": "ons-bcast",
            "broadcast": True,
            "instances": 2,
            "expect": [f"b-{i}" for i in range(3)],
        },
    ]
    spec = {"namesrv": module_node.namesrv_list, "steps": steps}
    run = clients.run(alions, spec, tmp_path / "alions-home", 600)
    assert not run.of("step_failed") and not run.of("send_failed"), run.explain()
    assert all(e["all_seen"] for e in run.of("push_waited")), run.explain()
    sent, consumed = clients.first_of(run.of("sent")), run.of("consumed")
    got = clients.first_of(consumed)

    for m in kinds:
        seen = got[m["body"]]
        assert seen["tags"] == m["tags"] and sorted(seen["keys"]) == sorted(m["keys"]), seen
        assert seen["properties"].get("color") == m["properties"]["color"], seen
        # ali-ons reports the broker's offset message id as the message id.
        assert seen["id"] == sent[m["body"]]["id"], (seen, sent[m["body"]])

    (delayed,) = [e for e in consumed if e["body"] == "delayed"]
    assert delayed["received_at"] - delayed["born_timestamp"] >= 1900, delayed

    poison = [e for e in consumed if e["body"] == "r-poison"]
    assert [e["reconsume_times"] for e in poison] == [0, 1, 2], poison
    dead = queue_records(module_node.remoting, "%DLQ%ons-retry", "ons-retry")
    assert [r.body for r in dead] == [b"r-poison"] and dead[0].reconsume_times == 3

    bcast = [e for e in consumed if e["topic"] == "ons-bcast"]
    instances = {e["instance"] for e in bcast}
    assert len(instances) == 2
    for name in instances:
        assert sorted(e["body"] for e in bcast if e["instance"] == name) == ["b-0", "b-1", "b-2"]


def test_the_master_killed_under_ali_ons_load_loses_nothing_acknowledged(tmp_path):
    """kill -9 of the master of a fresh 3-node SYNC cluster under ali-ons' load, every node
    as a NameServer: no acknowledged message lost, sends and receives back at the client's
    next route poll."""
    check_master_kill("alions", tmp_path)

"""The official Go remoting client (``rocketmq-client-go/v2`` v2.1.2), unchanged, against a
real 3-node ferrymq cluster over its remoting ports (every node a NameServer).

One driver run (``tests/compat/go/remoting``): the producer sync, async, oneway, batch, by
sharding key and with a delay level; push consumers of those, one that fails a message
(ConsumeRetryLater: retries through ``%RETRY%<group>``, then ``%DLQ%<group>``), and a
broadcasting pair. The node's delay levels are short (level 2 = 2 s, the others 1 s).
"""

from __future__ import annotations

import pytest

from tests.support import clients
from tests.support.client_drivers import check_master_kill
from tests.support.cluster import stop_all
from tests.support.remoting_client import cluster_with_resources, queue_records

pytestmark = pytest.mark.timeout(clients.INSTALL_TIMEOUT_S + 600)

NAMES = ("kinds", "orderly", "delay", "retry", "bcast")


@pytest.fixture(scope="module")
def go():
    return clients.required("go-remoting")


@pytest.fixture(scope="module")
def module_node(tmp_path_factory):
    """This module's 3 nodes: short delay levels, its topics and groups; the client is
    given every node as a NameServer, the test's checks read from the master."""
    directory = tmp_path_factory.mktemp("go-remoting") / "cluster"
    cluster = cluster_with_resources(str(directory), "g2", NAMES, NAMES)
    yield cluster
    stop_all(cluster.plan)


def test_go_v2_producer_and_push_consumers(go, module_node, tmp_path):
    kinds = [
        {
            "topic": "g2-kinds",
            "body": f"{mode}-{i}",
            "tags": f"Tag{i}",
            "keys": [f"k-{mode}-{i}"],
            "properties": {"color": f"c{i}"},
            "mode": mode,
        }
        for mode in ("sync", "async", "oneway")
        for i in range(2)
    ]
    orderly = [
        {"topic": "g2-orderly", "body": f"{key}-{i}", "order_key": key}
        for i in range(4)
        for key in ("order-a", "order-b")
    ]
    batch = [{"topic": "g2-kinds", "body": f"batch-{i}"} for i in range(3)]
    others = (
        [{"topic": "g2-delay", "body": "delayed", "delay_level": 2}]
        + [{"topic": "g2-retry", "body": b, "keys": [b]} for b in ("r-ok", "r-poison")]
        + [{"topic": "g2-bcast", "body": f"b-{i}"} for i in range(3)]
    )
    steps = [
        {"do": "produce", "group": "g2-producer", "messages": kinds + orderly + others},
        {"do": "produce", "group": "g2-producer", "batch": True, "messages": batch},
        {
            "do": "push",
            "group": "g2-kinds",
            "topic": "g2-kinds",
            "expect": [m["body"] for m in kinds + batch],
            "deadline_s": 60,
        },
        {
            "do": "push",
            "group": "g2-orderly",
            "topic": "g2-orderly",
            "orderly": True,
            "expect": [m["body"] for m in orderly],
            "deadline_s": 60,
        },
        {"do": "push", "group": "g2-delay", "topic": "g2-delay", "expect": ["delayed"]},
        {
            "do": "push",
            "group": "g2-retry",
            "topic": "g2-retry",
            "max_reconsume": 2,
            "fail": ["r-poison"],
            "fail_attempts": 3,
            "expect": ["r-ok"],
            "deadline_s": 60,
            "linger_s": 2,
        },
        {
            "do": "push",
            "group": "g2-bcast",
            "topic": "g2-bcast",
            "broadcast": True,
            "instances": 2,
            "expect": [f"b-{i}" for i in range(3)],
        },
    ]
    run = clients.run(
        go, {"namesrv": module_node.namesrv_list, "steps": steps}, tmp_path / "go-home", 600
    )
    assert not run.of("step_failed") and not run.of("send_failed"), run.explain()
    assert all(e["all_seen"] for e in run.of("push_waited")), run.explain()
    sent, consumed = clients.first_of(run.of("sent")), run.of("consumed")
    got = clients.first_of(consumed)

    for m in kinds:
        seen = got[m["body"]]
        assert seen["id"] == sent[m["body"]]["id"] and seen["tags"] == m["tags"], seen
        assert seen["properties"]["color"] == m["properties"]["color"], seen
    # The Go client's batch messages carry no UNIQ_KEY: their ids are offset ids.
    for m in batch:
        assert got[m["body"]]["offset_id"] == sent[m["body"]]["offset_id"]

    for key in ("order-a", "order-b"):
        bodies = [f"{key}-{i}" for i in range(4)]
        assert len({sent[b]["queue"] for b in bodies}) == 1
        assert [e["body"] for e in consumed if e["body"].startswith(key)] == bodies

    (delayed,) = [e for e in consumed if e["body"] == "delayed"]
    assert delayed["received_at"] - delayed["born_timestamp"] >= 1900, delayed

    poison = [e for e in consumed if e["body"] == "r-poison"]
    assert [e["reconsume_times"] for e in poison] == [0, 1, 2], poison
    assert {e["topic"] for e in poison} == {"g2-retry"}
    dead = queue_records(module_node.remoting, "%DLQ%g2-retry", "g2-retry")
    assert [r.body for r in dead] == [b"r-poison"] and dead[0].reconsume_times == 3

    bcast = [e for e in consumed if e["topic"] == "g2-bcast"]
    instances = {e["instance"] for e in bcast}
    assert len(instances) == 2
    for name in instances:
        assert sorted(e["body"] for e in bcast if e["instance"] == name) == ["b-0", "b-1", "b-2"]


def test_the_master_killed_under_the_go_v2_clients_load_loses_nothing_acknowledged(tmp_path):
    """kill -9 of the master of a fresh 3-node SYNC cluster under the Go v2 client's load,
    every node as a NameServer: no acknowledged message lost, sends and receives back at
    the client's next route poll."""
    check_master_kill("go4", tmp_path)

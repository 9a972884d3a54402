"""Transactions of the Go 4.x remoting client (rocketmq-client-go/v2) and SQL92
subscriptions of ali-ons on a 3-node cluster's remoting ports (every node a NameServer),
each client in its own process: a commit and a rollback from the local transaction, an
unknown one resolved by the master's check over the producer's connection; a push
consumer selecting by properties. (On a cluster the check's answer races the check's own
record to the slaves: this test found the master refusing it as a replication backlog,
``ha/master.py``'s ``EndTimeline``.)"""

from __future__ import annotations

import pytest

from ferrymq.protocol.ferrymq import admin_pb2 as api
from tests.support import clients
from tests.support.cluster import client_cluster, stop_all, topic_everywhere
from tests.support.rpc import create_topic, stubs

pytestmark = pytest.mark.timeout(clients.INSTALL_TIMEOUT_S + 300)

SETTINGS = {"messages": {"transaction_check_interval_ms": 2000, "transaction_max_checks": 5}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three nodes; the clients are given every node as a NameServer, the setup goes to
    the master."""
    started = client_cluster(str(tmp_path_factory.mktemp("remoting-tx-sql") / "cluster"), SETTINGS)
    channel, _, admin = stubs(started.address)
    create_topic(admin, "gtx", queues=2, message_type=api.TRANSACTION)
    create_topic(admin, "ons-sql", queues=2)
    for group in ("g2-tx-reader", "ons-sql-group"):
        assert (
            admin.CreateGroup(api.CreateGroupRequest(group=api.Group(name=group))).status.code == 0
        )
    channel.close()
    for topic in ("gtx", "ons-sql"):
        topic_everywhere(started.plan, topic)
    yield started
    stop_all(started.plan)


def test_go_remoting_transactions_commit_roll_back_and_are_checked(cluster, tmp_path):
    steps = [
        {
            "do": "transaction",
            "group": "g2-tx",
            "topic": "gtx",
            "messages": [
                {"body": "g-commit", "tags": "t", "keys": ["k-commit"], "local": "COMMIT"},
                {"body": "g-rollback", "local": "ROLLBACK"},
                {"body": "g-unknown", "local": "UNKNOWN"},
            ],
            "check_answer": "COMMIT",
            "checks": 1,
            "wait_for_check_s": 30,
        },
        {
            "do": "push",
            "group": "g2-tx-reader",
            "topic": "gtx",
            "expect": ["g-commit", "g-unknown"],
            "deadline_s": 60,
            "linger_s": 2,
        },
    ]
    spec = {"namesrv": cluster.namesrv_list, "steps": steps}
    run = clients.run(clients.required("go-remoting"), spec, tmp_path / "go", 180)
    assert not run.of("step_failed") and not run.of("send_failed"), run.explain()
    assert [e["body"] for e in run.of("checked")] == ["g-unknown"], run.explain()
    consumed = run.of("consumed")
    assert sorted({e["body"] for e in consumed}) == ["g-commit", "g-unknown"], run.explain()
    sent = {e["body"]: e for e in run.of("sent")}
    commit = next(e for e in consumed if e["body"] == "g-commit")
    assert commit["id"] == sent["g-commit"]["id"]
    assert (commit["tags"], commit["keys"]) == ("t", ["k-commit"])


def test_ali_ons_sql92_push_consumer_gets_only_what_its_expression_selects(cluster, tmp_path):
    steps = [
        {
            "do": "produce",
            "group": "ons-producer",
            "messages": [
                {"topic": "ons-sql", "body": f"o-{i}", "tags": "red" if i % 2 else "blue"}
                | {"properties": {"n": str(i)}}
                for i in range(5)
            ],
        },
        {
            "do": "push",
            "group": "ons-sql-group",
            "topic": "ons-sql",
            "sql": True,
            "expression": "n >= 2 AND TAGS = 'red'",
            "expect": ["o-3"],
            "deadline_s": 60,
            "linger_s": 3,
        },
    ]
    spec = {"namesrv": cluster.namesrv_list, "steps": steps}
    run = clients.run(clients.required("alions"), spec, tmp_path / "ons", 180)
    assert not run.of("step_failed") and not run.of("send_failed"), run.explain()
    assert sorted({e["body"] for e in run.of("consumed")}) == ["o-3"], run.explain()

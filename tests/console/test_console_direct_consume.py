"""A message detail view's "Resend to a group" (``POST /api/messages/consume-directly``,
``node/console/direct_consume.py``) on a real 3-node cluster with auth on: the 4.x push
consumer of the group is connected to a slave, the console is the master's, so the master
finds no member of the group and asks the broker group's other nodes as the console's user
until the slave hands the message to its client, whose answer comes back; each refusal is
precise (no permission to consume as the group, an unknown group, missing fields, no
online client anywhere)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from ferrymq.client import Admin, Message, Producer
from ferrymq.client.admin import AclRule
from ferrymq.codec.commitlog_record import decode
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.launcher.cluster import cluster_down, cluster_up
from ferrymq.launcher.polling import until
from ferrymq.protocol.ferrymq import admin_pb2 as admin_api
from tests.support.auth import APP
from tests.support.cluster import SMALL_STORE, master_of
from tests.support.console import CONSOLE_SETTINGS, ROOT, ConsoleClient, console_of
from tests.support.remoting_client import (
    RemotingClient,
    answer_direct_consumption,
    heartbeat_body,
)

TOPIC, GROUP = "cd-orders", "cd-checkers"
ASK = "/api/messages/consume-directly"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("console-direct"))
    plan = cluster_up(
        directory, nodes=3, auto_ports=True, settings={**SMALL_STORE, **CONSOLE_SETTINGS}
    )
    try:
        with Admin(plan.nodes[0].grpc, security=ROOT) as admin:
            admin.create_topic(TOPIC, 1)
            admin.create_group(GROUP)
            admin.create_user(APP.access_key, APP.secret_key)
            admin.grant(APP.access_key, AclRule("ALLOW", "SUBSCRIBE", "TOPIC", TOPIC))
        yield plan
    finally:
        cluster_down(directory)


def stored_message(plan, master) -> str:
    """A message of TOPIC, sent now, once every node serves it (a node that has not
    dispatched it yet answers MESSAGE_NOT_FOUND, and the console stops there): its offset
    message id."""
    with Producer(master.grpc, security=ROOT) as producer:
        sent = producer.send(Message(TOPIC, b"check me"))
    with Admin(master.grpc, security=ROOT) as admin:
        (found,) = until(lambda: admin.query_by_id(sent.message_id, TOPIC), 10, "the message")
    for node in plan.nodes:
        until(lambda n=node: served_by(n, found.offset_message_id), 10, f"the message on {node.id}")
    return found.offset_message_id


def served_by(node, message_id: str) -> bool:
    """Whether ``node`` itself (not its broker group's master) finds the message."""
    with Admin(node.grpc, security=ROOT) as admin:
        connection = admin.endpoints.connection(node.grpc)
        request = admin_api.QueryMessageByIdRequest(topic=TOPIC, message_id=message_id)
        return bool(connection.call(connection.admin.QueryMessageById, request).messages)


def answer_once(client: RemotingClient) -> dict:
    """Answer the node's CONSUME_MESSAGE_DIRECTLY as the Java client does: CR_SUCCESS."""
    asked = answer_direct_consumption(client, {"consumeResult": "CR_SUCCESS", "spentTimeMills": 1})
    assert decode(asked.body, 0).body == b"check me"
    return asked.ext_fields


def test_the_masters_console_reaches_a_client_connected_to_a_slave(cluster):
    master = master_of(cluster)
    slave = next(node for node in cluster.nodes if node.id != master.id)
    message_id = stored_message(cluster, master)
    root = ConsoleClient(console_of(cluster, master))
    assert root.login(ROOT).status == 200
    ask = {"topic": TOPIC, "group": GROUP, "message_id": message_id, "broker_group": "group-1"}
    with RemotingClient(slave.remoting, security=ROOT) as consumer, ThreadPoolExecutor(1) as pool:
        heartbeat = consumer.call(
            RequestCode.HEART_BEAT, body=heartbeat_body("far@1", [GROUP], TOPIC)
        )
        assert heartbeat.code == ResponseCode.SUCCESS, heartbeat
        asking = pool.submit(root.request, "POST", ASK, ask)
        header = answer_once(consumer)
        done = asking.result()
        assert done.status == 200, done
        assert (done.body["outcome"], done.body["client_answer"]) == ("consumed", "CR_SUCCESS")
        assert (done.body["client_id"], done.body["node"]) == ("far@1", slave.id)
        assert header["clientId"] == "far@1" and header["msgId"] == message_id
        app = ConsoleClient(console_of(cluster, master))
        assert app.login(APP).status == 200
        refused = app.request("POST", ASK, ask)  # may read the topic, not consume as the group
        assert refused.status == 403 and f"group {GROUP}" in refused.body["error"], refused
        unknown = root.request("POST", ASK, {**ask, "group": "nobody-here"})
        assert unknown.status == 404 and "nobody-here" in unknown.body["error"], unknown
        missing = root.request("POST", ASK, {"topic": TOPIC, "group": GROUP})
        assert missing.status == 400 and "message_id" in missing.body["error"], missing
    gone = until(
        lambda: (a := root.request("POST", ASK, ask)).status == 409 and a, 20, "the client gone"
    )
    assert "NO_ONLINE_CLIENT" in gone.body["error"], gone

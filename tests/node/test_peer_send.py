"""``PeerAdmin.send`` (``node/services/peer_admin.py``): a message handed to a master's
Messaging door signed as a user, as a slave's console hands a test message over, against a
real node with auth on. The master's send service decides it on that user; the answer
says the queue (``x-ferrymq-queues``, which only a caller that asks gets) and the record
is what the console would have stored itself."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from ferrymq.client import Admin
from ferrymq.client.admin import AclRule
from ferrymq.codec.properties import (
    PROPERTY_KEYS,
    PROPERTY_MESSAGE_GROUP,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2_grpc
from node.authentication import signature_headers
from node.rpc_status import AccessDenied, InvalidRequest
from node.services.caller import Caller, Door
from node.services.peer_admin import PeerAdmin, wire_message
from node.services.send import OutgoingMessage
from routing.acl import User
from routing.metadata import Member
from tests.support.auth import APP, AUTH_TOML, ROOT
from tests.support.nodes import start_node

KEYS = {ROOT.access_key: ROOT.secret_key, APP.access_key: APP.secret_key}


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    started = start_node(str(tmp_path_factory.mktemp("peer-send") / "node"), AUTH_TOML)
    try:
        with Admin(started.address, security=ROOT) as admin:
            admin.create_topic("handed", 4, message_type="NORMAL")
            admin.create_topic("handed-fifo", 2, message_type="FIFO")
            admin.create_user(APP.access_key, APP.secret_key)
            admin.grant(APP.access_key, AclRule("ALLOW", "PUBLISH", "TOPIC", "handed"))
        yield started
    finally:
        started.sigterm()


def caller(access_key: str) -> Caller:
    return Caller(Door.CONSOLE, "POST /api/topics", User(access_key, b"sealed"))


def message(message_id: str, *, group: str | None = None, declared: int = pb.NORMAL):
    properties = {PROPERTY_UNIQ_KEY: message_id, PROPERTY_TAGS: "TagA", PROPERTY_KEYS: "k1 k2"}
    if group is not None:
        properties[PROPERTY_MESSAGE_GROUP] = group
    return OutgoingMessage(
        b"handed over", properties, declared, message_group=group, born_ms=1, stamp_type=True
    )


def hand(node, access_key: str, topic: str, outgoing: OutgoingMessage):
    member = Member("node-1", "group-1", node.address, "", "")

    async def run():
        peers = PeerAdmin(
            grpc.aio.insecure_channel,
            lambda user: signature_headers(user.access_key, KEYS[user.access_key]),
            lambda group: (True, member),
            "another-node",
        )
        try:
            return await peers.send(caller(access_key), member, topic, outgoing)
        finally:
            await peers.close()

    return asyncio.run(run())


def test_a_handed_message_is_stored_by_the_masters_send_service_where_the_answer_says(node):
    sent = hand(node, ROOT.access_key, "handed", message("HANDED-1"))
    assert (sent.broker_group, sent.node_id, sent.message_id) == ("group-1", "node-1", "HANDED-1")
    assert 0 <= sent.queue_id < 4 and sent.queue_offset == 0
    fifo = hand(node, ROOT.access_key, "handed-fifo", message("F-1", group="g7", declared=pb.FIFO))
    with Admin(node.address, security=ROOT) as admin:
        (found,) = admin.query_by_id("HANDED-1", "handed")
        (ordered,) = admin.query_by_id("F-1", "handed-fifo")
    assert (found.queue_id, found.queue_offset) == (sent.queue_id, sent.queue_offset)
    assert (found.body, found.tag, found.keys) == (b"handed over", "TagA", ["k1", "k2"])
    assert (ordered.queue_id, ordered.properties["__SHARDINGKEY"]) == (fifo.queue_id, "g7")


def test_the_masters_refusal_comes_back_as_its_send_services(node):
    app = hand(node, APP.access_key, "handed", message("APP-1"))
    assert app.message_id == "APP-1"
    with pytest.raises(AccessDenied) as forbidden:
        hand(node, APP.access_key, "handed-fifo", message("APP-2", declared=pb.FIFO))
    assert str(forbidden.value) == (
        "FORBIDDEN: user app has no publish permission on topic handed-fifo"
    )
    with pytest.raises(InvalidRequest) as no_group:
        hand(node, ROOT.access_key, "handed-fifo", message("R-2", declared=pb.FIFO))
    assert no_group.value.code == pb.ILLEGAL_MESSAGE_GROUP
    with pytest.raises(InvalidRequest) as unknown:
        hand(node, ROOT.access_key, "handed-nowhere", message("R-3"))
    assert unknown.value.code == pb.TOPIC_NOT_FOUND
    assert str(unknown.value) == "TOPIC_NOT_FOUND: topic handed-nowhere does not exist on this node"


def test_only_a_caller_that_asks_is_told_the_queues(node):
    async def run(metadata):
        async with grpc.aio.insecure_channel(node.address) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            request = rpc.SendMessageRequest(messages=[wire_message("handed", message(metadata))])
            headers = (*signature_headers(ROOT.access_key, ROOT.secret_key),)
            if metadata.startswith("ASK"):
                headers += (("x-ferrymq-answer-queues", "1"),)
            call = stub.SendMessage(request, metadata=headers)
            await call
            return dict(await call.trailing_metadata() or ())

    asked = asyncio.run(run("ASK-1"))
    assert asked["x-ferrymq-queues"].isdigit()
    assert "x-ferrymq-queues" not in asyncio.run(run("PLAIN-1"))

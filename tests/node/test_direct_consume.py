"""A stored message consumed directly by one client of a group
(``node/services/direct_consume.py``), in-process over the POP test broker with doors that
record what they were handed: who may, every refusal in its order, which client is chosen,
the registry's keys and bounds; and how the remoting door reads a 4.x client's answer
(``node/remoting/broker_direct.py``: Java's CMResult names, Go's ordinals)."""

from __future__ import annotations

import asyncio
import json

import pytest

from ferrymq.codec.message_id import offset_message_id
from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import ResponseCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from node.grpc.telemetry_outbox import TelemetryOutbox
from node.grpc.telemetry_verify import PendingVerifications, StreamVerifications
from node.remoting.broker_direct import answer_of
from node.rpc_status import AccessDenied
from node.services import direct_consume
from node.services.admin import AdminRefused
from node.services.caller import Caller, Door
from node.services.direct_consume import (
    ClientAnswer,
    DirectConsumer,
    DirectConsumers,
    DirectConsumeService,
    DirectRequest,
    Outcome,
)
from node.services.permissions import Permissions
from node.topics import TopicConfig
from routing.acl import AclEntry, Action, Effect, ResourceKind, User
from tests.support.pop_broker import closed, opened_broker

ADMIN = Caller(Door.FERRY, "ConsumeMessageDirectly", User("root", b"x", admin=True))


@pytest.fixture
def broker(tmp_path):
    created = opened_broker(tmp_path)
    created.send("orders", 2)
    yield created
    closed(created)


class RecordingDoor:
    """A door's client that answers ``answer`` and keeps what it was handed."""

    def __init__(self, answer: ClientAnswer | None = None) -> None:
        self.answer = answer or ClientAnswer(Outcome.CONSUMED, "CR_SUCCESS", "", 3)
        self.handed: list[tuple] = []

    async def deliver(self, stored, group: str, timeout_s: float) -> ClientAnswer:
        self.handed.append((stored, group, timeout_s))
        return self.answer


def service(broker, live=("c1", "c2")) -> DirectConsumeService:
    members = {"G": [(client_id, 0) for client_id in live]}
    return DirectConsumeService(
        broker.store,
        broker.topics,
        lambda group: members.get(group, []),
        Permissions(enabled=True),
        "group-1",
    )


def stored(broker, index: int = 0):
    return broker.store.get_messages("orders", 0, index, 1).messages[0]


def refusal(broker, served: DirectConsumeService, request: DirectRequest, caller=ADMIN) -> str:
    with pytest.raises(AdminRefused) as error:
        broker.run(served.consume(caller, request))
    return error.value.message


def test_a_registered_live_client_consumes_the_message_it_is_handed(broker):
    served, door = service(broker), RecordingDoor()
    served.consumers.register("connection", "G", "c1", DirectConsumer("remoting", door.deliver))
    message = stored(broker, 1)
    request = DirectRequest("G", "orders", message.offset_message_id, timeout_ms=2000)
    result = broker.run(served.consume(ADMIN, request))
    assert door.handed == [(message, "G", 2.0)]
    assert (result.client_id, result.protocol) == ("c1", "remoting")
    assert (result.outcome, result.client_answer) == (Outcome.CONSUMED, "CR_SUCCESS")
    assert (result.spent_ms, result.broker_group) == (3, "group-1")
    assert (result.topic, result.message_id) == ("orders", message.offset_message_id)
    by_offset = DirectRequest("G", "orders", physical_offset=message.physical_offset)
    assert broker.run(served.consume(ADMIN, by_offset)).message_id == message.offset_message_id
    assert door.handed[1][0] == message


def test_the_clients_own_answer_is_the_result(broker):
    served = service(broker)
    door = RecordingDoor(ClientAnswer(Outcome.NOT_SUPPORTED, "NOT_IMPLEMENTED", "", -1))
    served.consumers.register("stream", "G", "c2", DirectConsumer("grpc", door.deliver))
    request = DirectRequest("G", "orders", physical_offset=stored(broker).physical_offset)
    result = broker.run(served.consume(ADMIN, request))
    assert (result.outcome, result.client_answer, result.protocol) == (
        Outcome.NOT_SUPPORTED,
        "NOT_IMPLEMENTED",
        "grpc",
    )


def test_who_may_admins_and_consumers_of_the_topic_as_the_group(broker):
    served = service(broker)
    served.consumers.register("k", "G", "c1", DirectConsumer("remoting", RecordingDoor().deliver))
    request = DirectRequest("G", "orders", physical_offset=stored(broker).physical_offset)
    topic = AclEntry(Effect.ALLOW, Action.SUBSCRIBE, ResourceKind.TOPIC, "orders")
    group = AclEntry(Effect.ALLOW, Action.SUBSCRIBE, ResourceKind.GROUP, "G")
    for rules in ((), (topic,), (group,)):
        caller = Caller(Door.CONSOLE, "x", User("someone", b"x", acl=rules))
        with pytest.raises(AccessDenied):
            broker.run(served.consume(caller, request))
    consumer = Caller(Door.CONSOLE, "x", User("consumer", b"x", acl=(topic, group)))
    assert broker.run(served.consume(consumer, request)).outcome is Outcome.CONSUMED
    anonymous = Caller(Door.FERRY, "x", None)
    with pytest.raises(AccessDenied):
        broker.run(served.consume(anonymous, request))


def test_every_refusal_names_its_reason(broker):
    served = service(broker, live=("c1", "pull"))
    offset = stored(broker).physical_offset

    def message(request: DirectRequest) -> str:
        return refusal(broker, served, request)

    assert message(DirectRequest("G", "orders")).startswith("ILLEGAL_SELECTION")
    too_long = DirectRequest("G", "orders", physical_offset=offset, timeout_ms=60_001)
    assert message(too_long).startswith("ILLEGAL_SELECTION")
    assert "group nope" in message(DirectRequest("nope", "orders", physical_offset=offset))
    assert "topic nope" in message(DirectRequest("G", "nope", physical_offset=offset))
    broker.topics.put_topic(TopicConfig("other", queue_count=1))
    assert message(DirectRequest("G", "other", physical_offset=offset)).startswith(
        "MESSAGE_NOT_FOUND"
    )
    assert message(DirectRequest("G", "orders", "00" * 16)).startswith("MESSAGE_NOT_FOUND")
    # The right offset under another store host: another broker group's record, not this one.
    elsewhere = offset_message_id(bytes([10, 9, 9, 9, 0, 0, 0x1F, 0x90]), offset)
    assert message(DirectRequest("G", "orders", elsewhere)).startswith("MESSAGE_NOT_FOUND")
    assert message(DirectRequest("G", "orders", physical_offset=offset)).startswith(
        "NO_ONLINE_CLIENT"
    )
    gone = DirectConsumer("remoting", RecordingDoor().deliver)
    served.consumers.register("gone", "G", "expired", gone)
    assert message(DirectRequest("G", "orders", physical_offset=offset)).startswith(
        "NO_ONLINE_CLIENT"
    )  # registered, but no live member any more
    unable = DirectConsumer("remoting", None, "a CONSUME_ACTIVELY (pull) consumer has no listener")
    served.consumers.register("p", "G", "pull", unable)
    assert message(DirectRequest("G", "orders", physical_offset=offset)).startswith(
        "DIRECT_CONSUME_UNSUPPORTED: client pull (remoting)"
    )
    named = DirectRequest("G", "orders", physical_offset=offset, client_id="c1")
    assert message(named).startswith("CLIENT_NOT_MEMBER: client c1")
    served.consumers.register("c", "G", "c1", DirectConsumer("remoting", RecordingDoor().deliver))
    named_unable = DirectRequest("G", "orders", physical_offset=offset, client_id="pull")
    assert message(named_unable).startswith("DIRECT_CONSUME_UNSUPPORTED")
    any_able = DirectRequest("G", "orders", physical_offset=offset)
    assert broker.run(served.consume(ADMIN, any_able)).client_id == "c1"  # not "pull"


def test_the_registry_forgets_a_key_whole_and_keeps_a_newer_keys_entry(monkeypatch):
    consumers = DirectConsumers()
    deliver = RecordingDoor().deliver
    consumers.register("old", "G", "c1", DirectConsumer("remoting", deliver))
    consumers.register("old", "H", "c1", DirectConsumer("remoting", deliver))
    consumers.register("new", "G", "c1", DirectConsumer("grpc", deliver))  # reconnected
    consumers.unregister("old")
    assert {c: d.protocol for c, d in consumers.of("G").items()} == {"c1": "grpc"}
    assert consumers.of("H") == {}
    monkeypatch.setattr(direct_consume, "CLIENTS_PER_GROUP_MAX", 1)
    assert not consumers.register("x", "G", "c2", DirectConsumer("grpc", deliver))
    assert consumers.register("x", "G", "c1", DirectConsumer("grpc", deliver))
    monkeypatch.setattr(direct_consume, "GROUPS_MAX", 1)
    assert not consumers.register("x", "H", "c1", DirectConsumer("grpc", deliver))
    assert consumers.of("H") == {}


def response(body: object, code: int = ResponseCode.SUCCESS, remark: str = ""):
    encoded = body if isinstance(body, bytes) else json.dumps(body).encode()
    return RemotingCommand(code, remark=remark, body=encoded)


def test_a_4x_answer_is_read_from_javas_names_and_gos_ordinals():
    java = answer_of(response({"consumeResult": "CR_LATER", "spentTimeMills": 7, "remark": None}))
    assert java == ClientAnswer(Outcome.LATER, "CR_LATER", "", 7)
    go = answer_of(response({"consumeResult": 0, "spentTimeMills": 1, "remark": ""}))
    assert go == ClientAnswer(Outcome.CONSUMED, "CR_SUCCESS", "", 1)
    thrown = answer_of(response({"consumeResult": "CR_THROW_EXCEPTION", "remark": "boom"}))
    assert thrown == ClientAnswer(Outcome.FAILED, "CR_THROW_EXCEPTION", "boom", -1)
    assert answer_of(response({"order": False})).client_answer == "none"
    assert answer_of(response(b"not json")).outcome is Outcome.FAILED
    refused = answer_of(response(b"", ResponseCode.SYSTEM_ERROR, "not exist in this consumer"))
    assert refused == ClientAnswer(Outcome.FAILED, "code 1", "not exist in this consumer")


def test_a_client_is_handed_only_what_its_own_user_may_consume(broker):
    served = service(broker)
    rules = (AclEntry(Effect.ALLOW, Action.SUBSCRIBE, ResourceKind.GROUP, "G"),)
    group_only = Caller(Door.REMOTING, "x", User("app", b"x", acl=rules))
    door = RecordingDoor()
    served.consumers.register(
        "k", "G", "c1", DirectConsumer("remoting", door.deliver, caller=group_only)
    )
    offset = stored(broker).physical_offset
    named = DirectRequest("G", "orders", physical_offset=offset, client_id="c1")
    assert refusal(broker, served, named).startswith("CLIENT_MAY_NOT_CONSUME: client c1")
    anyone = DirectRequest("G", "orders", physical_offset=offset)
    assert refusal(broker, served, anyone).startswith("NO_ONLINE_CLIENT")
    assert door.handed == []


def test_a_stream_is_online_while_registered_and_answers_by_nonce(broker):
    served = service(broker, live=())  # its heartbeats went to another node
    outbox = TelemetryOutbox()
    stream = StreamVerifications(outbox, PendingVerifications())
    served.consumers.register(outbox, "G", "c5", stream.consumer(pb.PUSH_CONSUMER, ADMIN))
    request = DirectRequest("G", "orders", physical_offset=stored(broker).physical_offset)

    async def answered(status: pb.Status, echo: bool = False):
        consuming = asyncio.ensure_future(served.consume(ADMIN, request))
        command = await outbox.next()
        nonce = command.verify_message_command.nonce
        assert command.verify_message_command.message.topic.name == "orders"
        if echo:  # the Node.js client's answer
            reply = rpc.TelemetryCommand(
                status=status, verify_message_command=rpc.VerifyMessageCommand(nonce=nonce)
            )
        else:
            result = rpc.VerifyMessageResult(nonce=nonce)
            reply = rpc.TelemetryCommand(status=status, verify_message_result=result)
        assert stream.answered(reply)
        return await consuming

    ok = broker.run(answered(pb.Status(code=pb.OK)))
    assert (ok.outcome, ok.client_answer, ok.protocol) == (Outcome.CONSUMED, "OK", "grpc")
    failure = broker.run(answered(pb.Status(code=pb.FAILED_TO_CONSUME_MESSAGE)))
    assert failure.outcome is Outcome.FAILED
    unsupported = broker.run(answered(pb.Status(code=pb.NOT_IMPLEMENTED), echo=True))
    assert (unsupported.outcome, unsupported.client_answer) == (
        Outcome.NOT_SUPPORTED,
        "NOT_IMPLEMENTED",
    )
    assert not stream.answered(rpc.TelemetryCommand(settings=pb.Settings()))
    other = StreamVerifications(TelemetryOutbox(), stream.pending)  # the client's new stream

    async def answered_elsewhere():
        consuming = asyncio.ensure_future(served.consume(ADMIN, request))
        nonce = (await outbox.next()).verify_message_command.nonce
        result = rpc.VerifyMessageResult(nonce=nonce)
        assert other.answered(
            rpc.TelemetryCommand(status=pb.Status(code=pb.OK), verify_message_result=result)
        )
        return await consuming

    assert broker.run(answered_elsewhere()).outcome is Outcome.CONSUMED


def test_a_streams_wait_ends_on_timeout_and_on_close(broker):
    served = service(broker, live=())
    outbox = TelemetryOutbox()
    stream = StreamVerifications(outbox, PendingVerifications())
    served.consumers.register(outbox, "G", "c5", stream.consumer(pb.PUSH_CONSUMER, ADMIN))
    offset = stored(broker).physical_offset
    quick = DirectRequest("G", "orders", physical_offset=offset, timeout_ms=50)
    timed_out = broker.run(served.consume(ADMIN, quick))
    assert (timed_out.outcome, timed_out.remark) == (Outcome.TIMED_OUT, "no answer in 0.05 s")

    async def closed_meanwhile():
        consuming = asyncio.ensure_future(
            served.consume(ADMIN, DirectRequest("G", "orders", physical_offset=offset))
        )
        await outbox.next()  # the timed-out call's command, never read
        await outbox.next()  # this call's
        stream.close()
        return await consuming

    closed_result = broker.run(closed_meanwhile())
    assert (closed_result.outcome, closed_result.remark) == (
        Outcome.TIMED_OUT,
        "its Telemetry stream closed",
    )
    simple = stream.consumer(pb.SIMPLE_CONSUMER, ADMIN)
    served.consumers.register(outbox, "G", "c6", simple)
    named = DirectRequest("G", "orders", physical_offset=offset, client_id="c6")
    assert refusal(broker, served, named).startswith(
        "DIRECT_CONSUME_UNSUPPORTED: client c6 (grpc) cannot consume a message directly: "
        "a SIMPLE_CONSUMER client has no listener"
    )


def test_an_admin_tools_request_is_passed_on_to_a_member_for_admins_only(broker):
    served = service(broker)
    consumer = DirectConsumer("remoting", None, "pull", relay=RecordingDoor().deliver)
    served.consumers.register("k", "G", "c1", consumer)
    assert served.relay_target(ADMIN, "G", "c1") is consumer
    rules = (
        AclEntry(Effect.ALLOW, Action.SUBSCRIBE, ResourceKind.TOPIC, "orders"),
        AclEntry(Effect.ALLOW, Action.SUBSCRIBE, ResourceKind.GROUP, "G"),
    )
    with pytest.raises(AccessDenied):
        served.relay_target(Caller(Door.REMOTING, "x", User("app", b"x", acl=rules)), "G", "c1")
    with pytest.raises(AdminRefused, match="CLIENT_NOT_MEMBER: client c2"):
        served.relay_target(ADMIN, "G", "c2")

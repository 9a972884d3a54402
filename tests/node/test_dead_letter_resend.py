"""The dead-letter resend service in-process (``node/services/dead_letter_resend.py``) over
the POP test broker (``tests/node/test_pop.py``): each refusal, the resent message reaching
the group's POP consumer and its 4.x consumers' retry topic and no other group, a second
resend, the log replayed after an abrupt stop, and the resent delivery's own life (ack,
nack, dead-lettered again)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ferrymq.codec.properties import PROPERTY_LITE_TOPIC
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from node import system_state
from node.lite_names import lmq_name
from node.pop_state import RESENT_QUEUE_ID
from node.rpc_status import AccessDenied
from node.services import dead_letter_resend
from node.services.admin import AdminRefused
from node.services.caller import Caller, Door
from node.services.dead_letter_resend import (
    RESEND_MAX,
    ResendRequest,
)
from node.services.permissions import Permissions
from node.topics import GroupConfig, MessageType, TopicConfig
from routing.acl import AclEntry, Action, Effect, ResourceKind, User
from store.message import Message
from store.results import PutResult, PutStatus
from tests.support.pop_broker import closed, opened_broker, resend_service

ANYONE = Caller(Door.FERRY, "ResendDeadLetters", None)


@pytest.fixture
def broker(tmp_path):
    created = opened_broker(tmp_path)
    yield created
    closed(created)


def dead_letter(broker, count: int, group: str = "G", topic: str = "orders") -> None:
    """``count`` messages of ``topic`` dead-lettered by ``group``'s POP consumer (3
    attempts), each with a message id and a key."""
    for i in range(count):
        message = Message.build(
            topic, b"body-%d" % i, tags="TagA", keys=[f"k{i}"], unique_key=f"ID{i}"
        )
        assert broker.store.put_message(message).ok
    for _ in range(3):
        assert len(broker.receive(group, topic)) == count
        broker.clock.ms += 10_000
    assert broker.receive(group, topic) == []
    assert len(broker.dead_letters(group)) >= count


def resend(broker, service, **fields):
    return broker.run(service.resend(ANYONE, ResendRequest("G", **fields)))


def refusal(broker, service, request: ResendRequest, caller=ANYONE) -> AdminRefused:
    with pytest.raises(AdminRefused) as error:
        broker.run(service.resend(caller, request))
    return error.value


def test_each_refusal_is_precise_and_changes_nothing(broker):
    service = resend_service(broker)
    unknown = refusal(broker, service, ResendRequest("nobody", offsets=(0,)))
    assert unknown.code == 5 and "group nobody does not exist" in unknown.message
    empty = refusal(broker, service, ResendRequest("G", offsets=(0,)))
    assert empty.code == 9 and empty.message.startswith("DLQ_EMPTY: %DLQ%G holds no message")
    dead_letter(broker, 2)
    outside = refusal(broker, service, ResendRequest("G", offsets=(1, 2, 7)))
    assert outside.code == 3
    assert outside.message == (
        "ILLEGAL_OFFSET: %DLQ%G on broker group group-1 holds offsets 0..1; 2 is outside "
        "(and 1 more)"
    )
    both = refusal(broker, service, ResendRequest("G", offsets=(0,), from_offset=0, to_offset=1))
    assert both.code == 3 and both.message.startswith("ILLEGAL_SELECTION")
    assert refusal(broker, service, ResendRequest("G")).message.startswith("ILLEGAL_SELECTION")
    backwards = refusal(broker, service, ResendRequest("G", from_offset=1, to_offset=0))
    assert backwards.code == 3 and backwards.message.startswith("ILLEGAL_RANGE")
    many = refusal(broker, service, ResendRequest("G", from_offset=0, to_offset=RESEND_MAX))
    assert many.code == 3 and many.message.startswith(f"TOO_MANY: {RESEND_MAX + 1}")
    mixed = resend_service(broker)
    mixed.routing.read(lambda state: setattr(state, "awaits_finalize", True))
    waiting = refusal(broker, mixed, ResendRequest("G", offsets=(0,)))
    assert waiting.code == 9 and waiting.message.startswith("UPGRADE_NOT_FINALIZED")
    elsewhere = refusal(broker, service, ResendRequest("G", offsets=(0,), broker_group="nowhere"))
    assert elsewhere.code == 5 and elsewhere.message == "UNKNOWN_BROKER_GROUP: nowhere"
    # Not the master: handed to it through PeerAdmin, unless it was handed over already.
    slave = resend_service(broker, is_master=False)
    handed = refusal(broker, slave, ResendRequest("G", offsets=(0,), handed=True))
    assert handed.code == 14 and handed.message.startswith("NOT_MASTER")
    masterless = resend_service(broker, is_master=False, master=None)
    no_peers = refusal(broker, masterless, ResendRequest("G", offsets=(0,)))
    assert no_peers.code == 14 and no_peers.message.startswith("NO_MASTER")
    slave.peers.node_id = "node-2"  # routing names this node, whose store is not master yet
    not_yet = refusal(broker, slave, ResendRequest("G", offsets=(0,)))
    assert not_yet.code == 14 and not_yet.message.startswith("NO_MASTER")
    assert broker.state.resent(("G", "%DLQ%G", RESENT_QUEUE_ID)) == set()
    assert broker.store.get_messages("%RETRY%G", 0, 0, 10).messages == []


def test_a_slave_hands_the_resend_to_its_master_as_the_callers_user(broker):
    dead_letter(broker, 1)
    slave = resend_service(broker, is_master=False)
    asked = []

    async def call(caller, member, method, request, timeout_s):
        asked.append((caller, member.node_id, method, request))
        return SimpleNamespace(broker_group="group-1", resent=[0], already_resent=[], not_yet=[])

    slave.peers.call = call
    outcome = broker.run(slave.resend(ANYONE, ResendRequest("G", offsets=(0,))))
    assert outcome.resent == (0,)
    ((caller, node, method, request),) = asked
    assert (caller, node, method) == (ANYONE, "node-2", "ResendDeadLetters")
    assert request.handed and request.broker_group == "group-1" and list(request.offsets) == [0]


def test_only_admins_and_users_who_may_consume_as_the_group_resend(broker):
    dead_letter(broker, 1)
    service = resend_service(broker, Permissions(enabled=True))
    stranger = Caller(Door.CONSOLE, "ResendDeadLetters", User("stranger", b"x"))
    with pytest.raises(AccessDenied) as denied:
        broker.run(service.resend(stranger, ResendRequest("G", offsets=(0,))))
    assert "no subscribe permission on topic %DLQ%G" in str(denied.value)
    reader_of_dlq = (AclEntry(Effect.ALLOW, Action.SUBSCRIBE, ResourceKind.TOPIC, "%DLQ%*"),)
    half = Caller(Door.CONSOLE, "x", User("half", b"x", acl=reader_of_dlq))
    with pytest.raises(AccessDenied) as denied:
        broker.run(service.resend(half, ResendRequest("G", offsets=(0,))))
    assert "no subscribe permission on group G" in str(denied.value)
    owner_acl = (*reader_of_dlq, AclEntry(Effect.ALLOW, Action.SUBSCRIBE, ResourceKind.GROUP, "G"))
    owner = Caller(Door.CONSOLE, "x", User("owner", b"x", acl=owner_acl))
    assert broker.run(service.resend(owner, ResendRequest("G", offsets=(0,)))).resent == (0,)
    admin = Caller(Door.CONSOLE, "x", User("root", b"x", admin=True))
    assert broker.run(service.resend(admin, ResendRequest("G", offsets=(0,)))).already_resent == (
        0,
    )


def test_a_resend_reaches_the_groups_pop_and_4x_consumers_and_no_other_group(broker):
    broker.topics.put_group(GroupConfig("other", max_delivery_attempts=3))
    dead_letter(broker, 3)
    assert broker.receive("other", "orders", batch=32) != []  # other's own first deliveries
    broker.clock.ms += 1
    service = resend_service(broker)
    outcome = resend(broker, service, offsets=(0, 2))
    assert outcome.resent == (0, 2) and outcome.already_resent == ()
    # The POP consumer of G: the dead letters as sent, ids and properties, attempt 1.
    delivered = broker.receive("G", "orders")
    assert [d.stored.body for d in delivered] == [b"body-0", b"body-2"]
    assert [d.attempt for d in delivered] == [1, 1]
    first = delivered[0].stored
    assert first.topic == "orders" and first.unique_key == "ID0" and first.keys == ["k0"]
    assert first.tags == "TagA" and not any(k.startswith("DLQ_ORIGIN") for k in first.properties)
    # The 4.x consumers of G: copies in %RETRY%G, RETRY_TOPIC the producer's topic.
    copies = broker.store.get_messages("%RETRY%G", 0, 0, 10).messages
    assert [c.body for c in copies] == [b"body-0", b"body-2"]
    assert [c.properties["RETRY_TOPIC"] for c in copies] == ["orders", "orders"]
    assert [c.unique_key for c in copies] == ["ID0", "ID2"]
    assert [c.reconsume_times for c in copies] == [0, 0]
    assert not any(k.startswith("DLQ_ORIGIN") for c in copies for k in c.properties)
    # Nobody else: the other group of the topic, and G's receive of another topic.
    broker.clock.ms += 10_000  # other's deliveries come back, nothing more
    assert sorted(d.stored.body for d in broker.receive("other", "orders")) == [
        b"body-0",
        b"body-1",
        b"body-2",
    ]
    assert broker.store.get_messages("%RETRY%other", 0, 0, 10).messages == []
    broker.topics.put_topic(TopicConfig("invoices", queue_count=1))
    assert broker.receive("G", "invoices") == []
    # The resent deliveries are acked like any other, and then gone for G.
    handles = [d.handle for d in delivered if d.attempt == 1][:2]
    assert all(f".{RESENT_QUEUE_ID}." in h for h in handles)
    answers = broker.ack("G", "orders", *handles)
    assert [e.status.code for e in answers.entries] == [pb.OK, pb.OK]
    broker.clock.ms += 60_000
    assert broker.receive("G", "orders") == []
    broker.state.check()


def test_a_second_resend_is_idempotent_and_a_range_resends_the_rest(broker):
    dead_letter(broker, 3)
    service = resend_service(broker)
    assert resend(broker, service, offsets=(1,)).resent == (1,)
    again = resend(broker, service, offsets=(1,))
    assert again.resent == () and again.already_resent == (1,)
    rest = resend(broker, service, from_offset=0, to_offset=2)
    assert rest.resent == (0, 2) and rest.already_resent == (1,)
    assert len(broker.store.get_messages("%RETRY%G", 0, 0, 10).messages) == 3
    assert sorted(d.stored.body for d in broker.receive("G", "orders")) == [
        b"body-0",
        b"body-1",
        b"body-2",
    ]
    page = broker.run(service.page(ANYONE, "G", "", -1, 10))
    assert (page.min_offset, page.max_offset) == (0, 3)
    assert [(e.offset, e.message_id, e.origin_topic, e.resent) for e in page.entries] == [
        (0, "ID0", "orders", True),
        (1, "ID1", "orders", True),
        (2, "ID2", "orders", True),
    ]


def test_resends_are_replayed_after_an_abrupt_stop_and_from_a_snapshot(broker, monkeypatch):
    dead_letter(broker, 2)
    assert resend(broker, resend_service(broker), offsets=(0,)).resent == (0,)
    broker.crash_and_reopen()
    service = resend_service(broker)
    assert resend(broker, service, offsets=(0, 1)).already_resent == (0,)
    first, second = broker.receive("G", "orders")
    assert (first.stored.body, first.attempt) == (b"body-0", 1)
    assert (second.stored.body, second.attempt) == (b"body-1", 1)
    assert broker.ack("G", "orders", first.handle).entries[0].status.code == pb.OK
    # Every segment starts with a snapshot: one taken now keeps what was resent.
    monkeypatch.setattr(system_state, "SNAPSHOT_EVERY_RECORDS", 1)
    broker.run(broker.state.snapshot_if_due())
    broker.crash_and_reopen()
    key = ("G", "%DLQ%G", RESENT_QUEUE_ID)
    assert broker.state.resent(key) == {0, 1}
    assert list(broker.state.cursor(key).in_flight) == [1]  # the acked one stays acked
    again = resend(broker, resend_service(broker), from_offset=0, to_offset=1)
    assert again.resent == () and again.already_resent == (0, 1)


def test_a_resent_message_nacked_to_its_last_attempt_is_dead_lettered_again(broker):
    dead_letter(broker, 1)
    resend(broker, resend_service(broker), offsets=(0,))
    for attempt in (1, 2, 3):
        (delivery,) = broker.receive("G", "orders")
        assert delivery.attempt == attempt
        broker.clock.ms += 10_000
    assert broker.receive("G", "orders") == []
    copies = broker.store.get_messages("%DLQ%G", 0, 0, 10).messages
    assert len(copies) == 2
    again = copies[1]
    assert again.body == b"body-0" and again.unique_key == "ID0"
    assert again.properties["DLQ_ORIGIN_TOPIC"] == "orders"
    assert (again.properties["DLQ_ORIGIN_QUEUE"], again.properties["DLQ_ORIGIN_OFFSET"]) == (
        copies[0].properties["DLQ_ORIGIN_QUEUE"],
        copies[0].properties["DLQ_ORIGIN_OFFSET"],
    )
    # The new dead letter may be resent in its turn.
    assert resend(broker, resend_service(broker), offsets=(1,)).resent == (1,)


def test_a_refused_resend_changes_nothing_and_may_be_asked_again(broker, monkeypatch):
    dead_letter(broker, 1)
    service = resend_service(broker)

    async def refuse(self, records):
        return PutResult(PutStatus.SERVICE_NOT_AVAILABLE)

    monkeypatch.setattr(system_state.SystemState, "append", refuse)
    refused = refusal(broker, service, ResendRequest("G", offsets=(0,)))
    assert refused.code == 14 and "was refused: SERVICE_NOT_AVAILABLE" in refused.message
    monkeypatch.undo()
    assert broker.state.resent(("G", "%DLQ%G", RESENT_QUEUE_ID)) == set()
    assert resend(broker, service, offsets=(0,)).resent == (0,)


def test_a_receive_of_another_topic_reads_a_resent_dead_letter_once_at_most(broker, monkeypatch):
    """The group's resent dead letters of one topic wait for its receive of that topic;
    a receive of another topic passes over them without reading them each time."""
    broker.topics.put_topic(TopicConfig("invoices", queue_count=1))
    dead_letter(broker, 2)
    resend(broker, resend_service(broker), from_offset=0, to_offset=1)
    reads = []
    original = broker.store.message_at

    def counted(topic, queue_id, offset):
        reads.append(topic)
        return original(topic, queue_id, offset)

    monkeypatch.setattr(broker.store, "message_at", counted)
    for _ in range(3):
        assert broker.receive("G", "invoices") == []
    assert reads.count("%DLQ%G") == 2  # each once, the first time
    assert sorted(d.stored.body for d in broker.receive("G", "orders")) == [b"body-0", b"body-1"]


def test_what_passes_one_calls_byte_bound_is_answered_not_yet_and_resent_next(broker, monkeypatch):
    dead_letter(broker, 4)
    service = resend_service(broker)
    record = broker.store.message_at("%DLQ%G", 0, 0).size
    monkeypatch.setattr(dead_letter_resend, "RESEND_BYTES_MAX", 1)  # a message at least
    first = resend(broker, service, from_offset=0, to_offset=3)
    assert (first.resent, first.not_yet) == ((0,), (1, 2, 3))
    monkeypatch.setattr(dead_letter_resend, "RESEND_BYTES_MAX", 2 * record)
    second = resend(broker, service, offsets=first.not_yet)
    assert (second.resent, second.not_yet) == ((1, 2), (3,))
    assert broker.state.resent(("G", "%DLQ%G", RESENT_QUEUE_ID)) == {0, 1, 2}
    last = resend(broker, service, offsets=second.not_yet)
    assert (last.resent, last.not_yet) == ((3,), ())
    assert len(broker.store.get_messages("%RETRY%G", 0, 0, 10).messages) == 4


def test_a_snapshot_written_by_the_resends_own_append_holds_it(broker, monkeypatch):
    """The append that logs a resend may write a snapshot right after it (a snapshot is
    due): replay starts there, so the snapshot must already hold the resend."""
    dead_letter(broker, 2)
    monkeypatch.setattr(system_state, "SNAPSHOT_EVERY_RECORDS", 1)
    assert resend(broker, resend_service(broker), offsets=(1,)).resent == (1,)
    monkeypatch.undo()
    broker.crash_and_reopen()
    key = ("G", "%DLQ%G", RESENT_QUEUE_ID)
    assert broker.state.resent(key) == {1} and list(broker.state.cursor(key).in_flight) == [1]
    (delivery,) = broker.receive("G", "orders")
    assert delivery.stored.body == b"body-1"


def test_a_lite_topics_dead_letter_goes_back_to_the_lite_consumers_of_its_lite_topic(broker):
    """A LITE topic's dead letter, resent, is served by a lite receive of a client that
    subscribes to its lite topic (and no other client), the resend waking that lite
    topic's long polls; its handle names the lite topic's queue, as the client's ack does."""
    broker.topics.put_topic(TopicConfig("chat", queue_count=1, message_type=MessageType.LITE))
    broker.service.lite_index.load(broker.loop, ["chat"])
    subscriptions = broker.lite.subscriptions
    subscriptions.sync(pb.PARTIAL_ADD, "G", "c-a", "chat", ["a"])
    subscriptions.sync(pb.PARTIAL_ADD, "G", "c-b", "chat", ["b"])

    def receive(client_id: str):
        client = subscriptions.client("G", client_id)
        return broker.run(broker.service.receive_lite(broker.topics.group("G"), client, 16, 10_000))

    for lite_topic in ("a", "b"):
        message = Message.build("chat", lite_topic.encode(), unique_key=f"ID-{lite_topic}")
        message.properties[PROPERTY_LITE_TOPIC] = lite_topic
        assert broker.store.put_message(message).ok
    for _ in range(3):  # three attempts each, then the DLQ
        assert len(receive("c-a")) == 1 and len(receive("c-b")) == 1
        broker.clock.ms += 10_000
    assert receive("c-a") == receive("c-b") == []
    assert sorted(broker.dead_letters("G")) == [b"a", b"b"]
    woken = []
    service = resend_service(broker)
    service.lite_changed = woken.append
    assert resend(broker, service, offsets=(0, 1)).resent == (0, 1)
    assert sorted(woken) == [lmq_name("chat", "a"), lmq_name("chat", "b")]
    (given_back,) = receive("c-a")
    assert given_back.stored.body == b"a" and given_back.attempt == 1
    assert given_back.stored.queue_id == RESENT_QUEUE_ID
    assert given_back.stored.properties[PROPERTY_LITE_TOPIC] == "a"
    (other,) = receive("c-b")
    assert other.stored.body == b"b"
    ack = rpc.AckMessageRequest(
        group=pb.Resource(name="G"),
        topic=pb.Resource(name="chat"),
        entries=[
            rpc.AckMessageEntry(message_id="m", receipt_handle=given_back.handle, lite_topic="a")
        ],
    )
    assert [e.status.code for e in broker.run(broker.door.AckMessage(ack, None)).entries] == [pb.OK]
    broker.clock.ms += 60_000  # b's comes back to c-b; a's was acked
    assert receive("c-a") == [] and [d.stored.body for d in receive("c-b")] == [b"b"]
    broker.state.check()

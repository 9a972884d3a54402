"""Lite topics (RocketMQ 5.5, RIP-83) on a real node, through the gRPC door as the official
lite consumers speak it: a LITE topic's messages name their lite topic; a consumer
subscribes to lite topics (SyncLiteSubscription, under its client id) and its receives
deliver only those, each lite topic in order with one delivery in flight; acks, changes of
invisibility and DLQ forwards name the lite topic; refusals carry RocketMQ's codes."""

from __future__ import annotations

import queue
import threading

import pytest

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from tests.support.remoting_client import RemotingClient, send_v2
from tests.support.rpc import create_group, create_topic, message, receive, stubs

TOPIC = "lite-parent"


@pytest.fixture(scope="module")
def grpc(module_node):
    channel, messaging, admin = stubs(module_node.address)
    create_topic(admin, TOPIC, queues=4, message_type=api.LITE)
    create_topic(admin, "lite-normal", queues=2, message_type=api.NORMAL)
    create_topic(admin, "lite-any", queues=2, message_type=api.MESSAGE_TYPE_UNSPECIFIED)
    yield messaging
    channel.close()


def client(name: str) -> list[tuple[str, str]]:
    return [("x-mq-client-id", name)]


def send(messaging, body: bytes, lite_topic: str | None, topic: str = TOPIC, **system):
    system.setdefault("message_type", pb.LITE)
    if lite_topic is not None:
        system["lite_topic"] = lite_topic
    sent = message(topic, body, f"ID-{body.decode()}", **system)
    return messaging.SendMessage(rpc.SendMessageRequest(messages=[sent]))


def sync(messaging, who: str, group: str, lite_topics, action=pb.PARTIAL_ADD, **option):
    request = rpc.SyncLiteSubscriptionRequest(
        action=action,
        topic=pb.Resource(name=TOPIC),
        group=pb.Resource(name=group),
        lite_topic_set=list(lite_topics),
    )
    if option:
        request.offset_option.CopyFrom(pb.OffsetOption(**option))
    return messaging.SyncLiteSubscription(request, metadata=client(who))


def lite_receive(messaging, who: str, group: str, **kw):
    return receive(messaging, TOPIC, group=group, metadata=client(who), **kw)


def lite_ack(messaging, group: str, delivered: pb.Message, lite_topic: str | None = None):
    entry = rpc.AckMessageEntry(
        message_id=delivered.system_properties.message_id,
        receipt_handle=delivered.system_properties.receipt_handle,
        lite_topic=lite_topic or delivered.system_properties.lite_topic,
    )
    return messaging.AckMessage(
        rpc.AckMessageRequest(
            group=pb.Resource(name=group), topic=pb.Resource(name=TOPIC), entries=[entry]
        )
    )


def test_a_consumer_receives_only_its_lite_topics_each_in_order(grpc):
    for body, lite in ((b"a1", "chat-a"), (b"b1", "chat-b"), (b"a2", "chat-a"), (b"c1", "c")):
        answer = send(grpc, body, lite)
        assert answer.status.code == pb.OK, answer
    assert sync(grpc, "client-1", "lite-g1", ["chat-a"]).status.code == pb.OK
    status, first, _ = lite_receive(grpc, "client-1", "lite-g1")
    assert status.code == pb.OK
    assert [m.body for m in first] == [b"a1", b"a2"]
    assert {m.system_properties.lite_topic for m in first} == {"chat-a"}
    assert {m.system_properties.message_type for m in first} == {pb.LITE}
    assert {m.topic.name for m in first} == {TOPIC}
    # One delivery of a lite topic in flight: nothing more of it until it is acked.
    send(grpc, b"a3", "chat-a")
    status, none, _ = lite_receive(grpc, "client-1", "lite-g1")
    assert status.code == pb.MESSAGE_NOT_FOUND and none == []
    for delivered in first:
        assert lite_ack(grpc, "lite-g1", delivered).status.code == pb.OK
    _, after, _ = lite_receive(grpc, "client-1", "lite-g1")
    assert [m.body for m in after] == [b"a3"]
    # Another lite topic joins the set: its stored messages come too.
    assert sync(grpc, "client-1", "lite-g1", ["chat-b"]).status.code == pb.OK
    _, more, _ = lite_receive(grpc, "client-1", "lite-g1")
    assert [m.body for m in more] == [b"b1"]


def test_a_message_arriving_wakes_a_waiting_lite_receive(grpc, module_node):
    import threading

    assert sync(grpc, "client-w", "lite-gw", ["wake-up"]).status.code == pb.OK
    result = {}

    def waiting():
        result["answer"] = lite_receive(grpc, "client-w", "lite-gw", wait_s=10)

    thread = threading.Thread(target=waiting)
    thread.start()
    with RemotingClient(module_node.remoting) as remoting:  # a 4.x-protocol producer
        assert send_v2(remoting, TOPIC, b"w1", 0, __LITE_TOPIC="wake-up").code == 0
    thread.join(10)
    status, woke, _ = result["answer"]
    assert status.code == pb.OK and [m.body for m in woke] == [b"w1"]
    assert woke[0].system_properties.lite_topic == "wake-up"


def test_a_lite_topic_is_delivered_again_in_order_after_its_invisibility_ends(grpc):
    for body in (b"r1", b"r2"):
        send(grpc, body, "retried")
    sync(grpc, "client-r", "lite-gr", ["retried"])
    _, first, _ = lite_receive(grpc, "client-r", "lite-gr", invisible_s=1)
    assert [m.body for m in first] == [b"r1", b"r2"]
    send(grpc, b"r3", "retried")
    _, again, _ = lite_receive(grpc, "client-r", "lite-gr", wait_s=5)
    assert [m.body for m in again] == [b"r1", b"r2", b"r3"]
    assert [m.system_properties.delivery_attempt for m in again] == [2, 2, 1]
    stale = lite_ack(grpc, "lite-gr", first[0])
    assert stale.entries[0].status.code == pb.INVALID_RECEIPT_HANDLE


def test_a_handle_verifies_for_its_own_lite_topic_only(grpc):
    send(grpc, b"h1", "handle-a")
    sync(grpc, "client-h", "lite-gh", ["handle-a"])
    _, got, _ = lite_receive(grpc, "client-h", "lite-gh")
    wrong = lite_ack(grpc, "lite-gh", got[0], lite_topic="handle-b")
    assert wrong.entries[0].status.code == pb.INVALID_RECEIPT_HANDLE
    changed = grpc.ChangeInvisibleDuration(
        rpc.ChangeInvisibleDurationRequest(
            group=pb.Resource(name="lite-gh"),
            topic=pb.Resource(name=TOPIC),
            receipt_handle=got[0].system_properties.receipt_handle,
            invisible_duration={"seconds": 5},
            lite_topic="handle-a",
        )
    )
    assert changed.status.code == pb.OK and changed.receipt_handle
    forwarded = grpc.ForwardMessageToDeadLetterQueue(
        rpc.ForwardMessageToDeadLetterQueueRequest(
            group=pb.Resource(name="lite-gh"),
            topic=pb.Resource(name=TOPIC),
            receipt_handle=changed.receipt_handle,
            lite_topic="handle-a",
        )
    )
    assert forwarded.status.code == pb.OK
    status, _, _ = lite_receive(grpc, "client-h", "lite-gh")
    assert status.code == pb.MESSAGE_NOT_FOUND  # dead-lettered, not delivered again


def test_an_offset_option_starts_a_new_subscription_where_it_says(grpc):
    for body in (b"o1", b"o2", b"o3"):
        send(grpc, body, "offsets")
    sync(grpc, "client-o", "lite-go-max", ["offsets"], policy=pb.OffsetOption.MAX)
    status, _, _ = lite_receive(grpc, "client-o", "lite-go-max")
    assert status.code == pb.MESSAGE_NOT_FOUND
    send(grpc, b"o4", "offsets")
    _, after, _ = lite_receive(grpc, "client-o", "lite-go-max")
    assert [m.body for m in after] == [b"o4"]
    sync(grpc, "client-t", "lite-go-tail", ["offsets"], tail_n=2)
    _, tail, _ = lite_receive(grpc, "client-t", "lite-go-tail")
    assert [m.body for m in tail] == [b"o3", b"o4"]


def test_a_client_that_unsubscribes_or_leaves_receives_nothing_more(grpc):
    send(grpc, b"u1", "leaving")
    sync(grpc, "client-u", "lite-gu", ["leaving"])
    assert sync(grpc, "client-u", "lite-gu", ["leaving"], pb.PARTIAL_REMOVE).status.code == pb.OK
    status, _, _ = lite_receive(grpc, "client-u", "lite-gu")
    assert status.code == pb.MESSAGE_NOT_FOUND
    sync(grpc, "client-u", "lite-gu", ["leaving"], pb.COMPLETE_ADD)
    _, back, _ = lite_receive(grpc, "client-u", "lite-gu")
    assert [m.body for m in back] == [b"u1"]


@pytest.mark.parametrize(
    ("lite_topic", "words"),
    [
        (" ", "lite topic cannot be the char sequence of whitespace"),
        ("x" * 65, "lite topic exceed the max size 64"),
        ("a.b", "can only contain alphanumeric characters, hyphens(-), and underscores(_)"),
    ],
)
def test_an_illegal_lite_topic_is_refused_on_send_and_on_subscribe(grpc, lite_topic, words):
    sent = send(grpc, b"bad", lite_topic)
    assert sent.status.code == pb.ILLEGAL_LITE_TOPIC and words in sent.status.message
    synced = sync(grpc, "client-x", "lite-gx", [lite_topic])
    assert synced.status.code == pb.ILLEGAL_LITE_TOPIC and words in synced.status.message


@pytest.mark.parametrize(
    ("topic", "lite_topic", "declared", "words"),
    [
        (TOPIC, None, pb.LITE, "each message names its lite topic"),
        (TOPIC, "x", pb.NORMAL, "LITE"),
        ("lite-normal", "x", pb.LITE, "NORMAL"),
        ("lite-any", "x", pb.LITE, "LITE"),
        ("lite-any", "x", pb.NORMAL, "a lite topic is for LITE messages"),
    ],
)
def test_a_lite_message_where_it_does_not_belong_is_refused(
    grpc, topic, lite_topic, declared, words
):
    answer = send(grpc, b"nope", lite_topic, topic=topic, message_type=declared)
    assert answer.status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, answer
    assert words in answer.status.message


def test_lite_subscriptions_need_a_lite_topic_and_a_client_id(grpc):
    request = rpc.SyncLiteSubscriptionRequest(
        action=pb.PARTIAL_ADD,
        topic=pb.Resource(name="lite-normal"),
        group=pb.Resource(name="lite-gn"),
        lite_topic_set=["a"],
    )
    not_lite = grpc.SyncLiteSubscription(request, metadata=client("client-n"))
    assert not_lite.status.code == pb.BAD_REQUEST and "not a LITE one" in not_lite.status.message
    request.topic.name = TOPIC
    anonymous = grpc.SyncLiteSubscription(request)
    assert anonymous.status.code == pb.CLIENT_ID_REQUIRED


def test_one_request_names_at_most_the_quota_and_slack(grpc):
    answer = sync(grpc, "client-q", "lite-gq", [f"q{n}" for n in range(2301)])
    assert answer.status.code == pb.LITE_SUBSCRIPTION_QUOTA_EXCEEDED
    assert "lite subscription quota exceeded: 2000" in answer.status.message


def test_consumer_settings_announce_the_lite_quota_and_name_size(grpc):
    settings = pb.Settings(
        client_type=pb.LITE_SIMPLE_CONSUMER,
        subscription=pb.Subscription(group=pb.Resource(name="lite-gs")),
    )
    answers = list(grpc.Telemetry(iter([rpc.TelemetryCommand(settings=settings)]), timeout=5))
    subscription = answers[0].settings.subscription
    assert subscription.lite_subscription_quota == 2000
    assert subscription.max_lite_topic_size == 64


class TelemetryStream:
    """A lite consumer's Telemetry stream held open, as the official clients hold theirs:
    the node's answers and notices land in ``commands``."""

    def __init__(self, messaging, who: str, group: str) -> None:
        settings = pb.Settings(
            client_type=pb.LITE_PUSH_CONSUMER,
            subscription=pb.Subscription(group=pb.Resource(name=group)),
        )
        self._done = threading.Event()
        self.commands: queue.Queue = queue.Queue()

        def requests():
            yield rpc.TelemetryCommand(settings=settings)
            self._done.wait()

        self._call = messaging.Telemetry(requests(), metadata=client(who))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        assert self.next().WhichOneof("command") == "settings"  # registered by then

    def _read(self) -> None:
        try:
            for command in self._call:
                self.commands.put(command)
        except Exception:  # cancelled at close
            pass

    def next(self, timeout_s: float = 5.0):
        return self.commands.get(timeout=timeout_s)

    def close(self) -> None:
        self._done.set()
        self._call.cancel()
        self._reader.join(5)


@pytest.mark.parametrize("exclusive", [True, False], ids=["exclusive", "shared"])
def test_an_exclusive_group_gives_a_lite_topic_to_its_newest_subscriber(
    grpc, module_node, exclusive
):
    """RocketMQ 5.5's ``lite.sub.model=Exclusive``: when a second client of the group
    subscribes to a lite topic, the first loses it, is told on its Telemetry stream
    (NotifyUnsubscribeLiteCommand) and receives nothing more of it. In a Shared group
    (the default) both keep it and nobody is told."""
    group = f"lite-model-{'x' if exclusive else 's'}"
    channel, _, admin = stubs(module_node.address)
    create_group(admin, group, lite_exclusive=exclusive)
    channel.close()
    room = f"room-{group}"
    first = TelemetryStream(grpc, f"{group}-1", group)
    try:
        assert sync(grpc, f"{group}-1", group, [room]).status.code == pb.OK
        assert sync(grpc, f"{group}-2", group, [room]).status.code == pb.OK
        send(grpc, f"{group}-m".encode(), room)
        if exclusive:
            notice = first.next()
            assert notice.notify_unsubscribe_lite_command.lite_topic == room, notice
        else:
            with pytest.raises(queue.Empty):
                first.next(timeout_s=1.0)
    finally:
        first.close()
    status, got, _ = lite_receive(grpc, f"{group}-1", group)
    if exclusive:
        assert status.code == pb.MESSAGE_NOT_FOUND
        _, got, _ = lite_receive(grpc, f"{group}-2", group)
    assert [m.body for m in got] == [f"{group}-m".encode()]

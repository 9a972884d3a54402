"""A real node process speaking apache.rocketmq.v2 and ferrymq's Admin service."""

from __future__ import annotations

import hashlib
import os
import stat
import threading
import time
import zlib

import grpc
import pytest

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from tests.support.nodes import start_node
from tests.support.rpc import create_topic, message, pull, queue_of, stubs


def test_body_digest_is_one_every_official_client_computes_alike(node):
    """MD5 in upper-case hex, as Apache's proxy sends. A CRC32 whose first hex digit is 0
    (``ok-0``'s) is written without it by the Java and Go clients and with it by the
    Python one; the push consumers discard a message whose digest they cannot match."""
    _, messaging, admin = stubs(node.address)
    create_topic(admin, "digests", queues=1)
    bodies = [b"ok-0", bytes(range(256))]
    assert zlib.crc32(b"ok-0") < 0x10000000
    sent = messaging.SendMessage(
        rpc.SendMessageRequest(
            messages=[message("digests", b, f"D{i}", queue_id=0) for i, b in enumerate(bodies)]
        )
    )
    assert sent.status.code == pb.OK
    _, messages, _ = pull(messaging, "digests", 0, 0)
    assert [m.body for m in messages] == bodies
    for m in messages:
        digest = m.system_properties.body_digest
        assert digest.type == pb.MD5
        assert digest.checksum == hashlib.md5(m.body).hexdigest().upper()


def test_route_send_pull_and_offsets(node):
    _, messaging, admin = stubs(node.address)
    create_topic(admin, "orders")
    assert admin.CreateGroup(api.CreateGroupRequest(group=api.Group(name="G"))).status.code == 0

    access_point = pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=1)])
    route = messaging.QueryRoute(
        rpc.QueryRouteRequest(topic=pb.Resource(name="orders"), endpoints=access_point)
    )
    assert route.status.code == pb.OK and len(route.message_queues) == 4
    for queue in route.message_queues:
        assert queue.broker.id == 0 and queue.permission == pb.READ_WRITE
        # The broker group's master, whatever access point the client used.
        (served_at,) = queue.broker.endpoints.addresses
        assert f"{served_at.host}:{served_at.port}" == node.address
        assert queue.broker.name == "group-1"
        assert list(queue.accept_message_types) == [pb.NORMAL]

    sent = messaging.SendMessage(
        rpc.SendMessageRequest(
            messages=[
                message(
                    "orders",
                    b"m%d" % i,
                    f"ID{i}",
                    queue_id=1,
                    tag="TagA" if i % 2 else "TagB",
                    keys=[f"k{i}"],
                )
                for i in range(10)
            ]
        )
    )
    assert sent.status.code == pb.OK
    assert [e.message_id for e in sent.entries] == [f"ID{i}" for i in range(10)]
    assert [e.offset for e in sent.entries] == list(range(10))

    status, messages, next_offset = pull(messaging, "orders", 1, 0)
    assert status.code == pb.OK and next_offset == 10
    assert [m.body for m in messages] == [b"m%d" % i for i in range(10)]
    first = messages[0].system_properties
    assert first.message_id == "ID0" and first.tag == "TagB" and list(first.keys) == ["k0"]
    assert first.queue_offset == 0 and first.body_digest.type == pb.MD5

    status, messages, _ = pull(messaging, "orders", 1, 0, tags="TagA")
    assert [m.system_properties.message_id for m in messages] == [f"ID{i}" for i in range(1, 10, 2)]

    queue = queue_of("orders", 1)
    group = pb.Resource(name="G")
    missing = messaging.GetOffset(rpc.GetOffsetRequest(group=group, message_queue=queue))
    assert missing.status.code == pb.OFFSET_NOT_FOUND
    updated = messaging.UpdateOffset(
        rpc.UpdateOffsetRequest(group=group, message_queue=queue, offset=7)
    )
    assert updated.status.code == pb.OK
    got = messaging.GetOffset(rpc.GetOffsetRequest(group=group, message_queue=queue))
    assert got.status.code == pb.OK and got.offset == 7
    end = messaging.QueryOffset(
        rpc.QueryOffsetRequest(message_queue=queue, query_offset_policy=pb.END)
    )
    assert end.offset == 10
    progress = admin.GroupProgress(api.GroupProgressRequest(group="G", topic="orders"))
    assert [(q.broker_offset, q.consumer_offset, q.lag) for q in progress.queues][1] == (10, 7, 3)

    by_key = admin.QueryMessageByKey(api.QueryMessageByKeyRequest(topic="orders", key="k3"))
    assert [m.message_id for m in by_key.messages] == ["ID3"]


def test_long_polling_pull_returns_when_a_message_arrives(node):
    _, messaging, admin = stubs(node.address)
    create_topic(admin, "events", queues=1)
    admin.CreateGroup(api.CreateGroupRequest(group=api.Group(name="G")))

    def send_later():
        time.sleep(0.3)  # the pull below must already be waiting: this is the scenario
        messaging.SendMessage(rpc.SendMessageRequest(messages=[message("events", b"late", "L1")]))

    sender = threading.Thread(target=send_later)
    started = time.monotonic()
    sender.start()
    status, messages, next_offset = pull(messaging, "events", 0, 0, wait_s=10)
    elapsed = time.monotonic() - started
    sender.join()
    assert status.code == pb.OK and [m.body for m in messages] == [b"late"] and next_offset == 1
    assert elapsed < 5, "the long poll did not wake on the new message"

    status, messages, next_offset = pull(messaging, "events", 0, 1, wait_s=1)
    assert status.code == pb.MESSAGE_NOT_FOUND and messages == [] and next_offset == 1


def test_bad_requests_get_precise_codes_and_store_nothing(node):
    _, messaging, admin = stubs(node.address)
    create_topic(admin, "orders", queues=2)
    create_topic(admin, "fifo", queues=2, message_type=api.FIFO)

    def send(*messages):
        return messaging.SendMessage(rpc.SendMessageRequest(messages=list(messages))).status.code

    assert send(message("nope", b"x", "A")) == pb.TOPIC_NOT_FOUND
    assert send(message("bad topic", b"x", "A")) == pb.ILLEGAL_TOPIC
    assert send(message("orders", b"", "A")) == pb.MESSAGE_BODY_EMPTY
    assert send(message("orders", bytes(4 * 1024 * 1024 + 1), "A")) == pb.MESSAGE_BODY_TOO_LARGE
    assert send(message("orders", b"x", "")) == pb.ILLEGAL_MESSAGE_ID
    assert send(message("orders", b"x", "A", message_type=pb.FIFO, message_group="g")) == (
        pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    )
    assert send(message("fifo", b"x", "A", message_type=pb.FIFO)) == pb.ILLEGAL_MESSAGE_GROUP
    assert send(message("orders", b"x", "A", tag="a|b")) == pb.ILLEGAL_MESSAGE_TAG
    bad_property = message("orders", b"x", "A")
    bad_property.user_properties["UNIQ_KEY"] = "mine"
    assert send(bad_property) == pb.ILLEGAL_MESSAGE_PROPERTY_KEY
    # A batch with one bad message stores none of it.
    assert send(message("orders", b"ok", "B"), message("orders", b"", "C")) == pb.MESSAGE_BODY_EMPTY
    for queue_id in (0, 1):
        end = messaging.QueryOffset(
            rpc.QueryOffsetRequest(
                message_queue=queue_of("orders", queue_id), query_offset_policy=pb.END
            )
        )
        assert end.offset == 0
    assert messaging.QueryRoute(
        rpc.QueryRouteRequest(topic=pb.Resource(name="nope"))
    ).status.code == (pb.TOPIC_NOT_FOUND)
    # An unknown group is created on first use (tests/compat/test_official_defaults.py); a bad
    # name is not.
    status, _, _ = pull(messaging, "orders", 0, 0, group="no such group")
    assert status.code == pb.ILLEGAL_CONSUMER_GROUP
    admin.CreateGroup(api.CreateGroupRequest(group=api.Group(name="G")))
    status, _, _ = pull(messaging, "orders", 0, 5)
    assert status.code == pb.ILLEGAL_OFFSET
    status, _, _ = pull(messaging, "orders", 9, 0)
    assert status.code == pb.BAD_REQUEST
    # The node still serves after all of that.
    assert send(message("orders", b"fine", "D")) == pb.OK


def test_what_the_fuzzer_found_answers_a_status_not_unknown(node):
    """Regressions from tests/node/test_fuzz_rpc.py: each of these once ended in an unhandled
    exception (gRPC UNKNOWN and a traceback in the node's log)."""
    channel, messaging, admin = stubs(node.address)
    # Bytes that are not the request message: INVALID_ARGUMENT, for unary and streams.
    for path in (
        "/apache.rocketmq.v2.MessagingService/SendMessage",
        "/ferrymq.admin.v1.Admin/ListTopics",
    ):
        with pytest.raises(grpc.RpcError) as refused:
            channel.unary_unary(path)(b"\xff\xff", timeout=10)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    receive = channel.unary_stream("/apache.rocketmq.v2.MessagingService/ReceiveMessage")
    with pytest.raises(grpc.RpcError) as refused:
        list(receive(b"\x00", timeout=10))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    telemetry = channel.stream_stream("/apache.rocketmq.v2.MessagingService/Telemetry")
    with pytest.raises(grpc.RpcError) as refused:
        list(telemetry(iter([b"\x0a\x00", b"\xff"]), timeout=10))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # Enum numbers the node does not know (proto3 takes any): INVALID_ARGUMENT.
    for topic in (
        api.Topic(name="t", queue_count=1, permission=-7),
        api.Topic(name="t", message_type=99),
    ):
        assert admin.CreateTopic(api.CreateTopicRequest(topic=topic)).status.code == 3
        assert admin.UpdateTopic(api.UpdateTopicRequest(topic=topic)).status.code == 3
    # A message type number the node does not know: the type conflict, named by number.
    create_topic(admin, "orders", queues=1)
    unknown_type = message("orders", b"x", "A", message_type=-5)
    answer = messaging.SendMessage(rpc.SendMessageRequest(messages=[unknown_type]))
    assert answer.status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert "unknown type -5" in answer.status.message
    # A delivery time before 1970: refused, where once it was stored and then failed
    # every pull of its queue (it did not convert back to a Timestamp).
    create_topic(admin, "later", queues=1, message_type=api.DELAY)
    early = message("later", b"x", "B", message_type=pb.DELAY)
    early.system_properties.delivery_timestamp.seconds = -(2**63)
    early.system_properties.delivery_timestamp.nanos = -(2**31)
    answer = messaging.SendMessage(rpc.SendMessageRequest(messages=[early]))
    assert answer.status.code == pb.ILLEGAL_DELIVERY_TIME


def test_telemetry_answers_settings_and_keeps_the_stream_open(node):
    _, messaging, _ = stubs(node.address)
    outgoing: list[rpc.TelemetryCommand] = [
        rpc.TelemetryCommand(
            settings=pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing())
        )
    ]
    release = threading.Event()

    def requests():
        yield outgoing[0]
        release.wait(10)  # keep our side open while we read the reply

    replies = messaging.Telemetry(requests(), timeout=20)
    first = next(replies)
    assert first.status.code == pb.OK
    assert first.settings.publishing.max_body_size == 4 * 1024 * 1024
    assert first.settings.metric.on is False
    release.set()


def test_sigkill_keeps_messages_and_committed_offsets_and_sigterm_is_clean(tmp_path):
    data_dir = str(tmp_path / "node")
    node = start_node(data_dir)
    _, messaging, admin = stubs(node.address)
    create_topic(admin, "orders", queues=1)
    admin.CreateGroup(api.CreateGroupRequest(group=api.Group(name="G")))
    for i in range(20):
        assert (
            messaging.SendMessage(
                rpc.SendMessageRequest(messages=[message("orders", b"%d" % i, f"ID{i}")])
            ).status.code
            == pb.OK
        )
    queue = queue_of("orders", 0)
    group = pb.Resource(name="G")
    for offset in (5, 12):
        assert (
            messaging.UpdateOffset(
                rpc.UpdateOffsetRequest(group=group, message_queue=queue, offset=offset)
            ).status.code
            == pb.OK
        )
    node.sigkill()

    node = start_node(data_dir)
    _, messaging, admin = stubs(node.address)
    assert messaging.GetOffset(rpc.GetOffsetRequest(group=group, message_queue=queue)).offset == 12
    _, messages, _ = pull(messaging, "orders", 0, 0)
    assert [m.body for m in messages] == [b"%d" % i for i in range(20)]
    assert node.sigterm() == 0

    node = start_node(data_dir)
    _, messaging, _ = stubs(node.address)
    assert messaging.GetOffset(rpc.GetOffsetRequest(group=group, message_queue=queue)).offset == 12
    node.sigkill()


def test_data_is_readable_by_the_node_user_only(tmp_path):
    """Files once took the default umask: any local user could read every message."""
    data_dir = tmp_path / "node"
    data_dir.mkdir(mode=0o755)  # as an older version, or an operator, left it
    os.chmod(data_dir, 0o755)
    node = start_node(str(data_dir))
    _, messaging, admin = stubs(node.address)
    create_topic(admin, "private", queues=1)
    request = rpc.SendMessageRequest(messages=[message("private", b"secret body", "ID1")])
    assert messaging.SendMessage(request).status.code == pb.OK
    assert node.sigterm() == 0
    assert stat.S_IMODE(os.stat(data_dir).st_mode) == 0o700
    found = []
    for directory, subdirectories, files in os.walk(data_dir):
        for name in subdirectories + files:
            path = os.path.join(directory, name)
            found.append(name)
            assert stat.S_IMODE(os.stat(path).st_mode) & 0o077 == 0, path
    assert "commitlog" in found and "node.toml" in found

"""Delayed messages through a real node: validation, due time honoured, the delivery time
returned, and a SIGKILL while they wait neither loses nor duplicates them."""

from __future__ import annotations

import time

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from tests.support.nodes import start_node
from tests.support.rpc import ack, create_group, create_topic, message, receive, stubs


def send_delayed(messaging, body: bytes, message_id: str, seconds: int, nanos: int = 0):
    sent = message("later", body, message_id, message_type=pb.DELAY)
    sent.system_properties.delivery_timestamp.seconds = seconds
    sent.system_properties.delivery_timestamp.nanos = nanos
    return messaging.SendMessage(rpc.SendMessageRequest(messages=[sent]))


def receive_until(messaging, count: int, deadline_s: float):
    """Everything received (acked) until ``count`` messages or the deadline."""
    got = []
    deadline = time.monotonic() + deadline_s
    while len(got) < count and time.monotonic() < deadline:
        _, messages, _ = receive(messaging, "later", wait_s=2)
        for m in messages:
            got.append((m, time.time()))
        if messages:
            handles = [m.system_properties.receipt_handle for m in messages]
            assert ack(messaging, "later", handles).status.code == pb.OK
    return got


def test_delayed_messages_arrive_at_their_time_in_due_order(tmp_path):
    node = start_node(str(tmp_path / "node"))
    try:
        _, messaging, admin = stubs(node.address)
        create_topic(admin, "later", queues=2, message_type=api.DELAY)
        create_group(admin, "G")
        now = time.time()
        due = {b"b": now + 2.0, b"a": now + 1.0, b"c": now + 3.0}
        # The official client sends seconds; its tests send milliseconds: both are accepted.
        assert send_delayed(messaging, b"b", "B", int(due[b"b"] * 1000)).status.code == pb.OK
        for body, message_id in ((b"a", "A"), (b"c", "C")):
            seconds = int(due[body])
            nanos = int((due[body] - seconds) * 1e9)
            answer = send_delayed(messaging, body, message_id, seconds, nanos)
            assert answer.status.code == pb.OK
        got = receive_until(messaging, 3, 15)
        assert [m.body for m, _ in got] == [b"a", b"b", b"c"]
        for m, arrived in got:
            due_s = due[m.body]
            assert arrived >= due_s - 0.01, (m.body, arrived - due_s)  # never early
            assert abs(m.system_properties.delivery_timestamp.seconds - int(due_s)) <= 1

        too_far = send_delayed(messaging, b"x", "X", int(now) + 41 * 24 * 3600)
        assert too_far.status.code == pb.ILLEGAL_DELIVERY_TIME
        missing = messaging.SendMessage(
            rpc.SendMessageRequest(messages=[message("later", b"y", "Y", message_type=pb.DELAY)])
        )
        assert missing.status.code == pb.ILLEGAL_DELIVERY_TIME
    finally:
        node.sigkill()


def test_sigkill_while_messages_wait_neither_loses_nor_duplicates(tmp_path):
    data_dir = str(tmp_path / "node")
    node = start_node(data_dir)
    _, messaging, admin = stubs(node.address)
    create_topic(admin, "later", queues=1, message_type=api.DELAY)
    create_group(admin, "G")
    now = time.time()
    for i in range(5):
        answer = send_delayed(messaging, b"%d" % i, f"M{i}", int((now + 1.5 + i * 0.2) * 1000))
        assert answer.status.code == pb.OK
    node.sigkill()
    node = start_node(data_dir)
    try:
        _, messaging, _ = stubs(node.address)
        got = receive_until(messaging, 5, 15)
        assert sorted(m.body for m, _ in got) == [b"%d" % i for i in range(5)]
        status, extra, _ = receive(messaging, "later", wait_s=1)
        assert status.code == pb.MESSAGE_NOT_FOUND and not extra
    finally:
        node.sigkill()

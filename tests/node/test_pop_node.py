"""POP consumption through a real node process: the RPC shapes, long polling, a client that
goes away mid-poll, bad requests, and in-flight state and acks surviving SIGKILL."""

from __future__ import annotations

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
from node.config import ConfigError, parse_node_config
from tests.support.nodes import start_node
from tests.support.rpc import ack, create_group, create_topic, message, queue_of, receive, stubs


def send(messaging, topic: str, count: int, prefix: str = "ID", **system) -> None:
    for i in range(count):
        answer = messaging.SendMessage(
            rpc.SendMessageRequest(messages=[message(topic, b"%d" % i, f"{prefix}{i}", **system)])
        )
        assert answer.status.code == pb.OK, answer.status


def test_receive_ack_and_the_shape_of_the_stream(node):
    _, messaging, admin = stubs(node.address)
    create_topic(admin, "orders", queues=2)
    create_group(admin, "G")
    send(messaging, "orders", 4, tag="TagA", keys=["k"])
    status, messages, parts = receive(messaging, "orders")
    assert status.code == pb.OK
    # status first, then the messages, then the delivery timestamp (as the Java proxy).
    assert [p.WhichOneof("content") for p in parts] == (
        ["status"] + ["message"] * 4 + ["delivery_timestamp"]
    )
    assert sorted(m.system_properties.message_id for m in messages) == [f"ID{i}" for i in range(4)]
    for m in messages:
        system = m.system_properties
        assert system.receipt_handle and system.delivery_attempt == 1
        assert system.tag == "TagA" and list(system.keys) == ["k"]
    assert receive(messaging, "orders")[0].code == pb.MESSAGE_NOT_FOUND
    answer = ack(messaging, "orders", [m.system_properties.receipt_handle for m in messages])
    assert answer.status.code == pb.OK and len(answer.entries) == 4
    progress = admin.GroupProgress(api.GroupProgressRequest(group="G", topic="orders"))
    assert sum(q.consumer_offset for q in progress.queues) == 4
    assert sum(q.in_flight for q in progress.queues) == 0
    assert sum(q.lag for q in progress.queues) == 0


def test_long_polling_receive_returns_when_a_message_arrives(node):
    _, messaging, admin = stubs(node.address)
    create_topic(admin, "orders", queues=4)
    create_group(admin, "G")
    result = {}

    def poll():
        started = time.monotonic()
        result["answer"] = receive(messaging, "orders", wait_s=20)
        result["took"] = time.monotonic() - started

    poller = threading.Thread(target=poll)
    poller.start()
    deadline = time.monotonic() + 10
    # Send until the poll has answered: a send racing ahead of the poll is also fine.
    while poller.is_alive() and time.monotonic() < deadline:
        send(messaging, "orders", 1, prefix=f"late{time.monotonic_ns()}-")
        poller.join(0.2)
    poller.join()
    status, messages, _ = result["answer"]
    assert status.code == pb.OK and messages
    assert result["took"] < 10  # woken by the send, not by the 20 s timeout


def test_a_client_that_leaves_mid_poll_costs_nothing(node):
    _, messaging, admin = stubs(node.address)
    create_topic(admin, "orders", queues=1)
    create_group(admin, "G")
    request = rpc.ReceiveMessageRequest(
        group=pb.Resource(name="G"), message_queue=queue_of("orders", 0), batch_size=1
    )
    request.long_polling_timeout.seconds = 30
    call = messaging.ReceiveMessage(request, timeout=40)
    # Hang up while the node holds the poll (the poll lasts 30 s, the hang-up comes first).
    threading.Timer(0.3, call.cancel).start()
    with pytest.raises(grpc.RpcError) as gone:
        list(call)
    assert gone.value.code() is grpc.StatusCode.CANCELLED
    send(messaging, "orders", 1)
    status, messages, _ = receive(messaging, "orders")
    assert status.code == pb.OK and [m.body for m in messages] == [b"0"]


def test_bad_receive_requests_get_precise_codes(node):
    _, messaging, admin = stubs(node.address)
    create_topic(admin, "orders", queues=1)
    create_group(admin, "G")
    send(messaging, "orders", 1)
    assert receive(messaging, "orders", group="no.pe")[0].code == pb.ILLEGAL_CONSUMER_GROUP
    assert receive(messaging, "missing")[0].code == pb.TOPIC_NOT_FOUND
    assert receive(messaging, "bad.name")[0].code == pb.ILLEGAL_TOPIC
    assert receive(messaging, "orders", invisible_s=0)[0].code == pb.ILLEGAL_INVISIBLE_TIME
    sql = receive(messaging, "orders", tags="a > ", filter_type=pb.SQL)[0]
    assert sql.code == pb.ILLEGAL_FILTER_EXPRESSION
    assert receive(messaging, "orders", tags="A ||")[0].code == pb.ILLEGAL_FILTER_EXPRESSION
    # None of that consumed anything.
    status, messages, _ = receive(messaging, "orders")
    assert status.code == pb.OK and len(messages) == 1
    forged = ack(messaging, "orders", ["0.0.0123456789abcdef.00000000"])
    assert forged.status.code == pb.INVALID_RECEIPT_HANDLE


def test_in_flight_state_and_acks_survive_sigkill(tmp_path):
    data_dir = str(tmp_path / "node")
    node = start_node(data_dir)
    _, messaging, admin = stubs(node.address)
    create_topic(admin, "orders", queues=1)
    create_group(admin, "G")
    send(messaging, "orders", 6)
    _, messages, _ = receive(messaging, "orders", batch=5, invisible_s=300)
    handles = [m.system_properties.receipt_handle for m in messages]
    assert ack(messaging, "orders", handles[:2]).status.code == pb.OK
    node.sigkill()

    node = start_node(data_dir)
    _, messaging, admin = stubs(node.address)
    # Still invisible after the restart: only the never-delivered message comes.
    status, messages, _ = receive(messaging, "orders")
    assert status.code == pb.OK and [m.body for m in messages] == [b"5"]
    assert ack(messaging, "orders", handles[:2]).status.code == pb.INVALID_RECEIPT_HANDLE
    assert ack(messaging, "orders", handles[2:]).status.code == pb.OK  # handles outlive it
    progress = admin.GroupProgress(api.GroupProgressRequest(group="G", topic="orders"))
    (queue,) = progress.queues
    assert (queue.consumer_offset, queue.in_flight, queue.lag) == (5, 1, 1)
    node.sigkill()


def test_a_standalone_node_keys_its_handles_and_they_survive_a_restart(tmp_path):
    """No cluster secret: the key is made at the first start, kept 0600 in the data
    directory, and read back, so handles issued before a restart still act after it; a
    handle of the old, unkeyed format for the same delivery is refused and says why."""
    data_dir = str(tmp_path / "node")
    node = start_node(data_dir)
    _, messaging, admin = stubs(node.address)
    create_topic(admin, "orders", queues=1)
    create_group(admin, "G")
    send(messaging, "orders", 2)
    _, messages, _ = receive(messaging, "orders", batch=2, invisible_s=300)
    handles = [m.system_properties.receipt_handle for m in messages]
    node.sigkill()
    key_file = os.path.join(data_dir, "receipt-handle.key")
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600

    node = start_node(data_dir)
    _, messaging, _ = stubs(node.address)
    _, queue_id, offset, delivery, _ = handles[1].split(".")
    fields = f"{queue_id}.{offset}.{delivery}"
    old = f"{fields}.{zlib.crc32(fields.encode()):08x}"
    refused = ack(messaging, "orders", [old])
    assert refused.status.code == pb.INVALID_RECEIPT_HANDLE
    assert "old-format receipt handle" in refused.status.message
    assert ack(messaging, "orders", handles).status.code == pb.OK
    node.sigkill()


def test_query_assignment_one_poll_for_normal_groups_every_queue_for_fifo(node):
    _, messaging, admin = stubs(node.address)
    create_topic(admin, "orders", queues=4)
    create_group(admin, "G")
    create_group(admin, "F", fifo=True)
    access_point = pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=9)])

    def assignment(group):
        answer = messaging.QueryAssignment(
            rpc.QueryAssignmentRequest(
                topic=pb.Resource(name="orders"),
                group=pb.Resource(name=group),
                endpoints=access_point,
            )
        )
        assert answer.status.code == pb.OK
        return [a.message_queue for a in answer.assignments]

    (normal,) = assignment("G")
    (served_at,) = normal.broker.endpoints.addresses
    assert normal.id == -1 and f"{served_at.host}:{served_at.port}" == node.address
    assert [q.id for q in assignment("F")] == [0, 1, 2, 3]
    # An unknown group is answered for as the default group it would become on first use.
    missing = messaging.QueryAssignment(
        rpc.QueryAssignmentRequest(topic=pb.Resource(name="orders"), group=pb.Resource(name="X"))
    )
    assert [a.message_queue.id for a in missing.assignments] == [-1]


def test_push_consumers_are_told_the_long_poll_the_node_is_configured_with(nodes):
    """``[messages] long_polling_s`` is the long poll a consumer's settings name (RocketMQ's
    proxy: 20 s): a push consumer's stop waits for its long polls, so an operator may
    shorten it; outside 1..60 the node does not start."""

    def announced(node) -> float:
        settings = pb.Settings(
            client_type=pb.PUSH_CONSUMER,
            subscription=pb.Subscription(group=pb.Resource(name="told")),
        )
        channel, messaging, _ = stubs(node.address)
        with channel:
            command = rpc.TelemetryCommand(settings=settings)
            answer = next(iter(messaging.Telemetry(iter([command]), timeout=5)))
        return answer.settings.subscription.long_polling_timeout.seconds

    assert announced(nodes(name="default")) == 20
    assert announced(nodes("[messages]\nlong_polling_s = 5\n", name="short")) == 5
    for wrong in (0, 61):
        with pytest.raises(ConfigError, match=r"messages\.long_polling_s must be"):
            parse_node_config(f"[messages]\nlong_polling_s = {wrong}\n")

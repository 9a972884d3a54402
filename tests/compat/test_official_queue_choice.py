"""The node chooses the queue of a message the official clients send (docs/architecture.md,
"Queue choice"): round robin over the topic's queues, the hash of the message group for
FIFO; a sender that pins its queue (``x-ferrymq-queue: pinned``, as the SDK does) gets it.

The official ``rocketmq-python-client`` runs in a process of its own (``tests/compat``)
against one node process.
"""

from __future__ import annotations

import grpc

from ferrymq.codec.headers import PINNED_QUEUE
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2_grpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from node.admission import hashed_queue
from tests.support.official_client import run_official_at
from tests.support.rpc import create_topic, message, pull

SENDS = 1000
QUEUES = 4


def per_queue(admin, topic: str) -> list[int]:
    described = admin.DescribeTopic(api.DescribeTopicRequest(name=topic))
    assert described.status.code == 0, described.status
    counts = [0] * QUEUES
    for queue in described.queues:
        counts[queue.queue_id] = queue.max_offset - queue.min_offset
    return counts


def test_one_official_producer_uses_every_queue(module_node, client_home, grpc_stubs):
    _, admin = grpc_stubs
    create_topic(admin, "spread", queues=QUEUES)
    sends = [{"topic": "spread", "body": f"m{i}"} for i in range(SENDS)]
    events = run_official_at(
        module_node.address,
        client_home,
        {"scenario": "produce", "topics": ["spread"], "messages": sends},
        timeout_s=240,
    )
    assert sum(e["event"] == "sent" for e in events) == SENDS
    counts = per_queue(admin, "spread")
    print(f"1,000 official sends over {QUEUES} queues: {counts}")
    assert sum(counts) == SENDS
    assert min(counts) >= SENDS * 15 // 100, counts


def test_official_fifo_keeps_each_message_group_on_one_queue(module_node, client_home, grpc_stubs):
    messaging, admin = grpc_stubs
    create_topic(admin, "ordered", queues=QUEUES, message_type=api.FIFO)
    groups = [f"group-{g}" for g in range(12)]
    sends = [
        {"topic": "ordered", "body": f"{group}:{i}", "group": group}
        for i in range(5)
        for group in groups
    ]
    events = run_official_at(
        module_node.address,
        client_home,
        {"scenario": "produce", "topics": ["ordered"], "messages": sends},
    )
    assert sum(e["event"] == "sent" for e in events) == len(sends)
    seen: dict[str, list[tuple[int, str]]] = {}
    for queue_id in range(QUEUES):
        _, messages, _ = pull(messaging, "ordered", queue_id, 0, group="fifo-reader")
        for m in messages:
            group = m.system_properties.message_group
            seen.setdefault(group, []).append((queue_id, m.body.decode()))
    assert sorted(seen) == sorted(groups)
    for group, found in seen.items():
        assert {queue_id for queue_id, _ in found} == {hashed_queue(group, QUEUES)}
        assert [body for _, body in found] == [f"{group}:{i}" for i in range(5)]  # in order
    assert len({hashed_queue(g, QUEUES) for g in groups}) > 1  # the groups spread


def test_the_queue_a_request_names_is_ignored_unless_pinned(module_node, grpc_stubs):
    _, admin = grpc_stubs
    create_topic(admin, "named", queues=QUEUES)
    raw = grpc.insecure_channel(module_node.address)  # no ferrymq header: the official way
    unpinned = service_pb2_grpc.MessagingServiceStub(raw)
    try:
        for i in range(8):
            sent = unpinned.SendMessage(
                rpc.SendMessageRequest(messages=[message("named", b"x", f"U{i}", queue_id=3)])
            )
            assert sent.status.code == pb.OK, sent.status
        assert per_queue(admin, "named") == [2, 2, 2, 2]  # round robin, queue_id ignored

        def pinned(queue_id: int, message_id: str) -> pb.Status:
            request = rpc.SendMessageRequest(
                messages=[message("named", b"x", message_id, queue_id=queue_id)]
            )
            return unpinned.SendMessage(request, metadata=[PINNED_QUEUE]).status

        assert pinned(3, "P1").code == pb.OK
        assert pinned(0, "P2").code == pb.OK
        assert per_queue(admin, "named") == [3, 2, 2, 3]
        refused = pinned(QUEUES, "P3")
        assert refused.code == pb.BAD_REQUEST and "queue 4 does not exist" in refused.message
    finally:
        raw.close()

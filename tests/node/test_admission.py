"""The admission rules of a produced message (``node.admission``), each on its own: every
refusal with its code, the queue a message gets, and the codes of the store's refusals."""

from __future__ import annotations

import asyncio
import itertools
import zlib
from types import SimpleNamespace

import pytest

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.admission import (
    INVALID_MESSAGE_CODES,
    STORE_STATUS_CODES,
    Admission,
    check_batch_bytes,
    check_batch_count,
    check_body_size,
    check_message_type,
    check_queue,
    check_type_text,
    fifo_queue,
    hashed_queue,
    store_refusal,
)
from node.rpc_status import InvalidRequest
from node.topics import MessageType, Permission, TopicConfig, TopicError, TopicTable
from store.config import StoreConfig
from store.message import Message
from store.message_store import MessageStore
from store.results import PutResult, PutStatus

FIFO = TopicConfig("fifo", queue_count=4, message_type=MessageType.FIFO)
NORMAL = TopicConfig("normal", queue_count=4)
READ_ONLY = TopicConfig("frozen", queue_count=1, permission=Permission.READ)


def code_of(check, *args) -> int:
    with pytest.raises(InvalidRequest) as refused:
        check(*args)
    return refused.value.code


def admission(is_master: bool = True, master=None) -> Admission:
    store = SimpleNamespace(
        is_master=is_master,
        config=SimpleNamespace(max_message_body_bytes=100, max_batch_bytes=1000),
    )
    routing = SimpleNamespace(state=SimpleNamespace(master_of=lambda group: master))
    return Admission(store, TopicTable([FIFO, NORMAL, READ_ONLY]), routing, "g1")


def test_a_master_admits_and_a_slave_refuses_naming_its_master():
    admission().check_master()
    master = SimpleNamespace(node_id="n2", grpc_address="10.0.0.2:8081")
    with pytest.raises(InvalidRequest) as refused:
        admission(is_master=False, master=master).check_master()
    assert refused.value.code == pb.HA_NOT_AVAILABLE
    assert "n2 at 10.0.0.2:8081" in str(refused.value)
    with pytest.raises(InvalidRequest, match="being elected"):
        admission(is_master=False).check_master()


def test_a_topic_must_be_well_named_exist_and_take_writes():
    def writable(name: str) -> TopicConfig:
        return asyncio.run(admission().writable_topic(name))

    assert writable("fifo") is FIFO
    with pytest.raises(TopicError) as bad_name:
        writable("bad name")
    assert bad_name.value.reason == "ILLEGAL_TOPIC"
    with pytest.raises(TopicError) as missing:
        writable("absent")
    assert missing.value.reason == "TOPIC_NOT_FOUND"
    assert code_of(writable, "frozen") == pb.FORBIDDEN


def test_limits_are_the_stores():
    assert (admission().body_limit, admission().batch_limit) == (100, 1000)


def test_batch_count_and_bytes():
    check_batch_count(1, 8)
    check_batch_count(8, 8)
    assert code_of(check_batch_count, 0, 8) == pb.BAD_REQUEST
    assert code_of(check_batch_count, -1, 8) == pb.BAD_REQUEST
    assert code_of(check_batch_count, 9, 8) == pb.BAD_REQUEST
    check_batch_bytes(1000, 1000)
    assert code_of(check_batch_bytes, 1001, 1000) == pb.PAYLOAD_TOO_LARGE


def test_body_size():
    check_body_size(1, 100)
    check_body_size(100, 100)
    assert code_of(check_body_size, 0, 100) == pb.MESSAGE_BODY_EMPTY
    assert code_of(check_body_size, 101, 100) == pb.MESSAGE_BODY_TOO_LARGE


def test_message_type_must_be_the_topics():
    check_message_type("fifo", pb.FIFO, pb.FIFO)
    assert code_of(check_message_type, "fifo", pb.FIFO, pb.NORMAL) == (
        pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    )
    with pytest.raises(InvalidRequest, match="unknown type 99"):
        check_message_type("fifo", pb.FIFO, 99)
    # Encoded properties: the exact text, as the C scan compares it.
    check_type_text("2", "2")
    for declared in ("1", "02", "", None):
        assert code_of(check_type_text, declared, "2") == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE


def test_a_group_keeps_its_queue_by_crc32():
    # The hash must never change: existing groups would move to another queue.
    for group in ("g", "orders-17", "ünïcode"):
        assert hashed_queue(group, 7) == zlib.crc32(group.encode()) % 7
        assert fifo_queue(group, 7) == hashed_queue(group, 7)
    assert code_of(fifo_queue, "", 4) == pb.ILLEGAL_MESSAGE_GROUP
    assert code_of(fifo_queue, None, 4) == pb.ILLEGAL_MESSAGE_GROUP


def test_send_queue():
    send_queue = admission().send_queue
    fifo = MessageType.FIFO
    assert send_queue(FIFO, fifo, "g", 3) == hashed_queue("g", 4)  # the group wins
    assert send_queue(FIFO, fifo, "g", None) == hashed_queue("g", 4)
    assert code_of(send_queue, FIFO, fifo, "", 0) == pb.ILLEGAL_MESSAGE_GROUP
    normal = MessageType.NORMAL
    assert send_queue(NORMAL, normal, "", 3) == 3  # the queue a pinning sender names
    assert code_of(send_queue, NORMAL, normal, "", 4) == pb.BAD_REQUEST
    assert code_of(send_queue, NORMAL, normal, "", -1) == pb.BAD_REQUEST
    assert send_queue(NORMAL, normal, "g", None) == hashed_queue("g", 4)  # the node's choice
    turns = [send_queue(NORMAL, normal, "", None) for _ in range(8)]
    assert sorted(turns) == [0, 0, 1, 1, 2, 2, 3, 3]  # round robin
    assert all((b - a) % 4 == 1 for a, b in itertools.pairwise(turns))


def test_a_queue_must_exist():
    check_queue(NORMAL, 0)
    check_queue(NORMAL, 3)
    assert code_of(check_queue, NORMAL, 4) == pb.BAD_REQUEST
    assert code_of(check_queue, NORMAL, -1) == pb.BAD_REQUEST


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        ("TOPIC_INVALID", pb.ILLEGAL_TOPIC),
        ("BODY_TOO_LARGE", pb.MESSAGE_BODY_TOO_LARGE),
        ("PROPERTIES_TOO_LARGE", pb.MESSAGE_PROPERTIES_TOO_LARGE),
        ("PROPERTY_INVALID", pb.ILLEGAL_MESSAGE_PROPERTY_KEY),
        ("BATCH_TOO_LARGE", pb.BAD_REQUEST),
        ("QUEUE_ID_INVALID", pb.BAD_REQUEST),
    ],
)
def test_a_refused_message_maps_by_its_reason_not_its_text(reason, code):
    # The text names another reason: only the reason may decide the code.
    result = PutResult(
        PutStatus.MESSAGE_ILLEGAL, error="TOPIC_INVALID BODY_TOO_LARGE", reason=reason
    )
    refused = store_refusal(result)
    assert (refused.code, refused.message) == (code, "TOPIC_INVALID BODY_TOO_LARGE")


def test_every_put_status_but_ok_has_a_code():
    assert set(STORE_STATUS_CODES) == set(PutStatus) - {PutStatus.OK}
    assert set(INVALID_MESSAGE_CODES) <= {
        "TOPIC_INVALID",
        "BODY_TOO_LARGE",
        "PROPERTIES_TOO_LARGE",
        "PROPERTY_INVALID",
    }
    for put_status, code in STORE_STATUS_CODES.items():
        refused = store_refusal(PutResult(put_status, error="BODY_TOO_LARGE in the text"))
        assert refused.code == code
    assert store_refusal(PutResult(PutStatus.DISK_FULL)).message == "DISK_FULL"


def test_the_store_says_why_it_refused(tmp_path):
    config = StoreConfig(
        str(tmp_path),
        commitlog_segment_bytes=128 * 1024,
        max_message_body_bytes=8,
        consume_queue_entries_per_file=20,
        index_slot_count=7,
        index_entry_count=30,
    )
    store = MessageStore.open(config)
    try:
        result = store.put_messages([Message("T", b"x" * 9, 0)])
        assert (result.status, result.reason) == (PutStatus.MESSAGE_ILLEGAL, "BODY_TOO_LARGE")
        assert store_refusal(result).code == pb.MESSAGE_BODY_TOO_LARGE
        result = store.put_messages([Message("bad topic", b"x", 0)])
        assert store_refusal(result).code == pb.ILLEGAL_TOPIC
    finally:
        store.shutdown()

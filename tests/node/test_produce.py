"""Data.Produce through a real node: stored records, and a precise status for every bad one."""

from __future__ import annotations

import zlib

import grpc
import pytest

from ferrymq.client.messages import Message, decode_records
from ferrymq.client.produce_records import encode_record
from ferrymq.codec.produce_records import PRODUCE_HEAD
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.ferrymq import admin_pb2 as api
from ferrymq.protocol.ferrymq import data_pb2 as data
from ferrymq.protocol.ferrymq import data_pb2_grpc
from tests.support.rpc import create_topic, stubs

BORN_MS = 1_700_000_000_123


@pytest.fixture(scope="module")
def produce_stub(module_node):
    """The Data stub of the module's node, with topics ``orders`` (2 queues), ``fifo`` and
    ``later`` (delay), and group ``G``."""
    options = [("grpc.max_receive_message_length", 64 << 20)]
    channel = grpc.insecure_channel(module_node.address, options=options)
    _, _, admin = stubs(module_node.address)
    create_topic(admin, "orders", queues=2)
    create_topic(admin, "fifo", queues=4, message_type=api.FIFO)
    create_topic(admin, "later", queues=1, message_type=api.DELAY)
    assert admin.CreateGroup(api.CreateGroupRequest(group=api.Group(name="G"))).status.code == 0
    return data_pb2_grpc.DataStub(channel)


def record(body: bytes = b"x", message_type: int = pb.NORMAL, **fields) -> bytes:
    fields.setdefault("message_id", f"ID{zlib.crc32(body):08X}")
    return encode_record(Message("ignored", body, **fields), message_type, BORN_MS)


def raw_record(body: bytes, properties: bytes) -> bytes:
    return PRODUCE_HEAD.pack(len(body), len(properties), BORN_MS) + body + properties


def produce(stub, records: list[bytes], topic="orders", queue_id=0, atomic=False, count=None):
    request = data.ProduceRequest(
        topic=topic,
        queue_id=queue_id,
        atomic=atomic,
        count=len(records) if count is None else count,
        records=b"".join(records),
    )
    return stub.Produce(request, timeout=30)


def fetch_all(stub, topic: str, queue_id: int):
    answer = stub.Fetch(
        data.FetchRequest(group="G", topic=topic, queue_id=queue_id, offset=0, max_messages=4096)
    )
    return decode_records(answer.records)


def codes(answer) -> dict[int, int]:
    return {f.index: f.code for f in answer.failures}


def test_produce_stores_records_as_sendmessage_would(produce_stub):
    before = len(fetch_all(produce_stub, "orders", 1))
    answer = produce(
        produce_stub,
        [
            record(b"a", message_id="M-A", tag="t1", keys=["k1", "k2"], properties={"p": "v"}),
            record(b"b", message_id="M-B"),
        ],
        queue_id=1,
    )
    assert answer.code == pb.OK and not answer.failures
    assert list(answer.offsets) == [before, before + 1]
    stored = fetch_all(produce_stub, "orders", 1)[before:]
    assert [s.body for s in stored] == [b"a", b"b"]
    first = stored[0]
    assert first.properties == {
        "UNIQ_KEY": "M-A",
        "__MSG_TYPE": str(pb.NORMAL),
        "TAGS": "t1",
        "KEYS": "k1 k2",
        "p": "v",
    }
    assert first.keys == ["k1", "k2"] and first.born_timestamp_ms == BORN_MS
    assert first.born_host[:4] == bytes([127, 0, 0, 1])  # the peer's address


def test_a_request_stored_whole_is_stored_as_one_stored_record_by_record(produce_stub):
    """A request whose records all pass is appended as one run from its bytes; one with a
    refused record is read record by record. Both store the same records."""
    good = [
        record(b"r%d" % i, message_id=f"R{i}", tag="t", keys=[f"k{i}"], properties={"p": "v"})
        for i in range(3)
    ]
    before = len(fetch_all(produce_stub, "orders", 1))
    whole = produce(produce_stub, good, queue_id=1)
    mixed = produce(produce_stub, [*good, record(b"bad", tag="a|b")], queue_id=1)
    assert whole.code == pb.OK and list(whole.offsets) == [before + i for i in range(3)]
    assert codes(mixed) == {3: pb.ILLEGAL_MESSAGE_TAG}
    assert list(mixed.offsets) == [before + 3 + i for i in range(3)] + [-1]
    stored = fetch_all(produce_stub, "orders", 1)[before:]
    as_run, one_by_one = stored[:3], stored[3:]
    for first, second in zip(as_run, one_by_one, strict=True):
        assert second.queue_offset == first.queue_offset + 3
        for field in ("body", "properties", "born_timestamp_ms", "born_host", "flag", "sys_flag"):
            assert getattr(first, field) == getattr(second, field), field
        assert first.size == second.size


def test_fifo_records_go_to_their_group_queue(produce_stub):
    answer = produce(
        produce_stub,
        [record(b"g%d" % i, pb.FIFO, message_id=f"F{i}", message_group="g1") for i in range(3)]
        + [record(b"none", pb.FIFO, message_id="F-none")],
        topic="fifo",
        queue_id=99,  # ignored for FIFO topics
    )
    assert codes(answer) == {3: pb.ILLEGAL_MESSAGE_GROUP}
    queue = zlib.crc32(b"g1") % 4
    assert [s.body for s in fetch_all(produce_stub, "fifo", queue)][-3:] == [b"g0", b"g1", b"g2"]
    assert list(answer.offsets)[:3] == [answer.offsets[0] + i for i in range(3)]


def test_each_bad_record_gets_its_own_code_and_the_good_ones_are_stored(produce_stub):
    before = len(fetch_all(produce_stub, "orders", 0))
    big = b"z" * (4 * 1024 * 1024 + 1)
    batch = [
        record(b"ok-0"),
        record(big),  # 1: over the body limit
        record(b""),  # 2: empty body
        record(b"bad-tag", tag="a|b"),  # 3
        raw_record(b"no-id", b"__MSG_TYPE\x011\x02"),  # 4: no UNIQ_KEY
        record(b"fifo-type", pb.FIFO, message_group="g"),  # 5: wrong type for the topic
        raw_record(b"keys", b"UNIQ_KEY\x01K\x02__MSG_TYPE\x011\x02KEYS\x01a  b\x02"),  # 6
        raw_record(b"timer", b"UNIQ_KEY\x01T\x02__MSG_TYPE\x011\x02TIMER_DELIVER_MS\x011\x02"),
        raw_record(b"pairs", b"UNIQ_KEY\x01P\x01Q\x02__MSG_TYPE\x011\x02"),  # 8: not pairs
        raw_record(b"utf8", b"UNIQ_KEY\x01\xff\x02__MSG_TYPE\x011\x02"),  # 9: not UTF-8
        raw_record(
            b"big-props", b"UNIQ_KEY\x01B\x02__MSG_TYPE\x011\x02x\x01" + b"v" * 40000 + b"\x02"
        ),
        record(b"ok-11"),
    ]
    # properties_length is 16 bits: 40 KB fits it and is over the store's 32,767 limit.
    answer = produce(produce_stub, batch)
    assert codes(answer) == {
        1: pb.MESSAGE_BODY_TOO_LARGE,
        2: pb.MESSAGE_BODY_EMPTY,
        3: pb.ILLEGAL_MESSAGE_TAG,
        4: pb.ILLEGAL_MESSAGE_ID,
        5: pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        6: pb.ILLEGAL_MESSAGE_KEY,
        7: pb.ILLEGAL_MESSAGE_PROPERTY_KEY,
        8: pb.ILLEGAL_MESSAGE_PROPERTY_KEY,
        9: pb.ILLEGAL_MESSAGE_PROPERTY_KEY,
        10: pb.MESSAGE_PROPERTIES_TOO_LARGE,
    }
    assert answer.code == pb.MESSAGE_BODY_TOO_LARGE  # the first failure's
    assert answer.offsets[0] == before and answer.offsets[11] == before + 1
    assert all(answer.offsets[i] == -1 for i in range(1, 11))
    assert [s.body for s in fetch_all(produce_stub, "orders", 0)[before:]] == [b"ok-0", b"ok-11"]


@pytest.mark.parametrize(
    ("last", "code"),
    [
        (record(b"z" * (4 * 1024 * 1024 + 1)), pb.MESSAGE_BODY_TOO_LARGE),
        (record(b""), pb.MESSAGE_BODY_EMPTY),
        (record(b"bad-tag", tag="a|b"), pb.ILLEGAL_MESSAGE_TAG),
    ],
    ids=["body-too-large", "empty-body", "bad-tag"],
)
def test_a_refused_last_record_gets_its_own_code(produce_stub, last, code):
    # The request's length is checked against the end of its last record, refused or not.
    before = len(fetch_all(produce_stub, "orders", 0))
    alone = produce(produce_stub, [last])
    assert alone.code == code and codes(alone) == {0: code}
    answer = produce(produce_stub, [record(b"first"), last])
    assert codes(answer) == {1: code}
    assert answer.offsets[0] == before and answer.offsets[1] == -1
    assert [s.body for s in fetch_all(produce_stub, "orders", 0)[before:]] == [b"first"]


def test_an_atomic_request_with_a_bad_record_stores_nothing(produce_stub):
    before = len(fetch_all(produce_stub, "orders", 0))
    answer = produce(
        produce_stub, [record(b"a1"), record(b"a2", tag=" "), record(b"a3")], atomic=True
    )
    assert answer.code == pb.ILLEGAL_MESSAGE_TAG
    assert codes(answer) == {
        0: pb.ILLEGAL_MESSAGE_TAG,
        1: pb.ILLEGAL_MESSAGE_TAG,
        2: pb.ILLEGAL_MESSAGE_TAG,
    }
    assert "not stored" in answer.failures[0].message and "record 1" in answer.failures[0].message
    assert list(answer.offsets) == [-1, -1, -1]
    assert len(fetch_all(produce_stub, "orders", 0)) == before


def test_malformed_record_bytes_refuse_that_record_and_the_rest(produce_stub):
    before = len(fetch_all(produce_stub, "orders", 0))
    good = record(b"before-the-break")
    cut = record(b"cut-short")[:-3]
    answer = produce(produce_stub, [good, cut], count=3)
    assert codes(answer) == {1: pb.BAD_REQUEST, 2: pb.BAD_REQUEST}
    assert answer.offsets[0] == before
    lying = PRODUCE_HEAD.pack(10**6, 0, 0) + b"tiny"  # a body length beyond the request
    assert codes(produce(produce_stub, [lying])) == {0: pb.BAD_REQUEST}
    trailing = produce(produce_stub, [record(b"t1"), record(b"t2")], count=1)  # bytes left over
    assert trailing.code == pb.BAD_REQUEST and codes(trailing) == {0: pb.BAD_REQUEST}
    negative = PRODUCE_HEAD.pack(-5, 0, 0)
    assert codes(produce(produce_stub, [negative])) == {0: pb.BAD_REQUEST}
    assert [s.body for s in fetch_all(produce_stub, "orders", 0)[before:]] == [b"before-the-break"]


def test_request_level_refusals_name_every_record(produce_stub):
    two = [record(b"r1"), record(b"r2")]
    for topic, code in (
        ("bad topic!", pb.ILLEGAL_TOPIC),
        ("", pb.ILLEGAL_TOPIC),
        ("missing", pb.TOPIC_NOT_FOUND),
        ("later", pb.UNSUPPORTED),  # DELAY topics: SendMessage parks them
    ):
        answer = produce(produce_stub, two, topic=topic)
        assert answer.code == code, topic
        assert codes(answer) == {0: code, 1: code} and list(answer.offsets) == [-1, -1]
    assert produce(produce_stub, two, queue_id=7).code == pb.BAD_REQUEST  # no such queue
    assert produce(produce_stub, two, count=0).code == pb.BAD_REQUEST
    assert produce(produce_stub, two, count=5000).code == pb.BAD_REQUEST

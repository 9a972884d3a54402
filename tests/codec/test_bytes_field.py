"""A FetchResponse with its records appended as the store gathered them
(``ferrymq.codec.bytes_field``) reads as protobuf's own encoding of it, and the reader
takes the records out of any encoding of one without a copy; the node takes a
ProduceRequest's records out of its frame the same way."""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from ferrymq.client.errors import MALFORMED_ANSWER, FerryError
from ferrymq.client.produce_records import ProduceCall
from ferrymq.client.remoting_channel import fetch_answer
from ferrymq.codec import bytes_field
from ferrymq.codec.remoting import RemotingCommand
from ferrymq.protocol.ferrymq import data_pb2 as data

heads = st.builds(
    data.FetchResponse,
    code=st.integers(0, 2**31 - 1),
    message=st.text(max_size=20),
    count=st.integers(0, 2**31 - 1),
    next_offset=st.integers(-(2**63), 2**63 - 1),
    min_offset=st.integers(-(2**63), 2**63 - 1),
    max_offset=st.integers(-(2**63), 2**63 - 1),
)
record_lists = st.lists(st.binary(max_size=300), max_size=6)


def joined(head: data.FetchResponse, records: list[bytes]) -> data.FetchResponse:
    whole = data.FetchResponse()
    whole.CopyFrom(head)
    whole.records = b"".join(records)
    return whole


def encode(head: data.FetchResponse, records: list[bytes]) -> bytes:
    return bytes_field.encode(head.SerializeToString(), records, bytes_field.FETCH_RECORDS_FIELD)


def decode(body: bytes) -> tuple[data.FetchResponse, memoryview]:
    head, records = bytes_field.split(body, bytes_field.FETCH_RECORDS_FIELD)
    return data.FetchResponse.FromString(head), records


def test_the_records_fields_are_the_protocols():
    assert data.FetchResponse.DESCRIPTOR.fields_by_name["records"].number == (
        bytes_field.FETCH_RECORDS_FIELD
    )
    assert data.ProduceRequest.DESCRIPTOR.fields_by_name["records"].number == (
        bytes_field.PRODUCE_RECORDS_FIELD
    )


@given(heads, record_lists)
def test_the_encoding_is_the_same_fetch_response_protobuf_reads(head, records):
    encoded = encode(head, records)
    assert data.FetchResponse.FromString(encoded) == joined(head, records)


@given(heads, record_lists)
def test_the_records_come_out_of_either_encoding_as_they_went_in(head, records):
    for encoded in (
        encode(head, records),
        joined(head, records).SerializeToString(),  # a node of an older release
    ):
        read_head, read_records = decode(encoded)
        assert isinstance(read_records, memoryview)
        assert read_records == b"".join(records)
        assert read_head == head


def test_a_records_field_given_twice_reads_as_protobuf_reads_it():
    head = data.FetchResponse(code=1, next_offset=7)
    twice = encode(head, [b"first"]) + encode(data.FetchResponse(), [b"last"])
    read_head, records = decode(twice)
    assert bytes(records) == data.FetchResponse.FromString(twice).records == b"last"
    assert (read_head.code, read_head.next_offset) == (1, 7)


def test_a_field_the_reader_does_not_know_is_kept_for_protobuf():
    unknown = bytes([9 << 3 | 0, 5, 10 << 3 | 5, 1, 2, 3, 4, 11 << 3 | 1]) + bytes(8)
    encoded = unknown + encode(data.FetchResponse(code=3), [b"r"])
    head, records = decode(encoded)
    assert (head.code, bytes(records)) == (3, b"r")


@pytest.mark.parametrize(
    "body",
    [
        bytes([3 << 3 | 2, 10]) + b"short",  # a field past the end
        bytes([1 << 3 | 0, 0x80]),  # a varint cut short
        bytes([1 << 3 | 0]) + b"\xff" * 11,  # a varint longer than 64 bits
        bytes([1 << 3 | 3]),  # a group
        bytes([0 << 3 | 0, 1]),  # field number 0
    ],
)
def test_a_body_that_is_no_fetch_response_is_a_malformed_answer(body):
    with pytest.raises((ValueError, DecodeError)):  # the split's, or protobuf's
        decode(body)
    with pytest.raises(FerryError) as refused:
        fetch_answer(RemotingCommand(0, body=body))
    assert refused.value.code == MALFORMED_ANSWER


produce_heads = st.builds(
    data.ProduceRequest,
    topic=st.text(max_size=20),
    queue_id=st.integers(-(2**31), 2**31 - 1),
    atomic=st.booleans(),
    count=st.integers(-(2**31), 2**31 - 1),
)


@given(produce_heads, st.binary(max_size=600), st.booleans())
def test_a_produce_requests_records_come_out_as_a_view_and_the_rest_as_protobuf_reads_it(
    head, records, records_first
):
    """What the node's FERRY_PRODUCE handler reads: protobuf's own encoding, in either
    order of the fields."""
    whole = data.ProduceRequest()
    whole.CopyFrom(head)
    whole.records = records
    only_records = data.ProduceRequest(records=records).SerializeToString()
    for body in (
        whole.SerializeToString(),
        only_records + head.SerializeToString() if records_first else whole.SerializeToString(),
    ):
        read_head, read_records = bytes_field.split(body, bytes_field.PRODUCE_RECORDS_FIELD)
        assert isinstance(read_records, memoryview)
        assert read_records == records
        assert data.ProduceRequest.FromString(read_head) == head


@given(produce_heads, st.binary(max_size=600))
def test_the_sdks_produce_body_is_protobufs_encoding_of_its_message(head, records):
    call = ProduceCall(head.topic, head.queue_id, head.atomic, head.count, records)
    assert call.body() == call.message().SerializeToString()
    assert data.ProduceRequest.FromString(call.body()) == call.message()


def split_outcome(split, body: bytes, field: int) -> object:
    try:
        head, value = split(body, field)
    except ValueError as error:
        return "ValueError", str(error)
    return head, bytes(value)


@given(st.binary(max_size=80), st.integers(0, 7))
def test_the_c_walk_splits_any_bytes_as_its_twin(body, field):
    """Its twin is the specification; each error is the twin's, word for word."""
    assert split_outcome(bytes_field.split, body, field) == split_outcome(
        bytes_field.split_in_python, body, field
    )


@given(produce_heads, st.binary(max_size=600), st.binary(max_size=30))
def test_the_c_walk_splits_encoded_messages_as_its_twin(head, records, tail):
    """Well-formed messages, one cut short or run on with stray bytes, and varints of every
    length (ten bytes and overlong ones among them)."""
    whole = data.ProduceRequest()
    whole.CopyFrom(head)
    whole.records = records
    encoded = whole.SerializeToString()
    for body in (
        encoded,
        encoded[: len(encoded) // 2],
        encoded + tail,
        b"\x08" + b"\xff" * 9 + b"\x01",
        b"\x08" + b"\xff" * 10 + b"\x01",
        b"\x2a" + b"\xff" * 9 + b"\x7f",
    ):
        assert split_outcome(bytes_field.split, body, 5) == split_outcome(
            bytes_field.split_in_python, body, 5
        )

"""The wire format's C loops (ferrymq/codec/_speedups.c, with the property parser
ferrymq/codec/_properties.h) against their Python twins, on generated input: the scan of
``Data.Produce`` records, the property decoder, and the Spark source's walk of a
``Data.Fetch`` answer into column buffers. The store's loops are checked the same
way in tests/store/test_speedups.py.

Each C function must return exactly what its twin returns, and decline (leave the record
to the twin) exactly where the twin raises: the twins are the specification."""

from __future__ import annotations

import re
import struct
import zlib

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.client.errors import FerryError
from ferrymq.client.messages import _RECORD_READER as RECORD_READER
from ferrymq.client.messages import Message as SdkMessage
from ferrymq.client.messages import (
    ReceivedMessage,
    new_record_reader,
    received_in_python,
    received_messages,
    record_reader_arguments,
)
from ferrymq.client.produce_records import _RECORD_ENCODER as RECORD_ENCODER
from ferrymq.client.produce_records import TYPE_TEXT as TYPE_TEXT_OF
from ferrymq.client.produce_records import encode_records, encode_records_in_python
from ferrymq.codec import _speedups as codec_speedups
from ferrymq.codec import commitlog_record
from ferrymq.codec.commitlog_record import OFFSET_BODY_CRC
from ferrymq.codec.produce_records import PRODUCE_HEAD, PRODUCE_SPAN
from ferrymq.codec.properties import (
    PROPERTIES_MAX_BYTES,
    PROPERTY_DELIVERY_TIME_MS,
    PROPERTY_KEYS,
    PROPERTY_LITE_TOPIC,
    PROPERTY_MESSAGE_GROUP,
    PROPERTY_MESSAGE_TYPE,
    PROPERTY_PRIORITY,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_UNIQ_KEY,
    decode_properties,
    decode_properties_in_python,
)
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.spark.fetch_columns import (
    CorruptRecord,
    fetch_columns,
    fetch_columns_in_c,
    fetch_columns_in_python,
)
from node.message_rules import produce_spans, produce_spans_in_python, scan_produce_records
from tests.support.fetch_answers import (
    CORRUPTION_MESSAGES,
    CORRUPTIONS,
    FIRST_OFFSET,
    QUEUE_ID,
    TOPIC,
    VALUE_TEXT,
    comparable,
    fetch_answers,
    record,
)
from tests.support.produce_scan import BODY_LIMIT, TYPE_TEXT, read_in_python

# Examples of the longer twin checks in make test; their native fuzz targets
# (tests/support/native_fuzz.py) take these parsers much further in make fuzz.
TWIN_EXAMPLES = 600

# Characters that decide checks: separators, '|', ASCII and Unicode whitespace (str.strip's
# and re's \s: U+001C..U+001F and U+3000 among them), non-ASCII letters, and plain ones.
TRICKY = "ab| \t\n\x0b\x1c\x1f\x85\xa0\u3000é€\U0001f600\x01\x02"
NAMES = [
    PROPERTY_UNIQ_KEY,
    PROPERTY_MESSAGE_TYPE,
    PROPERTY_TAGS,
    PROPERTY_KEYS,
    PROPERTY_MESSAGE_GROUP,
    PROPERTY_DELIVERY_TIME_MS,
    PROPERTY_TRANSACTION_ID,
    "user",
    "",
]


def values() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(
            ["", TYPE_TEXT, "2", "TagA", "id-1", "k1 k2", " k", "k ", "k  k", "k\tk", "k\u3000k"]
        ),
        st.sampled_from(["a", "\t", " ", "\x1c", "\u3000", "é", "|"]).map(lambda c: f"k{c}k"),
        st.text(alphabet=TRICKY, max_size=6),
    )


# Strategies the composites below draw from, made once: made inside them, each draw built
# and validated its strategies again, most of these tests' time.
_INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
_PAIR = st.tuples(st.sampled_from(NAMES), values())
_PAIRS = st.lists(_PAIR, max_size=6)
_FEW_PAIRS = st.lists(_PAIR, max_size=2)


@st.composite
def properties_bytes(draw) -> bytes:
    """Mostly well-formed pairs (so the checks after parsing are reached), sometimes not."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=12))  # invalid UTF-8 and odd separators too
    pairs = draw(_PAIRS)
    if draw(st.booleans()):  # the usual record: a message id and the topic's type
        pairs = [(PROPERTY_UNIQ_KEY, "id-1"), (PROPERTY_MESSAGE_TYPE, TYPE_TEXT), *pairs[:2]]
    text = "".join(f"{name}\x01{value}\x02" for name, value in pairs)
    if text and draw(st.integers(0, 7)) == 0:
        text = text[:-1]  # no final separator
    return text.encode()


@st.composite
def produce_request(draw) -> tuple[bytes, int]:
    records = []
    for _ in range(draw(st.integers(0, 5))):
        body = draw(_PRODUCE_BODY)
        properties = draw(_PROPERTIES_BYTES)
        born = draw(_INT64)
        body_length = len(body) if draw(st.integers(0, 15)) else draw(st.integers(-3, 100))
        records.append(PRODUCE_HEAD.pack(body_length, len(properties), born) + body + properties)
    data = b"".join(records)
    if data and draw(st.integers(0, 9)) == 0:
        data = data[: draw(st.integers(0, len(data) - 1))]  # cut short
    count = max(0, len(records) + draw(st.integers(-1, 2)))
    return data, count


_PRODUCE_BODY = st.binary(max_size=BODY_LIMIT + 2)
_PROPERTIES_BYTES = properties_bytes()


@settings(max_examples=TWIN_EXAMPLES, deadline=None)
@given(produce_request())
def test_the_c_scan_reads_and_declines_exactly_as_python_does(request):
    records, count = request
    assert scan_produce_records(records, count, BODY_LIMIT, TYPE_TEXT) == read_in_python(
        records, count
    )


# A body within the limit, or (one in ten) one byte over it.
_USUAL_BODIES = {over: st.binary(min_size=1, max_size=BODY_LIMIT + over) for over in (False, True)}


@st.composite
def usual_produce_request(draw) -> tuple[bytes, int]:
    """Records that mostly all pass: the requests ``produce_spans`` takes whole."""
    records = []
    for _ in range(draw(st.integers(1, 5))):
        body = draw(_USUAL_BODIES[draw(st.integers(0, 9)) == 0])
        pairs = [(PROPERTY_UNIQ_KEY, "id-1"), (PROPERTY_MESSAGE_TYPE, TYPE_TEXT)]
        pairs += draw(_FEW_PAIRS)
        text = "".join(f"{name}\x01{value}\x02" for name, value in draw(st.permutations(pairs)))
        properties = text.encode()
        born = draw(_INT64)
        records.append(PRODUCE_HEAD.pack(len(body), len(properties), born) + body + properties)
    data = b"".join(records)
    tail = draw(st.sampled_from([b"", b"", b"", b"x"]))  # bytes after the last record
    return data + tail, len(records) + draw(st.sampled_from([0, 0, 0, -1, 1]))


@settings(max_examples=TWIN_EXAMPLES, deadline=None)
@given(st.one_of(produce_request(), usual_produce_request()))
def test_produce_spans_in_c_are_their_python_twin(request):
    records, count = request
    expected = produce_spans_in_python(records, count, BODY_LIMIT, TYPE_TEXT)
    assert produce_spans(records, count, BODY_LIMIT, TYPE_TEXT) == expected
    # The remoting door hands the records on as a view of the request's frame.
    framed = memoryview(b"frame head" + records)[10:]
    assert produce_spans(framed, count, BODY_LIMIT, TYPE_TEXT) == expected
    assert produce_spans_in_python(framed, count, BODY_LIMIT, TYPE_TEXT) == expected


def test_produce_spans_place_each_record_and_decline_any_refusal():
    good = b"UNIQ_KEY\x01id\x02__MSG_TYPE\x011\x02TAGS\x01TagA\x02"
    records = b"".join(
        PRODUCE_HEAD.pack(len(body), len(good), born) + body + good
        for body, born in ((b"one", -5), (b"three", 1 << 40))
    )
    spans = produce_spans(records, 2, BODY_LIMIT, TYPE_TEXT)
    assert list(PRODUCE_SPAN.iter_unpack(spans)) == [
        (14, 3, len(good), -5),
        (14 + 3 + len(good) + 14, 5, len(good), 1 << 40),
    ]
    assert PRODUCE_SPAN.size == codec_speedups.PRODUCE_SPAN_SIZE
    huge = good + b"big\x01" + b"v" * PROPERTIES_MAX_BYTES + b"\x02"  # fits uint16, not the log
    refused = [
        records + b"x",  # bytes after the last record
        records.replace(b"TagA", b"A|B"),  # one record a check refuses
        PRODUCE_HEAD.pack(1, len(huge), 0) + b"b" + huge,
    ]
    for request in refused:
        count = 1 if request.startswith(PRODUCE_HEAD.pack(1, len(huge), 0)) else 2
        assert produce_spans(request, count, BODY_LIMIT, TYPE_TEXT) is None
        assert produce_spans_in_python(request, count, BODY_LIMIT, TYPE_TEXT) is None
    assert produce_spans(records, 3, BODY_LIMIT, TYPE_TEXT) is None  # a record short


@pytest.mark.parametrize("extra", [0, 31, 40])
def test_produce_spans_check_many_properties_as_few(extra):
    """Up to 32 pairs are checked on the bytes, more through a dict: the same answers."""
    good = b"UNIQ_KEY\x01id\x02__MSG_TYPE\x011\x02" + b"".join(
        b"p%d\x01v\x02" % i for i in range(extra)
    )
    for properties in (good, good + b"p0\x01again\x02", good + b"TAGS\x01 \x02"):
        records = PRODUCE_HEAD.pack(1, len(properties), 0) + b"b" + properties
        expected = produce_spans_in_python(records, 1, BODY_LIMIT, TYPE_TEXT)
        assert produce_spans(records, 1, BODY_LIMIT, TYPE_TEXT) == expected
        assert (expected is not None) == (properties == good) or extra == 0


def test_the_c_scan_reads_a_usual_record_and_leaves_each_refusal_to_python():
    good = b"UNIQ_KEY\x01id\x02__MSG_TYPE\x011\x02TAGS\x01TagA\x02KEYS\x01a b\x02"
    bad_tag = good.replace(b"TagA", b"A|B")
    records = b"".join(
        PRODUCE_HEAD.pack(len(b"body"), len(p), 7) + b"body" + p for p in (good, bad_tag, good)
    )
    first, second, third = scan_produce_records(records, 3, BODY_LIMIT, TYPE_TEXT)
    assert first[1:4] == (b"body", good, 7) and first[4][PROPERTY_KEYS] == "a b"
    assert second == first[0]  # where the refused record starts
    assert third[0] == len(records)
    assert scan_produce_records(records + b"x", 4, BODY_LIMIT, TYPE_TEXT)[3] == len(records)


def test_the_c_scan_reads_the_codecs_produce_head():
    """The C scanner's head size is the codec's layout, and the decoder every reader uses
    is the codec module's C function (one parser of the property encoding)."""
    assert codec_speedups.PRODUCE_HEAD_SIZE == PRODUCE_HEAD.size == 14
    assert decode_properties is codec_speedups.decode_properties


@settings(max_examples=1000, deadline=None)
@given(st.one_of(properties_bytes(), st.binary(max_size=16)))
def test_decode_properties_in_c_is_its_python_twin(raw):
    try:
        expected = decode_properties_in_python(raw)
    except UnicodeDecodeError:
        try:
            decode_properties(raw)
        except UnicodeDecodeError:
            return
        raise AssertionError("C decoded what Python refused") from None
    assert decode_properties(raw) == expected
    assert decode_properties(bytearray(raw)) == expected


# ---- fetch_columns: a Fetch answer into Arrow column buffers (the Spark source) ----------


def columns_or_refusal(records: bytes, end_offset: int) -> tuple | None:
    """The twin's columns, or None where it raises CorruptRecord (anything else fails)."""
    try:
        return comparable(fetch_columns_in_python(records, TOPIC, QUEUE_ID, end_offset))
    except CorruptRecord:
        return None


@settings(max_examples=TWIN_EXAMPLES, deadline=None)
@given(fetch_answers(name_value_separator=False))
def test_fetch_columns_in_c_is_its_python_twin(answer):
    """Absent, repeated and empty properties, pieces without 0x01, empty keys, non-ASCII
    text, end offsets that cut the answer anywhere, empty answers."""
    records, end_offset = answer
    expected = columns_or_refusal(records, end_offset)
    assert expected is not None
    assert comparable(fetch_columns_in_c(records, TOPIC, QUEUE_ID, end_offset)) == expected


@settings(max_examples=TWIN_EXAMPLES, deadline=None)
@given(fetch_answers(), st.data())
def test_fetch_columns_in_c_declines_exactly_where_the_twin_refuses(answer, data):
    """Damage anywhere (a byte changed, the answer cut or extended): the C returns the
    twin's columns or declines, and declines only where the twin raises CorruptRecord."""
    records, end_offset = answer
    damaged = bytearray(records)
    how = data.draw(st.sampled_from(["byte", "cut", "extend"]))
    if how == "byte" and damaged:
        damaged[data.draw(st.integers(0, len(damaged) - 1))] = data.draw(st.integers(0, 255))
    elif how == "cut" and damaged:
        del damaged[data.draw(st.integers(0, len(damaged) - 1)) :]
    else:
        damaged += data.draw(st.binary(max_size=100))
    records = bytes(damaged)
    expected = columns_or_refusal(records, end_offset)
    assert comparable(fetch_columns_in_c(records, TOPIC, QUEUE_ID, end_offset)) == expected


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_fetch_columns_in_c_declines_each_corruption_the_twin_refuses(corruption):
    good = b"".join(
        record(FIRST_OFFSET + i, b"x" * i, b"UNIQ_KEY\x01id\x02KEYS\x01a b\x02") for i in range(3)
    )
    records = CORRUPTIONS[corruption](good)
    with pytest.raises(CorruptRecord, match=re.escape(CORRUPTION_MESSAGES[corruption])):
        fetch_columns_in_python(records, TOPIC, QUEUE_ID, 1 << 62)
    assert fetch_columns_in_c(records, TOPIC, QUEUE_ID, 1 << 62) is None
    # Where the twin refuses, fetch_columns (C first) raises the twin's precise error.
    with pytest.raises(CorruptRecord, match=re.escape(CORRUPTION_MESSAGES[corruption])):
        fetch_columns(records, TOPIC, QUEUE_ID, 1 << 62)


def test_fetch_columns_in_c_checks_bodies_with_the_crc32c_package():
    """The codec's CRC32C (the header shared with the store) on bodies of every length
    around the 8-byte steps: a right CRC passes, a wrong one declines."""
    for length in range(0, 40):
        body = bytes(range(length))
        good = record(FIRST_OFFSET, body)
        assert fetch_columns_in_c(good, TOPIC, QUEUE_ID, 1 << 62).count == 1
        bad = good[:OFFSET_BODY_CRC] + struct.pack(">I", crc32c(body) ^ 1) + good[12:]
        assert fetch_columns_in_c(bad, TOPIC, QUEUE_ID, 1 << 62) is None


def test_fetch_columns_in_c_refuses_an_output_buffer_too_small_for_the_bodies():
    records = record(FIRST_OFFSET, b"body")
    names = (b"UNIQ_KEY", b"TAGS", b"KEYS", b" ", ())
    with pytest.raises(ValueError, match="body_data is shorter than records"):
        codec_speedups.fetch_columns(
            records, TOPIC.encode(), QUEUE_ID, 1 << 62, *names, bytearray(4)
        )


def utf8_edge_sequences() -> list[bytes]:
    """Every two-byte sequence with a non-ASCII first byte, and three- and four-byte ones
    around each lead byte's bounds (overlongs, surrogates, past U+10FFFF, cut short)."""
    edges = range(0x7F, 0xC1)
    sequences = [bytes((first, second)) for first in range(0x80, 0x100) for second in range(256)]
    sequences += [
        bytes((first, second, third))
        for first in range(0xE0, 0xF0)
        for second in edges
        for third in (0x41, 0x80, 0xBF, 0xC0)
    ]
    sequences += [
        bytes((first, second, third, fourth))
        for first in range(0xF0, 0xF8)
        for second in edges
        for third in (0x41, 0x80)
        for fourth in (0x80, 0xC0)
    ]
    return sequences


def test_fetch_columns_in_c_accepts_exactly_the_utf8_that_bytes_decode_accepts():
    """The C's own UTF-8 check (no str is built) against the rule the twin applies."""
    wrong = []
    for sequence in utf8_edge_sequences():
        records = record(FIRST_OFFSET, b"", b"name\x01" + sequence + b"\x02")
        try:
            sequence.decode()
            valid = True
        except UnicodeDecodeError:
            valid = False
        if (fetch_columns_in_c(records, TOPIC, QUEUE_ID, 1 << 62) is not None) != valid:
            wrong.append(sequence)
    assert wrong == []


def test_the_c_record_layout_is_the_codecs():
    """ferrymq/codec/_record_layout.h, which both extensions include, states
    commitlog_record's layout."""
    assert (
        codec_speedups.RECORD_HEADER_SIZE,
        codec_speedups.RECORD_MIN_SIZE,
        codec_speedups.MESSAGE_MAGIC,
        codec_speedups.BLANK_MAGIC,
        codec_speedups.OFFSET_BODY_CRC,
        codec_speedups.OFFSET_QUEUE_ID,
        codec_speedups.OFFSET_QUEUE_OFFSET,
        codec_speedups.OFFSET_STORE_TIMESTAMP,
        codec_speedups.OFFSET_BODY_LENGTH,
    ) == (
        commitlog_record.HEADER_SIZE,
        commitlog_record.MIN_RECORD_SIZE,
        commitlog_record.MESSAGE_MAGIC,
        commitlog_record.BLANK_MAGIC,
        commitlog_record.OFFSET_BODY_CRC,
        commitlog_record.OFFSET_QUEUE_ID,
        commitlog_record.OFFSET_QUEUE_OFFSET,
        commitlog_record.OFFSET_STORE_TIMESTAMP,
        commitlog_record.OFFSET_BODY_LENGTH,
    )
    # BORNTIMESTAMP, which commitlog_record places only by HEADER's order: after 8 fields.
    assert commitlog_record.HEADER.format[:9] == ">iIIiiqqi"
    assert struct.calcsize(">iIIiiqqi") == codec_speedups.OFFSET_BORN_TIMESTAMP


def _records(count: int) -> bytes:
    """``count`` small records as a master sends them, then a blank record."""
    record = struct.pack(
        ">iI", commitlog_record.MIN_RECORD_SIZE + 4, commitlog_record.MESSAGE_MAGIC
    )
    record += bytes(commitlog_record.MIN_RECORD_SIZE + 4 - len(record))
    blank = struct.pack(">iI", 16, commitlog_record.BLANK_MAGIC) + bytes(8)
    return record * count + blank


@settings(max_examples=1000, deadline=None)
@given(
    st.integers(0, 4),
    st.booleans(),
    st.integers(0, 600),
    st.lists(st.tuples(st.integers(0, 600), st.integers(0, 255)), max_size=3),
)
def test_chunk_is_whole_in_c_agrees_with_its_twin(count, with_blank, cut, flips):
    """A slave's check of a master's chunk: C says whole exactly where the twin finds no
    problem, on whole chunks, torn ones and ones with flipped bytes."""
    data = bytearray(_records(count) if with_blank else _records(count)[:-16])
    if cut % 3 == 0:  # a third of the chunks torn somewhere
        del data[cut % (len(data) + 1) :]
    for at, value in flips:
        if data:
            data[at % len(data)] = value
    problem = commitlog_record.chunk_problem_in_python(bytes(data))
    assert codec_speedups.chunk_is_whole(bytes(data)) == (problem is None)
    assert commitlog_record.chunk_problem(bytes(data)) == problem


# ---- RecordReader.received: a Fetch answer into the SDK's messages ----------------------

READ_NAMES = [
    PROPERTY_UNIQ_KEY,
    PROPERTY_TAGS,
    PROPERTY_KEYS,
    PROPERTY_MESSAGE_GROUP,
    PROPERTY_LITE_TOPIC,
    PROPERTY_PRIORITY,
    PROPERTY_MESSAGE_TYPE,
    "CLUSTER",  # a 4.x client's own, never a user property
    "user",
]


_SDK_PAIRS = st.lists(
    st.tuples(
        st.sampled_from(READ_NAMES),
        st.one_of(
            st.sampled_from(["", "5", "-1", "²", "a  b ", " k1 k2", "k1"]),
            st.text(VALUE_TEXT, max_size=4),
        ),
    ),
    max_size=5,
)


@st.composite
def sdk_record(draw) -> bytes:
    """A record as a Fetch answer may hold it: the SDK's system properties present or not
    (a message id falls back to the offset id), priorities that are no number, compressed
    bodies that inflate or do not, topics that change from one record to the next."""
    body = draw(st.binary(max_size=30))
    sys_flag = draw(st.sampled_from([0, 0, 0x1, 0x1 | 0x300, 0x1 | 0x100, 0x8]))
    if sys_flag & 0x1 and draw(st.booleans()):
        body = zlib.compress(body)
    pairs = draw(_SDK_PAIRS)
    properties = "".join(f"{name}\x01{value}\x02" for name, value in pairs).encode()
    topic = draw(st.sampled_from(["T", "orders-é", "T"])).encode()
    return commitlog_record.encode(
        size=commitlog_record.record_size(len(body), len(topic), len(properties)),
        body=body,
        topic=topic,
        properties=properties,
        queue_id=draw(st.integers(-(1 << 31), (1 << 31) - 1)),
        flag=0,
        queue_offset=draw(_INT64),
        physical_offset=draw(st.sampled_from([0, 4096, (1 << 63) - 1, -1])),
        sys_flag=sys_flag,
        born_timestamp_ms=draw(_INT64),
        born_host=b"\x7f\x00\x00\x01\x00\x00\x27\x10",
        store_timestamp_ms=draw(_INT64),
        store_host=draw(st.binary(min_size=8, max_size=8)),
        reconsume_times=0,
        prepared_transaction_offset=0,
    )


_SDK_RECORDS = st.lists(sdk_record(), max_size=4)


@st.composite
def sdk_answer(draw) -> bytes:
    answer = b"".join(draw(_SDK_RECORDS))
    if answer and draw(st.integers(0, 4)) == 0:
        answer = draw(st.sampled_from(sorted(CORRUPTIONS.values(), key=repr)))(answer)
    return answer


def received_outcome(call) -> object:
    try:
        return call()
    except Exception as error:  # compared: the C and its twin fail alike
        return type(error).__name__, str(error)


@settings(max_examples=600, deadline=None)  # ~15 ms an example; the fuzz target `received` goes on
@given(st.one_of(sdk_answer(), fetch_answers(name_value_separator=False).map(lambda a: a[0])))
def test_received_messages_in_c_are_their_python_twin(answer):
    """The C reads every answer its twin reads into equal messages, raises what the twin
    raises from the helpers both call, and declines (None) only where the twin refuses."""
    found = received_outcome(lambda: RECORD_READER.received(answer, "group-a"))
    expected = received_outcome(lambda: received_in_python(answer, "group-a"))
    if found is None:
        assert isinstance(expected, tuple) and expected[0] == "FerryError", expected
    else:
        assert found == expected


def test_received_messages_read_what_the_sdk_reads():
    first = record(5, b"one", b"UNIQ_KEY\x01id-1\x02TAGS\x01t\x02KEYS\x01 a  b\x02u\x01v\x02")
    second = record(6, zlib.compress(b"two"), b"__SHARDINGKEY\x01g\x02_SYS_MSG_PRIORITY_\x013\x02")
    second = second[:36] + struct.pack(">i", 0x1) + second[40:]  # its body is compressed
    found = received_messages(first + second, "group-a")
    assert [(m.message_id, m.body, m.tag, m.keys, m.properties) for m in found] == [
        ("id-1", b"one", "t", ["a", "b"], {"u": "v"}),
        (found[1].message_id, b"two", None, [], {}),
    ]
    assert len(found[1].message_id) == 32  # the offset id: it has no UNIQ_KEY
    assert (found[1].message_group, found[1].priority, found[1].broker_group) == ("g", 3, "group-a")
    assert RECORD_READER.received(first + second[:-1], "group-a") is None
    with pytest.raises(FerryError) as refused:
        received_messages(first + second[:-1], "group-a")
    assert "is no message record" in refused.value.detail


def test_a_reader_past_its_cache_of_names_reads_what_its_twin_reads():
    """The reader keeps the first 32 ASCII names it meets; the names after them, and the
    system names first met after the cache is full, still read as the twin reads them."""
    reader = new_record_reader()
    crowd = "".join(f"user-{i}\x01v{i}\x02" for i in range(40))
    late = "UNIQ_KEY\x01id-9\x02TAGS\x01t\x02KEYS\x01k1 k2\x02ключ\x01v\x02__SHARDINGKEY\x01g\x02"
    answer = record(1, b"a", crowd.encode()) + record(2, b"b", (crowd + late).encode())
    for _ in range(2):  # the second pass reads every name from the full cache
        found = reader.received(answer, "group-a")
        assert found == received_in_python(answer, "group-a")
    assert (found[1].message_id, found[1].tag, found[1].keys) == ("id-9", "t", ["k1", "k2"])
    assert found[1].message_group == "g" and found[1].properties["ключ"] == "v"
    assert len(found[1].properties) == 41


def test_a_reader_refuses_a_class_whose_slots_are_not_the_messages_fields():
    """The C writes the 16 fields into their slots: a class with an instance dict or one
    more slot would hand out messages with a field never written."""
    from dataclasses import make_dataclass

    plain = make_dataclass("Plain", list(ReceivedMessage.__dataclass_fields__))
    wider = make_dataclass("Wider", [*ReceivedMessage.__dataclass_fields__, "extra"], slots=True)
    for received_type in (plain, wider, "ReceivedMessage"):
        with pytest.raises(TypeError, match="only slots are a ReceivedMessage's 16 fields"):
            new_record_reader(received_type)
    narrower = make_dataclass(
        "Narrower", list(ReceivedMessage.__dataclass_fields__)[1:], slots=True
    )
    with pytest.raises(TypeError):
        new_record_reader(narrower)
    reader = new_record_reader()
    with pytest.raises(TypeError):  # a refused class leaves the reader as it was
        reader.__init__(**record_reader_arguments(wider))
    assert reader.received(record(1), "g") == received_in_python(record(1), "g")
    with pytest.raises(TypeError, match="__init__ was not called"):
        type(reader).__new__(type(reader)).received(record(1), "g")


# ---- RecordEncoder.encode: the SDK's messages into produce records ----------------------

SDK_TEXT = "ab \t\u3000é\U0001f600\ud800\x01"  # whitespace, non-ASCII, a lone surrogate


_SDK_MESSAGE_TEXT = st.text(SDK_TEXT, max_size=4)
_SDK_KEYS = st.lists(st.one_of(st.sampled_from(["k1", "k2", "é"]), _SDK_MESSAGE_TEXT), max_size=3)
_SDK_PROPERTIES = st.dictionaries(
    st.one_of(st.sampled_from(["u", "v", PROPERTY_TAGS, "é"]), _SDK_MESSAGE_TEXT),
    _SDK_MESSAGE_TEXT,
    max_size=3,
)


@st.composite
def sdk_message(draw) -> SdkMessage:
    """Messages as users make them, now and then with what the node would refuse (a key
    with a space, a reserved property name, a lone surrogate, properties past 64 KiB) or
    with types the SDK does not expect (a tuple of keys, a bytearray body)."""
    text = _SDK_MESSAGE_TEXT
    keys = draw(_SDK_KEYS)
    properties = draw(_SDK_PROPERTIES)
    if draw(st.integers(0, 30)) == 0:
        properties["big"] = "x" * 0x10000
    body = draw(st.binary(max_size=20))
    return SdkMessage(
        "T",
        bytearray(body) if draw(st.integers(0, 20)) == 0 else body,
        tag=draw(st.one_of(st.none(), text)),
        keys=tuple(keys) if draw(st.integers(0, 20)) == 0 else keys,
        properties=properties,
        message_group=draw(st.one_of(st.none(), text)),
        message_id=draw(st.sampled_from(["FE01", "", "id\ud800"])),
    )


@settings(max_examples=600, deadline=None)  # ~15 ms an example (the generated messages)
@given(st.lists(sdk_message(), max_size=4), st.sampled_from([pb.NORMAL, pb.FIFO, 99]))
def test_produce_records_in_c_are_their_python_twin(messages, message_type):
    """The C encodes every batch its twin encodes into the same bytes and declines (None)
    only where the twin raises."""
    type_text = TYPE_TEXT_OF.get(message_type) or str(message_type)
    found = RECORD_ENCODER.encode(messages, type_text, 1_700_000_000_123)
    expected = received_outcome(
        lambda: encode_records_in_python(messages, message_type, 1_700_000_000_123)
    )
    if found is None:
        assert isinstance(expected, tuple), "the C declined what the twin encodes"
        assert (
            received_outcome(lambda: encode_records(messages, message_type, 1_700_000_000_123))
            == expected
        )  # and the caller gets the twin's error
    else:
        assert found == expected


def test_produce_records_are_what_the_node_reads():
    message = SdkMessage("T", b"body", tag="t", keys=["a", "b"], properties={"u": "v"})
    records = encode_records([message, message], pb.NORMAL, 7)
    first = scan_produce_records(records, 2, BODY_LIMIT, str(pb.NORMAL))[0]
    assert first[1:4] == (b"body", records[18 : first[0]], 7)
    assert first[4] == {
        PROPERTY_UNIQ_KEY: message.message_id,
        PROPERTY_MESSAGE_TYPE: str(pb.NORMAL),
        PROPERTY_TAGS: "t",
        PROPERTY_KEYS: "a b",
        "u": "v",
    }

"""The store's C loops (store/_speedups.c, with the property parser it includes from
ferrymq/codec/_properties.h) against their Python twins, on generated input: batch
encoding, CRC32C, index puts, ``prepare`` and the dispatch plan of records. The wire
format's loops are checked the same way in tests/codec/test_speedups.py.

Each C function must return exactly what its twin returns, and decline (leave the record
to the twin) exactly where the twin raises: the twins are the specification."""

from __future__ import annotations

import dataclasses
import random

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.codec.commitlog_record import check_at as record_check_at
from ferrymq.codec.commitlog_record import encode_blank
from ferrymq.codec.errors import InvalidMessageError
from ferrymq.codec.produce_records import PRODUCE_HEAD, PRODUCE_SPAN
from ferrymq.codec.properties import (
    PROPERTY_DELIVERY_TIME_MS,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    encode_properties,
)
from store import _speedups as speedups
from store.commitlog import (
    CODEC,
    MAX_RUNS,
    MAX_WANTED,
    PreparedRun,
    dispatch_plan_in_python,
    encode_batch_in_python,
    prepare,
    topic_prefix_of,
)
from store.config import StoreConfig
from store.consume_queue import ENTRY as QUEUE_ENTRY
from store.dispatcher import Dispatcher
from store.index_file import INDEX_KEY, IndexFile
from store.message import TIMER_TOPIC, Message
from store.message_store import MessageStore
from store.results import AppendedMessage

BODY_LIMIT = 8


# The strategies the composites below draw from, made once: made inside them, each draw
# built and validated its strategies again, most of these tests' time.
_VALUE_TEXT = st.text(alphabet="ab é", min_size=1, max_size=4)
_BATCH_PROPERTIES = st.dictionaries(
    st.sampled_from([PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY, "u"]), _VALUE_TEXT, max_size=3
)
_RUN_PROPERTIES = st.dictionaries(
    st.sampled_from([PROPERTY_TAGS, PROPERTY_UNIQ_KEY, "u"]), _VALUE_TEXT, max_size=3
)
_INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
_INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
_HOST = st.binary(min_size=8, max_size=8)
_QUEUE_ID = st.integers(0, 3)
_MESSAGE = st.tuples(
    st.sampled_from(["T", "Topic-é", "%RETRY%g"]),
    st.binary(max_size=40),
    _QUEUE_ID,
    _BATCH_PROPERTIES,
    _INT32,
    st.sampled_from([0, 0x4, 0x8, 0xC, 0x1]),
    _INT64,
    _HOST,
    st.integers(0, 16),
    st.integers(0, 1 << 40),
)


@st.composite
def prepared_batch(draw) -> list:
    messages = [Message(*draw(_MESSAGE)) for _ in range(draw(st.integers(1, 6)))]
    batch: list = [
        prepare(m, topic_prefix_of(m.topic.encode()), encode_properties(m.properties))
        for m in messages
    ]
    for _ in range(draw(st.integers(0, 2))):  # runs of produce records among them
        batch.insert(draw(st.integers(0, len(batch))), draw(_PREPARED_RUN))
    return batch


@st.composite
def prepared_run(draw) -> PreparedRun:
    """A run as ``produce_spans`` finds one: records that fill the request, their spans."""
    records, spans = b"", b""
    for _ in range(draw(st.integers(0, 4))):
        body = draw(st.binary(min_size=1, max_size=40))
        properties = encode_properties(draw(_RUN_PROPERTIES))
        born = draw(_INT64)
        at = len(records) + PRODUCE_HEAD.size
        spans += PRODUCE_SPAN.pack(at, len(body), len(properties), born)
        records += PRODUCE_HEAD.pack(len(body), len(properties), born) + body + properties
    topic = draw(st.sampled_from(["T", "Topic-é"]))
    return PreparedRun.of(
        topic, topic_prefix_of(topic.encode()), draw(_QUEUE_ID), draw(_HOST), records, spans
    )


_PREPARED_RUN = prepared_run()
_PREPARED_BATCH = prepared_batch()


@settings(max_examples=200, deadline=None)
@given(prepared_run(), st.integers(0, 1 << 40))
def test_a_run_whose_records_are_a_view_of_its_request_is_laid_out_as_its_bytes(run, position):
    """The remoting door hands a Produce request's records on as a view of its frame."""
    host = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"
    framed = dataclasses.replace(run, records=memoryview(b"head" + run.records)[4:])
    expected = encode_batch_in_python([run], position, 5, host, {})
    assert encode_batch_in_python([framed], position, 5, host, {}) == expected
    assert (
        speedups.encode_batch([framed], position, 5, host, {}, AppendedMessage, PreparedRun)
        == expected
    )


@settings(max_examples=500, deadline=None)
@given(
    prepared_batch(),
    st.integers(0, 1 << 40),
    st.integers(0, 1 << 45),
    st.dictionaries(
        st.tuples(st.sampled_from(["T", "Topic-é"]), st.integers(0, 3)),
        st.integers(0, 1 << 40),
        max_size=3,
    ),
)
def test_encode_batch_in_c_is_its_python_twin(batch, position, stored_ms, offsets):
    host = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"
    offsets_c, offsets_py = dict(offsets), dict(offsets)
    expected = encode_batch_in_python(batch, position, stored_ms, host, offsets_py)
    assert (
        speedups.encode_batch(
            batch, position, stored_ms, host, offsets_c, AppendedMessage, PreparedRun
        )
        == expected
    )
    assert offsets_c == offsets_py
    data = expected[0]
    for appended in expected[1]:  # and the records read back as written
        local = appended.physical_offset - position
        assert record_check_at(data, local, len(data)).size == appended.size


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_crc32c_in_c_is_the_crc32c_package(data):
    assert speedups.crc32c(data) == crc32c(data)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, (1 << 32) - 1), st.integers(0, 1 << 40), st.integers(0, 1 << 40)),
        min_size=1,
        max_size=40,
    ),
    st.integers(0, 12),
    st.integers(0, 2**32 - 1),
)
def test_index_put_all_in_c_is_its_python_twin(tmp_path_factory, entries, crashed, seed):
    """Two files with the same history, including a batch whose entries and slots were
    written but whose header was not (a crash): the slots then point past the counted
    entries, which ``_last_counted`` must follow. The C loop leaves the bytes Python does."""
    directory = tmp_path_factory.mktemp("index")
    files = [IndexFile.create(str(directory / name), 7, 120) for name in ("c", "py")]
    rng = random.Random(seed)
    history = [(rng.getrandbits(32), 10 * i, 1000 * i) for i in range(crashed + 20)]
    for file in files:
        file.put_all_in_python(index_keys(history[:20]))
        file.write_header(20)
        # then the crash: the header stays at 20 entries
        file.put_all_in_python(index_keys(history[20:]))
        file.index_count = 21
    c, py = files
    c.put_all(index_keys(entries))
    py.put_all_in_python(index_keys(entries))
    c.write_header(1)
    py.write_header(1)
    assert c.map[:] == py.map[:]
    assert (c.index_count, c.used_slot_count) == (py.index_count, py.used_slot_count)


def index_keys(entries: list[tuple[int, int, int]]) -> bytes:
    """``INDEX_KEY`` rows of (key hash, physical offset, store ms) entries."""
    return b"".join(
        INDEX_KEY.pack(physical, 50, ms, key_hash) for key_hash, physical, ms in entries
    )


@st.composite
def message_to_prepare(draw) -> tuple[Message, bytes]:
    """A message and encoded properties that mostly match it (and sometimes do not)."""
    properties = draw(
        st.dictionaries(
            st.sampled_from([PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY, "u"]),
            st.one_of(
                st.text(alphabet="a é\U0001f600", max_size=5),
                st.sampled_from(["\ud800", " k  k ", "TagA", ""]),
            ),
            max_size=4,
        )
    )
    try:
        raw = encode_properties(properties)
    except (InvalidMessageError, UnicodeEncodeError):
        raw = b""

    def usually(valid, *invalid):
        """``valid`` nine times in ten, so that most messages reach the encoding."""
        return draw(st.sampled_from([valid] * 9 + list(invalid) if invalid else [valid]))

    message = Message(
        usually("T", "%SYS%TIMER"),
        draw(st.binary(max_size=BODY_LIMIT + 2)),
        usually(3, -1, 1 << 31),
        properties,
        usually(0, 1 << 31, -(1 << 31) - 1),
        usually(0, 0x4),
        usually(-(1 << 63), 1 << 63),
        usually(b"\x00" * 8, b"\x00" * 7),
        usually(16, 1 << 31),
        usually((1 << 63) - 1, 1 << 63),
    )
    raw = usually(raw, raw + b"\x02", raw[:-1], b"x" * 32768)
    return message, raw


@pytest.fixture(scope="module")
def prepare_store(tmp_path_factory):
    """One store for every example: its ``prepare_in_python`` is the reference."""
    config = StoreConfig(
        str(tmp_path_factory.mktemp("prepare")),
        max_message_body_bytes=BODY_LIMIT,
        commitlog_segment_bytes=8 << 20,
    )
    store = MessageStore.open(config)
    yield store
    store.shutdown()


@settings(max_examples=1000, deadline=None)
@given(message_to_prepare())
def test_prepare_in_c_is_its_python_twin(prepare_store, case):
    message, raw = case
    store = prepare_store
    prefix = topic_prefix_of(message.topic.encode())
    fast = CODEC.prepare(message, prefix, raw, BODY_LIMIT)
    try:
        expected = store.prepare_in_python(message, prefix, raw)
    except (InvalidMessageError, UnicodeEncodeError):
        assert fast is None
        return
    assert fast is None if message.topic == TIMER_TOPIC else fast == expected
    ACCEPTED.append(fast is not None)


ACCEPTED: list[bool] = []


@st.composite
def dispatch_case(draw) -> tuple[bytes, int]:
    """Records as a log holds them: batches appended one after another (a timer record
    among them, whose tag code is its delivery time), sometimes from queue offsets that do
    not follow the previous batch's (a plan must end its run there), sometimes followed by
    a blank record; and how many bytes are records."""
    timer = Message(TIMER_TOPIC, b"t", 0, {PROPERTY_DELIVERY_TIME_MS: "1700000000000"})
    timer_record = prepare(
        timer, topic_prefix_of(TIMER_TOPIC.encode()), b"TIMER_DELIVER_MS\x011700000000000\x02"
    )
    offsets: dict[tuple[str, int], int] = {}
    data = b""
    for _ in range(draw(st.integers(1, 3))):
        batch = draw(_PREPARED_BATCH)
        if draw(st.booleans()):
            batch.insert(draw(st.integers(0, len(batch))), timer_record)
        if draw(st.integers(0, 4)) == 0:
            offsets = {key: offset + 2 for key, offset in offsets.items()}  # a gap
        encoded, _ = encode_batch_in_python(batch, len(data), 5, b"\x00" * 8, offsets)
        data += encoded
    blank = encode_blank(64) if draw(st.booleans()) else b""
    return data + blank, len(data)


@settings(max_examples=250, deadline=None)  # the fuzz target dispatch_plan goes on
@given(
    dispatch_case(),
    st.integers(1, 5),
    st.sampled_from([(), ("T",), ("%RETRY%g", "Topic-é")]),
    st.sampled_from([(), ("u",), (PROPERTY_TAGS, "absent")]),
    st.booleans(),
)
def test_dispatch_plan_in_c_is_its_python_twin(case, chunk, topics, properties, own_hash):
    """Dispatch's reading of records (every append, a slave's chunks, recovery) in C,
    against the Python reading of each record, pass after pass as the dispatcher makes
    them; and the plans together hold every record's queue entry and keys."""
    buffer, records_end = case
    key_hash = (lambda raw: len(raw) * 7) if own_hash else None
    position, passes, blank = 0, 0, False
    while position < len(buffer) and not blank:
        expected = dispatch_plan_in_python(
            buffer, position, len(buffer), chunk, topics, properties, key_hash
        )
        found = CODEC.dispatch_plan(
            buffer, position, len(buffer), chunk, topics, properties, key_hash
        )
        assert found == expected
        assert 1 <= found[5] <= chunk or found[4]
        position, blank = found[3], found[4]
        passes += 1
    assert position == records_end and blank == (records_end < len(buffer))


def test_a_plan_ends_before_a_record_that_does_not_follow_its_queues_run():
    batch = [
        prepare(m, topic_prefix_of(b"T"), encode_properties(m.properties))
        for m in (Message("T", b"a", 0), Message("T", b"b", 0))
    ]
    first, _ = encode_batch_in_python(batch[:1], 0, 5, b"\x00" * 8, {("T", 0): 7})
    second, _ = encode_batch_in_python(batch[1:], len(first), 5, b"\x00" * 8, {("T", 0): 9})
    buffer = first + second
    runs, _, _, position, blank, count = CODEC.dispatch_plan(
        buffer, 0, len(buffer), 10, (), (), None
    )
    assert [(topic, queue_id, offset) for topic, queue_id, offset, _ in runs] == [("T", 0, 7)]
    assert (position, blank, count) == (len(first), False, 1)
    runs, _, _, position, _, count = CODEC.dispatch_plan(
        buffer, position, len(buffer), 10, (), (), None
    )
    assert [(topic, queue_id, offset) for topic, queue_id, offset, _ in runs] == [("T", 0, 9)]
    assert (position, count) == (len(buffer), 1)


def outcome_of(call):
    """What a call returns, or the type and text of what it raises."""
    try:
        return call()
    except Exception as error:  # compared, never hidden: C and twin must fail alike
        return type(error).__name__, str(error)


@settings(max_examples=250, deadline=None)  # the fuzz target dispatch_plan goes on
@given(
    dispatch_case(),
    st.integers(0, 2000),
    st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 255)), max_size=4),
)
def test_dispatch_plan_in_c_fails_where_its_twin_fails(case, cut, flips):
    """Damaged bytes (a torn tail, flipped bytes): the C loop raises what its twin raises
    (``CorruptRecordError`` naming the position) or returns what it returns, and never
    reads past the buffer."""
    buffer = bytearray(case[0][: cut % (len(case[0]) + 1)])
    for at, value in flips:
        if buffer:
            buffer[at % len(buffer)] = value
    data = bytes(buffer)
    expected = outcome_of(lambda: dispatch_plan_in_python(data, 0, len(data), 64, ("T",), ("u",)))
    found = outcome_of(lambda: CODEC.dispatch_plan(data, 0, len(data), 64, ("T",), ("u",), None))
    assert found == expected


def test_the_plans_limits_are_the_stores():
    """The C plan's bounds are the ones the twin and the dispatcher use; a listener that
    would name more than the plan compares is refused when it registers, not at a put."""
    assert (speedups.PLAN_MAX_RUNS, speedups.PLAN_MAX_WANTED) == (MAX_RUNS, MAX_WANTED)
    dispatcher = Dispatcher(None, None, None)
    dispatcher.add_listener(lambda batch: None, topics=tuple(f"T{i}" for i in range(MAX_WANTED)))
    with pytest.raises(ValueError, match="at most 8"):
        dispatcher.add_listener(lambda batch: None, topics=("one more",))
    assert len(dispatcher.listeners) == 1


@pytest.fixture(scope="module")
def filled_log(tmp_path_factory):
    """A store of small segments holding records of two queues interleaved, its first
    segment deleted by retention (entries that point there find nothing)."""
    store = MessageStore.open(
        StoreConfig(
            str(tmp_path_factory.mktemp("gather") / "store"),
            commitlog_segment_bytes=40_960,
            consume_queue_entries_per_file=64,
            max_message_body_bytes=100,
        )
    )
    for i in range(1000):
        assert store.put_messages([Message("T", b"m%03d" % i * (1 + i % 20), i % 2)]).ok
    assert len(store.commitlog.segments.files) >= 3
    store.commitlog.delete_segments_before(lambda segment: True, 1)
    yield store
    store.shutdown()


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.integers(-200, 180_000), st.integers(-2, 700), st.integers(0, 9)),
            st.just((0, 0x7FFFFFFF, 0)),  # a blank entry
        ),
        max_size=12,
    ),
    st.integers(0, 200),
    st.one_of(st.none(), st.integers(0, 180_000)),
    st.integers(1, 6),
    st.one_of(st.none(), st.integers(0, 2_000)),
)
def test_gather_records_in_c_is_its_python_twin(filled_log, entries, first, limit, count, size):
    """Entries of every kind (blank, before the log, past its end, over a segment's end,
    into the deleted segment, negative sizes) and every limit: the C takes what its twin
    takes, and stops where it stops."""
    log = filled_log.commitlog
    packed = b"".join(QUEUE_ENTRY.pack(*entry) for entry in entries)
    expected = log.gather_in_python(packed, first, limit, count, size, first)
    assert log.gather(packed, first, limit, count, size, first) == expected


def test_gather_reads_a_queue_as_the_scan_of_each_entry_does(filled_log):
    """Through the store: ``get_records`` of every record (the C) against the same read
    through the generic scan (a tag filter that keeps every record)."""
    for queue_id in (0, 1):
        high = filled_log.max_offset_in_queue("T", queue_id)
        reads = ((high - 40, 10, 1 << 20), (high - 37, 50, 300), (high - 20, 1, 1), (0, 10, 500))
        for offset, count, max_bytes in reads:
            fast = filled_log.get_records("T", queue_id, offset, count, max_bytes)
            queue = filled_log.consume_queues.get("T", queue_id)
            found, next_offset = filled_log._scan_entries(
                queue,
                offset,
                count,
                None,
                lambda physical, size: (
                    data
                    if len(data := filled_log.commitlog.read_bytes(physical, size)) == size
                    else None
                ),
                max_bytes,
                filled_log.read_cap(),
            )
            assert (fast.messages, fast.next_begin_offset) == (found, next_offset)
            assert fast.messages or offset == 0  # offset 0's records went with their segment


def test_gather_records_stops_at_a_limit_an_entry_overflows(filled_log):
    """An entry near int64's end, past the read limit: its end does not wrap around in C
    (the fuzz target found it taking the entry)."""
    entry = QUEUE_ENTRY.pack((1 << 63) - 10_000_000, 16_777_215, 0)
    log = filled_log.commitlog
    assert log.gather(entry, 0, 20_300, 5, None, 0) == ([], 0)
    assert log.gather_in_python(entry, 0, 20_300, 5, None, 0) == ([], 0)

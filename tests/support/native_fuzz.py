"""Coverage-guided, differential fuzz targets for every native parser of bytes from the
network or the disk: each target reads the fuzzer's bytes with the C function and with its
Python twin (the specification) and fails when their outcomes differ. The fuzzer (atheris,
libFuzzer's engine) steers by the coverage of the twins and of this module, which walk the
same branches as the C; a sanitizer build of the C (``make fuzz``) turns any read or write
out of bounds into a crash.

    python -m tests.support.native_fuzz TARGET [CORPUS_DIR] [libFuzzer options, e.g. -runs=N]

``seeds(TARGET)`` are well-formed inputs to start from (a corpus directory is filled with
them when it is empty). ``FERRYMQ_FUZZ_NATIVE_DIR``: a directory holding other builds of
the extensions (``store_speedups.so``, ``codec_speedups.so``, ``replica_lane.so``, e.g.
with ASan), loaded in place of the installed ones.

Targets: ``decode_properties``, ``produce_scan`` (``ProduceScanner.scan``),
``produce_run`` (``ProduceScanner.spans``, and ``encode_batch`` laying out the run they
make), ``received`` (``RecordReader.received``, the SDK's reading of a Fetch answer),
``fetch_columns``, ``chunk_is_whole``, ``dispatch_plan``
(``RecordCodec.dispatch_plan``), ``prepare`` (``RecordCodec.prepare``'s check of encoded
properties), ``index_put_all`` (an index file's slots and links as a crash or the disk
left them), ``gather_records`` (consume-queue entries as the disk holds them, pointing
anywhere in a log whose first segment retention took), ``remoting_header`` (a remoting
frame's binary header, ``read_binary_header``), ``replica_frames`` (a slave's link's bytes
taken by the replica lane, ``ha._replica_lane.apply_frames``, sealed right or not),
``link_thread`` (the same bytes read off a socket in pieces by the link's thread,
``ha._replica_lane.Follower``, against the twin on the whole stream), ``produce_request``
(a FERRY_PRODUCE body read by the produce lane in C, ``ProduceScanner.produce_run``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import types
from collections.abc import Callable

NATIVE_BUILDS = {
    "store._speedups": "store_speedups.so",
    "ferrymq.codec._speedups": "codec_speedups.so",
    "ha._replica_lane": "replica_lane.so",
}


def _load_native_builds() -> None:
    """Put the extensions of ``FERRYMQ_FUZZ_NATIVE_DIR`` in ``sys.modules`` before anything
    imports the installed ones."""
    directory = os.environ.get("FERRYMQ_FUZZ_NATIVE_DIR")
    if not directory:
        return
    for name, file_name in NATIVE_BUILDS.items():
        spec = importlib.util.spec_from_file_location(name, os.path.join(directory, file_name))
        assert spec is not None and spec.loader is not None, f"no {file_name} in {directory}"
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module


_load_native_builds()

import atheris  # noqa: E402  (after the builds are in place)

with atheris.instrument_imports(
    include=[
        "ferrymq.codec",
        "ferrymq.client.messages",
        "store",
        "node.message_rules",
        "ha.replica_lane",
        "node.remoting.ferry_data",
        "tests.support.replica_frames",
    ]
):
    from ferrymq.client.messages import _RECORD_READER as RECORD_READER
    from ferrymq.client.messages import received_in_python
    from ferrymq.codec import _speedups as codec_speedups
    from ferrymq.codec.bytes_field import split, split_in_python
    from ferrymq.codec.commitlog_record import chunk_problem_in_python
    from ferrymq.codec.produce_records import PRODUCE_HEAD
    from ferrymq.codec.properties import decode_properties, decode_properties_in_python
    from ferrymq.codec.remoting import (
        FLAG_RESPONSE,
        SERIALIZE_ROCKETMQ,
        RemotingCommand,
        _from_binary,
        _from_binary_in_python,
        encode_head,
    )
    from ferrymq.spark.fetch_columns import (
        CorruptRecord,
        fetch_columns_in_c,
        fetch_columns_in_python,
    )
    from node.message_rules import produce_spans, produce_spans_in_python, scan_produce_records
    from node.remoting.ferry_data import produce_run as produce_request_run
    from node.remoting.ferry_data import produce_run_in_python as produce_request_in_python
    from store import _speedups as store_speedups
    from store.commitlog import (
        CODEC,
        PreparedRun,
        dispatch_plan_in_python,
        encode_batch_in_python,
        topic_prefix_of,
    )
    from store.config import StoreConfig
    from store.index_file import HEADER as INDEX_HEADER
    from store.index_file import INDEX_KEY, IndexFile
    from store.message import TIMER_TOPIC, Message
    from store.message_store import MessageStore
    from store.results import AppendedMessage
    from tests.support.replica_frames import SegmentFile, apply_both, case_from, follow_both

from ferrymq.client.produce_records import ProduceCall  # noqa: E402
from ferrymq.codec.errors import InvalidMessageError  # noqa: E402
from tests.support.fetch_answers import QUEUE_ID, TOPIC, comparable, record  # noqa: E402
from tests.support.produce_scan import BODY_LIMIT, TYPE_TEXT, read_in_python  # noqa: E402

SAMPLE_PROPERTIES = b"UNIQ_KEY\x01id-1\x02__MSG_TYPE\x011\x02TAGS\x01TagA\x02KEYS\x01a b\x02"
PLAN_TOPICS = [(), ("T",), (TOPIC, "%SYS%TIMER")]
PLAN_PROPERTIES = [(), ("u",), ("TAGS", "__LITE_TOPIC")]


def outcome(call: Callable[[], object]) -> object:
    """What a call returns, or the type and text of what it raises."""
    try:
        return call()
    except Exception as error:  # compared below: C and twin must fail alike
        return type(error).__name__, str(error)


def fuzz_decode_properties(data: bytes) -> None:
    def kind(call: Callable[[], object]) -> object:
        found = outcome(call)
        return found[0] if isinstance(found, tuple) else found  # the error's type only

    assert kind(lambda: decode_properties(data)) == kind(lambda: decode_properties_in_python(data))


def fuzz_produce_scan(data: bytes) -> None:
    count, records = (data[0] % 6 if data else 0), data[1:]
    assert scan_produce_records(records, count, BODY_LIMIT, TYPE_TEXT) == read_in_python(
        records, count
    )


def fuzz_produce_run(data: bytes) -> None:
    """A Produce request taken whole: the C spans are the twin's, and the records the C
    lays out from them are the twin's, byte for byte. The records are a view of the
    request, as the remoting door hands them on."""
    count, records = (data[0] % 6 if data else 0), memoryview(data)[1:]
    spans = produce_spans(records, count, BODY_LIMIT, TYPE_TEXT)
    assert spans == produce_spans_in_python(records, count, BODY_LIMIT, TYPE_TEXT)
    if spans is None:
        return
    run = PreparedRun.of("T", topic_prefix_of(b"T"), 1, b"\x01" * 8, records, spans)
    host = b"\x02" * 8
    expected = encode_batch_in_python([run], 40, 5, host, {("T", 1): 3})
    found = store_speedups.encode_batch(
        [run], 40, 5, host, {("T", 1): 3}, AppendedMessage, PreparedRun
    )
    assert found == expected


# The produce lane's snapshot for ``produce_request``: a topic with two queues, another
# whose name is not ASCII.
LANE_TOPICS = {
    name: (topic_prefix_of(name.encode()), 2, TYPE_TEXT) for name in ("T", "\u00e9t\u00e9")
}
LANE_HOST = b"\x01" * 8


def fuzz_produce_request(data: bytes) -> None:
    """A FERRY_PRODUCE body, whatever its bytes: the C reads the twin's run or declines;
    and whatever the twin reads, the C reads the same request as the SDK writes it (each
    field once, in order), so a C that declined everything would fail here."""
    found = outcome(lambda: produce_request_run(data, LANE_HOST, LANE_TOPICS, BODY_LIMIT, 4))
    expected = outcome(
        lambda: produce_request_in_python(data, LANE_HOST, LANE_TOPICS, BODY_LIMIT, 4)
    )
    assert found is None or found == expected, (found, expected)
    if isinstance(expected, PreparedRun):
        canonical = ProduceCall(
            expected.topic, expected.queue_id, False, expected.count, bytes(expected.records)
        ).body()
        again = produce_request_run(canonical, LANE_HOST, LANE_TOPICS, BODY_LIMIT, 4)
        assert again is not None and again.spans == expected.spans


def fuzz_received(data: bytes) -> None:
    """A Fetch answer as the SDK reads it: the C's messages are the twin's; it declines
    only answers the twin refuses, and raises what the twin raises otherwise."""
    found = outcome(lambda: RECORD_READER.received(data, "group-a"))
    expected = outcome(lambda: received_in_python(data, "group-a"))
    if found is None:
        assert isinstance(expected, tuple) and expected[0] == "FerryError", expected
    else:
        assert found == expected, (found, expected)


def fuzz_fetch_columns(data: bytes) -> None:
    end_offset = 1000 + (data[0] if data else 0)
    records = data[1:]
    try:
        expected = comparable(fetch_columns_in_python(records, TOPIC, QUEUE_ID, end_offset))
    except CorruptRecord:
        expected = None
    found = fetch_columns_in_c(records, TOPIC, QUEUE_ID, end_offset)
    assert (None if found is None else comparable(found)) == expected


def fuzz_chunk_is_whole(data: bytes) -> None:
    assert codec_speedups.chunk_is_whole(data) == (chunk_problem_in_python(data) is None)


def fuzz_dispatch_plan(data: bytes) -> None:
    head = data[:2] or b"\x00\x00"
    chunk = 1 + head[0] % 8
    topics = PLAN_TOPICS[head[-1] % 3]
    properties = PLAN_PROPERTIES[head[-1] // 3 % 3]
    buffer = data[2:]
    key_hash = (lambda raw: len(raw) * 7) if head[0] & 0x80 else None
    position = 0
    while True:
        arguments = (buffer, position, len(buffer), chunk, topics, properties, key_hash)
        expected = outcome(lambda: dispatch_plan_in_python(*arguments))  # noqa: B023
        found = outcome(lambda: CODEC.dispatch_plan(*arguments))  # noqa: B023
        assert found == expected, (found, expected)
        if not isinstance(found, tuple) or len(found) != 6 or found[4] or found[3] == position:
            return  # an error, a blank record, or nothing left
        position = found[3]


_GATHER_LOG: list = []  # the log gather_records reads, made on first use


def _gather_log():
    if not _GATHER_LOG:
        store = MessageStore.open(
            StoreConfig(
                tempfile.mkdtemp(prefix="fuzz-gather-"),
                commitlog_segment_bytes=40_960,
                max_message_body_bytes=100,
            )
        )
        for i in range(1000):
            store.put_messages([Message("T", b"m%03d" % i * (1 + i % 20), i % 2)])
        store.commitlog.delete_segments_before(lambda segment: True, 1)
        _GATHER_LOG.append(store.commitlog)
    return _GATHER_LOG[0]


def fuzz_gather_records(data: bytes) -> None:
    """A read's consume-queue entries from the fuzzer's bytes: the C takes the records
    its twin takes, and stops where it stops."""
    head, entries = data[:4].ljust(4, b"\x00"), data[4:]
    if not head[0] & 0x80:  # whole entries, mostly: a cut one is refused at once
        entries = entries[: len(entries) // 20 * 20]
    log = _gather_log()
    limit = None if head[0] & 1 else head[1] * 700
    max_bytes = None if head[0] & 2 else head[2] * 40
    arguments = (entries, head[3], limit, 1 + head[0] % 7, max_bytes, head[3])
    expected = outcome(lambda: log.gather_in_python(*arguments))
    assert outcome(lambda: log.gather(*arguments)) == expected


INDEX_SLOTS, INDEX_ENTRIES = 7, 40


def fuzz_index_put_all(data: bytes) -> None:
    """A batch of keys put into an index file whose slots and entries are the fuzzer's
    bytes (the links ``_last_counted`` follows among them): the C leaves the twin's bytes
    and counts, or fails as the twin does."""
    head, data = data[:2].ljust(2, b"\x00"), data[2:]
    index_count = 1 + head[0] % INDEX_ENTRIES
    count = min(head[1] % 9, INDEX_ENTRIES + 1 - index_count)
    keys, region = data[: 4 * count], data[4 * count :]
    size = IndexFile.file_size(INDEX_SLOTS, INDEX_ENTRIES)
    header = INDEX_HEADER.pack(5000, 9000, 10, 90, head[1] >> 4, index_count)
    image = (header + region)[:size].ljust(size, b"\x00")
    # Store times mostly ascending, the last one anywhere in int64 when the fuzzer says.
    times = [7000 + 900 * i for i in range(count)]
    if times and head[1] & 0x40:
        times[-1] = int.from_bytes(keys[-8:].rjust(8, b"\x00"), "big", signed=True)
    entries = b"".join(
        INDEX_KEY.pack(100 + i, 40, times[i], int.from_bytes(keys[4 * i : 4 * i + 4], "big"))
        for i in range(count)
    )
    files = [IndexFile("fuzz", bytearray(image), INDEX_SLOTS, INDEX_ENTRIES) for _ in range(2)]
    found = outcome(lambda: files[0].put_all(entries))
    expected = outcome(lambda: files[1].put_all_in_python(entries))
    assert found == expected, (found, expected)
    c, py = files
    assert c.map == py.map
    assert (c.index_count, c.used_slot_count) == (py.index_count, py.used_slot_count)


# ``prepare_in_python`` reads only its store's config: no store (and no files) needed.
_PREPARE_TWIN = types.SimpleNamespace(
    config=StoreConfig("unused", max_message_body_bytes=BODY_LIMIT, commitlog_segment_bytes=8 << 20)
)


def fuzz_prepare(data: bytes) -> None:
    """A message whose encoded properties arrive as bytes (Data.Produce): the C check and
    encoding give the twin's PreparedMessage, or decline where the twin refuses."""
    head = data[:1] or b"\x00"
    raw = data[1:]
    try:
        properties = decode_properties_in_python(raw)
    except UnicodeDecodeError:
        properties = {}
    if head[0] & 1:
        properties["extra"] = "v"  # the dict and the bytes disagree
    topic = TIMER_TOPIC if head[0] & 2 else "T"
    message = Message(topic, b"b" * (head[0] >> 4), head[0] >> 5, properties)
    prefix = topic_prefix_of(topic.encode())
    fast = CODEC.prepare(message, prefix, raw, BODY_LIMIT)
    try:
        expected = MessageStore.prepare_in_python(_PREPARE_TWIN, message, prefix, raw)
    except (InvalidMessageError, UnicodeEncodeError):
        assert fast is None
        return
    assert fast is None if topic == TIMER_TOPIC else fast == expected


def fuzz_split_field(data: bytes) -> None:
    """A FERRY_PRODUCE body or FERRY_FETCH answer, whatever its bytes: the C walk splits it
    as its twin does, or fails with the twin's error. The field asked is the first byte's."""
    field, body = (data[0] % 8 if data else 5), data[1:]

    def parts(found: object) -> object:  # a view compared by its bytes
        if type(found) is tuple and isinstance(found[1], memoryview):
            return found[0], bytes(found[1])
        return found

    assert parts(outcome(lambda: split(body, field))) == parts(
        outcome(lambda: split_in_python(body, field))
    )


def fuzz_remoting_header(data: bytes) -> None:
    """A remoting frame's binary header, whatever its bytes: the C reads it as its twin
    does, or declines and the twin's error (its type, text and opaque) is the outcome."""

    def read(call: Callable[[], object]) -> object:
        try:
            return call()
        except Exception as error:  # the opaque says whether it may be answered
            return type(error).__name__, str(error), getattr(error, "opaque", None)

    assert read(lambda: _from_binary(data, b"b")) == read(
        lambda: _from_binary_in_python(data, b"b")
    )


_LANE_FILES: list = []  # the two segment files the replica lane target writes, made once


def fuzz_replica_frames(data: bytes) -> None:
    """A slave's link's bytes (frames sealed right, most of them, with every fault the
    lane must decline mixed in): the C takes, declines and writes as its twin does."""
    if not _LANE_FILES:
        _LANE_FILES.extend((SegmentFile(), SegmentFile()))
    c_file, twin_file = _LANE_FILES
    found, expected = apply_both(case_from(data), c_file, twin_file)
    assert found == expected, (found, expected)
    assert c_file.contents() == twin_file.contents()


def fuzz_link_thread(data: bytes) -> None:
    """The same bytes read off a real socket by the link's thread, in pieces its first
    three bytes size: it takes, declines, writes and acknowledges as the twin does on the
    whole stream, and leaves the rest unread."""
    if not _LANE_FILES:
        _LANE_FILES.extend((SegmentFile(), SegmentFile()))
    follow_both(case_from(data[3:]), [1 + 3 * size for size in data[:3]], *_LANE_FILES)


TARGETS: dict[str, Callable[[bytes], None]] = {
    "decode_properties": fuzz_decode_properties,
    "produce_scan": fuzz_produce_scan,
    "produce_run": fuzz_produce_run,
    "received": fuzz_received,
    "fetch_columns": fuzz_fetch_columns,
    "chunk_is_whole": fuzz_chunk_is_whole,
    "dispatch_plan": fuzz_dispatch_plan,
    "prepare": fuzz_prepare,
    "index_put_all": fuzz_index_put_all,
    "gather_records": fuzz_gather_records,
    "split_field": fuzz_split_field,
    "remoting_header": fuzz_remoting_header,
    "replica_frames": fuzz_replica_frames,
    "link_thread": fuzz_link_thread,
    "produce_request": fuzz_produce_request,
}


def seeds(target: str) -> list[bytes]:
    """Well-formed inputs of ``target`` for the fuzzer to mutate."""
    records = [
        record(1000 + i, b"x" * i, SAMPLE_PROPERTIES if i % 2 else b"u\x01v\x02", topic=topic)
        for i, topic in enumerate(["T", TOPIC, "T", "%SYS%TIMER"])
    ]
    blank = (16).to_bytes(4, "big") + (0xCBD43194).to_bytes(4, "big") + bytes(8)
    produce = [PRODUCE_HEAD.pack(4, len(SAMPLE_PROPERTIES), 7) + b"body" + SAMPLE_PROPERTIES]
    return {
        "decode_properties": [SAMPLE_PROPERTIES, b"a\x01b\x02\x02c\x02"],
        "produce_scan": [b"\x02" + produce[0] * 2, b"\x01" + produce[0]],
        "produce_run": [b"\x02" + produce[0] * 2, b"\x01" + produce[0]],
        "fetch_columns": [b"\x05" + b"".join(records[:3]), b"\x00" + records[1]],
        "received": [b"".join(records), records[1]],
        "chunk_is_whole": [b"".join(records[:3]) + blank, records[0]],
        "dispatch_plan": [b"\x03\x04" + b"".join(records[:3]) + blank, b"\x81\x01" + records[1]],
        "gather_records": [
            b"\x00\xff\x40\x00" + bytes(8) + (40_000).to_bytes(8, "big") + (90).to_bytes(12, "big"),
            b"\x03\x00\x00\x07" + (50_000).to_bytes(8, "big") + bytes(12),
        ],
        "index_put_all": [
            b"\x00\x08" + bytes(range(32)),
            b"\x05\x13" + b"\x00\x00\x00\x03" * 3 + bytes(28) + b"\x00\x00\x00\x09" * 7,
        ],
        "prepare": [b"\x10" + SAMPLE_PROPERTIES, b"\x02TIMER_DELIVER_MS\x011700000000000\x02"],
        # A ProduceRequest as the SDK writes it (topic, queue, atomic, count, records last),
        # and a FetchResponse with its records in the middle and a field it does not know.
        "split_field": [
            b"\x05\x0a\x01T\x10\x03\x18\x01\x20\x02\x2a\x04" + b"recs",
            b"\x03\x08\x00\x1a\x03abc\x28\x07\x4d\x01\x02\x03\x04",
        ],
        # Frames continuing the log (records, a heartbeat, a run closed by a blank), then
        # faults: a new epoch, a failing tag, a cut last frame; and bytes as they are.
        "replica_frames": [
            b"\x01\x02\x10\x01" + b"\x01\x00\x02\x00\x00\x00\x04\x00\x03\x00",
            b"\x12\x05\x00\x07" + b"\x02\x00\x01\x08\x01\x20\x05\x00\x04abcd",
            b"\x20\x00\x00\x01" + b"\x06\x00\x00\x30" + bytes(40),
        ],
        # The same, arriving in pieces of 1, 4, 7... bytes.
        "link_thread": [
            b"\x00\x01\x02" + b"\x01\x02\x10\x01" + b"\x01\x00\x02\x00\x00\x00\x04\x00\x03\x00",
            b"\x10\x00\x40" + b"\x12\x05\x00\x07" + b"\x02\x00\x01\x08\x01\x20\x05\x00\x04abcd",
        ],
        # FERRY_PRODUCE bodies as the SDK writes them: two records to a queue of "T", one
        # to the topic whose name is not ASCII.
        "produce_request": [
            ProduceCall("T", 1, False, 2, produce[0] * 2).body(),
            ProduceCall("\u00e9t\u00e9", 0, True, 1, produce[0]).body(),
        ],
        # A FERRY_PRODUCE request's header as the SDK writes it, and an answer's.
        "remoting_header": [
            encode_head(
                RemotingCommand(
                    310,
                    7,
                    0,
                    None,
                    {"topic": "T", "queueId": "3"},
                    b"",
                    "PYTHON",
                    1,
                    SERIALIZE_ROCKETMQ,
                )
            )[8:],
            encode_head(
                RemotingCommand(
                    0, 7, FLAG_RESPONSE, "é", {"msgId": "0A"}, b"", "JAVA", 0, SERIALIZE_ROCKETMQ
                )
            )[8:],
        ],
    }[target]


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1] not in TARGETS:
        sys.exit(
            f"usage: python -m tests.support.native_fuzz {{{','.join(TARGETS)}}} [CORPUS] [-opts]"
        )
    target, options = argv[1], argv[2:]
    corpus = next((o for o in options if not o.startswith("-")), None)
    if corpus is not None:
        os.makedirs(corpus, exist_ok=True)
        if not os.listdir(corpus):
            for number, seed in enumerate(seeds(target)):
                with open(os.path.join(corpus, f"seed-{number}"), "wb") as out:
                    out.write(seed)
    atheris.Setup([argv[0], *options], TARGETS[target])
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)

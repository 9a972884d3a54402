"""A FERRY_PRODUCE body read in one C pass by the produce lane
(``node.remoting.ferry_data.produce_run``) against its twin, ``produce_run_in_python``
(the body read as ``read_produce`` reads it, with ``SendService.produce_now``'s rules):
where the C answers, it answers the twin's run; it declines only what the twin declines or
what the SDK never writes (a field given twice, a field it does not know); and it reads
every request the SDK writes that the twin reads."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.client.messages import Message
from ferrymq.client.produce_records import ProduceCall, encode_record
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.remoting.ferry_data import produce_run, produce_run_in_python
from store.commitlog import topic_prefix_of

BODY_LIMIT = 4096
MAX_RECORDS = 8
HOST = b"\x7f\x00\x00\x01\x00\x00\x1f\x90"
TOPICS = {
    name: (topic_prefix_of(name.encode()), queues, str(pb.NORMAL))
    for name, queues in (("orders", 4), ("Zé", 2))
}


def sdk_records(bodies: list[bytes], topic: str = "orders", **fields) -> bytes:
    return b"".join(
        encode_record(Message(topic, body, **fields), pb.NORMAL, 1_700_000_000_000)
        for body in bodies
    )


def both(body: bytes, born_host: bytes = HOST, topics=TOPICS):
    found = produce_run(body, born_host, topics, BODY_LIMIT, MAX_RECORDS)
    expected = produce_run_in_python(body, born_host, topics, BODY_LIMIT, MAX_RECORDS)
    return found, expected


bodies = st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=MAX_RECORDS)


@settings(max_examples=300, deadline=None)
@given(
    bodies=bodies,
    topic=st.sampled_from(["orders", "Zé", "unknown", ""]),
    queue_id=st.integers(0, 5),
    atomic=st.booleans(),
    count_delta=st.integers(-1, 1),
    tag=st.one_of(st.none(), st.just("t")),
    oversize=st.booleans(),
)
def test_every_request_the_sdk_writes_is_read_as_the_twin_reads_it(
    bodies, topic, queue_id, atomic, count_delta, tag, oversize
):
    bodies = bodies + [b"x" * (BODY_LIMIT + 1)] * oversize  # a record the node refuses
    records = sdk_records(bodies, topic or "x", tag=tag)
    count = len(bodies) + count_delta
    found, expected = both(ProduceCall(topic, queue_id, atomic, count, records).body())
    assert found == expected
    taken = topic in TOPICS and queue_id < TOPICS[topic][1] and count == len(bodies)
    assert (found is not None) == (taken and not oversize and count <= MAX_RECORDS)


def test_a_run_read_natively_is_a_view_of_the_request():
    body = ProduceCall("orders", 3, False, 2, sdk_records([b"a", b"bc"])).body()
    run = produce_run(body, HOST, TOPICS, BODY_LIMIT, MAX_RECORDS)
    assert run is not None
    assert isinstance(run.records, memoryview) and run.records.obj is body
    assert (run.topic, run.queue_id, run.count, run.born_host) == ("orders", 3, 2, HOST)


def field(number: int, wire_type: int, payload: bytes) -> bytes:
    tag = bytes([number << 3 | wire_type])
    if wire_type == 2:
        return tag + bytes([len(payload)]) + payload
    return tag + payload


@settings(max_examples=500, deadline=None)
@given(
    parts=st.lists(
        st.one_of(
            st.builds(field, st.just(1), st.just(2), st.sampled_from([b"orders", b"Z\xc3\xa9"])),
            st.builds(field, st.just(1), st.just(2), st.binary(max_size=8)),  # any topic bytes
            st.builds(
                field,
                st.sampled_from([2, 3, 4]),
                st.just(0),
                st.sampled_from(
                    [b"\x00", b"\x01", b"\x02", b"\x7f", b"\x80\x01", b"\xff\xff\xff\xff\x0f"]
                ),
            ),
            st.builds(field, st.just(5), st.just(2), st.just(sdk_records([b"r"]))),
            st.builds(field, st.integers(6, 15), st.just(0), st.just(b"\x01")),  # unknown
            st.builds(field, st.integers(1, 5), st.sampled_from([1, 5]), st.just(bytes(8))),
            st.binary(max_size=4),  # bytes that are no field
        ),
        max_size=7,
    )
)
def test_any_body_is_declined_or_read_as_the_twin_reads_it(parts):
    found, expected = both(b"".join(parts))
    assert found is None or found == expected


def test_what_the_sdk_never_writes_is_declined_even_where_the_twin_reads_it():
    records = field(5, 2, sdk_records([b"r"]))
    canonical = field(1, 2, b"orders") + field(4, 0, b"\x01") + records
    assert both(canonical)[0] is not None
    for odd in (
        field(1, 2, b"orders") + canonical,  # the topic twice (protobuf: the last wins)
        canonical + field(9, 0, b"\x01"),  # a field this request does not have
    ):
        found, expected = both(odd)
        assert found is None and expected is not None


def test_a_born_host_of_the_wrong_size_or_a_topic_not_in_the_snapshot_is_declined():
    body = ProduceCall("orders", 0, False, 1, sdk_records([b"r"])).body()
    assert both(body, born_host=b"\x00" * 6) == (None, None)
    assert both(body, topics={}) == (None, None)

"""ferrymq's private remoting codes (FERRY_ROUTE, FERRY_PRODUCE, FERRY_FETCH) on a real
node: the Data service's answers in the body, bad bodies answered precisely, nothing
stored by a refused request, and the NameServer role's route naming both addresses."""

from __future__ import annotations

import dataclasses
import json
import time

import grpc
import pytest

from ferrymq.client.messages import Message
from ferrymq.client.produce_records import encode_record
from ferrymq.codec.commitlog_record import decode
from ferrymq.codec.remoting import SERIALIZE_ROCKETMQ
from ferrymq.codec.remoting_codes import FERRY_PRIVATE_CODES, FerryRequestCode, ResponseCode
from ferrymq.launcher.polling import until
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.ferrymq import admin_pb2 as api
from ferrymq.protocol.ferrymq import data_pb2 as data
from ferrymq.protocol.ferrymq import data_pb2_grpc
from tests.support.metrics import scrape, value
from tests.support.nodes import start_node
from tests.support.remoting_client import RemotingClient
from tests.support.rpc import create_topic, stubs


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    started = start_node(str(tmp_path_factory.mktemp("ferry") / "node"))
    channel, _, admin = stubs(started.address)
    create_topic(admin, "F", queues=2)
    assert admin.CreateGroup(api.CreateGroupRequest(group=api.Group(name="g"))).status.code == 0
    yield started, admin
    channel.close()
    started.sigterm()


@pytest.fixture
def client(node):
    with RemotingClient(node[0].remoting) as connected:
        yield connected


def call(client, code: int, body: bytes = b"", fields: dict | None = None):
    return client.call(code, fields, body, serialize_type=SERIALIZE_ROCKETMQ)


def records(*bodies: bytes) -> bytes:
    born = int(time.time() * 1000)
    return b"".join(encode_record(Message("F", b), pb.NORMAL, born) for b in bodies)


def fetch(client, offset: int = 0, topic: str = "F") -> data.FetchResponse:
    request = data.FetchRequest(group="g", topic=topic, queue_id=1, offset=offset)
    answer = call(client, FerryRequestCode.FERRY_FETCH, request.SerializeToString())
    assert answer.code == ResponseCode.SUCCESS
    return data.FetchResponse.FromString(answer.body)


def test_the_private_codes_are_in_their_range():
    assert all(code in FERRY_PRIVATE_CODES for code in FerryRequestCode)


def test_route_names_the_type_queues_and_both_addresses(node, client):
    started, _ = node
    answer = json.loads(call(client, FerryRequestCode.FERRY_ROUTE, fields={"topic": "F"}).body)
    assert answer["code"] == pb.OK and answer["messageType"] == pb.NORMAL
    [(_group, count, grpc_address, remoting_address)] = answer["queues"]
    assert (count, grpc_address, remoting_address) == (2, started.address, started.remoting)
    missing = json.loads(call(client, FerryRequestCode.FERRY_ROUTE, fields={"topic": "nope"}).body)
    assert missing["code"] == pb.TOPIC_NOT_FOUND and "nope" in missing["message"]


def test_route_without_a_topic_field_is_refused_by_name(client):
    answer = call(client, FerryRequestCode.FERRY_ROUTE)
    assert answer.code == ResponseCode.SYSTEM_ERROR and "topic" in answer.remark


def test_produce_then_fetch_round_trip(client):
    request = data.ProduceRequest(
        topic="F", queue_id=1, atomic=True, count=2, records=records(b"x", b"y")
    )
    answer = call(client, FerryRequestCode.FERRY_PRODUCE, request.SerializeToString())
    produced = data.ProduceResponse.FromString(answer.body)
    assert produced.code == pb.OK and len(produced.offsets) == 2
    fetched = fetch(client)
    assert fetched.code == pb.OK and fetched.count >= 2


def test_a_body_that_is_not_a_request_is_refused_and_stores_nothing(client):
    before = fetch(client).next_offset
    for code in (FerryRequestCode.FERRY_PRODUCE, FerryRequestCode.FERRY_FETCH):
        answer = call(client, code, b"\xff\xff\xff")
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert answer.remark.startswith("not a ")
    assert fetch(client).next_offset == before


@pytest.mark.parametrize(
    "body",
    [
        bytes([5 << 3 | 2, 100]) + b"short",  # the records run past the frame
        bytes([1 << 3 | 2, 2]) + b"\xff\xfe",  # a topic that is not UTF-8 (protobuf's refusal)
        bytes([4 << 3 | 0]) + b"\xff" * 11,  # a count longer than 64 bits
    ],
)
def test_a_produce_request_whose_fields_do_not_read_is_refused_and_stores_nothing(client, body):
    """The records are taken out of the frame as a view, the rest read by protobuf:
    either refusal is the same answer."""
    before = fetch(client).next_offset
    answer = call(client, FerryRequestCode.FERRY_PRODUCE, body)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert answer.remark.startswith("not a ProduceRequest: ")
    assert fetch(client).next_offset == before


@pytest.mark.parametrize("atomic", [True, False])
def test_records_short_of_the_count_get_the_data_services_answers(client, atomic):
    """Three announced, two sent: the third is refused by index; an atomic request stores
    nothing, another stores the two whole records (as Data.Produce answers)."""
    before = fetch(client).next_offset
    request = data.ProduceRequest(
        topic="F", queue_id=1, atomic=atomic, count=3, records=records(b"a", b"b")
    )
    answer = call(client, FerryRequestCode.FERRY_PRODUCE, request.SerializeToString())
    produced = data.ProduceResponse.FromString(answer.body)
    assert produced.code == pb.BAD_REQUEST
    assert produced.failures[-1].index == 2
    expected = [-1, -1, -1] if atomic else [before, before + 1, -1]
    assert list(produced.offsets) == expected
    assert fetch(client).next_offset == before + (0 if atomic else 2)


def stored_records(client, offset: int, count: int, topic: str = "F") -> list:
    """The ``count`` records of queue 1 from ``offset``, as stored."""
    answer = fetch(client, offset, topic)
    found, position = [], 0
    while len(found) < count:
        stored = decode(answer.records, position)
        found.append(stored)
        position += stored.size
    return found


def test_the_lane_and_the_handler_store_and_answer_a_produce_alike(node, client):
    """The same request taken by the produce lane (a connection with nothing in flight)
    and by the handler (a connection whose long poll is being handled as a task, so the
    lane is not offered it; with tags, the fetch lane declines the poll to its task): the
    same answer but for the offsets, the same records but for where and when they were
    stored."""
    request = data.ProduceRequest(
        topic="F", queue_id=1, count=2, records=records(b"same", b"twice")
    ).SerializeToString()
    first = fetch(client).next_offset
    by_lane = data.ProduceResponse.FromString(
        call(client, FerryRequestCode.FERRY_PRODUCE, request).body
    )
    with RemotingClient(node[0].remoting) as busy:
        at_end = data.FetchRequest(group="g", topic="F", queue_id=0, offset=0, max_messages=1)
        end = data.FetchResponse.FromString(
            call(busy, FerryRequestCode.FERRY_FETCH, at_end.SerializeToString()).body
        ).next_offset
        polling = data.FetchRequest(
            group="g", topic="F", queue_id=0, offset=end, wait_ms=5000, tags=["none"]
        )
        busy.send(
            FerryRequestCode.FERRY_FETCH,
            body=polling.SerializeToString(),
            serialize_type=SERIALIZE_ROCKETMQ,
        )
        by_handler = data.ProduceResponse.FromString(
            call(busy, FerryRequestCode.FERRY_PRODUCE, request).body
        )
    assert list(by_lane.offsets) == [first, first + 1]
    assert list(by_handler.offsets) == [first + 2, first + 3]
    assert (by_lane.code, by_lane.message, list(by_lane.failures)) == (
        by_handler.code,
        by_handler.message,
        list(by_handler.failures),
    )
    placed = ("queue_offset", "physical_offset", "store_timestamp_ms", "born_host")
    lane_records, handler_records = (
        [dataclasses.replace(r, **{field: 0 for field in placed}) for r in found]
        for found in (stored_records(client, first, 2), stored_records(client, first + 2, 2))
    )
    assert lane_records == handler_records
    assert [r.body for r in lane_records] == [b"same", b"twice"]


def test_a_topic_the_lane_read_natively_is_refused_once_it_is_made_read_only(node, client):
    """The produce lane reads a request in C for a topic whose rules passed before
    (``SendService.lane_topics``); a change of the topic table starts that snapshot again,
    so a topic made read-only is refused with the handler's precise answer at once, and
    nothing of the request is stored."""
    _, admin = node
    create_topic(admin, "Shut", queues=2)
    request = data.ProduceRequest(
        topic="Shut", queue_id=1, count=1, records=records(b"open")
    ).SerializeToString()
    for expected_offset in (0, 1):  # the first read in Python, the second in C
        answer = data.ProduceResponse.FromString(
            call(client, FerryRequestCode.FERRY_PRODUCE, request).body
        )
        assert (answer.code, list(answer.offsets)) == (pb.OK, [expected_offset])
    shut = api.Topic(name="Shut", queue_count=2, message_type=api.NORMAL, permission=api.READ)
    assert admin.UpdateTopic(api.UpdateTopicRequest(topic=shut)).status.code == 0
    refused = data.ProduceResponse.FromString(
        call(client, FerryRequestCode.FERRY_PRODUCE, request).body
    )
    assert refused.code == pb.FORBIDDEN and "read-only" in refused.message
    assert fetch(client, 0, "Shut").next_offset == 2
    assert [r.body for r in stored_records(client, 0, 2, "Shut")] == [b"open", b"open"]


def test_the_fetch_lane_answers_a_waiting_fetch_and_declines_what_it_does_not_take(node, client):
    """A FERRY_FETCH at the queue's end waits in the fetch lane (no task) and is answered
    by the produce that follows on another connection; one with tags is declined to the
    handler, which answers it as before; ``ferrymq_fetch_lane_total`` counts both."""
    started, admin = node
    create_topic(admin, "Tail", queues=1)

    def lane(outcome: str) -> float:
        return value(
            scrape(started.metrics, ("ferrymq_fetch_lane_total",)),
            "ferrymq_fetch_lane",
            outcome=outcome,
        )

    taken, declined = lane("taken"), lane("declined")
    with RemotingClient(started.remoting) as waiting:
        polling = data.FetchRequest(group="g", topic="Tail", queue_id=0, offset=0, wait_ms=20000)
        opaque = waiting.send(
            FerryRequestCode.FERRY_FETCH,
            body=polling.SerializeToString(),
            serialize_type=SERIALIZE_ROCKETMQ,
        )
        until(lambda: lane("taken") == taken + 1, 10, "the lane to take the poll")
        produce = data.ProduceRequest(topic="Tail", queue_id=0, count=1, records=records(b"now"))
        call(client, FerryRequestCode.FERRY_PRODUCE, produce.SerializeToString())
        answer = waiting.response()
    assert answer.opaque == opaque
    fetched = data.FetchResponse.FromString(answer.body)
    assert (fetched.code, fetched.count, fetched.next_offset) == (pb.OK, 1, 1)
    assert decode(fetched.records, 0).body == b"now"

    tagged = data.FetchRequest(group="g", topic="Tail", queue_id=0, offset=0, tags=["other"])
    answer = call(client, FerryRequestCode.FERRY_FETCH, tagged.SerializeToString())
    passed_over = data.FetchResponse.FromString(answer.body)
    assert (passed_over.code, passed_over.next_offset) == (pb.MESSAGE_NOT_FOUND, 1)
    assert lane("declined") == declined + 1


@pytest.mark.parametrize("follow", [-1, 65])
def test_a_follow_out_of_range_is_refused_by_name_through_both_doors(node, client, follow):
    asked = data.FetchRequest(group="g", topic="F", queue_id=1, follow=follow)
    answer = call(client, FerryRequestCode.FERRY_FETCH, asked.SerializeToString())
    by_remoting = data.FetchResponse.FromString(answer.body)
    with grpc.insecure_channel(node[0].address) as channel:
        by_grpc = data_pb2_grpc.DataStub(channel).Fetch(asked)
    for refused in (by_remoting, by_grpc):
        assert (refused.code, refused.message) == (pb.BAD_REQUEST, "follow must be 0..64")


def test_a_followed_fetch_is_answered_again_on_its_request_and_ends_once_spent(node, client):
    """Through a node's connection: each produce answered on the followed fetch's one
    request, ``follows`` on all but its last answer; the connection then takes requests
    as before, and has nothing in flight."""
    started, admin = node
    create_topic(admin, "Followed", queues=1)
    with RemotingClient(started.remoting) as waiting:
        asked = data.FetchRequest(
            group="g", topic="Followed", queue_id=0, offset=0, wait_ms=20000, follow=2
        )
        opaque = waiting.send(
            FerryRequestCode.FERRY_FETCH,
            body=asked.SerializeToString(),
            serialize_type=SERIALIZE_ROCKETMQ,
        )
        answers = []
        for body in (b"a", b"b", b"c"):
            produce = data.ProduceRequest(
                topic="Followed", queue_id=0, count=1, records=records(body)
            )
            call(client, FerryRequestCode.FERRY_PRODUCE, produce.SerializeToString())
            answer = waiting.response()
            assert answer.opaque == opaque
            answers.append(data.FetchResponse.FromString(answer.body))
        assert [(a.code, a.next_offset, a.follows) for a in answers] == [
            (pb.OK, 1, True),
            (pb.OK, 2, True),
            (pb.OK, 3, False),
        ]
        assert [decode(a.records, 0).body for a in answers] == [b"a", b"b", b"c"]
        after = data.FetchRequest(group="g", topic="Followed", queue_id=0, offset=3)
        answer = call(waiting, FerryRequestCode.FERRY_FETCH, after.SerializeToString())
        assert data.FetchResponse.FromString(answer.body).code == pb.MESSAGE_NOT_FOUND

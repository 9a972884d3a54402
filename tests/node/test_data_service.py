"""Data.Fetch: bulk reads of stored records through a real node."""

from __future__ import annotations

import threading
import time

import pytest

from ferrymq.client import FerryError
from ferrymq.client.errors import MALFORMED_ANSWER
from ferrymq.client.messages import decode_records
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from ferrymq.protocol.ferrymq import data_pb2 as data
from ferrymq.protocol.ferrymq import data_pb2_grpc
from tests.support.rpc import create_topic, message, stubs


@pytest.fixture(scope="module")
def rows_node(module_node):
    """The module's node holding 100 rows in queue 0 of topic ``rows`` (tagged ``even`` and
    ``odd``), and group ``G``: the node, its messaging stub and its Data stub."""
    channel, messaging, admin = stubs(module_node.address)
    create_topic(admin, "rows", queues=2)
    assert admin.CreateGroup(api.CreateGroupRequest(group=api.Group(name="G"))).status.code == 0
    batch = [
        message("rows", b"row-%d" % i, f"R{i}", queue_id=0, tag="even" if i % 2 == 0 else "odd")
        for i in range(100)
    ]
    assert messaging.SendMessage(rpc.SendMessageRequest(messages=batch)).status.code == pb.OK
    return module_node, messaging, data_pb2_grpc.DataStub(channel)


def fetch(stub, **fields):
    request = data.FetchRequest(group="G", topic="rows", **fields)
    return stub.Fetch(request, timeout=10)


def test_fetch_returns_whole_records_in_order(rows_node):
    _, _, stub = rows_node
    answer = fetch(stub, queue_id=0, offset=10, max_messages=50)
    assert answer.code == pb.OK and answer.count == 50 and answer.next_offset == 60
    records = decode_records(answer.records)
    assert [r.body for r in records] == [b"row-%d" % i for i in range(10, 60)]
    assert [r.queue_offset for r in records] == list(range(10, 60))
    assert (answer.min_offset, answer.max_offset) == (0, 100)


def test_an_answer_that_is_not_whole_records_is_a_clear_client_error(rows_node):
    """A client handed bytes that are no message records (zeros a torn read returned, a
    record cut short) says so with MALFORMED_ANSWER; it never loops on a zero size nor
    hands on garbage as messages."""
    _, _, stub = rows_node
    records = fetch(stub, queue_id=0, offset=0, max_messages=2).records
    first = int.from_bytes(records[:4], "big")  # the second record starts here
    for bad, at in (
        (bytes(200), 0),
        (records[:-1], first),
        (records + b"\x00", len(records)),
    ):
        with pytest.raises(FerryError) as raised:
            decode_records(bad)
        assert raised.value.code == MALFORMED_ANSWER
        assert f"byte {at} of {len(bad)}" in str(raised.value)


def test_fetch_filters_by_tag_and_limits_bytes(rows_node):
    _, _, stub = rows_node
    odd = decode_records(fetch(stub, queue_id=0, offset=0, max_messages=10, tags=["odd"]).records)
    assert [r.body for r in odd] == [b"row-%d" % i for i in range(1, 20, 2)]
    small = fetch(stub, queue_id=0, offset=0, max_bytes=1)
    assert small.count == 1 and small.next_offset == 1  # one record always fits


def test_fetch_bad_requests(rows_node):
    _, _, stub = rows_node
    assert fetch(stub, queue_id=5, offset=0).code == pb.BAD_REQUEST
    assert fetch(stub, queue_id=0, offset=500).code == pb.ILLEGAL_OFFSET
    assert fetch(stub, queue_id=0, offset=0, max_messages=99999).code == pb.BAD_REQUEST
    unknown = data.FetchRequest(group="nobody", topic="rows", queue_id=0)
    assert rows_node[2].Fetch(unknown).code == pb.CONSUMER_GROUP_NOT_FOUND
    missing = data.FetchRequest(group="G", topic="nothing", queue_id=0)
    assert rows_node[2].Fetch(missing).code == pb.TOPIC_NOT_FOUND


def test_fetch_long_polls_until_a_record_arrives(rows_node):
    _, messaging, stub = rows_node
    result = {}

    def poll():
        started = time.monotonic()
        result["answer"] = fetch(stub, queue_id=1, offset=0, wait_ms=20_000)
        result["took"] = time.monotonic() - started

    poller = threading.Thread(target=poll)
    poller.start()
    deadline = time.monotonic() + 10
    sent = 0
    while poller.is_alive() and time.monotonic() < deadline:
        late = message("rows", b"late", f"L{sent}", queue_id=1)
        assert messaging.SendMessage(rpc.SendMessageRequest(messages=[late])).status.code == pb.OK
        sent += 1
        poller.join(0.2)
    poller.join()
    assert result["answer"].code == pb.OK and result["took"] < 10

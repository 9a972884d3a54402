"""Message lookups on the remoting port of a real node: by key, by the 4.x offset message
id (which carries the node's remoting address, on both protocols), by time."""

from __future__ import annotations

import time

import pytest

from ferrymq.client import Admin
from ferrymq.codec.commitlog_record import decode, encode_host
from ferrymq.codec.message_id import parse_offset_message_id
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from tests.support.nodes import start_node
from tests.support.remoting_client import RemotingClient, send_v2
from tests.support.rpc import create_topic, message, stubs


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    started = start_node(str(tmp_path_factory.mktemp("remoting-query") / "node"))
    channel, messaging, admin = stubs(started.address)
    create_topic(admin, "Q", queues=2)
    create_topic(admin, "other", queues=1)
    create_topic(admin, "txq", queues=1, message_type=api.TRANSACTION)
    yield started, messaging
    channel.close()
    started.sigterm()


@pytest.fixture
def client(node):
    with RemotingClient(node[0].remoting) as connected:
        yield connected


def records(body: bytes) -> list:
    found, position = [], 0
    while position < len(body):
        record = decode(body, position)
        found.append(record)
        position += record.size
    return found


def query(client, topic: str, key: str, unique: bool = False, **fields: str):
    header = {"topic": topic, "key": key, "maxNum": "32", "beginTimestamp": "0"}
    header["endTimestamp"] = str(1 << 62)
    if unique:
        header["_UNIQUE_KEY_QUERY"] = "true"
    header.update(fields)
    return client.call(RequestCode.QUERY_MESSAGE, header)


def test_query_by_key_answers_the_stored_records(node, client):
    for i in range(3):
        assert (
            send_v2(client, "Q", b"k%d" % i, i % 2, UNIQ_KEY=f"QK-{i}", KEYS="order-7 x").code == 0
        )
    send_v2(client, "other", b"elsewhere", 0, UNIQ_KEY="QK-9", KEYS="order-7")
    answer = query(client, "Q", "order-7")
    assert answer.code == ResponseCode.SUCCESS, answer
    found = records(answer.body)
    assert sorted(r.body for r in found) == [b"k0", b"k1", b"k2"]
    assert {r.topic for r in found} == {"Q"} and found[0].keys == ["order-7", "x"]
    assert int(answer.ext_fields["indexLastUpdateTimestamp"]) >= found[0].store_timestamp_ms
    [unique] = records(query(client, "Q", "QK-1", unique=True).body)
    assert unique.body == b"k1"
    missing = query(client, "Q", "no-such-key")
    assert missing.code == ResponseCode.QUERY_NOT_FOUND
    assert missing.remark == "can not find message, maybe time range not correct"
    assert query(client, "Q", "order-7", endTimestamp="1").code == ResponseCode.QUERY_NOT_FOUND


def test_the_offset_id_carries_the_remoting_address_and_views_its_record(node, client):
    started, messaging = node
    sent = send_v2(client, "Q", b"view-me", 0, UNIQ_KEY="V-1")
    host, physical = parse_offset_message_id(sent.ext_fields["msgId"])
    remoting_host, _, remoting_port = started.remoting.rpartition(":")
    assert host == encode_host(remoting_host, int(remoting_port))
    answer = client.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(physical)})
    assert answer.code == ResponseCode.SUCCESS, answer
    [viewed] = records(answer.body)
    assert (viewed.body, viewed.unique_key, viewed.physical_offset) == (b"view-me", "V-1", physical)
    # The gRPC door speaks of the same id: its sends answer it, its Admin looks it up.
    grpc_sent = messaging.SendMessage(
        rpc.SendMessageRequest(messages=[message("Q", b"from-grpc", "G-1", queue_id=0)])
    )
    assert grpc_sent.status.code == pb.OK
    with Admin(started.address) as admin:
        [stored] = admin.query_by_id(sent.ext_fields["msgId"], "Q")
        assert stored.body == b"view-me"
        [grpc_stored] = admin.query_by_id("G-1", "Q")
    assert parse_offset_message_id(grpc_stored.offset_message_id)[0] == host


def test_a_view_answers_only_a_real_record_of_the_topic_named(node, client):
    sent = send_v2(client, "Q", b"mine", 0, UNIQ_KEY="V-2")
    _, physical = parse_offset_message_id(sent.ext_fields["msgId"])
    for fields in (
        {"offset": str(physical), "topic": "other"},  # another topic's name
        {"offset": str(physical + 1)},  # inside a record
        {"offset": str(1 << 40)},  # beyond the log
        {"offset": "-1"},
    ):
        answer = client.call(RequestCode.VIEW_MESSAGE_BY_ID, fields)
        assert answer.code == ResponseCode.SYSTEM_ERROR, (fields, answer)
        assert answer.remark.startswith("can not find message by the offset")
    bad = client.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": "x"})
    assert bad.code == ResponseCode.SYSTEM_ERROR and "offset" in bad.remark
    # A transaction half is not its real topic's message yet.
    half = send_v2(client, "txq", b"half", 0, UNIQ_KEY="H-1", TRAN_MSG="true", PGROUP="p")
    _, half_at = parse_offset_message_id(half.ext_fields["msgId"])
    named = client.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(half_at), "topic": "txq"})
    assert named.code == ResponseCode.SYSTEM_ERROR


def test_search_by_time_and_the_earliest_store_time(node, client):
    before = int(time.time() * 1000) - 1
    send_v2(client, "other", b"t1", 0, UNIQ_KEY="T-1")
    fields = {"topic": "other", "queueId": "0"}
    answer = client.call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, fields | {"timestamp": "0"})
    assert answer.code == ResponseCode.SUCCESS and answer.ext_fields["offset"] == "0"
    late = client.call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, fields | {"timestamp": str(1 << 50)})
    high = client.call(RequestCode.GET_MAX_OFFSET, fields).ext_fields["offset"]
    assert late.ext_fields["offset"] == high
    earliest = client.call(RequestCode.GET_EARLIEST_MSG_STORETIME, fields)
    assert earliest.code == ResponseCode.SUCCESS
    assert 0 < int(earliest.ext_fields["timestamp"]) <= max(before, int(time.time() * 1000))
    unknown = client.call(
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, fields | {"topic": "nope", "timestamp": "0"}
    )
    assert unknown.code == ResponseCode.TOPIC_NOT_EXIST
    no_queue = client.call(
        RequestCode.GET_EARLIEST_MSG_STORETIME, {"topic": "other", "queueId": "9"}
    )
    assert no_queue.code == ResponseCode.SYSTEM_ERROR

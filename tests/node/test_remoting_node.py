"""The remoting port of a real node process: the NameServer and broker roles as RocketMQ
4.x clients use them, and messages crossing between the remoting and gRPC doors with
their ids, tags, keys and properties intact."""

from __future__ import annotations

import threading
import time

import pytest

from ferrymq.client import Message, Producer, PullConsumer
from ferrymq.codec.commitlog_record import decode
from ferrymq.codec.message_id import parse_offset_message_id
from ferrymq.codec.remoting import FLAG_ONEWAY
from ferrymq.codec.remoting_codes import BROKER_VERSION, RequestCode, ResponseCode
from ferrymq.codec.remoting_messages import BatchedMessage, encode_batch
from ferrymq.launcher.polling import until
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from tests.support.nodes import start_node
from tests.support.remoting_client import (
    RemotingClient,
    heartbeat_body,
    json_of,
    pull_fields,
    send_v2,
)
from tests.support.rpc import create_topic, queue_of, stubs

CLIENT_ID = "127.0.0.1@4242#1"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    started = start_node(str(tmp_path_factory.mktemp("remoting") / "node"))
    channel, messaging, admin = stubs(started.address)
    create_topic(admin, "T", queues=4)
    create_topic(admin, "sdk", queues=1)
    create_topic(admin, "empty", queues=2)
    create_topic(admin, "fifo", queues=2, message_type=api.FIFO)
    for group in ("G", "H"):
        answer = admin.CreateGroup(api.CreateGroupRequest(group=api.Group(name=group)))
        assert answer.status.code == 0
    yield started, messaging
    channel.close()
    started.sigterm()


@pytest.fixture
def client(node):
    with RemotingClient(node[0].remoting) as connected:
        yield connected


def pull(client, topic: str, queue_id: int, offset: int, **fields: str):
    header = pull_fields("G", topic, queue_id, offset)
    header.update(fields)
    return client.call(RequestCode.PULL_MESSAGE, header)


def records(answer) -> list:
    found, position = [], 0
    while position < len(answer.body):
        record = decode(answer.body, position)
        found.append(record)
        position += record.size
    return found


def heartbeat(client, groups=("G",), client_id=CLIENT_ID, topic="T", expression="*"):
    body = heartbeat_body(client_id, groups, topic, expression)
    return client.call(RequestCode.HEART_BEAT, body=body)


def max_offset(client, topic: str, queue_id: int) -> int:
    answer = client.call(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(queue_id)})
    assert answer.code == ResponseCode.SUCCESS, answer
    return int(answer.ext_fields["offset"])


# ---- NameServer role -------------------------------------------------------------------
def test_the_route_points_at_the_nodes_remoting_port(node, client):
    answer = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
    assert answer.code == ResponseCode.SUCCESS
    route = json_of(answer)
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": node[0].remoting}
    assert route["queueDatas"][0]["writeQueueNums"] == 4 and route["queueDatas"][0]["perm"] == 6
    answer = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "missing"})
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST
    topics = json_of(client.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))["topicList"]
    assert {"T", "sdk", "%DLQ%G"} <= set(topics)


# ---- sends and pulls -------------------------------------------------------------------
def test_a_sent_message_is_pulled_back_as_stored(node, client):
    start = max_offset(client, "T", 1)
    answer = send_v2(
        client,
        "T",
        b"hello",
        1,
        UNIQ_KEY="ID-1",
        TAGS="red",
        KEYS="k1 k2",
        WAIT="true",
        color="blue",
    )
    assert answer.code == ResponseCode.SUCCESS, answer
    assert answer.ext_fields["queueId"] == "1" and answer.ext_fields["queueOffset"] == str(start)
    assert answer.ext_fields["MSG_REGION"] == "DefaultRegion"
    _, physical = parse_offset_message_id(answer.ext_fields["msgId"])
    pulled = pull(client, "T", 1, start)
    assert pulled.code == ResponseCode.SUCCESS
    assert pulled.ext_fields["nextBeginOffset"] == str(start + 1)
    assert pulled.ext_fields["suggestWhichBrokerId"] == "0"
    (record,) = records(pulled)
    assert (record.body, record.topic, record.queue_id, record.queue_offset) == (
        b"hello",
        "T",
        1,
        start,
    )
    assert record.physical_offset == physical
    properties = record.properties
    assert properties["UNIQ_KEY"] == "ID-1" and properties["TAGS"] == "red"
    assert properties["KEYS"] == "k1 k2" and properties["color"] == "blue"
    assert properties["CLUSTER"] == "DefaultCluster" and "WAIT" not in properties
    assert record.born_host[:4] == bytes([127, 0, 0, 1])  # the peer's address


def test_a_lite_pull_is_answered_as_a_pull(client):
    """RocketMQ 5's remoting client pulls for its DefaultLitePullConsumer with
    LITE_PULL_MESSAGE (361, sysFlag bit 16): it read nothing while the door did not serve it."""
    start = max_offset(client, "T", 2)
    assert send_v2(client, "T", b"lite-pulled", 2).code == ResponseCode.SUCCESS
    header = pull_fields("G", "T", 2, start)
    header["sysFlag"] = str(4 | 16)
    answer = client.call(RequestCode.LITE_PULL_MESSAGE, header)
    assert answer.code == ResponseCode.SUCCESS, answer
    assert answer.ext_fields["nextBeginOffset"] == str(start + 1)
    assert [r.body for r in records(answer)] == [b"lite-pulled"]


def test_v1_send_and_a_queue_the_node_picks(client):
    answer = client.call(
        RequestCode.SEND_MESSAGE,
        {
            "producerGroup": "producers",
            "topic": "T",
            "queueId": "-1",
            "sysFlag": "0",
            "bornTimestamp": "1700000000000",
            "flag": "7",
            "properties": "UNIQ_KEY\x01V1\x02",
        },
        b"v1",
    )
    assert answer.code == ResponseCode.SUCCESS, answer
    queue_id = int(answer.ext_fields["queueId"])
    pulled = pull(client, "T", queue_id, int(answer.ext_fields["queueOffset"]))
    record = records(pulled)[0]
    assert record.body == b"v1" and record.flag == 7 and record.born_timestamp_ms == 1700000000000


def test_a_batch_is_stored_whole_and_pulled_back(client):
    start = max_offset(client, "T", 2)
    batch = [
        BatchedMessage(0, b"b%d" % i, f"UNIQ_KEY\x01B{i}\x02TAGS\x01t{i}".encode())
        for i in range(3)
    ]
    fields = {
        "a": "producers",
        "b": "T",
        "e": "2",
        "f": "0",
        "g": "0",
        "h": "0",
        "i": "",
        "m": "true",
    }
    answer = client.call(RequestCode.SEND_BATCH_MESSAGE, fields, encode_batch(batch))
    assert answer.code == ResponseCode.SUCCESS, answer
    assert len(answer.ext_fields["msgId"].split(",")) == 3
    pulled = records(pull(client, "T", 2, start))
    assert [(r.body, r.properties["UNIQ_KEY"], r.tags) for r in pulled] == [
        (b"b0", "B0", "t0"),
        (b"b1", "B1", "t1"),
        (b"b2", "B2", "t2"),
    ]
    # Not whole messages: refused, nothing stored.
    answer = client.call(RequestCode.SEND_BATCH_MESSAGE, fields, encode_batch(batch)[:-4])
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL and "batch body" in answer.remark
    assert max_offset(client, "T", 2) == start + 3


@pytest.mark.parametrize(
    ("topic", "queue_id", "body", "properties", "code", "words"),
    [
        ("missing", 0, b"x", {}, ResponseCode.TOPIC_NOT_EXIST, "does not exist"),
        ("bad topic!", 0, b"x", {}, ResponseCode.SYSTEM_ERROR, "characters"),
        ("T", 9, b"x", {}, ResponseCode.SYSTEM_ERROR, "queue 9 does not exist"),
        ("T", 0, b"", {}, ResponseCode.MESSAGE_ILLEGAL, "empty"),
        ("T", 0, b"x", {"__MSG_TYPE": "1"}, ResponseCode.MESSAGE_ILLEGAL, "node's own"),
        ("T", 0, b"x", {"TAGS": "a|b"}, ResponseCode.MESSAGE_ILLEGAL, "tag"),
        ("T", 0, b"x", {"DELAY": "3"}, ResponseCode.MESSAGE_ILLEGAL, "not DELAY"),
        ("fifo", 0, b"x", {}, ResponseCode.MESSAGE_ILLEGAL, "takes FIFO"),
    ],
)
def test_refused_sends_get_rocketmqs_code_and_store_nothing(
    client, topic, queue_id, body, properties, code, words
):
    before = max_offset(client, "T", 0)
    answer = send_v2(client, topic, body, queue_id, **properties)
    assert answer.code == code and words in answer.remark, answer
    assert max_offset(client, "T", 0) == before


def test_malformed_send_headers_are_answered_precisely(client):
    answer = client.call(RequestCode.SEND_MESSAGE_V2, {"a": "p", "e": "0"}, b"x")
    assert (
        answer.code == ResponseCode.SYSTEM_ERROR
        and answer.remark == "header field topic is missing"
    )
    answer = client.call(RequestCode.SEND_MESSAGE_V2, {"a": "p", "b": "T", "e": "zero"}, b"x")
    assert answer.remark == "header field queueId='zero' is not an integer"
    answer = send_v2(client, "T", b"x", 0)
    answer = client.call(
        RequestCode.SEND_MESSAGE_V2, {"a": "p", "b": "T", "e": "0", "i": "no-separator"}, b"x"
    )
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL and "0x01" in answer.remark


def test_pull_statuses_follow_rocketmq(client):
    # Its own message in queue 1, so it needs no earlier test's (and passes alone).
    assert send_v2(client, "T", b"for the statuses", queue_id=1).code == ResponseCode.SUCCESS
    high = max_offset(client, "T", 1)
    assert high > 0
    answer = pull(client, "T", 1, high + 5)
    assert answer.code == ResponseCode.PULL_OFFSET_MOVED
    assert answer.ext_fields["nextBeginOffset"] == "0"  # min is 0: start there
    assert pull(client, "T", 1, high).code == ResponseCode.PULL_NOT_FOUND
    empty = pull(client, "empty", 0, 0)
    assert empty.code == ResponseCode.PULL_NOT_FOUND and empty.ext_fields["maxOffset"] == "0"
    assert pull(client, "empty", 0, 3).code == ResponseCode.PULL_OFFSET_MOVED
    filtered = pull(client, "T", 1, 0, subscription="no-such-tag")
    assert filtered.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert int(filtered.ext_fields["nextBeginOffset"]) > 0
    assert pull(client, "T", 77, 0).code == ResponseCode.SYSTEM_ERROR
    # A group nobody created is created by its first pull, as on the gRPC door
    # (tests/node/test_remoting_groups_on_first_use.py); an illegal name is refused.
    illegal = pull(client, "T", 0, 0, consumerGroup="bad group")
    assert illegal.code == ResponseCode.SYSTEM_ERROR
    assert illegal.remark.startswith("ILLEGAL_CONSUMER_GROUP: consumer_group name 'bad group'")
    # "*" is no SQL92 expression (tests/node/test_remoting_sql92.py has the filters).
    sql_star = pull(client, "T", 0, 0, expressionType="SQL92")
    assert sql_star.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED


def test_a_long_poll_answers_when_a_message_arrives(node, client):
    offset = max_offset(client, "T", 3)
    answers = []

    def wait() -> None:
        answers.append(pull(client, "T", 3, offset, sysFlag="6", suspendTimeoutMillis="15000"))

    waiter = threading.Thread(target=wait)
    started = time.monotonic()
    waiter.start()
    time.sleep(0.3)  # the pull is waiting meanwhile (a late send still answers it)
    with RemotingClient(node[0].remoting) as sender:
        assert send_v2(sender, "T", b"wake", 3).code == ResponseCode.SUCCESS
    waiter.join(15)
    assert time.monotonic() - started < 10
    assert answers[0].code == ResponseCode.SUCCESS
    assert [r.body for r in records(answers[0])] == [b"wake"]


def test_pulls_without_a_subscription_use_the_heartbeats(client):
    assert heartbeat(client, expression="blue || green").code == ResponseCode.SUCCESS
    start = max_offset(client, "T", 0)
    for tag in ("red", "blue", "green"):
        assert send_v2(client, "T", tag.encode(), 0, TAGS=tag).code == ResponseCode.SUCCESS
    answer = pull(client, "T", 0, start, sysFlag="0", subVersion="1")
    assert [r.body for r in records(answer)] == [b"blue", b"green"]
    newer = pull(client, "T", 0, start, sysFlag="0", subVersion="2")
    assert newer.code == ResponseCode.SUBSCRIPTION_NOT_LATEST
    unknown = pull(client, "sdk", 0, 0, sysFlag="0")
    assert unknown.code == ResponseCode.SUBSCRIPTION_NOT_EXIST


# ---- offsets and clients ---------------------------------------------------------------
def test_a_new_group_starts_at_a_queues_first_message_while_it_is_in_memory(client):
    """Answered "not found", a lite pull consumer started at the queue's end and skipped
    what was sent just before it (an OpenChaos queue run lost 17 such messages to it)."""
    assert send_v2(client, "T", b"sent before the consumer", 2).code == ResponseCode.SUCCESS
    fields = {"consumerGroup": "fresh", "topic": "T", "queueId": "2"}
    answer = client.call(RequestCode.QUERY_CONSUMER_OFFSET, fields)
    assert answer.code == ResponseCode.SUCCESS, answer
    assert answer.ext_fields["offset"] == "0"


def test_consumer_offsets_are_shared_with_the_grpc_door(node, client):
    _, messaging = node
    fields = {"consumerGroup": "H", "topic": "T", "queueId": "1"}
    empty = {"consumerGroup": "H", "topic": "empty", "queueId": "1"}
    answer = client.call(RequestCode.QUERY_CONSUMER_OFFSET, empty)
    assert answer.code == ResponseCode.SUCCESS and answer.ext_fields["offset"] == "0"
    # Offset 1 is inside the queue whichever tests of this module ran before.
    assert send_v2(client, "T", b"for an offset", queue_id=1).code == ResponseCode.SUCCESS
    client.send(
        RequestCode.UPDATE_CONSUMER_OFFSET, {**fields, "commitOffset": "1"}, flag=FLAG_ONEWAY
    )
    until(
        lambda: (
            client.call(RequestCode.QUERY_CONSUMER_OFFSET, fields).ext_fields.get("offset") == "1"
        )
    )
    grpc_answer = messaging.GetOffset(
        rpc.GetOffsetRequest(group=pb.Resource(name="H"), message_queue=queue_of("T", 1))
    )
    assert grpc_answer.status.code == pb.OK and grpc_answer.offset == 1
    bad = client.call(RequestCode.UPDATE_CONSUMER_OFFSET, {**fields, "commitOffset": "999999"})
    assert bad.code == ResponseCode.SYSTEM_ERROR and "outside" in bad.remark
    assert client.call(RequestCode.GET_MIN_OFFSET, {"topic": "T", "queueId": "1"}).ext_fields == {
        "offset": "0"
    }


def test_heartbeats_make_members_until_they_leave(node):
    members = {"consumerGroup": "H"}
    with RemotingClient(node[0].remoting) as first, RemotingClient(node[0].remoting) as second:
        answer = heartbeat(first, groups=("H",), client_id="10.0.0.9@1")
        assert answer.code == ResponseCode.SUCCESS and answer.version == BROKER_VERSION
        assert heartbeat(second, groups=("H",), client_id="10.0.0.9@2").code == 0
        listed = json_of(first.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, members))
        assert listed == {"consumerIdList": ["10.0.0.9@1", "10.0.0.9@2"]}
        left = first.call(
            RequestCode.UNREGISTER_CLIENT, {"clientID": "10.0.0.9@1", "consumerGroup": "H"}
        )
        assert left.code == ResponseCode.SUCCESS
        listed = json_of(second.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, members))
        assert listed == {"consumerIdList": ["10.0.0.9@2"]}
        illegal = heartbeat(first, groups=("no such group",))
        assert illegal.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    # The second's connection closed: it left too.
    with RemotingClient(node[0].remoting) as third:
        until(
            lambda: (
                third.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, members).code
                == ResponseCode.SYSTEM_ERROR
            )
        )


# ---- across the two protocols ----------------------------------------------------------
def test_a_remoting_send_is_read_by_the_sdk_and_an_sdk_send_is_pulled(node, client):
    started, _ = node
    sent = send_v2(
        client, "sdk", b"from-4x", 0, UNIQ_KEY="REMOTING-1", TAGS="t4", KEYS="a b", region="eu"
    )
    assert sent.code == ResponseCode.SUCCESS
    with Producer(started.address) as producer:
        receipt = producer.send(
            Message("sdk", b"from-sdk", tag="t5", keys=["c", "d"], properties={"region": "us"})
        )
    with PullConsumer(started.address, "G", start="beginning") as consumer:
        consumer.assign("sdk", [0])
        read: list = []
        until(lambda: read.extend(consumer.poll(0.5)) or len(read) >= 2)
    first = read[0]
    assert (first.message_id, first.body, first.tag, first.keys) == (
        "REMOTING-1",
        b"from-4x",
        "t4",
        ["a", "b"],
    )
    assert first.properties["region"] == "eu"
    pulled = records(pull(client, "sdk", 0, 1))
    assert len(pulled) == 1
    record = pulled[0]
    assert record.body == b"from-sdk" and record.properties["UNIQ_KEY"] == receipt.message_id
    assert record.tags == "t5" and record.keys == ["c", "d"] and record.properties["region"] == "us"

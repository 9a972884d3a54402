"""What RocketMQ 4.x consumers need from a node beyond pulls, on its remoting port: the
retry topic and delay levels (CONSUMER_SEND_MSG_BACK, then the dead-letter topic), delay
levels on sends, queue locks of orderly consumers, and the consumer-ids-changed notice."""

from __future__ import annotations

import json
import time

import pytest

from ferrymq.codec.commitlog_record import decode
from ferrymq.codec.message_id import parse_offset_message_id
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.launcher.polling import until
from ferrymq.protocol.ferrymq import admin_pb2 as api
from node.config import ConfigError, parse_node_config
from node.delay_levels import DEFAULT_LEVELS_MS, level_delay_ms
from tests.support.nodes import start_node
from tests.support.remoting_client import (
    SHORT_DELAY_LEVELS,
    RemotingClient,
    json_of,
    properties_text,
    pull_fields,
    send_v2,
)
from tests.support.rpc import create_topic, stubs

UNTYPED = api.MESSAGE_TYPE_UNSPECIFIED


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    started = start_node(str(tmp_path_factory.mktemp("consumers") / "node"), SHORT_DELAY_LEVELS)
    channel, _, admin = stubs(started.address)
    create_topic(admin, "any", queues=2, message_type=UNTYPED)
    create_topic(admin, "delays", queues=1, message_type=api.DELAY)
    create_topic(admin, "plain", queues=1)
    for group in ("G", "H", "L", "N"):
        answer = admin.CreateGroup(api.CreateGroupRequest(group=api.Group(name=group)))
        assert answer.status.code == 0
    yield started
    channel.close()
    started.sigterm()


@pytest.fixture
def client(node):
    with RemotingClient(node.remoting) as connected:
        yield connected


def records(answer) -> list:
    found, position = [], 0
    while position < len(answer.body):
        record = decode(answer.body, position)
        found.append(record)
        position += record.size
    return found


def pull(client, topic: str, queue_id: int, offset: int, group: str = "G") -> list:
    answer = client.call(RequestCode.PULL_MESSAGE, pull_fields(group, topic, queue_id, offset))
    assert answer.code in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND), answer
    return records(answer) if answer.code == ResponseCode.SUCCESS else []


def max_offset(client, topic: str, queue_id: int = 0) -> int:
    answer = client.call(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(queue_id)})
    assert answer.code == ResponseCode.SUCCESS, answer
    return int(answer.ext_fields["offset"])


def arrival(client, topic: str, offset: int, timeout_s: float = 30):
    """The record at ``offset`` of ``topic`` queue 0, once it is there."""
    until(lambda: max_offset(client, topic) > offset, timeout_s, f"a record in {topic}")
    return pull(client, topic, 0, offset)[0]


def send_back(client, physical_offset: int, group: str = "G", **fields: str):
    header = {"offset": str(physical_offset), "group": group, "delayLevel": "0"}
    header.update(fields)
    return client.call(RequestCode.CONSUMER_SEND_MSG_BACK, header)


def sent(client, topic: str, body: bytes, queue_id: int = 0, **properties: str):
    answer = send_v2(client, topic, body, queue_id, **properties)
    assert answer.code == ResponseCode.SUCCESS, answer
    return answer


# ---- delay levels on sends ---------------------------------------------------------------
@pytest.mark.parametrize("topic", ["any", "delays"])
def test_a_delay_level_parks_the_message_until_its_delay_passed(client, topic):
    start = max_offset(client, topic)
    began = time.monotonic()
    sent(client, topic, b"later", 0, UNIQ_KEY=f"D-{topic}", DELAY="2")
    assert max_offset(client, topic) == start  # parked, not in its topic yet
    record = arrival(client, topic, start)
    assert time.monotonic() - began >= 1.9  # level 2 of this node's table
    assert record.body == b"later" and record.properties["UNIQ_KEY"] == f"D-{topic}"
    # Released as RocketMQ's broker releases it: no DELAY, the real topic and queue kept.
    assert "DELAY" not in record.properties
    assert record.properties["REAL_TOPIC"] == topic and record.properties["REAL_QID"] == "0"


def test_a_delay_level_where_the_topic_refuses_delays_is_refused_as_on_grpc(client):
    answer = send_v2(client, "plain", b"x", 0, DELAY="1")
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL
    assert "takes NORMAL messages, not DELAY" in answer.remark
    assert max_offset(client, "plain") == 0


# ---- retries: CONSUMER_SEND_MSG_BACK ---------------------------------------------------
def test_the_retry_topic_of_a_group_has_a_route_and_one_queue(client):
    route = json_of(client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "%RETRY%G"}))
    (queues,) = route["queueDatas"]
    assert queues["readQueueNums"] == 1 and queues["writeQueueNums"] == 1 and queues["perm"] == 6
    topics = json_of(client.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))["topicList"]
    assert {"%RETRY%G", "%DLQ%G"} <= set(topics)
    missing = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "%RETRY%nobody"})
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST


def test_a_failed_message_is_retried_through_the_retry_topic_then_dead_lettered(client):
    start = max_offset(client, "any", 1)
    answer = sent(client, "any", b"poison", 1, UNIQ_KEY="P-1", TAGS="t", color="red")
    origin_id = answer.ext_fields["msgId"]
    (original,) = pull(client, "any", 1, start)
    retry_start, dead_start = max_offset(client, "%RETRY%G"), max_offset(client, "%DLQ%G")
    copy = original
    for attempt in (1, 2):
        began = time.monotonic()
        answer = send_back(client, copy.physical_offset, maxReconsumeTimes="2")
        assert answer.code == ResponseCode.SUCCESS, answer
        copy = arrival(client, "%RETRY%G", retry_start + attempt - 1)
        assert time.monotonic() - began >= 0.9  # level 3 + reconsume times: 1 s here
        assert copy.reconsume_times == attempt and copy.body == b"poison"
        properties = copy.properties
        assert properties["RETRY_TOPIC"] == "any" and properties["ORIGIN_MESSAGE_ID"] == origin_id
        assert properties["UNIQ_KEY"] == "P-1" and properties["TAGS"] == "t"
        assert properties["color"] == "red" and "DELAY" not in properties
    # Consumed again twice, the limit: the third failure goes to the dead-letter topic.
    assert send_back(client, copy.physical_offset, maxReconsumeTimes="2").code == 0
    dead = arrival(client, "%DLQ%G", dead_start, timeout_s=5)
    assert dead.body == b"poison" and dead.reconsume_times == 3
    assert dead.properties["RETRY_TOPIC"] == "any" and dead.properties["UNIQ_KEY"] == "P-1"
    assert dead.properties["DLQ_ORIGIN_TOPIC"] == "any"
    assert dead.properties["ORIGIN_MESSAGE_ID"] == origin_id
    assert max_offset(client, "%RETRY%G") == retry_start + 2


def test_a_4x_consumers_retries_and_dead_letter_are_the_messages_history(client, node):
    """The copies a send-back leaves (after the timer's delay) are the original's history
    for the group (``node/services/delivery_history.py``), asked at the Admin door."""
    channel, _, admin = stubs(node.address)
    create_topic(admin, "traced", queues=1)
    assert admin.CreateGroup(api.CreateGroupRequest(group=api.Group(name="R"))).status.code == 0
    sent(client, "traced", b"poison", 0, UNIQ_KEY="T-1")
    (original,) = pull(client, "traced", 0, 0, group="R")
    committed = {"consumerGroup": "R", "topic": "traced", "queueId": "0", "commitOffset": "1"}
    assert client.call(RequestCode.UPDATE_CONSUMER_OFFSET, committed).code == 0

    def history() -> api.GroupHistory:
        request = api.MessageHistoryRequest(topic="traced", queue_id=0, offset=0)
        answer = admin.MessageHistory(request)
        assert answer.status.code == 0, answer.status
        (group,) = answer.groups
        return group

    assert (history().state, history().state_text) == (
        "consumed",
        "consumed (committed offset 1)",
    )
    assert send_back(client, original.physical_offset, group="R", maxReconsumeTimes="1").code == 0
    copy = arrival(client, "%RETRY%R", 0)
    group = history()
    assert (group.group, group.model, group.state) == ("R", "offsets", "retrying")
    assert group.state_text == "retrying: copy 1 waits in %RETRY%R"
    (retried,) = group.events
    assert (retried.kind, retried.attempt, retried.time_ms) == (
        "retry copy",
        1,
        copy.store_timestamp_ms,
    )
    assert retried.detail == "%RETRY%R queue 0 offset 0 (not consumed yet)"
    assert send_back(client, copy.physical_offset, group="R", maxReconsumeTimes="1").code == 0
    dead = arrival(client, "%DLQ%R", 0, timeout_s=5)
    group = history()
    assert [e.kind for e in group.events] == ["retry copy", "dead-letter copy"]
    assert group.events[1].time_ms == dead.store_timestamp_ms
    assert (group.state, group.state_text) == (
        "dead-lettered",
        "dead-lettered to %DLQ%R after 2 attempts",
    )
    channel.close()


def test_a_negative_delay_level_dead_letters_at_once(client):
    start = max_offset(client, "any")
    sent(client, "any", b"hopeless")
    (original,) = pull(client, "any", 0, start)
    dead_start = max_offset(client, "%DLQ%H")
    assert send_back(client, original.physical_offset, group="H", delayLevel="-1").code == 0
    assert pull(client, "%DLQ%H", 0, dead_start)[0].body == b"hopeless"


def test_send_backs_that_name_no_message_or_group_are_refused_and_store_nothing(client):
    answer = sent(client, "any", b"0123456789" * 10)
    _, physical = parse_offset_message_id(answer.ext_fields["msgId"])
    retry_start = max_offset(client, "%RETRY%G")
    for offset in (physical + 40, 1 << 50, -1):  # inside a record, past the log, negative
        refused = send_back(client, offset)
        assert refused.code == ResponseCode.SYSTEM_ERROR
        assert refused.remark == f"look message by offset failed, {offset}"
    refused = send_back(client, physical, group="nobody")
    assert refused.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    malformed = client.call(RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "G", "offset": "x"})
    assert malformed.code == ResponseCode.SYSTEM_ERROR and "offset" in malformed.remark
    assert max_offset(client, "%RETRY%G") == retry_start


def test_a_copy_sent_to_the_retry_topic_follows_the_same_rule(client):
    """What an orderly consumer out of local retries sends (and a concurrent one whose
    send-back failed): under its limit it waits its delay level, at it it is dead."""
    retry_start, dead_start = max_offset(client, "%RETRY%L"), max_offset(client, "%DLQ%L")

    def resend(body: bytes, reconsume: int):
        fields = {
            "a": "p",
            "b": "%RETRY%L",
            "e": "0",
            "j": str(reconsume),
            "l": "3",
            "i": properties_text({"DELAY": "4", "RETRY_TOPIC": "any", "UNIQ_KEY": "R"}),
        }
        return client.call(RequestCode.SEND_MESSAGE_V2, fields, body)

    assert resend(b"again", 1).code == ResponseCode.SUCCESS
    assert resend(b"enough", 3).code == ResponseCode.SUCCESS
    dead = pull(client, "%DLQ%L", 0, dead_start)
    assert [r.body for r in dead] == [b"enough"] and "DELAY" not in dead[0].properties
    assert dead[0].properties["DLQ_ORIGIN_TOPIC"] == "any"
    assert max_offset(client, "%RETRY%L") == retry_start  # still waiting out its level
    retried = arrival(client, "%RETRY%L", retry_start)
    assert retried.body == b"again" and retried.reconsume_times == 1


# ---- queue locks ---------------------------------------------------------------------
def lock_body(client_id: str, *queue_ids: int, group: str = "G") -> bytes:
    queues = [{"topic": "any", "brokerName": "b", "queueId": q} for q in queue_ids]
    return json.dumps({"consumerGroup": group, "clientId": client_id, "mqSet": queues}).encode()


def locked(client, client_id: str, *queue_ids: int) -> list[int]:
    answer = client.call(RequestCode.LOCK_BATCH_MQ, body=lock_body(client_id, *queue_ids))
    assert answer.code == ResponseCode.SUCCESS, answer
    return [q["queueId"] for q in json_of(answer)["lockOKMQSet"]]


def test_a_queue_lock_has_one_owner_until_it_is_released(client):
    assert locked(client, "c1", 0) == [0]
    assert locked(client, "c2", 0, 1) == [1]  # queue 0 is c1's
    assert locked(client, "c1", 0) == [0]  # renewed
    client.call(RequestCode.UNLOCK_BATCH_MQ, body=lock_body("c2", 0))  # not c2's to end
    assert locked(client, "c2", 0) == []
    assert client.call(RequestCode.UNLOCK_BATCH_MQ, body=lock_body("c1", 0)).code == 0
    assert locked(client, "c2", 0) == [0]
    other_group = client.call(RequestCode.LOCK_BATCH_MQ, body=lock_body("c1", 0, group="H"))
    assert json_of(other_group)["lockOKMQSet"] == [
        {"brokerName": "b", "queueId": 0, "topic": "any"}
    ]


@pytest.mark.parametrize(
    "body, words",
    [
        (b"{", "not JSON"),
        (b"[]", "not a JSON object"),
        (b'{"consumerGroup": "G", "mqSet": []}', "clientId"),
        (b'{"consumerGroup": "G", "clientId": "c", "mqSet": [{"topic": "t"}]}', "queueId"),
    ],
)
def test_a_malformed_lock_body_is_answered_precisely(client, body, words):
    answer = client.call(RequestCode.LOCK_BATCH_MQ, body=body)
    assert answer.code == ResponseCode.SYSTEM_ERROR and words in answer.remark, answer


# ---- consumer-ids-changed -------------------------------------------------------------
def heartbeat(client, client_id: str, group: str = "N"):
    body = {
        "clientID": client_id,
        "consumerDataSet": [
            {
                "groupName": group,
                "subscriptionDataSet": [{"topic": "any", "subString": "*", "subVersion": 1}],
            }
        ],
    }
    answer = client.call(RequestCode.HEART_BEAT, body=json.dumps(body).encode())
    assert answer.code == ResponseCode.SUCCESS, answer


def notice_of(client) -> str:
    request = client.node_request()
    assert request.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED and request.is_oneway
    return request.ext_fields["consumerGroup"]


def members(client) -> list[str]:
    answer = client.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "N"})
    return json_of(answer)["consumerIdList"] if answer.code == ResponseCode.SUCCESS else []


def test_members_are_told_when_their_group_changes(node):
    with RemotingClient(node.remoting) as first:
        heartbeat(first, "n@1")
        assert notice_of(first) == "N"  # its own arrival
        heartbeat(first, "n@1")  # a member heartbeating again changes nothing
        with RemotingClient(node.remoting) as second:
            heartbeat(second, "n@2")
            assert notice_of(first) == "N" and notice_of(second) == "N"
            assert members(first) == ["n@1", "n@2"]
            left = second.call(
                RequestCode.UNREGISTER_CLIENT, {"clientID": "n@2", "consumerGroup": "N"}
            )
            assert left.code == ResponseCode.SUCCESS
            assert notice_of(first) == "N" and members(first) == ["n@1"]
            heartbeat(second, "n@3")
            assert notice_of(first) == "N" and members(first) == ["n@1", "n@3"]
        # The second's connection closed: its client left, and the first hears of it.
        assert notice_of(first) == "N" and members(first) == ["n@1"]
        assert not first.requests


def test_delay_levels_read_as_rocketmq_writes_them():
    assert DEFAULT_LEVELS_MS[:4] == (1000, 5000, 10_000, 30_000) and len(DEFAULT_LEVELS_MS) == 18
    assert DEFAULT_LEVELS_MS[-1] == 2 * 3600 * 1000
    assert level_delay_ms(DEFAULT_LEVELS_MS, 40) == 2 * 3600 * 1000  # past the end: the last
    assert parse_node_config(SHORT_DELAY_LEVELS).messages.delay_levels_ms[:3] == (1000, 2000, 1000)
    for bad in ('"1x"', '"0s"', '""', "3", '"1s 41d"'):  # 41 days: past max_delay_ms
        with pytest.raises(ConfigError, match="delay_levels"):
            parse_node_config(f"[messages]\ndelay_levels = {bad}\n")

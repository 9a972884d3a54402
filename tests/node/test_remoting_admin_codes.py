"""The admin requests mqadmin sends, on the remoting port of a real node, answered by the
Admin service (tests/cluster/test_mqadmin.py runs mqadmin itself against a cluster):
consumer progress in RocketMQ's ConsumeStats shape, and the refusals a bad request gets."""

from __future__ import annotations

import json

import pytest

from ferrymq.client import Admin
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from tests.support.nodes import start_node
from tests.support.remoting_client import RemotingClient, send_v2


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    started = start_node(str(tmp_path_factory.mktemp("remoting-admin") / "node"))
    yield started
    started.sigterm()


@pytest.fixture
def client(node):
    with RemotingClient(node.remoting) as connected:
        yield connected


def create_topic(client, topic: str, perm: str = "6", queues: str = "2"):
    fields = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues}
    fields |= {"writeQueueNums": queues, "perm": perm, "topicFilterType": "SINGLE_TAG"}
    return client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, fields)


def create_group(client, body: bytes):
    return client.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)


def test_consumer_progress_is_rocketmqs_consume_stats(node, client):
    assert create_topic(client, "progress").code == ResponseCode.SUCCESS
    group = json.dumps({"groupName": "watcher", "retryMaxTimes": 2}).encode()
    assert create_group(client, group).code == ResponseCode.SUCCESS
    for i in range(3):
        send_v2(client, "progress", b"p%d" % i, 0, UNIQ_KEY=f"P-{i}")
    committed = client.call(
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "watcher", "topic": "progress", "queueId": "0", "commitOffset": "2"},
    )
    assert committed.code == ResponseCode.SUCCESS, committed
    answer = client.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "watcher"})
    assert answer.code == ResponseCode.SUCCESS
    body = answer.body.decode()
    # fastjson's map of MessageQueue objects: the keys are JSON objects.
    key = '{"brokerName":"group-1","queueId":0,"topic":"progress"}'
    assert body.startswith('{"consumeTps":0.0,"offsetTable":{') and key in body
    value = json.loads(body.split(key + ":", 1)[1].split("}", 1)[0] + "}")
    assert (value["brokerOffset"], value["consumerOffset"]) == (3, 2)
    assert value["lastTimestamp"] > 0  # the store time of the last message consumed
    by_who = client.call(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "progress"})
    assert json.loads(by_who.body) == {"groupList": ["watcher"]}
    with Admin(node.address) as admin:
        made = next(g for g in admin.list_groups() if g.name == "watcher")
    assert made.max_delivery_attempts == 3


def test_bad_admin_requests_are_refused_with_what_is_wrong(client):
    bad_perm = create_topic(client, "oddperm", perm="9")  # inherit and priority only
    assert bad_perm.code == ResponseCode.SYSTEM_ERROR
    assert bad_perm.remark.startswith("perm 9 allows neither reads nor writes")
    assert create_topic(client, "inherits", perm="7").code == ResponseCode.SUCCESS
    reserved = create_topic(client, "%SYS%mine")
    assert reserved.code == ResponseCode.SYSTEM_ERROR and "reserved" in reserved.remark
    not_json = create_group(client, b"{")
    assert not_json.code == ResponseCode.SYSTEM_ERROR
    assert not_json.remark.startswith("body is not a SubscriptionGroupConfig")
    wrong_type = create_group(client, json.dumps({"groupName": 7}).encode())
    assert wrong_type.code == ResponseCode.SYSTEM_ERROR
    # Deleting what is not there is success, as each request of one deleteTopic finds.
    gone = client.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "never-was"})
    assert gone.code == ResponseCode.SUCCESS
    unknown = client.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "x", "topic": "nope"})
    assert unknown.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST and "x" in unknown.remark

"""The admin requests mqadmin sends, on the remoting port of a real node, answered by the
Admin service (tests/cluster/test_mqadmin.py runs mqadmin itself against a cluster):
consumer progress in RocketMQ's ConsumeStats shape, and the refusals a bad request gets."""

from __future__ import annotations

import json
import time

import pytest

from ferrymq.client import Admin, Message, Producer
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.launcher.polling import until
from tests.support.nodes import start_node
from tests.support.remoting_client import RemotingClient, pull_fields, send_v2


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


def test_a_group_takes_rocketmqs_lite_subscription_model_attribute(node, client):
    """mqadmin ``updateSubGroup --attributes +lite.sub.model=Exclusive`` (RocketMQ 5.5):
    the group is created Exclusive; Shared is the default; another model is refused."""
    for name, attributes in (("lite-x", {"+lite.sub.model": "Exclusive"}), ("lite-s", {})):
        body = json.dumps({"groupName": name, "attributes": attributes}).encode()
        assert create_group(client, body).code == ResponseCode.SUCCESS
    with Admin(node.address) as admin:
        models = {g.name: g.lite_exclusive for g in admin.list_groups()}
    assert models["lite-x"] is True and models["lite-s"] is False
    odd = json.dumps({"groupName": "lite-o", "attributes": {"+lite.sub.model": "Solo"}})
    refused = create_group(client, odd.encode())
    assert refused.code == ResponseCode.SYSTEM_ERROR
    assert "lite.sub.model 'Solo': Shared or Exclusive" in refused.remark


def test_topic_status_is_each_queues_offsets_and_last_store_time(client):
    assert create_topic(client, "stats").code == ResponseCode.SUCCESS
    for i in range(3):
        assert send_v2(client, "stats", b"s%d" % i, 0).code == ResponseCode.SUCCESS
    answer = client.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "stats"})
    assert answer.code == ResponseCode.SUCCESS, answer
    body = answer.body.decode()
    first = '{"brokerName":"group-1","queueId":0,"topic":"stats"}'
    second = '{"brokerName":"group-1","queueId":1,"topic":"stats"}'
    assert body.startswith('{"offsetTable":{') and first in body and second in body

    def offsets(key: str) -> dict:
        return json.loads(body.split(key + ":", 1)[1].split("}", 1)[0] + "}")

    assert (offsets(first)["minOffset"], offsets(first)["maxOffset"]) == (0, 3)
    assert offsets(first)["lastUpdateTimestamp"] > 0  # the newest message's store time
    assert offsets(second) == {"lastUpdateTimestamp": 0, "maxOffset": 0, "minOffset": 0}
    missing = client.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "no-such"})
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST and "no-such" in missing.remark


def heartbeat_body(client_id: str, consumer_group: str, producer_group: str) -> bytes:
    consumer = {
        "groupName": consumer_group,
        "consumeType": "CONSUME_ACTIVELY",
        "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
        "subscriptionDataSet": [{"topic": "watched", "subString": "a || b", "subVersion": 7}],
    }
    return json.dumps(
        {
            "clientID": client_id,
            "consumerDataSet": [consumer],
            "producerDataSet": [{"groupName": producer_group}],
        }
    ).encode()


def test_connection_lists_name_the_clients_heartbeats_describe(node, client):
    assert create_topic(client, "watched").code == ResponseCode.SUCCESS
    group = json.dumps({"groupName": "lookers"}).encode()
    assert create_group(client, group).code == ResponseCode.SUCCESS
    with RemotingClient(node.remoting) as consumer:
        beat = consumer.call(
            RequestCode.HEART_BEAT, body=heartbeat_body("10.0.0.9@looker", "lookers", "makers")
        )
        assert beat.code == ResponseCode.SUCCESS, beat
        host, port = consumer.socket.getsockname()[:2]
        answer = client.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "lookers"})
        assert answer.code == ResponseCode.SUCCESS, answer
        listed = json.loads(answer.body)
        assert listed["connectionSet"] == [
            {
                "clientAddr": f"{host}:{port}",
                "clientId": "10.0.0.9@looker",
                "language": "JAVA",
                "version": 407,
            }
        ]
        assert (listed["consumeType"], listed["messageModel"], listed["consumeFromWhere"]) == (
            "CONSUME_ACTIVELY",
            "CLUSTERING",
            "CONSUME_FROM_FIRST_OFFSET",
        )
        watched = listed["subscriptionTable"]["watched"]
        assert (watched["subString"], watched["subVersion"]) == ("a || b", 7)
        producers = client.call(
            RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "makers"}
        )
        assert producers.code == ResponseCode.SUCCESS, producers
        assert [c["clientId"] for c in json.loads(producers.body)["connectionSet"]] == [
            "10.0.0.9@looker"
        ]
        gone = consumer.call(
            RequestCode.UNREGISTER_CLIENT,
            {"clientID": "10.0.0.9@looker", "consumerGroup": "lookers"},
        )
        assert gone.code == ResponseCode.SUCCESS
        offline = client.call(
            RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "lookers"}
        )
        assert offline.code == ResponseCode.CONSUMER_NOT_ONLINE
        assert offline.remark == "the consumer group[lookers] not online"
    # The producer's connection closed: it is no longer listed.
    until(
        lambda: (
            client.call(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "makers"}).code
            == ResponseCode.SYSTEM_ERROR
        ),
        20,
        "the closed producer unlisted",
    )


def test_a_heartbeat_with_a_malformed_producer_set_is_refused_and_lists_nobody(client):
    bad = json.dumps({"clientID": "c", "producerDataSet": [{"groupName": 5}]}).encode()
    answer = client.call(RequestCode.HEART_BEAT, body=bad)
    assert answer.code == ResponseCode.SYSTEM_ERROR and "groupName" in answer.remark
    nobody = client.call(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "5"})
    assert nobody.code == ResponseCode.SYSTEM_ERROR
    assert nobody.remark == "the producer group[5] not exist"


def test_broker_config_is_the_nodes_settings_under_rocketmqs_names(node, client):
    answer = client.call(RequestCode.GET_BROKER_CONFIG)
    assert answer.code == ResponseCode.SUCCESS, answer
    properties = dict(line.split("=", 1) for line in answer.body.decode().splitlines() if line)
    assert properties["brokerName"] == "group-1"
    assert properties["brokerId"] == "0"
    assert properties["brokerRole"] == "SYNC_MASTER"
    assert properties["listenPort"] == node.remoting.rpartition(":")[2]
    assert properties["flushDiskType"] == "ASYNC_FLUSH"
    assert properties["brokerClusterName"] == "DefaultCluster"
    assert not [k for k in properties if "secret" in k.lower() or "token" in k.lower()]


def test_consumer_settings_sent_as_numbers_are_shown_not_refused(node, client):
    assert create_group(client, json.dumps({"groupName": "numbered"}).encode()).code == 0
    consumer = {"groupName": "numbered", "consumeType": 1, "messageModel": 1}
    beat = json.dumps({"clientID": "n1", "consumerDataSet": [consumer]}).encode()
    with RemotingClient(node.remoting) as numbered:
        assert numbered.call(RequestCode.HEART_BEAT, body=beat).code == ResponseCode.SUCCESS
        answer = client.call(
            RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "numbered"}
        )
        listed = json.loads(answer.body)
        assert (listed["consumeType"], listed["messageModel"]) == ("1", "1")
        assert listed["consumeFromWhere"] == "CONSUME_FROM_LAST_OFFSET"  # RocketMQ's default


# Every key RocketMQ's tools read of GET_BROKER_RUNTIME_INFO: clusterList (4.9 and 5.x:
# base and -m), brokerStatus prints the whole table. (5.x also reads timer figures, and
# prints 0 for those it lacks.)
RUNTIME_KEYS_READ_BY_TOOLS = (
    "brokerVersionDesc",
    "putTps",
    "getTransferedTps",
    "getTransferredTps",
    "sendThreadPoolQueueSize",
    "pullThreadPoolQueueSize",
    "sendThreadPoolQueueHeadWaitTimeMills",
    "pullThreadPoolQueueHeadWaitTimeMills",
    "ackThreadPoolQueueSize",
    "ackThreadPoolQueueHeadWaitTimeMills",
    "pageCacheLockTimeMills",
    "earliestMessageTimeStamp",
    "commitLogDiskRatio",
    "msgPutTotalYesterdayMorning",
    "msgPutTotalTodayMorning",
    "msgPutTotalTodayNow",
    "msgGetTotalYesterdayMorning",
    "msgGetTotalTodayMorning",
    "msgGetTotalTodayNow",
)


def runtime_table(client) -> dict[str, str]:
    answer = client.call(RequestCode.GET_BROKER_RUNTIME_INFO)
    assert answer.code == ResponseCode.SUCCESS, answer
    return json.loads(answer.body)["table"]


def test_runtime_info_counts_what_every_door_stored_and_delivered(node, client):
    assert create_topic(client, "counted", queues="1").code == ResponseCode.SUCCESS
    before = runtime_table(client)
    started_ms = int(time.time() * 1000)
    assert send_v2(client, "counted", b"by remoting").code == ResponseCode.SUCCESS
    with Producer(node.address) as producer:
        producer.send(Message("counted", b"by grpc"))
    pulled = client.call(RequestCode.PULL_MESSAGE, pull_fields("counters", "counted"))
    assert pulled.code == ResponseCode.SUCCESS, pulled
    table = runtime_table(client)
    missing = [k for k in RUNTIME_KEYS_READ_BY_TOOLS if not table.get(k) or table[k] == "null"]
    assert not missing, table

    def grew(key: str) -> int:
        return int(table[key]) - int(before[key])

    assert grew("msgPutTotalTodayNow") == grew("putMessageTimesTotal") == 2
    assert grew("msgGetTotalTodayNow") == 2
    assert int(table["msgPutTotalTodayMorning"]) == 0  # no midnight since the node started
    put_10s, put_1min, put_10min = (float(x) for x in table["putTps"].split())
    assert put_10s > 0 and put_1min > 0 and put_10min > 0
    assert float(table["getTransferedTps"].split()[0]) > 0
    assert table["getTransferedTps"] == table["getTransferredTps"]
    assert 0 < int(table["earliestMessageTimeStamp"]) <= started_ms + 1000
    assert int(table["commitLogMaxOffset"]) > int(table["commitLogMinOffset"])
    assert 0 < float(table["commitLogDiskRatio"]) < 1
    assert table["commitLogDirCapacity"].startswith("Total : ")
    assert table["sendThreadPoolQueueSize"] == "0"  # every send was answered
    # topicStatus's and consumerProgress's rates: the topic's puts, the group's deliveries.
    stats = client.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "counted"})
    assert float(stats.body.split(b'"topicPutTps":')[1].rstrip(b"}")) > 0, stats.body
    consume = client.call(
        RequestCode.GET_CONSUME_STATS, {"consumerGroup": "counters", "topic": "counted"}
    )
    assert consume.code == ResponseCode.SUCCESS, consume
    assert float(consume.body.split(b'"consumeTps":')[1].split(b",")[0]) > 0, consume.body
    assert int(table["sendThreadPoolQueueCapacity"]) > 0

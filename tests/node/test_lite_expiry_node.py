"""Expiry of idle lite topics (RocketMQ 5.5's lite.topic.expiration) on a real node: an
expired lite topic delivers none of its old messages, stays expired after kill -9 and a
restart, and a new message starts it afresh; the setting through the Admin API, the SDK and
the 4.x door's UPDATE_AND_CREATE_TOPIC attributes, and the refusals of bad ones.

The node runs with ``[lite] min_expiry_s = 0`` and a check every second, and its expiry
clock is moved ahead by the test (``tests/support/skewed_clock_node.py``): messages are
minutes old without minutes of waiting."""

from __future__ import annotations

import json

import pytest

from ferrymq.cli.main import main
from ferrymq.client import Admin
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.launcher.polling import until
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from tests.support.remoting_client import RemotingClient
from tests.support.rpc import message, receive, stubs
from tests.support.skewed_clock_node import skew_file

TOPIC = "sessions"
FAST_EXPIRY = "[lite]\nexpiry_check_interval_s = 1\nmin_expiry_s = 0\n"
SKEWED = "tests.support.skewed_clock_node"
INVALID_ARGUMENT = 3


def send(messaging, body: bytes, lite_topic: str) -> None:
    sent = message(TOPIC, body, f"ID-{body.decode()}", message_type=pb.LITE, lite_topic=lite_topic)
    answer = messaging.SendMessage(rpc.SendMessageRequest(messages=[sent]))
    assert answer.status.code == pb.OK, answer


def subscribe(messaging, client: str, lite_topic: str) -> None:
    request = rpc.SyncLiteSubscriptionRequest(
        action=pb.PARTIAL_ADD,
        topic=pb.Resource(name=TOPIC),
        group=pb.Resource(name="G"),
        lite_topic_set=[lite_topic],
    )
    answer = messaging.SyncLiteSubscription(request, metadata=[("x-mq-client-id", client)])
    assert answer.status.code == pb.OK, answer


def lite_receive(messaging, client: str, **options) -> tuple[int, list[bytes]]:
    status, got, _ = receive(
        messaging, TOPIC, group="G", metadata=[("x-mq-client-id", client)], **options
    )
    return status.code, [m.body for m in got]


def lite_topics_held(admin) -> set[str]:
    progress = admin.GroupProgress(api.GroupProgressRequest(group="G", topic=TOPIC))
    assert progress.status.code == 0, progress.status
    return {q.topic.rsplit("$", 1)[1] for q in progress.queues}


def test_an_expired_lite_topic_delivers_nothing_old_stays_expired_and_starts_afresh(nodes):
    node = nodes(FAST_EXPIRY, module=SKEWED)
    _, messaging, admin = stubs(node.address)
    created = admin.CreateTopic(
        api.CreateTopicRequest(
            topic=api.Topic(
                name=TOPIC, queue_count=2, message_type=api.LITE, lite_expiration_minutes=1
            )
        )
    )
    assert created.status.code == 0 and created.topic.lite_expiration_minutes == 1
    send(messaging, b"o1", "old")
    send(messaging, b"o2", "old")
    subscribe(messaging, "c1", "old")
    # Delivered, not acked: visible again in a second, unless the lite topic is gone.
    assert lite_receive(messaging, "c1", invisible_s=1) == (pb.OK, [b"o1", b"o2"])

    with open(skew_file(node.data_dir), "w", encoding="utf-8") as f:
        f.write("120000")  # two minutes on: idle past its one minute
    until(lambda: "old" not in lite_topics_held(admin), 10, "the lite topic to expire")
    with open(skew_file(node.data_dir), "w", encoding="utf-8") as f:
        f.write("0")
    subscribe(messaging, "c1", "old")  # its subscription went with it: named again
    assert lite_receive(messaging, "c1", wait_s=2) == (pb.MESSAGE_NOT_FOUND, [])

    node.sigkill()
    node = nodes(FAST_EXPIRY, module=SKEWED)
    _, messaging, admin = stubs(node.address)
    assert "old" not in lite_topics_held(admin)
    subscribe(messaging, "c1", "old")
    assert lite_receive(messaging, "c1") == (pb.MESSAGE_NOT_FOUND, [])
    send(messaging, b"o3", "old")
    assert lite_receive(messaging, "c1", wait_s=5) == (pb.OK, [b"o3"])
    node.sigkill()


@pytest.fixture(scope="module")
def admin_node(module_node):
    _, _, admin = stubs(module_node.address)
    return module_node, admin


def create(admin, name: str, kind=api.LITE, **fields) -> api.CreateTopicResponse:
    topic = api.Topic(name=name, queue_count=1, message_type=kind, **fields)
    return admin.CreateTopic(api.CreateTopicRequest(topic=topic))


def test_the_admin_api_and_the_sdk_set_it_and_refuse_bad_ones_precisely(admin_node):
    node, admin = admin_node
    made = create(admin, "lite-a")
    assert made.status.code == 0 and made.topic.lite_expiration_minutes == -1
    too_long = create(admin, "lite-b", lite_expiration_minutes=43201)
    assert too_long.status.code == INVALID_ARGUMENT
    assert "lite.topic.expiration must be -1..43200 minutes" in too_long.status.message
    not_lite = create(admin, "normal-a", api.NORMAL, lite_expiration_minutes=5)
    assert not_lite.status.code == INVALID_ARGUMENT
    assert "for LITE topics only, this one is NORMAL" in not_lite.status.message
    with Admin(node.address) as sdk:
        topic = sdk.create_topic("lite-c", 1, "LITE", lite_expiration_minutes=1440)
        assert topic.lite_expiration_minutes == 1440
        assert sdk.update_topic("lite-c", 2).lite_expiration_minutes == 1440  # unchanged
        assert (
            sdk.update_topic("lite-c", 2, lite_expiration_minutes=60).lite_expiration_minutes == 60
        )
        assert sdk.describe_topic("lite-c")[0].lite_expiration_minutes == 60
    refused = admin.UpdateTopic(
        api.UpdateTopicRequest(
            topic=api.Topic(name="lite-c", queue_count=2, lite_expiration_minutes=-2)
        )
    )
    assert refused.status.code == INVALID_ARGUMENT and "got -2" in refused.status.message


def update_topic(client, topic: str, attributes: str | None):
    fields = {"topic": topic, "readQueueNums": "2", "writeQueueNums": "2", "perm": "6"}
    if attributes is not None:
        fields["attributes"] = attributes
    return client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, fields)


def test_the_4x_doors_topic_attributes_set_it_and_refuse_bad_ones(admin_node):
    node, admin = admin_node
    with RemotingClient(node.remoting) as client:
        made = update_topic(client, "door-lite", "+message.type=LITE,+lite.topic.expiration=60")
        assert made.code == ResponseCode.SUCCESS, made.remark
        config = client.call(RequestCode.GET_TOPIC_CONFIG, {"topic": "door-lite"})
        attributes = json.loads(config.body)["attributes"]
        assert attributes == {"message.type": "LITE", "lite.topic.expiration": "60"}
        assert (
            update_topic(client, "door-lite", "+lite.topic.expiration=90").code
            == ResponseCode.SUCCESS
        )
        assert update_topic(client, "door-lite", None).code == ResponseCode.SUCCESS  # unchanged
        described = admin.DescribeTopic(api.DescribeTopicRequest(name="door-lite")).topic
        assert described.lite_expiration_minutes == 90
        for attributes, words in [
            ("+lite.topic.expiration=43201", "must be -1..43200 minutes (-1: never), got 43201"),
            ("+lite.topic.expiration=1_0", "must be a whole number of minutes, got '1_0'"),
            ("lite.topic.expiration=5", "is neither +key=value nor -key"),
            ("+message.type=FIFO", "its message.type cannot be changed to FIFO"),
        ]:
            refused = update_topic(client, "door-lite", attributes)
            assert refused.code == ResponseCode.SYSTEM_ERROR and words in refused.remark, words
        untyped = update_topic(client, "door-untyped", "+lite.topic.expiration=5")
        assert untyped.code == ResponseCode.SYSTEM_ERROR
        assert "for LITE topics only" in untyped.remark
        assert (
            update_topic(client, "door-lite", "-lite.topic.expiration").code == ResponseCode.SUCCESS
        )
    described = admin.DescribeTopic(api.DescribeTopicRequest(name="door-lite")).topic
    assert described.lite_expiration_minutes == -1


def test_the_cli_creates_a_lite_topic_with_an_expiration(admin_node, capsys):
    node, _ = admin_node
    server = ["--server", node.address]
    created = ["topic", "create", "cli-lite", "--type", "LITE", "--lite-expiration-minutes", "30"]
    assert main(created + server) == 0
    assert main(["topic", "describe", "cli-lite", *server]) == 0
    assert "cli-lite: 8 queues, LITE, READ_WRITE, lite topics expire after 30 min idle" in (
        capsys.readouterr().out
    )
    assert main(["topic", "create", "cli-plain", "--lite-expiration-minutes", "30", *server]) != 0
    assert "for LITE topics only" in capsys.readouterr().err

"""SQL92 subscriptions on the remoting port of a real node: a pull's own expression and
one registered by heartbeat, evaluated by the gRPC doors' filter (node/sql_filter.py);
expressions that do not parse get RocketMQ's codes and a remark that says where."""

from __future__ import annotations

import json

import pytest

from ferrymq.codec.commitlog_record import decode
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.protocol.ferrymq import admin_pb2 as api
from tests.support.nodes import start_node
from tests.support.remoting_client import RemotingClient, send_v2
from tests.support.rpc import create_topic, stubs


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    started = start_node(str(tmp_path_factory.mktemp("remoting-sql") / "node"))
    channel, _, admin = stubs(started.address)
    create_topic(admin, "S", queues=1)
    assert admin.CreateGroup(api.CreateGroupRequest(group=api.Group(name="G"))).status.code == 0
    with RemotingClient(started.remoting) as client:
        for i in range(6):
            color = "red" if i % 2 else "blue"
            send_v2(client, "S", b"m%d" % i, 0, UNIQ_KEY=f"S-{i}", TAGS=color, n=str(i))
    yield started
    channel.close()
    started.sigterm()


@pytest.fixture
def client(node):
    with RemotingClient(node.remoting) as connected:
        yield connected


def pull(client, expression: str, own: bool = True, offset: int = 0):
    return client.call(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "G",
            "topic": "S",
            "queueId": "0",
            "queueOffset": str(offset),
            "maxMsgNums": "32",
            "sysFlag": "4" if own else "0",
            "commitOffset": "0",
            "suspendTimeoutMillis": "0",
            "subscription": expression,
            "subVersion": "1",
            "expressionType": "SQL92",
        },
    )


def bodies(answer) -> list[bytes]:
    found, position = [], 0
    while position < len(answer.body):
        record = decode(answer.body, position)
        found.append(record.body)
        position += record.size
    return found


def register(client, expression: str, expression_type: str = "SQL92") -> None:
    subscription = {"topic": "S", "subString": expression, "expressionType": expression_type}
    body = {
        "clientID": "127.0.0.1@1#sql",
        "consumerDataSet": [
            {"groupName": "G", "subscriptionDataSet": [subscription | {"subVersion": 1}]}
        ],
    }
    answer = client.call(RequestCode.HEART_BEAT, body=json.dumps(body).encode())
    assert answer.code == ResponseCode.SUCCESS, answer


def test_a_pulls_own_sql92_expression_filters_by_properties_and_tags(client):
    answer = pull(client, "n > 1 AND TAGS = 'red'")
    assert answer.code == ResponseCode.SUCCESS, answer
    assert bodies(answer) == [b"m3", b"m5"]
    assert answer.ext_fields["nextBeginOffset"] == "6"
    none = pull(client, "n > 100")
    assert none.code == ResponseCode.PULL_RETRY_IMMEDIATELY and not none.body
    assert none.ext_fields["nextBeginOffset"] == "6"  # the filtered window is passed


def test_a_registered_sql92_subscription_filters_pulls_that_carry_none(client):
    register(client, "n BETWEEN 1 AND 2")
    answer = pull(client, "", own=False)
    assert bodies(answer) == [b"m1", b"m2"]


def test_an_expression_that_does_not_parse_gets_rocketmqs_codes(client):
    own = pull(client, "n >")
    assert own.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert own.remark.startswith("parse the consumer's subscription failed: SQL filter:")
    assert "at the end" in own.remark
    register(client, "n = 'x' AND (")
    registered = pull(client, "", own=False)
    assert registered.code == ResponseCode.FILTER_DATA_NOT_EXIST
    assert "Your expression may be wrong!" in registered.remark
    odd = client.call(
        RequestCode.PULL_MESSAGE,
        {"consumerGroup": "G", "topic": "S", "queueId": "0", "queueOffset": "0"}
        | {"sysFlag": "4", "subscription": "*", "expressionType": "XPATH"},
    )
    assert odd.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "TAG or SQL92" in odd.remark


def test_a_push_consumer_starting_with_sql92_is_told_whether_it_parses(client):
    def check(expression: str, expression_type: str = "SQL92"):
        body = {
            "clientId": "127.0.0.1@1#sql",
            "group": "G",
            "subscriptionData": {"topic": "S", "subString": expression}
            | {"expressionType": expression_type},
        }
        return client.call(RequestCode.CHECK_CLIENT_CONFIG, body=json.dumps(body).encode())

    assert check("n BETWEEN 1 AND 2").code == ResponseCode.SUCCESS
    assert check("a || b", "TAG").code == ResponseCode.SUCCESS
    bad = check("n BETWEEN 1")
    assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "SQL filter" in bad.remark
    malformed = client.call(RequestCode.CHECK_CLIENT_CONFIG, body=b"{")
    assert malformed.code == ResponseCode.SYSTEM_ERROR
    assert malformed.remark.startswith("body is not a CheckClientRequestBody")

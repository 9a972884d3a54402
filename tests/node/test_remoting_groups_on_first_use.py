"""A consumer group nobody created is created by a 4.x client's first heartbeat, pull or
offset call, as the gRPC door and RocketMQ's ``autoCreateSubscriptionGroup`` do
(``node/group_creation.py``); with ``auto_create_groups = false`` each of those calls is
answered SUBSCRIPTION_GROUP_NOT_EXIST and creates nothing."""

from __future__ import annotations

import pytest

from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.protocol.ferrymq import admin_pb2 as api
from tests.support.nodes import start_node
from tests.support.remoting_client import RemotingClient, heartbeat_body, pull_fields
from tests.support.rpc import create_topic, stubs

OFF_TOML = """
[messages]
auto_create_groups = false
"""


def started(directory, extra_toml: str = ""):
    node = start_node(str(directory / "node"), extra_toml)
    channel, _, admin = stubs(node.address)
    create_topic(admin, "T", queues=2)
    return node, channel, admin


@pytest.fixture(scope="module")
def creating(tmp_path_factory):
    node, channel, admin = started(tmp_path_factory.mktemp("first-use"))
    yield node, admin
    channel.close()
    node.sigterm()


@pytest.fixture(scope="module")
def not_creating(tmp_path_factory):
    node, channel, admin = started(tmp_path_factory.mktemp("no-first-use"), OFF_TOML)
    yield node, admin
    channel.close()
    node.sigterm()


def group_names(admin) -> set[str]:
    return {g.name for g in admin.ListGroups(api.ListGroupsRequest()).groups}


def heartbeat(client, group: str):
    body = heartbeat_body("127.0.0.1@7#1", (group,), "T", producer=False)
    return client.call(RequestCode.HEART_BEAT, {}, body)


def pull(client, group: str):
    return client.call(RequestCode.PULL_MESSAGE, pull_fields(group, "T"))


def query_offset(client, group: str):
    fields = {"consumerGroup": group, "topic": "T", "queueId": "0"}
    return client.call(RequestCode.QUERY_CONSUMER_OFFSET, fields)


def update_offset(client, group: str):
    fields = {"consumerGroup": group, "topic": "T", "queueId": "0", "commitOffset": "0"}
    return client.call(RequestCode.UPDATE_CONSUMER_OFFSET, fields)


CALLS = {"heartbeat": heartbeat, "pull": pull, "query": query_offset, "update": update_offset}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_the_first_call_of_a_new_group_creates_it(creating, call):
    node, admin = creating
    group = f"new-by-{call}"
    assert group not in group_names(admin)
    with RemotingClient(node.remoting) as client:
        answer = CALLS[call](client, group)
    assert answer.code in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND), answer.remark
    assert group in group_names(admin)  # committed through routing before the answer


@pytest.mark.parametrize("call", sorted(CALLS))
def test_with_creation_off_an_unknown_group_is_refused_and_not_created(not_creating, call):
    node, admin = not_creating
    group = f"unknown-to-{call}"
    with RemotingClient(node.remoting) as client:
        answer = CALLS[call](client, group)
    assert answer.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    assert group in answer.remark
    assert group not in group_names(admin)

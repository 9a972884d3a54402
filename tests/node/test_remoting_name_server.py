"""The NameServer role (node/remoting/name_server.py) against routing states built by
applying routing commands: routes, cluster info, topic lists, unknown topics."""

from __future__ import annotations

import asyncio
import json

from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from node.group_creation import GroupsOnFirstUse
from node.remoting.name_server import CLUSTER_NAME, NameServer, route_data
from node.services.caller import Caller, Door
from node.services.permissions import Permissions
from node.services.routes import RouteService
from node.topics import TopicTable
from routing.commands import (
    AlterInSync,
    CreateGroup,
    CreateTopic,
    ElectMaster,
    MarkNodeDown,
    RegisterNode,
)
from routing.metadata import Permission
from routing.state import RoutingState


class Replica:
    """What the NameServer reads of a RoutingReplica."""

    def __init__(self, state: RoutingState) -> None:
        self.state = state

    def read(self, reader):
        return reader(self.state)

    async def catch_up(self) -> None:
        """This state is the whole truth: nothing to catch up with."""


def apply(state: RoutingState, *commands) -> None:
    for command in commands:
        result = state.apply(command)
        assert result.ok, result


def register(node: str, group: str, remoting: str = "") -> RegisterNode:
    return RegisterNode(node, group, f"{node}:8081", remoting_address=remoting)


def cluster() -> RoutingState:
    """group-1: n1 master, n2 and n3 in sync (n3 then down), n4 out of sync; group-2: n5
    master, registered by a node without a remoting port."""
    state = RoutingState()
    apply(
        state,
        register("n1", "group-1", "10.0.0.1:10911"),
        register("n2", "group-1", "10.0.0.2:10911"),
        register("n3", "group-1", "10.0.0.3:10911"),
        register("n4", "group-1", "10.0.0.4:10911"),
        register("n5", "group-2"),
        AlterInSync("group-1", "n1", 1, frozenset({"n1", "n2", "n3"}), 1),
        MarkNodeDown("n3", 1),  # its one heartbeat: its registration
        CreateTopic("orders", 4, ("group-1",)),
        CreateTopic("both", 2, ("group-1", "group-2"), permission=Permission.READ),
        CreateGroup("G", 16),
    )
    return state


def ask(state: RoutingState, code: int, **fields: str) -> RemotingCommand:
    replica = Replica(state)
    routes = RouteService(
        replica, GroupsOnFirstUse(TopicTable(), None, False), Permissions(enabled=False)
    )
    handlers = dict(NameServer(routes).handlers())
    request = RemotingCommand(code, opaque=3, ext_fields=fields)
    return asyncio.run(handlers[code](request, None, Caller(Door.REMOTING, "test", None)))


def test_a_route_names_the_master_as_0_and_live_in_sync_slaves_after_it():
    answer = ask(cluster(), RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="orders")
    assert answer.code == ResponseCode.SUCCESS and answer.opaque == 3 and answer.is_response
    assert json.loads(answer.body) == {
        "brokerDatas": [
            {
                "brokerAddrs": {"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"},
                "brokerName": "group-1",
                "cluster": CLUSTER_NAME,
            }
        ],
        "filterServerTable": {},
        "queueDatas": [
            {
                "brokerName": "group-1",
                "perm": 6,
                "readQueueNums": 4,
                "topicSynFlag": 0,
                "topicSysFlag": 0,
                "writeQueueNums": 4,
            }
        ],
    }
    assert b" " not in answer.body  # the Go client splits brokerAddrs text: no whitespace


def test_read_only_topics_have_perm_4_and_unreachable_groups_are_left_out():
    route = route_data(cluster(), "both")
    assert [q["perm"] for q in route["queueDatas"]] == [4]  # PERM_READ
    assert [b["brokerName"] for b in route["brokerDatas"]] == ["group-1"]


def test_a_new_master_is_broker_0_of_the_next_route():
    state = cluster()
    apply(state, ElectMaster("group-1", "n2", 1))  # the old master leaves the in-sync set
    addresses = route_data(state, "orders")["brokerDatas"][0]["brokerAddrs"]
    assert addresses == {"0": "10.0.0.2:10911"}
    apply(state, AlterInSync("group-1", "n2", 2, frozenset({"n1", "n2"}), 3))
    addresses = route_data(state, "orders")["brokerDatas"][0]["brokerAddrs"]
    assert addresses == {"0": "10.0.0.2:10911", "1": "10.0.0.1:10911"}


def test_unknown_and_illegal_topics_are_topic_not_exist():
    for topic in ("nope", "bad name!"):
        answer = ask(cluster(), RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=topic)
        assert answer.code == ResponseCode.TOPIC_NOT_EXIST and topic in answer.remark
    assert ask(cluster(), RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="%DLQ%G").code == 0


def test_cluster_info_lists_every_broker_group_in_one_cluster():
    info = json.loads(ask(cluster(), RequestCode.GET_BROKER_CLUSTER_INFO).body)
    assert info["clusterAddrTable"] == {CLUSTER_NAME: ["group-1", "group-2"]}
    assert info["brokerAddrTable"]["group-1"]["brokerAddrs"] == {
        "0": "10.0.0.1:10911",
        "1": "10.0.0.2:10911",
    }
    assert info["brokerAddrTable"]["group-2"]["brokerAddrs"] == {}


def test_the_topic_list_holds_topics_and_the_groups_retry_and_dead_letter_topics():
    answer = ask(cluster(), RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert json.loads(answer.body) == {"topicList": ["%DLQ%G", "%RETRY%G", "both", "orders"]}


def test_kv_config_is_never_set():
    answer = ask(cluster(), RequestCode.GET_KV_CONFIG, namespace="ORDER_TOPIC_CONFIG", key="t")
    assert answer.code == ResponseCode.QUERY_NOT_FOUND and "ORDER_TOPIC_CONFIG" in answer.remark

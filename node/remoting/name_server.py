"""The NameServer role: every node answers RocketMQ 4.x clients' route requests on its
remoting port, from its replica of the Raft-replicated routing state, so ``namesrvAddr``
may list any nodes.

A broker group is a RocketMQ broker: ``brokerName`` is the group's name, its master is
brokerId 0 and its in-sync slaves that are alive are 1..n (by node id), each at its
*remoting* address. Every group is in one cluster, ``CLUSTER_NAME`` (both rules in
``node/broker_ids.py``). Bodies are compact JSON with quoted keys, which every client
parses (the Go client splits ``brokerAddrs`` text on commas and colons: no whitespace
anywhere).

Who may: a route needs valid credentials, the cluster's broker and topic listings admin
rights (the route service, ``node/services/routes.py``, decides); GET_KV_CONFIG needs valid
credentials.

Thread-safety: handlers run on the event loop; each reads the routing state once under
its lock (``RoutingReplica.read``).
"""

from __future__ import annotations

import json

from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from node.broker_ids import CLUSTER_NAME, broker_addresses
from node.remoting.authentication import DoorHandler
from node.services.caller import Caller
from node.services.routes import RouteService
from routing.metadata import DLQ_PREFIX, RETRY_PREFIX, Permission, TopicError
from routing.state import RoutingState

PERM_READ = 4  # RocketMQ's PermName bits
PERM_WRITE = 2
PERMISSION_BITS = {
    Permission.READ: PERM_READ,
    Permission.WRITE: PERM_WRITE,
    Permission.READ_WRITE: PERM_READ | PERM_WRITE,
}


def json_body(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def broker_data(state: RoutingState, broker_group: str) -> dict:
    return {
        "brokerAddrs": broker_addresses(state, broker_group),
        "brokerName": broker_group,
        "cluster": CLUSTER_NAME,
    }


def route_data(state: RoutingState, topic: str) -> dict:
    """RocketMQ's TopicRouteData of ``topic`` (``TopicError`` when it does not exist)."""
    route = state.topic(topic)
    perm = PERMISSION_BITS[route.permission]
    brokers, queues = [], []
    for broker_group, count in route.queues:
        data = broker_data(state, broker_group)
        if not data["brokerAddrs"]:
            continue  # nobody to reach: the group's queues come back with its members
        brokers.append(data)
        queues.append(
            {
                "brokerName": broker_group,
                "perm": perm,
                "readQueueNums": count,
                "topicSynFlag": 0,  # the spelling before 4.9.0, which the Go client reads
                "topicSysFlag": 0,
                "writeQueueNums": count,
            }
        )
    return {"brokerDatas": brokers, "filterServerTable": {}, "queueDatas": queues}


def cluster_info(state: RoutingState) -> dict:
    """RocketMQ's ClusterInfo: every broker group, all in ``CLUSTER_NAME``."""
    names = sorted(state.broker_groups)
    return {
        "brokerAddrTable": {name: broker_data(state, name) for name in names},
        "clusterAddrTable": {CLUSTER_NAME: names},
    }


def topic_list(state: RoutingState) -> dict:
    """Every topic, the retry and dead-letter topics of the groups included."""
    names = set(state.topics)
    for group in state.groups:
        names.update((DLQ_PREFIX + group, RETRY_PREFIX + group))
    return {"topicList": sorted(names)}


class NameServer:
    def __init__(self, routes: RouteService) -> None:
        self.routes = routes

    def handlers(self) -> list[tuple[int, DoorHandler]]:
        return [
            (RequestCode.GET_ROUTEINFO_BY_TOPIC, self.route),
            (RequestCode.GET_BROKER_CLUSTER_INFO, self.cluster_info),
            (RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, self.topic_list),
            (RequestCode.GET_KV_CONFIG, self.kv_config),
        ]

    async def route(self, request: RemotingCommand, connection, caller: Caller):
        topic = request.text("topic")
        try:
            body = await self.routes.read_caught_up(caller, lambda state: route_data(state, topic))
        except TopicError as error:
            return request.reply(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic} ({error.detail})",
            )
        return request.reply(ResponseCode.SUCCESS, body=json_body(body))

    async def cluster_info(self, request: RemotingCommand, connection, caller: Caller):
        body = self.routes.read_all(caller, cluster_info)
        return request.reply(ResponseCode.SUCCESS, body=json_body(body))

    async def topic_list(self, request: RemotingCommand, connection, caller: Caller):
        body = self.routes.read_all(caller, topic_list)
        return request.reply(ResponseCode.SUCCESS, body=json_body(body))

    async def kv_config(self, request: RemotingCommand, connection, caller: Caller):
        """ferrymq keeps no NameServer key-value configuration (ordered-topic
        configurations among them): every key is absent, as RocketMQ answers an unset one."""
        self.routes.read(caller, lambda state: None)
        namespace, key = request.text("namespace"), request.text("key")
        return request.reply(
            ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace} Key: {key}"
        )

"""Routes, through every door: RocketMQ 5 QueryRoute and QueryAssignment, 4.x
GET_ROUTEINFO_BY_TOPIC (the NameServer role), the SDK's FERRY_ROUTE; and the cluster-wide
listings mqadmin reads (GET_BROKER_CLUSTER_INFO, GET_ALL_TOPIC_LIST_FROM_NAMESERVER).

Who may: a route needs valid credentials only (it shows the queue layout and the nodes'
addresses, not messages); a listing of every topic or broker needs admin rights. Each door
renders the routing state in its own format (``read``'s ``view``); the state is read once,
under the replica's lock (``RoutingReplica.read``).

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from node.group_creation import GroupsOnFirstUse
from node.services.caller import Caller
from node.services.permissions import Permissions
from node.topics import GroupConfig, TopicError
from routing.replica import RoutingReplica, RoutingUnavailable
from routing.state import RoutingState

View = TypeVar("View")


class RouteService:
    def __init__(
        self, routing: RoutingReplica, groups: GroupsOnFirstUse, permissions: Permissions
    ) -> None:
        self.routing = routing
        self.groups = groups
        self.permissions = permissions

    def read(self, caller: Caller, view: Callable[[RoutingState], View]) -> View:
        """``view`` of the routing state, for a caller with valid credentials."""
        self.permissions.require(caller, ())
        return self.routing.read(view)

    async def read_caught_up(self, caller: Caller, view: Callable[[RoutingState], View]) -> View:
        """``read``, once more after catching up with routing when ``view`` finds no such
        topic here: a route asked of this node right after another node created the topic
        answers the topic (``RoutingReplica.catch_up``)."""
        try:
            return self.read(caller, view)
        except TopicError as error:
            if error.reason != "TOPIC_NOT_FOUND":
                raise
            missing = error
        try:
            await self.routing.catch_up()
        except RoutingUnavailable:
            raise missing from None
        return self.read(caller, view)

    def read_all(self, caller: Caller, view: Callable[[RoutingState], View]) -> View:
        """``view`` of the whole cluster (every topic, every broker): admins only."""
        self.permissions.require_admin(caller)
        return self.routing.read(view)

    def group(self, caller: Caller, name: str) -> GroupConfig:
        """The group a push consumer's assignment is computed for: never created here (an
        assignment needs no permission on the group), an unknown one answered for as the
        default group it would become."""
        self.permissions.require(caller, ())
        return self.groups.default(name)

    def settings_group(self, caller: Caller, name: str) -> GroupConfig:
        """The group a consumer's settings are answered for: the group if it exists, else
        one with the defaults (settings create nothing)."""
        self.permissions.require(caller, ())
        return self.groups.known(name) or GroupConfig(name or "-")

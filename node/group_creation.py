"""Consumer groups created on first use, as RocketMQ's ``autoCreateSubscriptionGroup``
default does: a receive, pull, offset call or consumer heartbeat that names a group nobody
created creates it (default settings: ``DEFAULT_MAX_DELIVERY_ATTEMPTS``, not FIFO) through
Raft, so it exists on every node once the call goes on. ``[messages] auto_create_groups =
false`` turns it off: such calls answer CONSUMER_GROUP_NOT_FOUND as before.

Bounds (docs/security.md): only calls whose access rule needs SUBSCRIBE on the group create
it (the services decide that before they create one, so with auth on the caller
may consume from that group anyway); QueryAssignment and Telemetry, which need only a
signature, never create one and answer for an unknown group as for a default one. Routing
stops creating on first use at ``FIRST_USE_GROUPS_MAX`` groups in the cluster
(``routing.state``). A node submits at most ``CREATIONS_IN_FLIGHT_MAX`` creations at once
(one per name; callers naming the same new group share it): more answer TOO_MANY_REQUESTS
at once rather than queueing Raft commands.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import asyncio

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.rpc_status import InvalidRequest
from node.topics import GroupConfig, TopicError, TopicTable
from routing.commands import CreateGroup
from routing.metadata import DEFAULT_MAX_DELIVERY_ATTEMPTS, check_group_config
from routing.replica import RoutingReplica, RoutingUnavailable

CREATIONS_IN_FLIGHT_MAX = 64


class GroupsOnFirstUse:
    def __init__(self, topics: TopicTable, routing: RoutingReplica | None, enabled: bool) -> None:
        self.topics = topics
        self.routing = routing
        self.enabled = enabled and routing is not None
        self._creating: dict[str, asyncio.Future[GroupConfig]] = {}

    def known(self, name: str) -> GroupConfig | None:
        """The group if it exists (no creation): for the calls that may not create."""
        found = self.topics.groups.get(name)
        if found is None and self.routing is not None:
            # Committed, but the node's table is rebuilt on the loop a moment later.
            found = self.routing.state.groups.get(name)
        return found

    def default(self, name: str) -> GroupConfig:
        """What a call that may not create a group assumes for an unknown one: the group
        it would become (TopicError for an illegal name, or when creation is off)."""
        found = self.known(name)
        if found is not None:
            return found
        if not self.enabled:
            return self.topics.group(name)
        config = GroupConfig(name)
        check_group_config(config)
        return config

    async def group(self, name: str) -> GroupConfig:
        """The group ``name``, created now if it does not exist and creation is on;
        TopicError (not found, illegal, the cluster's limit) or InvalidRequest (routing
        unavailable, too many creations at once) otherwise."""
        found = self.known(name)
        if found is not None:
            return found
        if not self.enabled:
            return self.topics.group(name)  # raises CONSUMER_GROUP_NOT_FOUND
        check_group_config(GroupConfig(name))
        pending = self._creating.get(name)
        if pending is None:
            if len(self._creating) >= CREATIONS_IN_FLIGHT_MAX:
                raise InvalidRequest(
                    pb.TOO_MANY_REQUESTS,
                    f"group {name} does not exist and {CREATIONS_IN_FLIGHT_MAX} groups are "
                    "being created on first use on this node already: retry",
                )
            pending = self._creating[name] = asyncio.ensure_future(self._create(name))
            pending.add_done_callback(lambda _: self._creating.pop(name, None))
        # Shielded: a caller that goes away does not cancel the creation others await.
        return await asyncio.shield(pending)

    async def _create(self, name: str) -> GroupConfig:
        command = CreateGroup(name, DEFAULT_MAX_DELIVERY_ATTEMPTS, on_first_use=True)
        try:
            result = await self.routing.submit(command)
        except RoutingUnavailable as error:
            raise InvalidRequest(
                pb.INTERNAL_SERVER_ERROR,
                f"group {name} does not exist and could not be created now: {error}",
            ) from None
        if not result.ok:
            raise TopicError(result.reason, result.detail)
        config: GroupConfig = result.value
        self.topics.put_group(config)  # the refresh after the commit brings the same
        return config

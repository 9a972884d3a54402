"""A stored message consumed directly by one online client of a group, from a message's
detail view ("Resend to a group", RocketMQ Dashboard's semantics: one client runs its
listener on it, nothing is stored): ``POST /api/messages/consume-directly`` with
``{topic, group, message_id, broker_group, client_id?}``.

A client is connected to some node: a 4.x client heartbeats over its connections to its
broker groups' nodes, a RocketMQ 5 client holds one Telemetry stream per broker group, to
any node of it. So the endpoint asks the nodes of the message's broker group, this node
first, each through ``DirectConsumeService`` (here) or its Admin door as the console's user
(``PeerAdmin``), until one holds a member of the group: a node without one answers
NO_ONLINE_CLIENT or CLIENT_NOT_MEMBER and the next is asked; every other refusal is the
answer. Each node's wait is bounded by the request's own timeout.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ferrymq.protocol.ferrymq import admin_pb2 as api
from node.services.admin import AdminRefused
from node.services.caller import Caller
from node.services.direct_consume import TIMEOUT_DEFAULT_MS, DirectRequest, DirectResult
from node.services.peer_admin import PeerAdmin
from node.services.registry import Services
from routing.metadata import Member

NOT_HERE = ("NO_ONLINE_CLIENT", "CLIENT_NOT_MEMBER")
PEER_MARGIN_S = 5.0  # beyond the client's own wait: the call to the other node


class DirectConsumeEndpoint:
    def __init__(
        self,
        services: Services,
        node_id: str,
        peers: PeerAdmin,
        text: Callable[..., str],
        bad_request: Callable[[str], Exception],
    ) -> None:
        self.services = services
        self.node_id = node_id
        self.peers = peers
        self.text = text
        self.bad_request = bad_request

    def routes(self) -> list[tuple[str, str, Callable]]:
        return [("POST", "messages/consume-directly", self.consume)]

    async def consume(self, caller: Caller, call) -> dict:
        body = call.json()
        request = DirectRequest(
            self.text(body.get("group", ""), "group", 255),
            self.text(body.get("topic", ""), "topic", 255),
            self.text(body.get("message_id", ""), "message_id", 64),
            client_id=self.text(body.get("client_id", ""), "client_id", 256),
        )
        if not request.group or not request.topic or not request.message_id:
            raise self.bad_request("name the group, the topic and the message_id")
        broker_group = self.text(body.get("broker_group", ""), "broker_group", 255)
        refused = None
        for member in self._nodes(caller, broker_group):
            try:
                return await self._at(caller, member, request)
            except AdminRefused as error:
                if not any(f"{name}:" in error.message for name in NOT_HERE):
                    raise
                refused = refused or error
        if refused is None:
            raise self.bad_request(f"no broker group {broker_group}")
        raise refused

    def _nodes(self, caller: Caller, broker_group: str) -> list[Member]:
        """The broker group's nodes, this one first."""
        members = self.services.admin.cluster(caller).members
        found = [m for m in members if m.broker_group == broker_group]
        return sorted(found, key=lambda m: m.node_id != self.node_id)

    async def _at(self, caller: Caller, member: Member, request: DirectRequest) -> dict:
        if member.node_id == self.node_id:
            result = await self.services.direct_consume.consume(caller, request)
            return result.as_fields() | {"node": member.node_id}
        asked = api.ConsumeMessageDirectlyRequest(
            group=request.group,
            topic=request.topic,
            message_id=request.message_id,
            client_id=request.client_id,
            timeout_ms=request.timeout_ms,
        )
        timeout_s = (request.timeout_ms or TIMEOUT_DEFAULT_MS) / 1000 + PEER_MARGIN_S
        answer = await self.peers.call(caller, member, "ConsumeMessageDirectly", asked, timeout_s)
        fields = {f.name: getattr(answer, f.name) for f in dataclasses.fields(DirectResult)}
        return fields | {"node": member.node_id}

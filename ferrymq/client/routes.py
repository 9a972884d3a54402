"""Where a client's requests go: topic routes and the connections to the nodes they name.

A client is given one access point (any node), or several separated by commas or
semicolons (as the official clients take them) so that it still finds the cluster when
one is down. QueryRoute there says, for every queue of a
topic, which broker group holds it and the address of that group's master; data requests
go straight to that master. Routes are cached and refreshed when a request fails in a way
that means the route may be stale (a node down, a slave answering, a timeout). When the
access point itself is down, the other nodes the client knows of answer QueryRoute.

Two doors (``transport``): "remoting" (the default) asks routes of the NameServer role on
the nodes' remoting port (``FERRY_ROUTE``) and sends and fetches there
(``remoting_channel.py``); "grpc" does everything on the gRPC port. Both doors take the
client's credentials and TLS settings (ACL 1.0 signatures and TLS on the remoting port),
and a route refused on the remoting door raises what QueryRoute's refusal raises
(UNAUTHORIZED, FORBIDDEN), so the door changes no error a caller sees. The client is given
gRPC access points, as before; it learns every node's remoting address once, from the first
access point that answers ClusterStatus, and each route names its masters' two addresses. A
node that has no remoting address (an older node) is reached on gRPC. Admin calls, offsets
and group membership stay on gRPC.

Thread-safety: not thread-safe; one client object per thread (as the clients that use it).
"""

from __future__ import annotations

import json
import re
import time
import zlib
from dataclasses import dataclass, field
from typing import NamedTuple

from ferrymq.client.connection import Connection, new_client_id
from ferrymq.client.errors import (
    MALFORMED_ANSWER,
    REFUSED_CODE_NAMES,
    TRANSPORT,
    FerryError,
    check,
    check_admin,
)
from ferrymq.client.remoting_channel import RemotingChannel
from ferrymq.client.security import ClientSecurity
from ferrymq.codec.remoting_codes import FerryRequestCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api

TRANSPORTS = ("remoting", "grpc")

# A refusal on the remoting door, as QueryRoute's status gives it on gRPC.
ROUTE_REFUSALS = {"UNAUTHENTICATED": pb.UNAUTHORIZED, "PERMISSION_DENIED": pb.FORBIDDEN}

# A node whose connection failed is avoided this long (``Endpoints.reachable``).
UNREACHABLE_S = 5.0
# Failures after which the route is asked again before a retry.
ROUTE_STALE_CODES = frozenset({TRANSPORT, pb.HA_NOT_AVAILABLE, pb.TOPIC_NOT_FOUND})


class QueueRef(NamedTuple):
    """One queue of a topic: broker groups number their queues 0..n-1 each. A named
    tuple (as kafka-python's ``TopicPartition``): a reader's poll keys its dictionaries
    by the queue, a dozen times a message, and a dataclass's ``__hash__`` and ``__eq__``
    are Python calls where a tuple's are C (bench/RESULTS.md, "The SDK's share of the end
    to end")."""

    broker_group: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.broker_group}/{self.queue_id}"


@dataclass(frozen=True)
class TopicRoute:
    topic: str
    message_type: int
    queues: tuple[QueueRef, ...]
    masters: dict[str, str] = field(hash=False)  # broker group -> master address

    @property
    def broker_groups(self) -> list[str]:
        return sorted(self.masters)

    def broker_for_key(self, key: str) -> str:
        """The broker group a message group's messages go to: always the same one, so that
        a FIFO group stays in one queue."""
        groups = self.broker_groups
        return groups[zlib.crc32(key.encode()) % len(groups)]


def route_of(topic: str, answer: rpc.QueryRouteResponse) -> TopicRoute:
    check(answer.status)
    masters: dict[str, str] = {}
    queues = []
    for queue in answer.message_queues:
        address = queue.broker.endpoints.addresses[0]
        masters[queue.broker.name] = f"{address.host}:{address.port}"
        queues.append(QueueRef(queue.broker.name, queue.id))
    message_type = pb.NORMAL
    if answer.message_queues and answer.message_queues[0].accept_message_types:
        message_type = answer.message_queues[0].accept_message_types[0]
    return TopicRoute(topic, message_type, tuple(sorted(queues)), masters)


def ferry_route_of(topic: str, body: bytes) -> tuple[TopicRoute, dict[str, str]]:
    """The route in a FERRY_ROUTE answer, and the gRPC → remoting addresses it names."""
    try:
        answer = json.loads(body)
        if answer["code"] != pb.OK:
            check(pb.Status(code=answer["code"], message=answer.get("message", "")))
        masters: dict[str, str] = {}
        remoting: dict[str, str] = {}
        queues = []
        for broker_group, count, grpc_address, remoting_address in answer["queues"]:
            masters[broker_group] = grpc_address
            if remoting_address:
                remoting[grpc_address] = remoting_address
            queues += [QueueRef(broker_group, queue_id) for queue_id in range(count)]
        message_type = answer["messageType"]
    except (ValueError, KeyError, TypeError) as error:
        raise FerryError(
            MALFORMED_ANSWER, "MALFORMED_ANSWER", f"route of {topic}: {error}"
        ) from None
    return TopicRoute(topic, message_type, tuple(sorted(queues)), masters), remoting


def route_refusal(error: FerryError) -> FerryError:
    """A refused ClusterStatus or FERRY_ROUTE, raised as QueryRoute's refusal."""
    code = ROUTE_REFUSALS[error.code_name]
    return FerryError(code, pb.Code.Name(code), error.detail)


class Endpoints:
    """The connections of one client object: the access point and every master it was
    routed to. All share one client id, so that nodes see one member of a group.

    A node whose connection failed (a transport error: down, or cut off from this client)
    is avoided for ``UNREACHABLE_S``: a send meant for it goes to another access point
    instead (``reachable``), whose node forwards it to its group's master (sends on the
    remoting port, and gRPC SendMessage). A master the client cannot reach while its
    peers can (clients cut off from it) is then written through the others at once,
    where every send waited for its timeout until the network healed."""

    def __init__(
        self,
        access_points: str,
        timeout_s: float,
        security: ClientSecurity | None = None,
        transport: str = "remoting",
    ) -> None:
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}")
        self.security = security or ClientSecurity.from_environment()
        self.uses_remoting = transport == "remoting"
        self.access_points = [a.strip() for a in re.split(r"[,;]", access_points) if a.strip()]
        if not self.access_points:
            raise ValueError("no access point given")
        self.access_point = self.access_points[0]
        self.timeout_s = timeout_s
        self.client_id = new_client_id()
        self._connections: dict[str, Connection] = {}
        self._routes: dict[str, TopicRoute] = {}
        self._remoting_addresses: dict[str, str] = {}  # gRPC address -> remoting address
        self._learned = False
        self._channels: dict[str, RemotingChannel] = {}
        self._unreachable: dict[str, float] = {}  # address -> avoided until (monotonic)
        self._stale: dict[str, float] = {}  # address -> not asked routes first until

    def mark_unreachable(self, address: str) -> None:
        """A request to the node at gRPC ``address`` failed in transport."""
        self._unreachable[address] = time.monotonic() + UNREACHABLE_S

    def mark_stale(self, address: str) -> None:
        """The node at gRPC ``address`` refused as no master (HA_NOT_AVAILABLE): its routes
        may be stale (a master cut off from routing, fenced, still names itself), so
        routes are asked elsewhere first for ``UNREACHABLE_S``; sends may still go to it."""
        self._stale[address] = time.monotonic() + UNREACHABLE_S

    def reachable(self, address: str, forwardable: bool = True) -> str:
        """``address``, or, while it is avoided, another access point that is not (its
        node forwards the request); ``address`` when none is, or the request is not one a
        node forwards (``forwardable``)."""
        until = self._unreachable.get(address)
        if until is None or not forwardable:
            return address
        now = time.monotonic()
        if now >= until:
            del self._unreachable[address]
            return address
        for other in self.access_points:
            if other != address and self._unreachable.get(other, 0.0) <= now:
                return other
        return address

    @property
    def access(self) -> Connection:
        return self.connection(self.access_point)

    def connection(self, address: str) -> Connection:
        found = self._connections.get(address)
        if found is None:
            found = self._connections[address] = Connection(
                address, self.timeout_s, client_id=self.client_id, security=self.security
            )
        return found

    def remoting_address(self, address: str) -> str | None:
        """The remoting address of the node at gRPC ``address`` (None: use gRPC)."""
        if not self.uses_remoting:
            return None
        return self._remoting_addresses.get(address)

    def channel(self, address: str) -> RemotingChannel | None:
        """The blocking remoting channel to the node at gRPC ``address``, if it has one."""
        remoting = self.remoting_address(address)
        if remoting is None:
            return None
        found = self._channels.get(remoting)
        if found is None:
            found = self._channels[remoting] = RemotingChannel(
                remoting, self.timeout_s, self.security
            )
        return found

    def _learn_remoting_addresses(self, address: str) -> None:
        """Every node's remoting address, from ClusterStatus (once per client)."""
        connection = self.connection(address)
        answer = connection.call(connection.admin.ClusterStatus, api.ClusterStatusRequest())
        check_admin(answer.status)
        for node in answer.nodes:
            if node.remoting_address:
                self._remoting_addresses[node.address] = node.remoting_address
        self._learned = True

    def route_candidates(self) -> list[str]:
        """Where a route is asked, in turn: the access points, then any other node this
        client has reached; the nodes avoided now (``mark_unreachable``, ``mark_stale``)
        last. Every node answers routes, so a node whose connection just failed (a client
        cut off from it) is not asked first again: asking it cost the next send the call's
        whole timeout; nor one that refused as no master: a master cut off from its peers
        kept naming itself, and its clients wrote nowhere until the partition healed."""
        candidates = [*self.access_points]
        candidates += [a for a in self._connections if a not in candidates]
        now = time.monotonic()

        def avoided(address: str) -> bool:
            return max(self._unreachable.get(address, 0.0), self._stale.get(address, 0.0)) > now

        return sorted(candidates, key=avoided)

    def route(self, topic: str, refresh: bool = False) -> TopicRoute:
        cached = self._routes.get(topic)
        if cached is not None and not refresh:
            return cached
        if self.uses_remoting:
            return self._remoting_route(topic)
        return self._grpc_route(topic)

    def _remoting_route(self, topic: str) -> TopicRoute:
        """FERRY_ROUTE from the first node that answers (access points first); a node
        without a remoting address answers QueryRoute on gRPC."""
        last_error: FerryError | None = None
        for address in self.route_candidates():
            try:
                if not self._learned:
                    self._learn_remoting_addresses(address)
                answer = self._ask_route(address, topic)
                if answer is None:
                    return self._grpc_route(topic, [address])
            except FerryError as error:
                if error.code != TRANSPORT:
                    raise
                if error.code_name in REFUSED_CODE_NAMES:
                    raise route_refusal(error) from None
                self.mark_unreachable(address)
                last_error = error
                continue
            route, remoting = ferry_route_of(topic, answer.body)
            self._remoting_addresses.update(remoting)
            self._routes[topic] = route
            return route
        assert last_error is not None
        raise last_error

    def _ask_route(self, address: str, topic: str):
        """FERRY_ROUTE at the node at gRPC ``address`` (None: it has no remoting port).
        When its remoting port does not answer, ClusterStatus is asked again first: a
        node restarted on its gRPC port may listen for remoting elsewhere now."""
        channel = self.channel(address)
        if channel is None:
            return None
        try:
            return channel.call(FerryRequestCode.FERRY_ROUTE, fields={"topic": topic})
        except FerryError as error:
            if error.code != TRANSPORT:
                raise
            known = self.remoting_address(address)
            self._learn_remoting_addresses(address)  # raises when gRPC is down too
            if self.remoting_address(address) == known:
                raise
        return self._ask_route(address, topic)

    def _grpc_route(self, topic: str, candidates: list[str] | None = None) -> TopicRoute:
        request = rpc.QueryRouteRequest(topic=pb.Resource(name=topic))
        last_error: FerryError | None = None
        if candidates is None:
            candidates = self.route_candidates()
        for address in candidates:
            connection = self.connection(address)
            try:
                answer = connection.call(connection.messaging.QueryRoute, request)
            except FerryError as error:
                self.mark_unreachable(address)
                last_error = error
                continue
            route = route_of(topic, answer)
            self._routes[topic] = route
            return route
        assert last_error is not None
        raise last_error

    def cached_route(self, topic: str) -> TopicRoute | None:
        return self._routes.get(topic)

    def master(self, topic: str, broker_group: str) -> Connection:
        return self.connection(self.route(topic).masters[broker_group])

    def forget(self, topic: str) -> None:
        self._routes.pop(topic, None)

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()

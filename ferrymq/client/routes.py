"""Where a client's requests go: topic routes and the connections to the nodes they name.

A client is given one access point (any node), or several separated by commas or
semicolons (as the official clients take them) so that it still finds the cluster when
one is down. QueryRoute there says, for every queue of a
topic, which broker group holds it and the address of that group's master; data requests
go straight to that master. Routes are cached and refreshed when a request fails in a way
that means the route may be stale (a node down, a slave answering, a timeout). When the
access point itself is down, the other nodes the client knows of answer QueryRoute.

Thread-safety: not thread-safe; one client object per thread (as the clients that use it).
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field

from ferrymq.client.connection import Connection, new_client_id
from ferrymq.client.errors import TRANSPORT, FerryError, check
from ferrymq.client.security import ClientSecurity
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc

# Failures after which the route is asked again before a retry.
ROUTE_STALE_CODES = frozenset({TRANSPORT, pb.HA_NOT_AVAILABLE, pb.TOPIC_NOT_FOUND})


@dataclass(frozen=True, order=True)
class QueueRef:
    """One queue of a topic: broker groups number their queues 0..n-1 each."""

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


class Endpoints:
    """The connections of one client object: the access point and every master it was
    routed to. All share one client id, so that nodes see one member of a group."""

    def __init__(
        self, access_points: str, timeout_s: float, security: ClientSecurity | None = None
    ) -> None:
        self.security = security or ClientSecurity.from_environment()
        self.access_points = [a.strip() for a in re.split(r"[,;]", access_points) if a.strip()]
        if not self.access_points:
            raise ValueError("no access point given")
        self.access_point = self.access_points[0]
        self.timeout_s = timeout_s
        self.client_id = new_client_id()
        self._connections: dict[str, Connection] = {}
        self._routes: dict[str, TopicRoute] = {}

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

    def route(self, topic: str, refresh: bool = False) -> TopicRoute:
        cached = self._routes.get(topic)
        if cached is not None and not refresh:
            return cached
        request = rpc.QueryRouteRequest(topic=pb.Resource(name=topic))
        last_error: FerryError | None = None
        # The access points first, then any other node this client has reached.
        candidates = [*self.access_points]
        candidates += [a for a in self._connections if a not in candidates]
        for address in candidates:
            connection = self.connection(address)
            try:
                answer = connection.call(connection.messaging.QueryRoute, request)
            except FerryError as error:
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

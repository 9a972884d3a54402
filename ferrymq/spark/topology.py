"""Where a topic's queues live and which offsets they hold, as seen from Spark.

The seed ``endpoints`` are only a way in: a queue's address comes from ``QueryRoute`` (any
node answers it), and its retained range from ``DescribeTopic`` on that address. Nothing
here is cached for long: a read that fails asks again (``locate``), so a query follows a
broker group whose master moved once routing answers with the new one.

Reads go to a node's remoting port (``FERRY_FETCH``, as the SDK's ``PullConsumer``) when
the node has one and the process's client settings are plaintext and unauthenticated
(``ferrymq/client/routes.py``); every other call is gRPC. The nodes' remoting addresses
come from ClusterStatus, once per process (``remoting_address``).

Connections are kept per process in ``_CONNECTIONS`` (Spark reuses Python workers, and
objects holding channels cannot be pickled); readers and writers hold only plain data.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from ferrymq.client.connection import Connection
from ferrymq.client.errors import FerryError, check, check_admin
from ferrymq.client.remoting_channel import RemotingChannel
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api

ADMIN_NOT_FOUND = 5
ADMIN_ALREADY_EXISTS = 6
BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)

_CONNECTIONS: dict[str, Connection] = {}
_CONNECTIONS_LOCK = threading.Lock()
_REMOTING: dict[str, str] = {}  # gRPC address -> remoting address ("" for none)
_CHANNELS = threading.local()  # per thread: remoting address -> RemotingChannel


def connection(address: str) -> Connection:
    """The process's connection to ``address`` (created on first use)."""
    with _CONNECTIONS_LOCK:
        found = _CONNECTIONS.get(address)
        if found is None:
            found = _CONNECTIONS[address] = Connection(address, timeout_s=10.0)
        return found


def remoting_address(address: str) -> str | None:
    """The remoting address of the node at gRPC ``address``, or None: use gRPC (a node
    without a remoting port)."""
    conn = connection(address)
    with _CONNECTIONS_LOCK:
        known = _REMOTING.get(address)
    if known is None:
        answer = conn.call(conn.admin.ClusterStatus, api.ClusterStatusRequest())
        check_admin(answer.status)
        with _CONNECTIONS_LOCK:
            for node in answer.nodes:
                _REMOTING[node.address] = node.remoting_address
            known = _REMOTING.setdefault(address, "")
    return known or None


def remoting_channel(address: str) -> RemotingChannel | None:
    """This thread's blocking remoting channel to the node at gRPC ``address`` (None: use
    gRPC). A channel serves one thread at a time, so each thread has its own."""
    remoting = remoting_address(address)
    if remoting is None:
        return None
    channels = getattr(_CHANNELS, "channels", None)
    if channels is None:
        channels = _CHANNELS.channels = {}
    found = channels.get(remoting)
    if found is None:
        conn = connection(address)
        found = channels[remoting] = RemotingChannel(remoting, conn.timeout_s, conn.security)
    return found


def forget_remoting(address: str) -> None:
    """Ask ClusterStatus again next time: the node at ``address`` failed on its remoting
    port (it may have restarted on another one)."""
    with _CONNECTIONS_LOCK:
        _REMOTING.clear()  # the others' may have moved too, and asking is cheap


class TopicNotFound(ValueError):
    pass


@dataclass(frozen=True)
class QueueState:
    topic: str
    queue_id: int
    address: str
    broker_group: str
    min_offset: int
    max_offset: int


def backoff(attempt: int) -> float:
    return BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)]


def retrying(endpoints: tuple[str, ...], timeout_ms: int, what: str, action):
    """``action(address)`` on each endpoint in turn until one answers; transport failures
    and retriable codes are retried until ``timeout_ms``, anything else raises at once."""
    deadline = time.monotonic() + timeout_ms / 1000
    attempt = 0
    while True:
        address = endpoints[attempt % len(endpoints)]
        try:
            return action(address)
        except FerryError as error:
            if not error.retriable or time.monotonic() >= deadline:
                raise FerryError(
                    error.code, error.code_name, f"{what} via {address}: {error.detail}"
                ) from None
        time.sleep(backoff(attempt))
        attempt += 1


QueueKey = tuple[str, int]  # (broker group, queue id): each group numbers its own queues


def route(endpoints: tuple[str, ...], topic: str, timeout_ms: int) -> dict[QueueKey, str]:
    """(broker group, queue id) -> address of the master serving it."""

    def ask(address: str) -> dict[QueueKey, str]:
        conn = connection(address)
        answer = conn.call(
            conn.messaging.QueryRoute, rpc.QueryRouteRequest(topic=pb.Resource(name=topic))
        )
        if answer.status.code == pb.TOPIC_NOT_FOUND:
            raise TopicNotFound(
                f"topic {topic!r} does not exist (asked {address}); create it first, e.g. "
                f"ferrymq topic create {topic}"
            )
        check(answer.status)
        found = {}
        for queue in answer.message_queues:
            addresses = queue.broker.endpoints.addresses
            where = f"{addresses[0].host}:{addresses[0].port}" if addresses else address
            found[(queue.broker.name, queue.id)] = where
        return found

    return retrying(endpoints, timeout_ms, f"route of {topic}", ask)


def queue_states(endpoints: tuple[str, ...], topic: str, timeout_ms: int) -> list[QueueState]:
    """Every queue of ``topic`` with its master's address and retained range [min, max).
    A master that does not answer (it may have failed over) makes the route asked again."""
    deadline = time.monotonic() + timeout_ms / 1000
    attempt = 0
    while True:
        remaining_ms = max(1, int((deadline - time.monotonic()) * 1000))
        routes = route(endpoints, topic, remaining_ms)
        try:
            return _described(topic, routes)
        except FerryError as error:
            if not error.retriable or time.monotonic() >= deadline:
                raise
        time.sleep(backoff(attempt))
        attempt += 1


def _described(topic: str, routes: dict[QueueKey, str]) -> list[QueueState]:
    states: list[QueueState] = []
    for address in sorted(set(routes.values())):
        conn = connection(address)
        answer = conn.call(conn.admin.DescribeTopic, api.DescribeTopicRequest(name=topic))
        if answer.status.code == ADMIN_NOT_FOUND:
            raise TopicNotFound(f"topic {topic!r} does not exist (asked {address})")
        check_admin(answer.status)
        for queue in answer.queues:
            # A node knows the offsets of its own broker group's queues only.
            if routes.get((queue.broker_group, queue.queue_id)) == address:
                states.append(
                    QueueState(
                        topic,
                        queue.queue_id,
                        address,
                        queue.broker_group,
                        queue.min_offset,
                        queue.max_offset,
                    )
                )
    return sorted(states, key=lambda s: (s.broker_group, s.queue_id))


def locate(
    endpoints: tuple[str, ...], topic: str, broker_group: str, queue_id: int, timeout_ms: int
) -> str:
    """The address serving one queue now (after a failure, routing may name another)."""
    found = route(endpoints, topic, timeout_ms).get((broker_group, queue_id))
    if found is None:
        raise FerryError(
            pb.NOT_FOUND, "NOT_FOUND", f"queue {broker_group}/{queue_id} of {topic} has no route"
        )
    return found


def ensure_group(endpoints: tuple[str, ...], group: str, timeout_ms: int) -> None:
    """Data.Fetch reads on behalf of a consumer group that exists; the source creates its
    own (offsets stay in Spark's checkpoint, the group only names the reader)."""

    def create(address: str) -> None:
        conn = connection(address)
        answer = conn.call(
            conn.admin.CreateGroup, api.CreateGroupRequest(group=api.Group(name=group))
        )
        if answer.status.code not in (0, ADMIN_ALREADY_EXISTS):
            check_admin(answer.status)

    retrying(endpoints, timeout_ms, f"group {group}", create)

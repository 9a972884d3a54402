"""Who is connected, per group, as ``mqadmin consumerConnection`` and ``producerConnection``
show it (GET_CONSUMER_CONNECTION_LIST and GET_PRODUCER_CONNECTION_LIST, answered by the
remoting door from ``node/services/membership.py``).

What a 4.x client says of itself comes with its heartbeats (``broker_clients.py``): its
client id, its language and version (the request's header), the address it connects from,
and per consumer group its consume type, message model and where a new group starts. A
consumer is listed while it is a live member of the group (``node/group_members.py``: the
one table of liveness, shared with the gRPC doors); a producer while its heartbeats are
younger than RocketMQ's 120 s and its connection is open. Clients of the gRPC doors are
not here (Admin ``GroupMembers`` lists them). A group with nobody connected is answered
CONSUMER_NOT_ONLINE with a remark, as RocketMQ's broker does.

Soft state: a restarted node learns it from the next heartbeats. Bounded: at most
``MAX_GROUPS`` groups of each kind, ``MAX_CLIENTS_PER_GROUP`` clients in each, and
``max_producer_groups`` producer groups per client id (``[messages]
max_producer_groups_per_client``); a heartbeat past a bound
is refused (``ConnectionsFull``). Every entry leaves in constant time (dicts by group and
by client), so a client closing takes as long as its own entries, whatever the others.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from node.consumer_subscriptions import Subscriptions
from node.group_members import GroupMembers

MAX_GROUPS = 10_000
MAX_CLIENTS_PER_GROUP = 1024
# A 4.x client's heartbeat names every producer group of its instance (and its inner one):
# a handful in practice. The bound keeps one client's share of the table small.
DEFAULT_PRODUCER_GROUPS_PER_CLIENT = 64
PRODUCER_LIFETIME_MS = 120_000  # RocketMQ's channel expiry
SWEEP_EVERY_MS = 1_000


class ConnectionsFull(Exception):
    """A heartbeat past a bound of the table."""


@dataclass(frozen=True)
class ClientConnection:
    """RocketMQ's ``Connection``: one client as the broker sees it."""

    client_id: str
    address: str  # host:port it connects from
    language: str  # LanguageCode's name
    version: int  # MQVersion's ordinal


@dataclass(frozen=True)
class ConsumerSettings:
    """What a consumer's heartbeat says of its group, as its own strings."""

    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"


class ClientConnections:
    def __init__(
        self,
        members: GroupMembers,
        subscriptions: Subscriptions,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        max_producer_groups: int = DEFAULT_PRODUCER_GROUPS_PER_CLIENT,
    ) -> None:
        self.members = members
        self.subscriptions = subscriptions
        self.clock_ms = clock_ms
        self.max_producer_groups = max_producer_groups
        self._consumers: dict[str, dict[str, tuple[ClientConnection, ConsumerSettings]]] = {}
        self._producers: dict[str, dict[str, tuple[ClientConnection, int]]] = {}
        self._producer_groups_of: dict[str, set[str]] = {}  # client id -> its groups
        self._swept_at = -SWEEP_EVERY_MS

    # ---- what heartbeats tell ---------------------------------------------------------
    def consumer_heard(
        self, group: str, connection: ClientConnection, settings: ConsumerSettings
    ) -> None:
        clients = self._slot(self._consumers, group, connection.client_id)
        clients.pop(connection.client_id, None)  # the newest heartbeat last
        clients[connection.client_id] = (connection, settings)

    def producers_heard(self, groups: list[str], connection: ClientConnection) -> None:
        """``connection``'s client produces for ``groups``: all listed, or (past a bound)
        none of the new ones, ``ConnectionsFull``."""
        client_id = connection.client_id
        held = self._producer_groups_of.get(client_id, set())
        new = set(groups) - held
        if len(held) + len(new) > self.max_producer_groups:
            raise ConnectionsFull(
                f"client {client_id[:64]} would produce for {len(held) + len(new)} producer "
                f"groups here, the limit is {self.max_producer_groups}"
            )
        unlisted = [group for group in new if group not in self._producers]
        if unlisted and len(self._producers) + len(unlisted) > MAX_GROUPS:
            self._sweep_producers()
            if len(self._producers) + len(unlisted) > MAX_GROUPS:
                raise ConnectionsFull(f"this node lists the clients of {MAX_GROUPS} groups")
        expires = self.clock_ms() + PRODUCER_LIFETIME_MS
        for group in groups:
            clients = self._slot(self._producers, group, client_id)
            clients[client_id] = (connection, expires)
            self._producer_groups_of.setdefault(client_id, set()).add(group)

    def consumer_left(self, group: str, client_id: str) -> None:
        self._drop(self._consumers, group, client_id)

    def producer_left(self, group: str, client_id: str) -> None:
        self._drop(self._producers, group, client_id)
        groups = self._producer_groups_of.get(client_id)
        if groups is not None:
            groups.discard(group)
            if not groups:
                del self._producer_groups_of[client_id]

    def _slot(self, table: dict, group: str, client_id: str) -> dict:
        clients = table.get(group)
        if clients is None:
            if len(table) >= MAX_GROUPS:
                raise ConnectionsFull(f"this node lists the clients of {MAX_GROUPS} groups")
            clients = table[group] = {}
        if client_id not in clients and len(clients) >= MAX_CLIENTS_PER_GROUP:
            self._expire_producers(group)  # make room of the expired first
            if len(clients) >= MAX_CLIENTS_PER_GROUP:
                raise ConnectionsFull(
                    f"group {group} has {MAX_CLIENTS_PER_GROUP} clients listed, the limit"
                )
        return clients

    @staticmethod
    def _drop(table: dict, group: str, client_id: str) -> None:
        clients = table.get(group)
        if clients is not None:
            clients.pop(client_id, None)
            if not clients:
                del table[group]

    def _sweep_producers(self) -> None:
        """Expire every group's producers; a full table does so at most once per
        ``SWEEP_EVERY_MS``, so a flood of refused heartbeats costs no full scan each."""
        now = self.clock_ms()
        if now - self._swept_at < SWEEP_EVERY_MS:
            return
        self._swept_at = now
        for group in list(self._producers):
            self._expire_producers(group)

    def _expire_producers(self, group: str) -> None:
        clients = self._producers.get(group, {})
        now = self.clock_ms()
        for client_id in [c for c, (_, expires) in clients.items() if expires <= now]:
            self.producer_left(group, client_id)

    # ---- what mqadmin asks ------------------------------------------------------------
    def consumers(self, group: str) -> tuple[list[ClientConnection], ConsumerSettings | None]:
        """The group's live consumers (a member of the group the heartbeats described),
        and the settings the newest of them stated."""
        live = {client_id for client_id, _ in self.members.live(group)}
        known = self._consumers.get(group, {})
        for client_id in [c for c in known if c not in live]:
            self._drop(self._consumers, group, client_id)  # expired or gone since
        listed = self._consumers.get(group, {})
        settings = next(reversed(listed.values()))[1] if listed else None
        return [connection for connection, _ in listed.values()], settings

    def producers(self, group: str) -> list[ClientConnection]:
        self._expire_producers(group)
        return [connection for connection, _ in self._producers.get(group, {}).values()]

    def producer_groups(self) -> list[str]:
        """Every producer group with a live producer here, sorted (the console's list;
        expired ones swept first, at most once per ``SWEEP_EVERY_MS``)."""
        self._sweep_producers()
        return sorted(self._producers)

"""Live members of consumer groups, from heartbeats.

A client's id is the ``x-mq-client-id`` metadata every official client (and ferrymq's SDK)
sends. A member is live while heartbeats keep arriving (the official clients send one every
10 s; members expire after ``EXPIRY_MS``) and leaves at once on NotifyClientTermination.
Pull consumers rebalance queues over the sorted member list, so every member computes the
same assignment from the same list. Membership is soft state: a restarted node learns it
again from the next heartbeats.

A client id belongs to the identity that first heartbeat with it (``Caller.identity``: the
access key with authentication on, else the peer's IP address) for as long as it is a
member of any group: a heartbeat or a termination for it from another identity is refused
and changes nothing, so nobody can evict a member or take its place. Every table is
bounded (``MAX_*``); a heartbeat beyond a bound is refused, not silently dropped.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb

EXPIRY_MS = 30_000
MAX_MEMBERS_PER_GROUP = 10_000  # a pull group larger than this cannot be rebalanced sanely
MAX_GROUPS = 10_000  # groups with live members on this node
MAX_CLIENTS = 100_000  # client ids bound to an identity; with the above, about 20 MB at most
MAX_CLIENT_ID_CHARS = 256  # official ids are host@pid@index@time, about 50 characters
SWEEP_EVERY_MS = 1_000  # a full table looks for expired entries at most this often


class MembershipRefused(Exception):
    """A heartbeat or termination this node refuses; ``code`` is the status to answer."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class _Client:
    identity: str
    groups: set[str] = field(default_factory=set)
    lifetime_ms: int = EXPIRY_MS  # how long a heartbeat of this client keeps it live


class GroupMembers:
    def __init__(self, clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000):
        self.clock_ms = clock_ms
        self._groups: dict[str, dict[str, int]] = {}  # group -> client id -> last heartbeat
        self._clients: dict[str, _Client] = {}
        self._swept_at = -SWEEP_EVERY_MS

    def heartbeat(
        self, group: str, client_id: str, identity: str, lifetime_ms: int = EXPIRY_MS
    ) -> None:
        """Record a live member, live for ``lifetime_ms`` after this heartbeat (RocketMQ
        4.x clients heartbeat every 30 s: the remoting port gives them RocketMQ's 120 s);
        ``MembershipRefused`` when the id belongs to another identity or a table is full."""
        _check_client_id(client_id)
        client = self._owned(client_id, identity)
        members = self._groups.get(group, {})
        if not members:  # a group new to the table
            if len(self._groups) >= MAX_GROUPS:
                self._sweep()
            if len(self._groups) >= MAX_GROUPS:
                raise _full(f"this node tracks members of {MAX_GROUPS} groups, the limit")
        elif client_id not in members and len(members) >= MAX_MEMBERS_PER_GROUP:
            self._expire(group, members)
            if len(members) >= MAX_MEMBERS_PER_GROUP:
                raise _full(f"group {group} has {MAX_MEMBERS_PER_GROUP} live members, the limit")
        if client is None:
            if len(self._clients) >= MAX_CLIENTS:
                self._sweep()
            if len(self._clients) >= MAX_CLIENTS:
                raise _full(f"this node tracks {MAX_CLIENTS} client ids, the limit")
            client = self._clients[client_id] = _Client(identity)
        client.lifetime_ms = lifetime_ms
        members[client_id] = self.clock_ms()
        self._groups[group] = members
        client.groups.add(group)

    def leave(self, group: str, client_id: str, identity: str) -> None:
        """End a membership at once; a client id that is no member is nothing to end."""
        _check_client_id(client_id)
        client = self._owned(client_id, identity)
        if client is None or group not in client.groups:
            return
        self._remove(group, client_id)

    def live(self, group: str) -> list[tuple[str, int]]:
        """(client id, last heartbeat ms) of live members, sorted by id."""
        members = self._groups.get(group)
        if members is None:
            return []
        self._expire(group, members)
        return sorted(members.items())

    @property
    def client_count(self) -> int:
        return len(self._clients)

    def _owned(self, client_id: str, identity: str) -> _Client | None:
        """The id's record if ``identity`` owns it, None if nobody does (any more)."""
        client = self._clients.get(client_id)
        if client is None or client.identity == identity:
            return client
        for group in list(client.groups):  # expired memberships free the id
            self._expire(group, self._groups.get(group, {}))
        client = self._clients.get(client_id)
        if client is None:
            return None
        raise MembershipRefused(
            pb.FORBIDDEN,
            f"client id {client_id!r} is a member registered by another identity (access key "
            "or address): only its own client may heartbeat or end it",
        )

    def _expire(self, group: str, members: dict[str, int]) -> None:
        now = self.clock_ms()
        clients = self._clients
        expired = [
            client_id
            for client_id, seen in members.items()
            if seen < now - (clients[client_id].lifetime_ms if client_id in clients else 0)
        ]
        for client_id in expired:
            self._remove(group, client_id)

    def _remove(self, group: str, client_id: str) -> None:
        members = self._groups.get(group)
        if members is not None:
            members.pop(client_id, None)
            if not members:
                del self._groups[group]
        client = self._clients.get(client_id)
        if client is not None:
            client.groups.discard(group)
            if not client.groups:
                del self._clients[client_id]

    def _sweep(self) -> None:
        """Expire every group's members; a full table does so at most once per
        ``SWEEP_EVERY_MS``, so a flood of refused heartbeats costs no full scan each."""
        now = self.clock_ms()
        if now - self._swept_at < SWEEP_EVERY_MS:
            return
        self._swept_at = now
        for group in list(self._groups):
            self._expire(group, self._groups[group])


def _check_client_id(client_id: str) -> None:
    if not client_id:
        raise MembershipRefused(
            pb.CLIENT_ID_REQUIRED, "the request carries no x-mq-client-id metadata"
        )
    if len(client_id) > MAX_CLIENT_ID_CHARS:
        raise MembershipRefused(
            pb.BAD_REQUEST,
            f"client id is {len(client_id)} characters, the limit is {MAX_CLIENT_ID_CHARS}",
        )


def _full(message: str) -> MembershipRefused:
    return MembershipRefused(
        pb.TOO_MANY_REQUESTS, f"{message}: retry once members have expired ({EXPIRY_MS} ms)"
    )

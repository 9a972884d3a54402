"""Group membership, through every door: RocketMQ 5 Heartbeat and NotifyClientTermination,
4.x HEART_BEAT, UNREGISTER_CLIENT and GET_CONSUMER_LIST_BY_GROUP, Admin GroupMembers, and
mqadmin's consumer and producer connection lists.

One heartbeat, whichever door, is a ``ClientHeartbeat``: the consumer groups a client is a
member of (with what a 4.x client registers for each: its subscriptions, its settings) and
the producer groups it produces for. The service decides on the whole heartbeat before it
changes anything:

1. SUBSCRIBE on every consumer group it names (a producer group needs nothing beyond
   valid credentials, as in RocketMQ);
2. each group exists, or is created on first use (only groups step 1 allowed); a group
   that cannot be (creation off, an illegal name) is reported back, the others join;
3. each membership: a client id belongs to the identity that registered it
   (``node/group_members.py``), every table is bounded, a heartbeat past a bound is
   refused.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from node.client_registry import ClientConnection, ClientConnections, ConsumerSettings
from node.consumer_subscriptions import Subscription, Subscriptions
from node.group_creation import GroupsOnFirstUse
from node.group_members import EXPIRY_MS, GroupMembers
from node.services.caller import Caller
from node.services.permissions import Permissions, group_need
from node.topics import TopicError
from routing.metadata import check_name


@dataclass(slots=True)
class ConsumerMembership:
    """What a heartbeat says of one consumer group (4.x clients say more than 5.x ones)."""

    subscriptions: list[Subscription] = field(default_factory=list)
    settings: ConsumerSettings | None = None


@dataclass(slots=True)
class ClientHeartbeat:
    client_id: str
    consumers: dict[str, ConsumerMembership] = field(default_factory=dict)
    producer_groups: list[str] = field(default_factory=list)
    lifetime_ms: int = EXPIRY_MS  # how long it keeps the client a member
    client: ClientConnection | None = None  # what a 4.x client says of itself


@dataclass(slots=True)
class HeartbeatOutcome:
    joined: list[str] = field(default_factory=list)  # consumer groups it is a member of
    unknown: list[TopicError] = field(default_factory=list)  # why a group was not joined
    producing: list[str] = field(default_factory=list)  # producer groups listed


class MembershipService:
    def __init__(
        self,
        members: GroupMembers,
        subscriptions: Subscriptions,
        clients: ClientConnections,
        groups: GroupsOnFirstUse,
        permissions: Permissions,
    ) -> None:
        self.members = members
        self.subscriptions = subscriptions
        self.clients = clients
        self.groups = groups
        self.permissions = permissions

    async def heartbeat(self, caller: Caller, heartbeat: ClientHeartbeat) -> HeartbeatOutcome:
        """Steps 1-3; ``AccessDenied``, ``InvalidRequest`` (routing unavailable, too many
        creations), ``MembershipRefused``, ``SubscriptionRefused`` or ``ConnectionsFull``
        for a heartbeat refused (the ones before the refusal stay registered: a client
        repeats its heartbeat whole)."""
        self.permissions.require(caller, [group_need(group) for group in heartbeat.consumers])
        outcome = HeartbeatOutcome()
        client_id, identity = heartbeat.client_id, caller.identity
        if heartbeat.client is not None and heartbeat.producer_groups:
            self.clients.producers_heard(heartbeat.producer_groups, heartbeat.client)
            outcome.producing.extend(heartbeat.producer_groups)
        for group, membership in heartbeat.consumers.items():
            try:
                await self.groups.group(group)
            except TopicError as error:
                outcome.unknown.append(error)
                continue
            self.members.heartbeat(group, client_id, identity, heartbeat.lifetime_ms)
            if membership.subscriptions:
                self.subscriptions.register(group, membership.subscriptions)
            if heartbeat.client is not None:
                self.clients.consumer_heard(
                    group, heartbeat.client, membership.settings or ConsumerSettings()
                )
            outcome.joined.append(group)
        return outcome

    def leave(self, caller: Caller, group: str, client_id: str) -> None:
        """A consumer leaves ``group`` at once (it need not exist any more: it may have been
        deleted while the client ran; its name must be legal)."""
        self.permissions.require(caller, [group_need(group)])
        check_name("CONSUMER_GROUP", group)
        self.left(caller.identity, group, client_id)

    def left(self, identity: str, group: str, client_id: str) -> None:
        """``client_id`` of ``identity`` is no member of ``group`` any more (it left, or the
        connection it joined over closed); ``MembershipRefused`` when the id is another
        identity's."""
        self.members.leave(group, client_id, identity)
        self.clients.consumer_left(group, client_id)
        if not self.members.live(group):
            self.subscriptions.forget(group)

    def producer_left(self, group: str, client_id: str) -> None:
        self.clients.producer_left(group, client_id)

    def live_members(
        self, caller: Caller, group: str, existing: bool = False
    ) -> list[tuple[str, int]]:
        """(client id, last heartbeat ms) of the group's live members, sorted by id;
        ``existing``: ``TopicError`` CONSUMER_GROUP_NOT_FOUND for a group nobody created."""
        self.permissions.require(caller, [group_need(group)])
        if existing and self.groups.known(group) is None:
            self.groups.topics.group(group)  # raises CONSUMER_GROUP_NOT_FOUND
        return self.members.live(group)

    def subscription(self, group: str, topic: str) -> Subscription | None:
        """What ``group`` registered for ``topic`` (a 4.x pull that carries none reads with
        it; the pull itself was allowed on the group)."""
        return self.subscriptions.get(group, topic)

    def consumers(
        self, caller: Caller, group: str
    ) -> tuple[list[ClientConnection], ConsumerSettings | None, list[Subscription]]:
        """mqadmin's consumer connections: admins only."""
        self.permissions.require_admin(caller)
        clients, settings = self.clients.consumers(group)
        return clients, settings, self.subscriptions.of(group)

    def producers(self, caller: Caller, group: str) -> list[ClientConnection]:
        """mqadmin's producer connections: admins only."""
        self.permissions.require_admin(caller)
        return self.clients.producers(group)

    def online_producers(self, caller: Caller) -> list[tuple[str, list[ClientConnection]]]:
        """Every producer group with its live producers here (4.x clients say theirs in
        their heartbeats, to the masters they send to): admins only, as mqadmin's list."""
        self.permissions.require_admin(caller)
        found = []
        for group in self.clients.producer_groups():
            clients = self.clients.producers(group)
            if clients:
                found.append((group, clients))
        return found

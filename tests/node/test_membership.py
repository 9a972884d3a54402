"""Consumer-group membership through the RocketMQ 5 door's Heartbeat and
NotifyClientTermination over the membership service, in-process with an injected clock: a
client id belongs to the identity that registered it, groups must exist, and every table
is bounded."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from node import group_members
from node.authentication import parse_authorization, signature_headers
from node.client_registry import ClientConnections
from node.consumer_subscriptions import Subscriptions
from node.group_creation import GroupsOnFirstUse
from node.group_members import EXPIRY_MS, GroupMembers
from node.grpc.authentication import AUTHENTICATED_USER
from node.grpc.messaging import MessagingService
from node.services.membership import MembershipService
from node.services.permissions import Permissions
from node.topics import GroupConfig, TopicTable
from routing.acl import AclEntry, Action, Effect, ResourceKind, User

SUBSCRIBE_ANY_GROUP = (AclEntry(Effect.ALLOW, Action.SUBSCRIBE, ResourceKind.GROUP, "*"),)


class Context:
    """What the service reads of a call: its metadata and its peer."""

    def __init__(self, client_id: str = "", peer: str = "ipv4:10.0.0.1:40000", signed=()):
        self.metadata = (("x-mq-client-id", client_id),) if client_id else ()
        self.metadata += tuple(signed)
        self._peer = peer

    def invocation_metadata(self):
        return self.metadata

    def peer(self) -> str:
        return self._peer


class Clock:
    def __init__(self) -> None:
        self.ms = 1_800_000_000_000

    def __call__(self) -> int:
        return self.ms


class Membership:
    def __init__(self, authenticated: bool = False) -> None:
        self.clock = Clock()
        self.members = GroupMembers(self.clock)
        self.topics = TopicTable(groups=[GroupConfig("G"), GroupConfig("H")])
        subscriptions = Subscriptions()
        membership = MembershipService(
            self.members,
            subscriptions,
            ClientConnections(self.members, subscriptions),
            GroupsOnFirstUse(self.topics, None, enabled=False),
            Permissions(enabled=authenticated),
        )
        no_lite = SimpleNamespace(forget=lambda group, client_id: None)
        self.service = MessagingService(SimpleNamespace(membership=membership, lite=no_lite), 1024)
        self.authenticated = authenticated

    def call(self, method, request, context: Context):
        async def called():
            if self.authenticated:  # what the door's authentication keeps for the call
                header = dict(context.invocation_metadata())["authorization"]
                access_key = parse_authorization(header).access_key
                AUTHENTICATED_USER.set(User(access_key, b"", acl=SUBSCRIBE_ANY_GROUP))
            return await method(request, context)

        return asyncio.run(called())

    def heartbeat(self, group: str | None, context: Context) -> pb.Status:
        request = rpc.HeartbeatRequest(client_type=pb.PUSH_CONSUMER)
        if group is not None:
            request.group.name = group
        return self.call(self.service.Heartbeat, request, context).status

    def leave(self, group: str, context: Context) -> pb.Status:
        request = rpc.NotifyClientTerminationRequest(group=pb.Resource(name=group))
        return self.call(self.service.NotifyClientTermination, request, context).status

    def live(self, group: str) -> list[str]:
        return [client_id for client_id, _ in self.members.live(group)]


@pytest.fixture
def membership() -> Membership:
    return Membership()


def test_another_address_can_neither_evict_nor_take_over_a_member(membership):
    owner = Context("consumer-1", peer="ipv4:10.0.0.1:40000")
    reconnected = Context("consumer-1", peer="ipv4:10.0.0.1:40555")  # same host, new port
    intruder = Context("consumer-1", peer="ipv4:10.0.0.66:40000")
    assert membership.heartbeat("G", owner).code == pb.OK
    evicted = membership.leave("G", intruder)
    assert evicted.code == pb.FORBIDDEN and "another identity" in evicted.message
    assert membership.heartbeat("G", intruder).code == pb.FORBIDDEN
    assert membership.heartbeat("H", intruder).code == pb.FORBIDDEN  # any group
    assert membership.live("G") == ["consumer-1"] and membership.live("H") == []
    assert membership.heartbeat("G", reconnected).code == pb.OK
    assert membership.leave("G", reconnected).code == pb.OK
    assert membership.live("G") == []


def test_a_client_id_is_free_again_once_its_memberships_expired(membership):
    first = Context("consumer-1", peer="ipv4:10.0.0.1:1")
    assert membership.heartbeat("G", first).code == pb.OK
    later = Context("consumer-1", peer="ipv4:10.0.0.2:1")
    assert membership.heartbeat("G", later).code == pb.FORBIDDEN
    membership.clock.ms += EXPIRY_MS + 1
    assert membership.heartbeat("G", later).code == pb.OK
    assert membership.members.client_count == 1


def test_with_authentication_the_access_key_owns_the_client_id():
    membership = Membership(authenticated=True)
    app = Context("consumer-1", signed=signature_headers("app", "app-secret"))
    other = Context("consumer-1", peer="ipv4:10.0.0.1:40000", signed=signature_headers("x", "s"))
    elsewhere = Context("consumer-1", peer="ipv4:10.9.9.9:1", signed=signature_headers("app", "s"))
    assert membership.heartbeat("G", app).code == pb.OK
    assert membership.leave("G", other).code == pb.FORBIDDEN  # same address, other key
    assert membership.heartbeat("G", elsewhere).code == pb.OK  # same key, other address
    assert membership.live("G") == ["consumer-1"]


def test_heartbeats_need_an_existing_group_and_a_client_id(membership):
    unknown = membership.heartbeat("ghost", Context("consumer-1"))
    assert unknown.code == pb.CONSUMER_GROUP_NOT_FOUND
    assert membership.heartbeat("bad.name", Context("consumer-1")).code == pb.ILLEGAL_CONSUMER_GROUP
    assert membership.heartbeat("G", Context("")).code == pb.CLIENT_ID_REQUIRED
    assert membership.heartbeat("G", Context("c" * 257)).code == pb.BAD_REQUEST
    assert membership.heartbeat(None, Context("producer-1")).code == pb.OK  # a producer's
    assert membership.members.client_count == 0
    assert membership.leave("ghost", Context("consumer-1")).code == pb.OK  # nothing to end


def test_members_per_group_groups_and_client_ids_are_bounded(membership, monkeypatch):
    monkeypatch.setattr(group_members, "MAX_MEMBERS_PER_GROUP", 3)
    for i in range(3):
        assert membership.heartbeat("G", Context(f"c{i}")).code == pb.OK
    full = membership.heartbeat("G", Context("c3"))
    assert full.code == pb.TOO_MANY_REQUESTS and "3 live members, the limit" in full.message
    assert membership.heartbeat("G", Context("c0")).code == pb.OK  # a member goes on
    membership.clock.ms += EXPIRY_MS + 1
    assert membership.heartbeat("G", Context("c3")).code == pb.OK  # room once expired
    assert membership.live("G") == ["c3"]

    monkeypatch.setattr(group_members, "MAX_GROUPS", 1)
    refused = membership.heartbeat("H", Context("c9"))
    assert refused.code == pb.TOO_MANY_REQUESTS and "1 groups" in refused.message
    monkeypatch.setattr(group_members, "MAX_GROUPS", 10)
    monkeypatch.setattr(group_members, "MAX_CLIENTS", 2)
    assert membership.heartbeat("H", Context("c4")).code == pb.OK
    refused = membership.heartbeat("H", Context("c5"))
    assert refused.code == pb.TOO_MANY_REQUESTS and "2 client ids" in refused.message
    assert membership.members.client_count == 2

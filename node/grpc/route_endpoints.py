"""The endpoints a route gives each queue: every node of its broker group, master first.

Official RocketMQ 5 clients send every call but QueryRoute to ``MessageQueue.broker.
endpoints`` and refresh routes only every 30 s. With the master's address alone, a client
keeps calling a dead or demoted master until then; with every node of the group it keeps
one gRPC channel over all of them (target ``ipv4:h1:p1,h2:p2,...``, gRPC's pick_first),
which moves to the next address when the node it is connected to goes away, and any node
takes the call (``node/grpc/forwarding.py``). So the route stays valid through a failover.

The order: the master first (a client that keeps the order, like the Java client,
connects to it, and a healthy group costs no extra hop), then the live members, then the
rest, by node id. The set of addresses does not change with the master, so clients that
compare endpoints as a set (the Python client sorts them) keep their channel and session
across failovers. A group without a master still has its queues routed: its nodes hold the
calls until one is elected.

The clients accept several addresses only for literal IP addresses (scheme IPv4 or IPv6);
a group whose nodes register host names gets its master's address alone (DOMAIN_NAME),
as before, so a failover there waits for the client's next route refresh.

One official client takes one address only: ``rocketmq-client-nodejs`` 1.0.x joins a
route's addresses into a gRPC target without a scheme, which its gRPC library resolves as
one DNS name, and fails. It names itself ``HTTP`` in ``x-mq-language``
(``takes_one_address``), and gets the node it asked for every group that node belongs to
(``one_address``): that node forwards what belongs to its master, so a failover costs this
client what it costs the others, while the node it was configured with is up. For a group
the node is not a member of, it gets that group's master.
"""

from __future__ import annotations

import ipaddress

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from routing.metadata import Member
from routing.state import RoutingState


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _scheme(host: str) -> int:
    try:
        parsed = ipaddress.ip_address(host)
    except ValueError:
        return pb.DOMAIN_NAME
    return pb.IPv4 if parsed.version == 4 else pb.IPv6


# What clients that take one address per route say in ``x-mq-language``.
ONE_ADDRESS_LANGUAGES = frozenset({"HTTP"})  # rocketmq-client-nodejs 1.0.x


def takes_one_address(language: str) -> bool:
    return language in ONE_ADDRESS_LANGUAGES


def _single(address: str) -> pb.Endpoints:
    host, port = _split(address)
    return pb.Endpoints(scheme=_scheme(host), addresses=[pb.Address(host=host, port=port)])


def one_address(state: RoutingState, broker_group: str, asked: str) -> pb.Endpoints | None:
    """The one address of ``broker_group`` for a client that takes one: node ``asked``
    (the node answering) when it is a member, else the group's master, else its first
    member (None when it has none)."""
    member = state.members.get(asked)
    if member is not None and member.broker_group == broker_group:
        return _single(member.grpc_address)
    endpoints = group_endpoints(state, broker_group)
    if endpoints is None:
        return None
    return pb.Endpoints(scheme=endpoints.scheme, addresses=endpoints.addresses[:1])


def group_endpoints(state: RoutingState, broker_group: str) -> pb.Endpoints | None:
    """The endpoints of ``broker_group`` (None when it has no member)."""
    group = state.broker_groups.get(broker_group)
    if group is None:
        return None
    members = [m for m in state.members.values() if m.broker_group == broker_group]
    if not members:
        return None

    def rank(member: Member) -> tuple[int, str]:
        if member.node_id == group.master:
            return (0, member.node_id)
        return (1 if member.alive else 2, member.node_id)

    members.sort(key=rank)
    addresses = [_split(m.grpc_address) for m in members]
    schemes = {_scheme(host) for host, _ in addresses}
    if len(schemes) != 1 or schemes == {pb.DOMAIN_NAME}:
        return _single(members[0].grpc_address)
    return pb.Endpoints(
        scheme=schemes.pop(),
        addresses=[pb.Address(host=host, port=port) for host, port in addresses],
    )

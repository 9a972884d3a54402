"""Forwarding in-process (``node/forwarding.py``, ``node/forward_proof.py``): two or three
real grpc.aio servers with a routing state the test sets, each serving a recording
MessagingService behind the node's wrapper. A slave relays a call to its group's master
and the answer back, the master takes the client's peer from the proof, a forwarded call
is never forwarded again, forged, stale and keyless proofs are refused, a call waits for
an election and moves to the new master, and ACLs are the master's."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from ferrymq.codec.headers import RESEND_HEADER, RESEND_VALUE
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2_grpc
from node.authentication import Authenticator, Verification, signature_headers
from node.config import SecurityOptions
from node.forward_proof import (
    DEADLINE_MARGIN_S,
    PEER_HEADER,
    PROOF_HEADER,
    WINDOW_S,
    ForwardProofs,
    ProofRefused,
)
from node.grpc import forwarding
from node.grpc.authentication import CallAuthentication, caller_of
from node.grpc.forwarding import Forwarder
from node.grpc.method_wrapping import add_wrapped
from node.grpc.request_decoding import tolerate_malformed
from node.rpc_status import AccessDenied
from node.secret_box import SecretBox
from node.services.caller import Door
from node.services.permissions import Permissions, publish
from node.tls import ClientTls, peer_channel_credentials, server_credentials
from routing.acl import AclEntry, Action, Effect, ResourceKind, User
from routing.metadata import BrokerGroup, Member
from routing.state import RoutingState
from tests.support.tls_certs import make_pki

SECRET = "the-cluster-secret"
METHOD = "/apache.rocketmq.v2.MessagingService/SendMessage"


# ---- the proof -------------------------------------------------------------------------
def as_metadata(headers) -> dict[str, str]:
    return dict(headers)


def test_a_proof_verifies_only_for_its_method_peer_and_cluster_and_not_once_stale():
    now = [1_800_000_000.0]
    a = ForwardProofs(SECRET, "node-a", clock=lambda: now[0])
    b = ForwardProofs(SECRET, "node-b", clock=lambda: now[0])
    headers = as_metadata(a.headers(METHOD, "ipv4:10.0.0.5:41000"))
    assert b.verify(METHOD, headers).peer == "ipv4:10.0.0.5:41000"
    assert b.verify(METHOD, headers).node_id == "node-a"
    assert b.verify(METHOD, {"authorization": "x"}) is None  # a client's own call

    def refused(metadata, method=METHOD, verifier=b) -> str:
        with pytest.raises(ProofRefused) as error:
            verifier.verify(method, metadata)
        return error.value.reason

    other_method = "/apache.rocketmq.v2.MessagingService/AckMessage"
    assert refused(headers, method=other_method) == "FORGED"
    assert refused({**headers, PEER_HEADER: "ipv4:10.0.0.6:41000"}) == "FORGED"
    other_cluster = ForwardProofs("another-secret", "node-c", clock=lambda: now[0])
    assert refused(as_metadata(other_cluster.headers(METHOD, "ipv4:1.2.3.4:5"))) == "FORGED"
    assert refused({**headers, PROOF_HEADER: "v1 node-a soon abc"}) == "MALFORMED"
    assert refused({PROOF_HEADER: headers[PROOF_HEADER]}) == "MALFORMED"  # no peer
    assert refused(headers, verifier=ForwardProofs("", "node-x")) == "NO_SECRET"
    assert not ForwardProofs("", "node-x").can_forward
    now[0] += WINDOW_S + 1
    assert refused(headers) == "STALE"


def test_a_forwarded_call_is_overdue_once_its_budget_less_the_margin_has_passed():
    now = [1_800_000_000.0]
    a = ForwardProofs(SECRET, "node-a", clock=lambda: now[0])
    b = ForwardProofs(SECRET, "node-b", clock=lambda: now[0])
    forwarded = b.verify(METHOD, as_metadata(a.headers(METHOD, "ipv4:10.0.0.5:41000")))
    assert forwarded.made_at_s == pytest.approx(now[0], abs=0.001)
    now[0] += 3.0 - DEADLINE_MARGIN_S - 0.01
    assert b.overdue(forwarded, budget_s=3.0) is None
    now[0] += 0.02
    assert b.overdue(forwarded, budget_s=3.0) == pytest.approx(0.01, abs=0.002)
    assert b.overdue(forwarded, budget_s=10.0) is None


def test_refused_proofs_are_logged_once_per_reason_and_window(caplog):
    proofs = ForwardProofs(SECRET, "node-b")
    forged = {PROOF_HEADER: "v1 node-a 1 00", PEER_HEADER: "ipv4:1.2.3.4:5"}
    with caplog.at_level(logging.WARNING, logger="ferrymq.forwarding"):
        for _ in range(5):
            with pytest.raises(ProofRefused):
                proofs.verify(METHOD, forged)
    lines = [r for r in caplog.records if "forward proof refused" in r.getMessage()]
    assert len(lines) == 1 and "FORGED" in lines[0].getMessage()


# ---- servers ---------------------------------------------------------------------------
@dataclass
class Seen:
    """What a node's service saw: (method, peer, metadata) per call it served."""

    calls: list[tuple[str, str, dict]] = field(default_factory=list)
    refuse_sends: int = 0  # answer this many sends HA_NOT_AVAILABLE (a new master)
    refuse_receives: int = 0  # and this many receives
    cancelled: int = 0  # long polls cancelled


class Recording(service_pb2_grpc.MessagingServiceServicer):
    """Records each call; with ``permissions``, a send is decided as the send service
    decides it (PUBLISH on its topic, for the caller the door authenticated)."""

    def __init__(self, name: str, seen: Seen, permissions: Permissions | None = None) -> None:
        self.name = name
        self.seen = seen
        self.permissions = permissions or Permissions(enabled=False)

    def _record(self, method: str, context) -> None:
        metadata = {k: v for k, v in context.invocation_metadata()}
        self.seen.calls.append((method, context.peer(), metadata))

    async def SendMessage(self, request, context):
        self._record("SendMessage", context)
        try:
            caller = caller_of(context, Door.MESSAGING, "SendMessage")
            self.permissions.require(caller, publish(request.messages[0].topic.name))
        except AccessDenied as denied:
            return rpc.SendMessageResponse(status=pb.Status(code=denied.code, message=str(denied)))
        if self.seen.refuse_sends:
            self.seen.refuse_sends -= 1
            return rpc.SendMessageResponse(
                status=pb.Status(code=pb.HA_NOT_AVAILABLE, message="lease not renewed yet")
            )
        return rpc.SendMessageResponse(
            status=pb.Status(code=pb.OK, message=self.name),
            entries=[rpc.SendResultEntry(status=pb.Status(code=pb.OK), message_id="m-1")],
        )

    async def ReceiveMessage(self, request, context):
        self._record("ReceiveMessage", context)
        if self.seen.refuse_receives:
            self.seen.refuse_receives -= 1
            yield rpc.ReceiveMessageResponse(
                status=pb.Status(code=pb.HA_NOT_AVAILABLE, message="lease not renewed yet")
            )
            return
        if request.group.name == "long-poll":
            try:
                await asyncio.sleep(60)  # a long poll nothing wakes
            except asyncio.CancelledError:
                self.seen.cancelled += 1
                raise
        yield rpc.ReceiveMessageResponse(status=pb.Status(code=pb.OK, message=self.name))
        for i in range(3):
            yield rpc.ReceiveMessageResponse(message=pb.Message(body=b"%d" % i))

    async def QueryRoute(self, request, context):
        self._record("QueryRoute", context)
        return rpc.QueryRouteResponse(status=pb.Status(code=pb.OK, message=self.name))


class Cluster:
    """Nodes n1..nN of broker group g1 (or the groups ``group_of`` says) on loopback,
    their routing state shared (set by the test), each serving a ``Recording`` service
    behind its ``Forwarder``."""

    def __init__(
        self,
        names,
        secret=SECRET,
        access: dict[str, CallAuthentication] | None = None,
        group_of: dict[str, str] | None = None,
        security: SecurityOptions | None = None,
        master: str | None = None,
        wait_cap_s: float = 3.0,
    ):
        self.names = names
        self.first_master = master  # elected in epoch 1 as the cluster starts
        self.wait_cap_s = wait_cap_s
        self.security = security  # TLS on every node's port (mutual with tls_client_ca)
        self.group_of = group_of or dict.fromkeys(names, "g1")
        self.extra_groups: dict[str, BrokerGroup] = {}  # other groups' records, as set
        self.secret = secret
        self.access = access or {}
        self.state = RoutingState()
        self.seen = {name: Seen() for name in names}
        self.servers: dict[str, grpc.aio.Server] = {}
        self.ports: dict[str, int] = {}
        self.forwarders: dict[str, Forwarder] = {}
        self.masters: set[str] = set()  # nodes whose role says master
        self.clock_offset_s: dict[str, float] = {}  # how far a node's wall clock is ahead

    async def start(self, wait_cap_s: float = 3.0) -> None:
        for name in self.names:
            server = grpc.aio.server()
            forwarder = Forwarder(
                node_id=name,
                broker_group=self.group_of[name],
                proofs=ForwardProofs(
                    self.secret,
                    name,
                    clock=lambda name=name: time.time() + self.clock_offset_s.get(name, 0.0),
                ),
                state=lambda: self.state,
                is_master=lambda name=name: name in self.masters,
                channel_for=self._channel_for,
                wait_cap_s=wait_cap_s,
            )
            wrappers = [tolerate_malformed, forwarder.wrap]
            if name in self.access:
                wrappers.append(self.access[name].wrap)
            add_wrapped(
                server,
                service_pb2_grpc.add_MessagingServiceServicer_to_server,
                Recording(name, self.seen[name], Permissions(enabled=name in self.access)),
                wrappers,
            )
            if self.security is None:
                self.ports[name] = server.add_insecure_port("127.0.0.1:0")
            else:
                tls = ClientTls(
                    "required",
                    self.security.tls_cert,
                    self.security.tls_key,
                    self.security.tls_client_ca,
                )
                credentials = server_credentials(tls)
                self.ports[name] = server.add_secure_port("127.0.0.1:0", credentials)
            await server.start()
            self.servers[name], self.forwarders[name] = server, forwarder
        members = {
            name: Member(name, self.group_of[name], f"127.0.0.1:{self.ports[name]}", "", "")
            for name in self.names
        }
        self.set_routing(members, master=None, epoch=0)

    async def __aenter__(self) -> Cluster:
        await self.start(self.wait_cap_s)
        if self.first_master is not None:
            self.elect(self.first_master, epoch=1)
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.stop()

    def _channel_for(self, address: str) -> grpc.aio.Channel:
        if self.security is None:
            return grpc.aio.insecure_channel(address)
        return grpc.aio.secure_channel(address, peer_channel_credentials(self.security))

    def set_routing(self, members=None, *, master: str | None, epoch: int) -> None:
        state = RoutingState()
        state.members = members if members is not None else dict(self.state.members)
        in_sync = frozenset({master}) if master else frozenset()
        groups = {g: BrokerGroup(g) for g in self.group_of.values()}
        state.broker_groups = {**groups, **self.extra_groups}
        state.broker_groups["g1"] = BrokerGroup("g1", master, epoch, in_sync)
        self.state = state
        for forwarder in self.forwarders.values():
            forwarder.routing_changed()

    def elect(self, name: str, epoch: int) -> None:
        self.masters = {name}
        self.set_routing(master=name, epoch=epoch)

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}"

    async def stop(self, name: str | None = None) -> None:
        for each in [name] if name else list(self.servers):
            await self.servers.pop(each).stop(None)
            await self.forwarders[each].close()


def run(scenario):
    asyncio.run(asyncio.wait_for(scenario(), 60))


def send_request() -> rpc.SendMessageRequest:
    return rpc.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name="t"), body=b"x")])


def receive_request(broker: str = "g1") -> rpc.ReceiveMessageRequest:
    return rpc.ReceiveMessageRequest(
        group=pb.Resource(name="G"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="t"), broker=pb.Broker(name=broker)),
    )


CLIENT_METADATA = (("x-mq-client-id", "client-1"), ("authorization", "MQv2-HMAC-SHA1 x"))


def test_a_slave_relays_unary_and_streaming_calls_to_the_master_with_the_clients_peer():
    async def scenario():
        async with Cluster(["n1", "n2", "n3"], master="n1") as cluster:
            async with grpc.aio.insecure_channel(cluster.address("n2")) as channel:
                stub = service_pb2_grpc.MessagingServiceStub(channel)
                answer = await stub.SendMessage(
                    send_request(), metadata=CLIENT_METADATA, timeout=10
                )
                assert answer.status.message == "n1" and answer.entries[0].message_id == "m-1"
                stream = [
                    r
                    async for r in stub.ReceiveMessage(
                        receive_request(), metadata=CLIENT_METADATA, timeout=10
                    )
                ]
                assert stream[0].status.message == "n1"
                assert [r.message.body for r in stream[1:]] == [b"0", b"1", b"2"]
                # A routing read is served where it arrives.
                route = await stub.QueryRoute(rpc.QueryRouteRequest(), timeout=10)
                assert route.status.message == "n2"
            assert not [c for c in cluster.seen["n2"].calls if c[0] != "QueryRoute"]
            served = cluster.seen["n1"].calls
            assert [c[0] for c in served] == ["SendMessage", "ReceiveMessage"]
            for _, peer, metadata in served:
                # The client's own metadata and address, not the forwarding node's.
                assert metadata["x-mq-client-id"] == "client-1"
                assert metadata["authorization"] == "MQv2-HMAC-SHA1 x"
                assert peer.startswith("ipv4:127.0.0.1:") and peer == metadata[PEER_HEADER]
            assert cluster.forwarders["n2"].forwarded == 2

    run(scenario)


def test_the_master_serves_directly_and_a_forwarded_for_header_without_proof_is_ignored():
    async def scenario():
        async with Cluster(["n1", "n2"], master="n1") as cluster:
            async with grpc.aio.insecure_channel(cluster.address("n1")) as channel:
                stub = service_pb2_grpc.MessagingServiceStub(channel)
                metadata = (*CLIENT_METADATA, (PEER_HEADER, "ipv4:6.6.6.6:66"))
                answer = await stub.SendMessage(send_request(), metadata=metadata, timeout=10)
            assert answer.status.message == "n1"
            (_, peer, _) = cluster.seen["n1"].calls[0]
            assert peer.startswith("ipv4:127.0.0.1:")  # the connection's, not the header's
            assert cluster.forwarders["n1"].forwarded == 0

    run(scenario)


def test_a_forwarded_call_is_never_forwarded_again_and_bad_proofs_are_refused():
    async def scenario():
        async with Cluster(["n1", "n2"], master="n1") as cluster:
            sender = ForwardProofs(SECRET, "n3")
            async with grpc.aio.insecure_channel(cluster.address("n2")) as channel:
                stub = service_pb2_grpc.MessagingServiceStub(channel)
                # A proof-carrying call to a node that is not the master: refused, not
                # passed on (n2 would otherwise hand it to n1).
                proof = sender.headers(METHOD, "ipv4:10.0.0.5:1")
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.SendMessage(send_request(), metadata=proof, timeout=10)
                assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
                assert "not the master" in refused.value.details()
                # A proof made with another secret, or for another method: refused.
                forged = ForwardProofs("not-the-secret", "n3").headers(METHOD, "ipv4:1.2.3.4:5")
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.SendMessage(send_request(), metadata=forged, timeout=10)
                assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
                assert "FORGED" in refused.value.details()
            assert not cluster.seen["n1"].calls and not cluster.seen["n2"].calls
            assert cluster.forwarders["n2"].forwarded == 0

    run(scenario)


def test_a_node_without_a_cluster_secret_forwards_nothing_and_takes_no_proof():
    async def scenario():
        async with (
            Cluster(["n1", "n2"], secret="", master="n1") as cluster,
            grpc.aio.insecure_channel(cluster.address("n2")) as channel,
        ):
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            answer = await stub.SendMessage(send_request(), timeout=10)
            assert answer.status.message == "n2"  # served where it arrived, as before
            proof = ForwardProofs(SECRET, "n3").headers(METHOD, "ipv4:1.2.3.4:5")
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.SendMessage(send_request(), metadata=proof, timeout=10)
            assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
            assert "NO_SECRET" in refused.value.details()

    run(scenario)


def test_a_call_waits_for_an_election_then_follows_the_new_master_when_the_old_one_dies():
    async def scenario():
        async with (
            Cluster(["n1", "n2", "n3"], wait_cap_s=8.0) as cluster,
            grpc.aio.insecure_channel(cluster.address("n2")) as channel,
        ):
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            # No master yet: the call waits, and is served once one is elected.
            pending = asyncio.ensure_future(
                stub.SendMessage(send_request(), metadata=CLIENT_METADATA, timeout=10)
            )
            await asyncio.sleep(0)  # nothing to wait for: the call is in flight
            deadline = time.monotonic() + 5
            while not cluster.forwarders["n2"].waiting and time.monotonic() < deadline:
                await asyncio.sleep(0.01)  # until it waits for routing
            assert not pending.done()
            cluster.elect("n1", epoch=1)
            assert (await pending).status.message == "n1"
            # The master dies; routing still names it. The call keeps trying until
            # routing names the next one, and is served there.
            await cluster.stop("n1")
            pending = asyncio.ensure_future(
                stub.SendMessage(send_request(), metadata=CLIENT_METADATA, timeout=10)
            )
            deadline = time.monotonic() + 5
            while cluster.forwarders["n2"].forwarded < 3 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)  # until it failed on n1 at least once
            assert not pending.done()
            cluster.elect("n3", epoch=2)
            assert (await pending).status.message == "n3"
            # n1 may have stored it before it died: n3 is asked as for a resend, which
            # it answers from its log if it holds it (tests/node/test_resend.py).
            (_, _, tried), (_, _, resent) = (
                cluster.seen["n1"].calls[-1],
                cluster.seen["n3"].calls[-1],
            )
            assert RESEND_HEADER not in tried and resent[RESEND_HEADER] == RESEND_VALUE
            # This node is elected itself: it serves, no hop.
            cluster.elect("n2", epoch=3)
            answer = await stub.SendMessage(send_request(), timeout=10)
            assert answer.status.message == "n2"

    run(scenario)


def test_a_node_that_takes_the_dead_masters_place_serves_the_call_as_a_resend():
    """The call went from n2 to n1, which died mid-call; n2 is elected: it serves the call
    itself, marked a resend (n1 may have stored it, and n2 holds what n1 replicated), as a
    try at another node would be. A call it serves as master from the start is not."""

    async def scenario():
        async with (
            Cluster(["n1", "n2", "n3"], master="n1", wait_cap_s=8.0) as cluster,
            grpc.aio.insecure_channel(cluster.address("n2")) as channel,
        ):
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            await cluster.stop("n1")
            pending = asyncio.ensure_future(
                stub.SendMessage(send_request(), metadata=CLIENT_METADATA, timeout=10)
            )
            deadline = time.monotonic() + 5
            while cluster.forwarders["n2"].forwarded < 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)  # until its try at n1 failed
            cluster.elect("n2", epoch=2)
            assert (await pending).status.message == "n2"
            ((_, _, served),) = cluster.seen["n2"].calls
            assert served[RESEND_HEADER] == RESEND_VALUE
            assert (await stub.SendMessage(send_request(), timeout=10)).status.message == "n2"
            assert RESEND_HEADER not in cluster.seen["n2"].calls[-1][2]

    run(scenario)


def test_no_master_within_the_wait_is_answered_in_the_status_before_the_deadline():
    async def scenario():
        async with (
            Cluster(["n1", "n2"], wait_cap_s=0.5) as cluster,
            grpc.aio.insecure_channel(cluster.address("n2")) as channel,
        ):
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            started = time.monotonic()
            answer = await stub.SendMessage(send_request(), timeout=10)
            assert answer.status.code == pb.HA_NOT_AVAILABLE
            assert "broker group g1 has no master" in answer.status.message
            assert time.monotonic() - started < 5
            change = await stub.ChangeInvisibleDuration(
                rpc.ChangeInvisibleDurationRequest(receipt_handle="h2.handle"), timeout=10
            )
            assert change.status.code == pb.HA_NOT_AVAILABLE
            assert change.receipt_handle == "h2.handle"  # the client reads it first
            stream = [r async for r in stub.ReceiveMessage(receive_request(), timeout=10)]
            assert [r.status.code for r in stream] == [pb.HA_NOT_AVAILABLE]
            # A deadline shorter than the cap: answered before it.
            cluster.forwarders["n2"].wait_cap_s = 30
            answer = await stub.SendMessage(send_request(), timeout=1.5)
            assert answer.status.code == pb.HA_NOT_AVAILABLE

    run(scenario)


def test_a_forwarded_call_that_reaches_the_master_after_its_deadline_is_refused_unserved():
    """A try held up on a cut path reaches the master when the path heals, with gRPC's
    deadline counted from its arrival: the master counts it from the proof instead, and
    serves nothing its client has given up on (before, it stored the send behind the
    client's later ones)."""

    async def scenario():
        async with Cluster(["n1", "n2"], master="n1") as cluster:
            held_up = ForwardProofs(SECRET, "n2", clock=lambda: time.time() - 2.0)
            async with grpc.aio.insecure_channel(cluster.address("n1")) as channel:
                stub = service_pb2_grpc.MessagingServiceStub(channel)
                late = held_up.headers(METHOD, "ipv4:10.0.0.5:1")
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.SendMessage(send_request(), metadata=late, timeout=1.5)
                assert refused.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
                assert "past its client's deadline" in refused.value.details()
                assert not cluster.seen["n1"].calls
                # The same delay within a longer deadline is served.
                answer = await stub.SendMessage(send_request(), metadata=late, timeout=10)
                assert answer.status.code == pb.OK
                assert len(cluster.seen["n1"].calls) == 1

    run(scenario)


def test_a_call_forwarded_after_an_election_wait_carries_a_proof_made_then():
    """The proof of each try is made as it leaves: a try after a long wait for the
    election is not taken for one held up on the way since the call came. (The nodes'
    clocks jump ahead while the call waits: the wait, simulated.)"""

    async def scenario():
        async with (
            Cluster(["n1", "n2"], wait_cap_s=5.0) as cluster,
            grpc.aio.insecure_channel(cluster.address("n2")) as channel,
        ):
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            pending = asyncio.ensure_future(stub.SendMessage(send_request(), timeout=2.5))
            await asyncio.sleep(0)  # nothing to wait for: the call is in flight
            deadline = time.monotonic() + 5
            while not cluster.forwarders["n2"].waiting and time.monotonic() < deadline:
                await asyncio.sleep(0.01)  # until it waits for routing
            cluster.clock_offset_s.update(n1=2.4, n2=2.4)
            cluster.elect("n1", epoch=1)
            answer = await pending
            assert answer.status.code == pb.OK, answer.status.message
            assert len(cluster.seen["n1"].calls) == 1

    run(scenario)


def test_acls_are_decided_by_the_master_for_a_forwarded_call():
    box = SecretBox(SECRET)
    users = {
        "reader": User(
            "reader",
            box.seal("reader", "reader-secret"),
            acl=(AclEntry(Effect.ALLOW, Action.SUBSCRIBE, ResourceKind.TOPIC, "*"),),
        ),
        "writer": User(
            "writer",
            box.seal("writer", "writer-secret"),
            acl=(AclEntry(Effect.ALLOW, Action.PUBLISH, ResourceKind.TOPIC, "t"),),
        ),
    }
    access = CallAuthentication(Verification(Authenticator(users.get, box, 300)))

    async def scenario():
        # Only the master checks access here: what the client hears is its decision.
        async with Cluster(["n1", "n2"], access={"n1": access}, master="n1") as cluster:
            async with grpc.aio.insecure_channel(cluster.address("n2")) as channel:
                stub = service_pb2_grpc.MessagingServiceStub(channel)
                refused = await stub.SendMessage(
                    send_request(), metadata=signature_headers("reader", "reader-secret")
                )
                assert refused.status.code == pb.FORBIDDEN
                assert "no publish permission on topic t" in refused.status.message
                bad = await stub.SendMessage(
                    send_request(), metadata=signature_headers("writer", "wrong-secret")
                )
                assert bad.status.code == pb.UNAUTHORIZED
                allowed = await stub.SendMessage(
                    send_request(), metadata=signature_headers("writer", "writer-secret")
                )
                assert allowed.status.code == pb.OK and allowed.status.message == "n1"
            # Bad credentials stop at the master's door; the reader's send reaches it and is
            # refused by the (stand-in) service's decision there.
            assert len(cluster.seen["n1"].calls) == 2 and not cluster.seen["n2"].calls
            assert cluster.forwarders["n2"].forwarded == 3

    run(scenario)


def test_a_master_refusing_for_now_is_asked_again_and_a_lasting_refusal_is_relayed():
    async def scenario():
        async with (
            Cluster(["n1", "n2"], master="n1") as cluster,
            grpc.aio.insecure_channel(cluster.address("n2")) as channel,
        ):
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            cluster.seen["n1"].refuse_sends = 2  # a new master renewing its lease
            answer = await stub.SendMessage(send_request(), timeout=10)
            assert answer.status.code == pb.OK and len(cluster.seen["n1"].calls) == 3
            # A refusal wrote nothing: asked again, it is not a resend.
            assert all(RESEND_HEADER not in seen for _, _, seen in cluster.seen["n1"].calls)
            cluster.seen["n1"].refuse_sends = 1_000  # refusing for good
            started = time.monotonic()
            answer = await stub.SendMessage(send_request(), timeout=10)
            assert answer.status.code == pb.HA_NOT_AVAILABLE
            assert answer.status.message == "lease not renewed yet"  # the master's own
            assert time.monotonic() - started < 5

    run(scenario)


def test_a_new_master_that_refuses_after_a_long_election_is_still_asked_again(monkeypatch):
    """The refusal window runs from the first refusal: a call that waited out an election
    longer than the window still lets the new master renew its lease (a CI failure: an ack
    through a slave got the new master's "could not renew its lease" right after a kill)."""
    monkeypatch.setattr(forwarding, "REFUSAL_RETRY_S", 0.6)

    async def scenario():
        async with (
            Cluster(["n1", "n2"]) as cluster,  # no master yet: an election under way
            grpc.aio.insecure_channel(cluster.address("n2")) as channel,
        ):
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            loop = asyncio.get_running_loop()
            seen = cluster.seen["n1"]
            seen.refuse_sends = seen.refuse_receives = 2  # the new master renewing its lease
            started = time.monotonic()
            loop.call_later(1.0, cluster.elect, "n1", 1)  # longer than the window
            answer = await stub.SendMessage(send_request(), timeout=10)
            assert answer.status.code == pb.OK, answer.status
            assert [c[0] for c in seen.calls] == ["SendMessage"] * 3
            assert time.monotonic() - started >= 1.0
            cluster.masters, seen.calls = set(), []  # the master dies: another election
            cluster.set_routing(master=None, epoch=1)
            started = time.monotonic()
            loop.call_later(1.0, cluster.elect, "n1", 2)
            stream = [r async for r in stub.ReceiveMessage(receive_request(), timeout=10)]
            assert stream[0].status.code == pb.OK, stream[0].status
            assert [c[0] for c in seen.calls] == ["ReceiveMessage"] * 3
            assert time.monotonic() - started >= 1.0

    run(scenario)


def test_with_two_broker_groups_a_queue_names_its_group_and_a_send_stays_in_its_own():
    async def scenario():
        async with Cluster(
            ["a1", "a2", "b1"], group_of={"a1": "g1", "a2": "g1", "b1": "g2"}
        ) as cluster:
            cluster.extra_groups["g2"] = BrokerGroup("g2", "b1", 1, frozenset({"b1"}))
            cluster.masters = {"a1", "b1"}
            cluster.set_routing(master="a1", epoch=1)
            async with grpc.aio.insecure_channel(cluster.address("a2")) as channel:
                stub = service_pb2_grpc.MessagingServiceStub(channel)
                stream = [r async for r in stub.ReceiveMessage(receive_request("g2"), timeout=10)]
                assert stream[0].status.message == "b1"  # the queue's group's master
                stream = [r async for r in stub.ReceiveMessage(receive_request("g1"), timeout=10)]
                assert stream[0].status.message == "a1"
                answer = await stub.SendMessage(send_request(), timeout=10)
                assert answer.status.message == "a1"  # this node's own group
            async with grpc.aio.insecure_channel(cluster.address("b1")) as channel:
                stub = service_pb2_grpc.MessagingServiceStub(channel)
                # A master of one group forwards what names another.
                stream = [r async for r in stub.ReceiveMessage(receive_request("g1"), timeout=10)]
                assert stream[0].status.message == "a1"
                # A broker name routing does not know: this node's group.
                stream = [
                    r async for r in stub.ReceiveMessage(receive_request("nowhere"), timeout=10)
                ]
                assert stream[0].status.message == "b1"

    run(scenario)


def test_with_mutual_tls_the_forward_link_is_tls_too(tmp_path):
    pki = make_pki(tmp_path / "pki")
    security = SecurityOptions(
        tls_cert=pki.server_cert, tls_key=pki.server_key, tls_client_ca=pki.ca, tls_ca=pki.ca
    )

    async def scenario():
        async with Cluster(["n1", "n2"], security=security, master="n1") as cluster:
            client = grpc.ssl_channel_credentials(
                root_certificates=Path(pki.ca).read_bytes(),
                private_key=Path(pki.client_key).read_bytes(),
                certificate_chain=Path(pki.client_cert).read_bytes(),
            )
            async with grpc.aio.secure_channel(cluster.address("n2"), client) as channel:
                stub = service_pb2_grpc.MessagingServiceStub(channel)
                answer = await stub.SendMessage(send_request(), timeout=10)
                assert answer.status.message == "n1"
            assert cluster.forwarders["n2"].forwarded == 1

    run(scenario)


def test_a_client_that_cancels_a_forwarded_long_poll_cancels_it_at_the_master():
    async def scenario():
        async with (
            Cluster(["n1", "n2"], master="n1") as cluster,
            grpc.aio.insecure_channel(cluster.address("n2")) as channel,
        ):
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            request = receive_request()
            request.group.name = "long-poll"
            call = stub.ReceiveMessage(request, timeout=30)
            reading = asyncio.ensure_future(call.read())
            deadline = time.monotonic() + 10
            while not cluster.seen["n1"].calls and time.monotonic() < deadline:
                await asyncio.sleep(0.01)  # until the master holds the long poll
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await reading
            while not cluster.seen["n1"].cancelled and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert cluster.seen["n1"].cancelled == 1

    run(scenario)

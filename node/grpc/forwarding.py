"""Any node serves any MessagingService request: a node that is not the master of the
broker group a request belongs to forwards the call to that master and relays the answer.

Routes name every node of a broker group (``node/grpc/route_endpoints.py``), and the official
clients keep a channel to one of them; when that node dies, gRPC moves to the next. So a
client's calls reach whichever node is up, and this wrapper gets them to the master.

Which group a request belongs to (``TARGETS``): a queue-scoped read or write
(ReceiveMessage, PullMessage, offsets) names its queue's broker group; SendMessage,
EndTransaction, acks, invisibility changes and DLQ forwards belong to this node's own
group (a client sends them to the endpoints of the queue they concern, which are that
group's nodes; receipt handles do not name a group). A consumer's Heartbeat and
NotifyClientTermination go to the own group's master too, where the group's members are
kept (``node.group_members``). QueryRoute, QueryAssignment (routing reads, the same on
every node), a producer's Heartbeat and Telemetry (session streams) are served where they
arrive.

The forwarded call carries the client's metadata unchanged (the master checks the
client's signature and ACLs itself) and a proof that a node forwards it
(``node/grpc/forward_proof.py``); it goes to the master's client port on a channel cached per
(address, epoch), so a new master gets a fresh channel and no reconnect backoff left over
from a dead one. Answers are relayed as the master's bytes.

While the group has no master (an election is under way), or this node is named master
and has not taken the role yet, or the master answers UNAVAILABLE before sending anything
(it died, or just lost its role), the call waits for routing to change (woken by every
routing change, polling every ``RETRY_S`` meanwhile) and tries again, for at most
``WAIT_CAP_S`` and never past the call's deadline; then it answers ``HA_NOT_AVAILABLE``
in its response status, so the client retries as after any refused call. A master that
answers ``HA_NOT_AVAILABLE`` itself (it refused before writing anything: a new master
whose lease is not renewed yet, too few in-sync replicas) is asked again for up to
``REFUSAL_RETRY_S`` from its first refusal (however long the call waited for the election
before), then its answer is relayed. A SendMessage the dead master may have stored (and
replicated) is sent again marked as a resend (``ferrymq/codec/headers.py``): the next
master answers what its log holds under the same message ids instead of storing it twice.

Each try carries a proof made as it leaves, and its remaining time as gRPC's deadline; a
master that receives it later than that deadline (the try was held up on a cut path and
delivered when it healed) refuses it unserved, DEADLINE_EXCEEDED: its client has given up
and may have sent its next messages since (``ForwardProofs.overdue``).

A forwarded call is never forwarded again: a node that receives a proof-carrying call for
a group it is not master of answers UNAVAILABLE "not the master", which the forwarding
node takes as a reason to retry once routing names another master.

A node without a cluster secret (standalone) forwards nothing: it serves every call.

Thread-safety: the wrapped handlers and ``routing_changed`` run on the node's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc
from google.protobuf.message import DecodeError

from ferrymq.codec.headers import RESEND
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from node.client_port import client_peer
from node.forward_proof import (
    PROOF_HEADER,
    Forwarded,
    ForwardProofs,
    ProofRefused,
    without_proof_headers,
)
from node.recall_handle import broker_group_named
from routing.state import RoutingState

log = logging.getLogger("ferrymq.forwarding")
MESSAGING = "/apache.rocketmq.v2.MessagingService/"
# Longest a call waits for its group to have a master that answers: an election after a
# kill takes about a second, a lease (3 s by default) when the routing leader died too.
WAIT_CAP_S = 10.0
RETRY_S = 0.1  # between tries while waiting (a promotion makes no routing change)
DEADLINE_MARGIN_S = 0.2  # answer this long before the client's deadline
# A master that refuses for now (HA_NOT_AVAILABLE: a new master renewing its lease, too
# few in-sync replicas) is asked again for this long at most: long enough for a failover
# to settle, short enough that a lasting refusal reaches the client soon.
REFUSAL_RETRY_S = 2.0
NO_DEADLINE_S = 120.0  # a forwarded call the client set no deadline for
CHANNEL_CLOSE_GRACE_S = 30.0  # calls in flight on a channel dropped for a new master


class _Here:
    """A request served where it arrives, whatever this node's role."""


HERE = _Here()
# This node serves a call itself after a try at the master failed mid-call.
HERE_AFTER_FAILURE = _Here()
OWN = None  # the request belongs to this node's broker group


def _queue_broker(request) -> str | None:
    return request.message_queue.broker.name or OWN


def _membership(request) -> str | _Here | None:
    return OWN if request.HasField("group") else HERE  # a producer's changes nothing


TARGETS: dict[str, Callable[[object], str | _Here | None]] = {
    "SendMessage": lambda r: OWN,
    "EndTransaction": lambda r: OWN,
    "AckMessage": lambda r: OWN,
    "ChangeInvisibleDuration": lambda r: OWN,
    "ForwardMessageToDeadLetterQueue": lambda r: OWN,
    "RecallMessage": lambda r: broker_group_named(r.recall_handle) or OWN,
    "SyncLiteSubscription": lambda r: OWN,  # kept where its receives are served
    "Heartbeat": _membership,
    "NotifyClientTermination": _membership,
    "ReceiveMessage": _queue_broker,
    "PullMessage": _queue_broker,
    "UpdateOffset": _queue_broker,
    "GetOffset": _queue_broker,
    "QueryOffset": _queue_broker,
}


@dataclass(frozen=True)
class Master:
    node_id: str
    address: str
    epoch: int


class _ForwardedContext:
    """The servicer context of a forwarded call: the client's peer address is the one the
    proof names, everything else is the call's."""

    def __init__(self, context, peer: str) -> None:
        self._context = context
        self._peer = peer

    def peer(self) -> str:
        return self._peer

    def __getattr__(self, name: str):
        return getattr(self._context, name)


class _ResentContext:
    """The context of a call this node serves itself after forwarding it failed mid-call
    (the master died and this node took its place): marked a resend, as a try sent on
    to the next master would be."""

    def __init__(self, context) -> None:
        self._context = context

    def invocation_metadata(self):
        return (*(self._context.invocation_metadata() or ()), RESEND)

    def __getattr__(self, name: str):
        return getattr(self._context, name)


class Forwarder:
    """The wrapper (``node/method_wrapping.py``) that sends calls to their group's master.

    ``state`` reads the routing state, ``is_master`` says whether this node serves its
    own group's writes now (the replication role), ``channel_for`` opens a channel to a
    node's client port (TLS when this node has it)."""

    def __init__(
        self,
        *,
        node_id: str,
        broker_group: str,
        proofs: ForwardProofs,
        state: Callable[[], RoutingState],
        is_master: Callable[[], bool],
        channel_for: Callable[[str], grpc.aio.Channel],
        wait_cap_s: float = WAIT_CAP_S,
    ) -> None:
        self.node_id = node_id
        self.broker_group = broker_group
        self.proofs = proofs
        self.state = state
        self.is_master = is_master
        self.channel_for = channel_for
        self.wait_cap_s = wait_cap_s
        self._changed: asyncio.Event | None = None
        self._channels: dict[tuple[str, int], grpc.aio.Channel] = {}
        self._callables: dict[tuple[str, int, str], object] = {}
        self.forwarded = 0  # calls handed to a master (tries, retries included)
        self.waiting = 0  # calls waiting for routing to name a master that answers

    # ---- routing -------------------------------------------------------------------
    def routing_changed(self) -> None:
        """Wake the calls waiting for a master, and drop channels to nodes that are no
        longer the master of their epoch (their calls in flight get a grace period)."""
        if self._changed is not None:
            self._changed.set()
            self._changed = None
        masters = {(m.address, m.epoch) for m in self._masters()}
        for key in [k for k in self._channels if k not in masters]:
            channel = self._channels.pop(key)
            for callable_key in [c for c in self._callables if c[:2] == key]:
                del self._callables[callable_key]
            task = asyncio.ensure_future(channel.close(CHANNEL_CLOSE_GRACE_S))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())

    def _masters(self) -> list[Master]:
        state = self.state()
        found = []
        for group in state.broker_groups.values():
            member = state.members.get(group.master) if group.master else None
            if member is not None:
                found.append(Master(member.node_id, member.grpc_address, group.epoch))
        return found

    async def _wait_change(self, timeout_s: float) -> None:
        if self._changed is None:
            self._changed = asyncio.Event()
        self.waiting += 1
        try:
            await asyncio.wait_for(self._changed.wait(), max(0.0, timeout_s))
        except TimeoutError:
            pass
        finally:
            self.waiting -= 1

    def _group_of(self, target: str | None) -> str:
        if target is OWN or target == self.broker_group:
            return self.broker_group
        return target if target in self.state().broker_groups else self.broker_group

    def master_of(self, group: str) -> Master | _Here | None:
        """HERE when this node serves ``group`` now; the master to forward to; None
        while there is none to forward to (an election, or this node's promotion, is
        under way)."""
        if group == self.broker_group and self.is_master():
            return HERE
        state = self.state()
        record = state.broker_groups.get(group)
        if record is None:
            return HERE  # not joined yet: the service answers
        if record.master is None or record.master == self.node_id:
            return None
        member = state.members.get(record.master)
        if member is None:
            return None
        return Master(member.node_id, member.grpc_address, record.epoch)

    def _channel(self, master: Master) -> grpc.aio.Channel:
        key = (master.address, master.epoch)
        channel = self._channels.get(key)
        if channel is None:
            channel = self._channels[key] = self.channel_for(master.address)
        return channel

    def _callable(self, master: Master, method: str, kind: str, request_class):
        key = (master.address, master.epoch, method)
        found = self._callables.get(key)
        if found is None:
            channel = self._channel(master)
            make = channel.unary_unary if kind == "unary" else channel.unary_stream
            found = self._callables[key] = make(
                method,
                request_serializer=request_class.SerializeToString,
                response_deserializer=None,  # relayed as the master's bytes
            )
        return found

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        self._callables.clear()
        for channel in channels:
            await channel.close(None)

    # ---- the wrapper ---------------------------------------------------------------
    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        short = method.rsplit("/", 1)[-1]
        target_of = TARGETS.get(short) if method.startswith(MESSAGING) else None
        if target_of is None:
            return handler
        response_class = getattr(rpc, f"{short}Response")
        original = handler.response_serializer

        def serialize(response) -> bytes:
            return response if type(response) is bytes else original(response)

        if handler.unary_unary is not None:
            behavior = handler.unary_unary

            async def unary(request, context):
                target = target_of(request)
                forwarded = await self._forwarded(method, context)
                if forwarded is not None:
                    await self._refuse_unless_master(target, context)
                    return await behavior(request, _ForwardedContext(context, forwarded.peer))
                if target is HERE or not self.proofs.can_forward:
                    return await behavior(request, context)
                group = self._group_of(target)
                if self.master_of(group) is HERE:
                    return await behavior(request, context)
                answer = await self._forward_unary(method, group, request, context, response_class)
                if answer is HERE:
                    return await behavior(request, context)
                if answer is HERE_AFTER_FAILURE:
                    return await behavior(request, _ResentContext(context))
                if isinstance(answer, pb.Status):
                    return _refusal(response_class, request, answer)
                return answer

            return grpc.unary_unary_rpc_method_handler(
                unary,
                request_deserializer=handler.request_deserializer,
                response_serializer=serialize,
            )
        if handler.unary_stream is not None:
            behavior = handler.unary_stream

            async def unary_stream(request, context):
                target = target_of(request)
                forwarded = await self._forwarded(method, context)
                if forwarded is not None:
                    await self._refuse_unless_master(target, context)
                    async for response in behavior(
                        request, _ForwardedContext(context, forwarded.peer)
                    ):
                        yield response
                    return
                group = self._group_of(target)
                if target is HERE or not self.proofs.can_forward or self.master_of(group) is HERE:
                    async for response in behavior(request, context):
                        yield response
                    return
                async for response in self._forward_stream(
                    method, group, request, context, response_class
                ):
                    if response is HERE:
                        async for local in behavior(request, context):
                            yield local
                        return
                    if isinstance(response, pb.Status):
                        yield response_class(status=response)
                        return
                    yield response

            return grpc.unary_stream_rpc_method_handler(
                unary_stream,
                request_deserializer=handler.request_deserializer,
                response_serializer=serialize,
            )
        raise TypeError(f"{method}: only unary and server-streaming calls are forwarded")

    async def _forwarded(self, method: str, context) -> Forwarded | None:
        """The proof a call carries, verified; None for a client's own call. A proof
        that is refused ends the call (UNAUTHENTICATED) before it reaches the service."""
        metadata = context.invocation_metadata() or ()
        if not any(key == PROOF_HEADER for key, _ in metadata):
            return None  # a client's own call: the common case, decided in one pass
        headers = {k: v for k, v in metadata if isinstance(v, str)}
        try:
            forwarded = self.proofs.verify(method, headers)
        except ProofRefused as refused:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(refused))
        remaining = context.time_remaining()  # as the forwarding node sent it, less transit
        late_s = None if remaining is None else self.proofs.overdue(forwarded, remaining)
        if late_s is not None:
            await context.abort(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"not served: this call, forwarded by {forwarded.node_id}, arrived "
                f"{late_s:.2f} s past its client's deadline",
            )
        return forwarded

    async def _refuse_unless_master(self, target, context) -> None:
        """The loop guard: a forwarded call is served by the master or not at all."""
        if isinstance(target, _Here):
            return
        group = self._group_of(target)
        if self.master_of(group) is HERE:
            return
        await context.abort(
            grpc.StatusCode.UNAVAILABLE,
            f"not the master: node {self.node_id} does not serve broker group {group} now "
            "(a forwarded call is not forwarded again)",
        )

    def _timing(self, context) -> tuple[float, float]:
        """(when the forwarded call's deadline is, until when to wait for a master)."""
        now = time.monotonic()
        remaining = context.time_remaining()
        deadline = now + (NO_DEADLINE_S if remaining is None else remaining)
        return deadline, min(now + self.wait_cap_s, deadline - DEADLINE_MARGIN_S)

    def _proven(self, method: str, metadata: list, context) -> list[tuple[str, object]]:
        """``metadata`` with a proof made now: the master counts the call's remaining
        time from the proof's (``ForwardProofs.overdue``), so each try carries its own."""
        return [*metadata, *self.proofs.headers(method, client_peer(context.peer() or ""))]

    async def _next_master(self, group: str, wait_until: float, waited: bool):
        """The master to try now (or HERE); None once ``wait_until`` has passed."""
        while True:
            if waited:
                await self._wait_change(min(RETRY_S, wait_until - time.monotonic()))
            master = self.master_of(group)
            if master is not None:
                return master
            if time.monotonic() >= wait_until:
                return None
            waited = True

    async def _forward_unary(self, method: str, group: str, request, context, response_class):
        deadline, wait_until = self._timing(context)
        refusals_until: float | None = None  # set by the first refusal
        metadata = without_proof_headers(context.invocation_metadata() or ())
        resend = [*metadata, RESEND]  # a send whose try failed mid-call may be stored
        last = "no master elected"
        waited = False
        while True:
            master = await self._next_master(group, wait_until, waited)
            if master is HERE:
                return HERE_AFTER_FAILURE if metadata is resend else HERE
            if master is None:
                return _no_master(group, self.wait_cap_s, last)
            call = self._callable(master, method, "unary", type(request))
            self.forwarded += 1
            try:
                answer = await call(
                    request,
                    metadata=self._proven(method, metadata, context),
                    timeout=deadline - time.monotonic(),
                )
            except grpc.aio.AioRpcError as error:
                if error.code() is not grpc.StatusCode.UNAVAILABLE:
                    await context.abort(error.code(), error.details() or "")
                last = f"{master.node_id} at {master.address}: {error.details()}"
                metadata = resend
            else:
                refused = _not_serving_yet(answer, response_class)
                if refused is None:
                    return answer
                refusals_until = refusals_until or _refusals_until(wait_until)
                if time.monotonic() >= refusals_until:
                    return answer
                last = f"{master.node_id} at {master.address}: {refused}"
            if time.monotonic() >= wait_until:
                return _no_master(group, self.wait_cap_s, last)
            waited = True

    async def _forward_stream(self, method: str, group: str, request, context, response_class):
        deadline, wait_until = self._timing(context)
        refusals_until: float | None = None  # set by the first refusal
        metadata = without_proof_headers(context.invocation_metadata() or ())
        last = "no master elected"
        waited = False
        while True:
            master = await self._next_master(group, wait_until, waited)
            if master is None or master is HERE:
                yield master or _no_master(group, self.wait_cap_s, last)
                return
            call = self._callable(master, method, "stream", type(request))
            self.forwarded += 1
            relayed = False
            responses = call(
                request,
                metadata=self._proven(method, metadata, context),
                timeout=deadline - time.monotonic(),
            )
            try:
                async for response in responses:
                    refused = None if relayed else _not_serving_yet(response, response_class)
                    if refused is not None:
                        refusals_until = refusals_until or _refusals_until(wait_until)
                        if time.monotonic() < refusals_until:
                            last = f"{master.node_id} at {master.address}: {refused}"
                            responses.cancel()
                            break
                    relayed = True
                    yield response
                else:
                    return
            except grpc.aio.AioRpcError as error:
                if relayed or error.code() is not grpc.StatusCode.UNAVAILABLE:
                    await context.abort(error.code(), error.details() or "")
                last = f"{master.node_id} at {master.address}: {error.details()}"
            finally:
                # The client went away (cancelled) mid-stream: so does the master's call,
                # before its long poll hands messages to nobody.
                if not responses.done():
                    responses.cancel()
            if time.monotonic() >= wait_until:
                yield _no_master(group, self.wait_cap_s, last)
                return
            waited = True


def _refusals_until(wait_until: float) -> float:
    """How long a master that began refusing is asked again: the window runs from its
    first refusal, not from the call's start, so a call that already waited out an
    election still gives the new master time to renew its lease."""
    return min(wait_until, time.monotonic() + REFUSAL_RETRY_S)


def _not_serving_yet(answer: bytes, response_class) -> str | None:
    """The master's refusal when it answered HA_NOT_AVAILABLE: it took nothing (a write
    refused before anything was appended: a new master whose lease is not renewed yet,
    an in-sync set too small, a demotion under way), so the call may be tried again."""
    try:
        status = response_class.FromString(answer).status
    except DecodeError:
        return None
    return status.message if status.code == pb.HA_NOT_AVAILABLE else None


def _no_master(group: str, cap_s: float, last: str) -> pb.Status:
    return pb.Status(
        code=pb.HA_NOT_AVAILABLE,
        message=f"broker group {group} has no master that answers (waited up to "
        f"{cap_s:.0f} s; last: {last}); retry",
    )


def _refusal(response_class, request, answer: pb.Status):
    response = response_class(status=answer)
    if response_class is rpc.ChangeInvisibleDurationResponse:
        # The official client takes the returned handle before it looks at the status.
        response.receipt_handle = request.receipt_handle
    return response

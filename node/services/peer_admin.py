"""Admin calls a node makes to another node's Admin door on behalf of its own caller: the
parts of a request that live in another broker group's store (an offset reset of a topic
whose queues span groups, ``node/services/offset_reset.py``; the console's reads and
planned failovers at each group's master, a node's configuration at that node,
``node/console/``). And one Messaging call:
a console's test message handed to a master (``send``), whose send service decides it.

The call is signed as the caller's user with that user's own key, as the user's client
would sign it (``signed_as``; nothing with authentication off), whichever door the caller
came through: the node that serves it decides on the same user, and its refusal comes
back as the service's own (``AccessDenied``, ``AdminRefused`` naming the broker group that
refused). One channel per address,
at most ``CHANNELS_MAX`` (the oldest is closed past it), kept until the node stops.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from ferrymq.codec.headers import ANSWER_QUEUES, QUEUES_TRAILER
from ferrymq.codec.properties import (
    PROPERTY_KEYS,
    PROPERTY_LITE_TOPIC,
    PROPERTY_MESSAGE_GROUP,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2_grpc
from ferrymq.protocol.ferrymq import admin_pb2_grpc
from node.rpc_status import AccessDenied, InvalidRequest
from node.services.admin import NOT_FOUND, UNAVAILABLE, AdminRefused
from node.services.caller import Caller
from node.services.send import OutgoingMessage
from routing.acl import User
from routing.metadata import Member

PEER_CALL_TIMEOUT_S = 10.0  # one broker group's part of a request
CHANNELS_MAX = 64  # one per other node asked; past it, the oldest is closed


class PeerAdmin:
    def __init__(
        self,
        channel_for: Callable[[str], grpc.aio.Channel],
        signed_as: Callable[[User | None], tuple[tuple[str, str], ...]],
        master_of: Callable[[str], tuple[bool, Member | None]],
        node_id: str,
    ) -> None:
        """``channel_for(address)``: a channel to a node's client port (TLS when this
        node's port has it); ``signed_as(user)``: the signature headers of a call made as
        ``user``; ``master_of(broker_group)``: whether routing knows the broker group, and
        its master (None: none now); ``node_id``: this node's."""
        self.channel_for = channel_for
        self.signed_as = signed_as
        self.master_of = master_of
        self.node_id = node_id
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._closing: set[asyncio.Future] = set()

    async def call(
        self,
        caller: Caller,
        member: Member,
        method: str,
        request,
        timeout_s: float = PEER_CALL_TIMEOUT_S,
    ):
        """``method`` at ``member``'s Admin door as ``caller``'s user: its answer, or its
        refusal raised as the service's own; ``AdminRefused(UNAVAILABLE)`` when it cannot
        be reached or does not answer in time."""
        stub = admin_pb2_grpc.AdminStub(self._channel(member.grpc_address))
        try:
            answer = await getattr(stub, method)(
                request, timeout=timeout_s, metadata=self.signed_as(caller.user)
            )
        except grpc.aio.AioRpcError as error:
            code = error.code()
            if code is grpc.StatusCode.PERMISSION_DENIED:
                raise AccessDenied(True, error.details() or "FORBIDDEN") from None
            if code is grpc.StatusCode.UNAUTHENTICATED:
                raise AccessDenied(False, error.details() or "UNAUTHENTICATED") from None
            raise AdminRefused(
                UNAVAILABLE,
                f"{member.node_id} of broker group {member.broker_group} did not answer "
                f"{method}: {code.name} {error.details() or ''}".rstrip(),
            ) from None
        except TimeoutError:
            raise AdminRefused(
                UNAVAILABLE, f"{member.node_id} did not answer {method} in time"
            ) from None
        if answer.status.code != 0:
            raise AdminRefused(
                answer.status.code,
                f"broker group {member.broker_group} ({member.node_id}): {answer.status.message}",
            )
        return answer

    async def call_master(
        self,
        caller: Caller,
        broker_group: str,
        method: str,
        request,
        timeout_s: float = PEER_CALL_TIMEOUT_S,
    ):
        """``call`` at ``broker_group``'s master, for a service whose work lives in that
        group's store. ``AdminRefused``: NOT_FOUND for a broker group routing does not
        know; UNAVAILABLE when the group has no master now, or routing names this node
        while its store has not taken the role yet (the caller asked because it had not)."""
        known, master = self.master_of(broker_group)
        if not known:
            raise AdminRefused(NOT_FOUND, f"UNKNOWN_BROKER_GROUP: {broker_group}")
        if master is None or master.node_id == self.node_id:
            raise no_master(broker_group)
        return await self.call(caller, master, method, request, timeout_s)

    async def send(
        self,
        caller: Caller,
        member: Member,
        topic: str,
        message: OutgoingMessage,
        timeout_s: float = PEER_CALL_TIMEOUT_S,
    ) -> SentThere:
        """``message`` sent to ``topic`` at ``member``'s Messaging door (SendMessage, as
        the caller's user): where it was stored. A refusal of its send service comes back
        as ``InvalidRequest`` with the service's code and reason (``AccessDenied`` for
        FORBIDDEN and UNAUTHORIZED); ``AdminRefused(UNAVAILABLE)`` when the node cannot be
        reached or does not answer in time."""
        stub = service_pb2_grpc.MessagingServiceStub(self._channel(member.grpc_address))
        request = rpc.SendMessageRequest(messages=[wire_message(topic, message)])
        metadata = (*self.signed_as(caller.user), ANSWER_QUEUES)
        try:
            call = stub.SendMessage(request, timeout=timeout_s, metadata=metadata)
            answer = await call
            trailers = dict(await call.trailing_metadata() or ())
        except grpc.aio.AioRpcError as error:
            raise AdminRefused(
                UNAVAILABLE,
                f"{member.node_id}, the master of broker group {member.broker_group}, did not "
                f"take the message: {error.code().name} {error.details() or ''}".rstrip(),
            ) from None
        except TimeoutError:
            raise AdminRefused(
                UNAVAILABLE, f"{member.node_id} did not answer SendMessage in time"
            ) from None
        status = answer.status
        if status.code == pb.OK and answer.entries:
            status = answer.entries[0].status
        if status.code != pb.OK or not answer.entries:
            if status.code in (pb.FORBIDDEN, pb.UNAUTHORIZED):
                raise AccessDenied(status.code == pb.FORBIDDEN, status.message)
            raise InvalidRequest(status.code, status.message)
        queues = str(trailers.get(QUEUES_TRAILER, "")).split(",")
        entry = answer.entries[0]
        queue_id = int(queues[0]) if queues[0].isdigit() else -1
        return SentThere(
            member.broker_group, member.node_id, entry.message_id, queue_id, entry.offset
        )

    def _channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            if len(self._channels) >= CHANNELS_MAX:
                closing = asyncio.ensure_future(
                    self._channels.pop(next(iter(self._channels))).close()
                )
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)
            channel = self._channels[address] = self.channel_for(address)
        return channel

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close(None)


@dataclass(frozen=True, slots=True)
class SentThere:
    """Where a message handed to another node was stored (``queue_id`` -1: the answer did
    not say, as when the node it reached relayed the call to a newer master)."""

    broker_group: str
    node_id: str
    message_id: str
    queue_id: int
    queue_offset: int


def wire_message(topic: str, message: OutgoingMessage) -> pb.Message:
    """``message`` as RocketMQ 5's SendMessage carries it (the receiving door reads it back
    into the same ``OutgoingMessage``: ``node/grpc/wire.py`` ``outgoing``)."""
    properties = dict(message.properties)
    system = pb.SystemProperties(
        message_id=properties.pop(PROPERTY_UNIQ_KEY),
        message_type=message.declared_type,
        body_encoding=pb.IDENTITY,
        keys=properties.pop(PROPERTY_KEYS, "").split(),
    )
    system.born_timestamp.FromMilliseconds(message.born_ms)
    if PROPERTY_TAGS in properties:
        system.tag = properties.pop(PROPERTY_TAGS)
    if message.message_group is not None:
        properties.pop(PROPERTY_MESSAGE_GROUP, None)
        system.message_group = message.message_group
    if message.lite_topic is not None:
        properties.pop(PROPERTY_LITE_TOPIC, None)
        system.lite_topic = message.lite_topic
    return pb.Message(
        topic=pb.Resource(name=topic),
        user_properties=properties,
        system_properties=system,
        body=message.body,
    )


def no_master(broker_group: str) -> AdminRefused:
    """The refusal of a call that needs ``broker_group``'s master when there is none this
    node can ask (``call_master``; a node alone has no peers to ask)."""
    return AdminRefused(
        UNAVAILABLE,
        f"NO_MASTER: broker group {broker_group} has no master that this node can ask now; retry",
    )

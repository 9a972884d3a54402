"""Admission of produced messages: whether a message may be written here, and to which queue.

Queue choice (docs/architecture.md, "Queue choice"): a FIFO message goes to the queue of
its message group's hash; otherwise a sender that pins its queue (ferrymq's SDK: the
``x-ferrymq-queue: pinned`` header of ``ferrymq.codec.headers``, or Data.Produce, whose
queue id is part of its contract) gets that queue; otherwise the node chooses, as Apache
RocketMQ's proxy does: the hash of the message group when the message has one, else the
next of the topic's queues on this broker group in turn (round robin).

The send service (``node/services/send.py``), the one path of every door's sends, asks
here with plain values, so a message is judged by the same rules and refused with the same
code whichever door it came through. Each refusal is an ``InvalidRequest`` carrying its
``apache.rocketmq.v2.Code``; a topic that is unknown or
badly named is routing's ``TopicError`` (``TopicTable.topic`` checks the name). The store
checks what it checks again (``MessageStore.prepare``); its refusals map to codes in one
place, ``store_refusal``.
"""

from __future__ import annotations

import random
import zlib

from ferrymq.codec.compression import CompressedBodyError, inflate
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ha.replicated_store import ReplicatedStore
from node.rpc_status import InvalidRequest, status
from node.topics import MessageType, Permission, TopicConfig, TopicTable
from routing.replica import RoutingReplica
from store.results import PutResult, PutStatus

# A topic's type as the wire's MessageType.
MESSAGE_TYPES = {
    MessageType.NORMAL: pb.NORMAL,
    MessageType.FIFO: pb.FIFO,
    MessageType.DELAY: pb.DELAY,
    MessageType.TRANSACTION: pb.TRANSACTION,
    MessageType.PRIORITY: pb.PRIORITY,
    MessageType.LITE: pb.LITE,
}
MESSAGE_TYPE_NAMES = frozenset(pb.MessageType.values())
# What a topic's queues accept (a route's ``accept_message_types``): an untyped topic every
# type a message can declare, as in RocketMQ 5.
ANY_TYPE = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)
# What an untyped topic takes: a priority message needs a PRIORITY topic, whose consumers
# take the highest priority first (RocketMQ's proxy would take one into a MIXED topic,
# where nothing reads it by priority), and a lite message a LITE topic.
TYPES_OF_WIRE = {
    wire: kind
    for kind, wire in MESSAGE_TYPES.items()
    if kind not in (MessageType.PRIORITY, MessageType.LITE)
}
# Topics whose round-robin position is kept; past this many the table starts again (a
# position is only where the next unpinned send starts).
ROTATION_TOPICS_MAX = 100_000

# What a refused put means for the client, by the store's status...
STORE_STATUS_CODES = {
    PutStatus.MESSAGE_ILLEGAL: pb.BAD_REQUEST,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: pb.MESSAGE_PROPERTIES_TOO_LARGE,
    PutStatus.DISK_FULL: pb.INTERNAL_SERVER_ERROR,
    PutStatus.FLUSH_DISK_TIMEOUT: pb.MASTER_PERSISTENCE_TIMEOUT,
    PutStatus.SERVICE_NOT_AVAILABLE: pb.HA_NOT_AVAILABLE,
    PutStatus.FLUSH_SLAVE_TIMEOUT: pb.SLAVE_PERSISTENCE_TIMEOUT,
    PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: pb.HA_NOT_AVAILABLE,
    PutStatus.SYSTEM_BUSY: pb.TOO_MANY_REQUESTS,
}
# ... and, for a refused message, more precisely by its reason (``InvalidMessageError``);
# a reason not named here answers BAD_REQUEST.
INVALID_MESSAGE_CODES = {
    "TOPIC_INVALID": pb.ILLEGAL_TOPIC,
    "BODY_TOO_LARGE": pb.MESSAGE_BODY_TOO_LARGE,
    "PROPERTIES_TOO_LARGE": pb.MESSAGE_PROPERTIES_TOO_LARGE,
    "PROPERTY_INVALID": pb.ILLEGAL_MESSAGE_PROPERTY_KEY,
}


def type_name(message_type: int) -> str:
    """A MessageType's name, or its number when unknown (proto3 takes any number)."""
    if message_type in MESSAGE_TYPE_NAMES:
        return pb.MessageType.Name(message_type)
    return f"unknown type {message_type}"


class Admission:
    """The checks that need this node's state: may it write, may the topic be written."""

    def __init__(
        self,
        store: ReplicatedStore,
        topics: TopicTable,
        routing: RoutingReplica,
        broker_name: str,
    ) -> None:
        self.store = store
        self.topics = topics
        self.routing = routing
        self.broker_name = broker_name
        self._rotation: dict[str, int] = {}

    def next_queue(self, topic: TopicConfig) -> int:
        """The next of ``topic``'s queues in turn (each topic starts at a random one, so
        that nodes and restarts do not all start with queue 0)."""
        rotation = self._rotation
        position = rotation.get(topic.name)
        if position is None:
            if len(rotation) >= ROTATION_TOPICS_MAX:
                rotation.clear()
            position = random.randrange(topic.queue_count)
        rotation[topic.name] = position + 1
        return position % topic.queue_count

    def send_queue(
        self,
        topic: TopicConfig,
        kind: MessageType,
        message_group: str | None,
        pinned: int | None,
        priority: int | None = None,
        lite_topic: str | None = None,
    ) -> int:
        """The queue of one message of type ``kind`` (``message_kind``); ``pinned`` is the
        queue its sender named on purpose, None when the node chooses; a PRIORITY message's
        is its ``priority`` (``priority_queue``), a LITE message's its lite topic's: every
        message of one lite topic in one queue, in order."""
        if kind is MessageType.FIFO:
            return fifo_queue(message_group, topic.queue_count)
        if kind is MessageType.PRIORITY:
            return priority_queue(priority, topic.queue_count)
        if kind is MessageType.LITE and lite_topic:
            return hashed_queue(lite_topic, topic.queue_count)
        if pinned is not None:
            check_queue(topic, pinned)
            return pinned
        if message_group:
            return hashed_queue(message_group, topic.queue_count)
        return self.next_queue(topic)

    def check_master(self) -> None:
        """Refuse unless this node takes writes (the replication role decides; this only
        says where the master is, so the client can go there)."""
        if self.store.is_master:
            return
        master = self.routing.state.master_of(self.broker_name)
        where = f"{master.node_id} at {master.grpc_address}" if master else "being elected"
        raise InvalidRequest(
            pb.HA_NOT_AVAILABLE,
            f"this node is a slave of broker group {self.broker_name}; its master is {where} "
            "(query the route again)",
        )

    async def writable_topic(self, name: str) -> TopicConfig:
        """The topic ``name`` if it exists and takes writes (``TopicError`` otherwise; a
        name this node has not heard of is asked of routing first)."""
        topic = self.topics.topics.get(name) or await self.topics.topic_caught_up(name)
        if not takes_writes(topic):
            raise InvalidRequest(pb.FORBIDDEN, f"topic {topic.name} is read-only")
        return topic

    def known_writable_topic(self, name: str) -> TopicConfig | None:
        """The topic ``name`` if this node knows it and it takes writes, without asking
        routing (the produce lane's check; None: ``writable_topic`` decides)."""
        topic = self.topics.topics.get(name)
        return topic if topic is not None and takes_writes(topic) else None

    @property
    def body_limit(self) -> int:
        return self.store.config.max_message_body_bytes

    @property
    def batch_limit(self) -> int:
        return self.store.config.max_batch_bytes


def check_batch_count(count: int, limit: int) -> None:
    """A request carries 1..``limit`` messages: each is checked in one turn of the event
    loop, and the bound keeps that turn short."""
    if count < 1:
        detail = "no messages in the request" if count == 0 else f"{count} messages"
        raise InvalidRequest(pb.BAD_REQUEST, detail)
    if count > limit:
        raise InvalidRequest(
            pb.BAD_REQUEST, f"{count} messages in one request, the limit is {limit}"
        )


def check_batch_bytes(body_bytes: int, limit: int) -> None:
    """The bodies alone past the batch limit: refused before any message is converted
    (the store checks the exact record sizes of what gets this far)."""
    if body_bytes > limit:
        raise InvalidRequest(
            pb.PAYLOAD_TOO_LARGE,
            f"the bodies are {body_bytes} bytes, the limit of a request is {limit}",
        )


def check_body_size(size: int, limit: int) -> None:
    """A message has a body, and not more than ``limit`` bytes of it."""
    if not size:
        raise InvalidRequest(pb.MESSAGE_BODY_EMPTY, "message body is empty")
    if size > limit:
        raise InvalidRequest(
            pb.MESSAGE_BODY_TOO_LARGE, f"body is {size} bytes, the limit is {limit}"
        )


def check_compressed_body(body: bytes, sys_flag: int, limit: int) -> None:
    """A body flagged compressed inflates (zlib), to at most ``limit`` bytes: every
    reader of plain bodies can then be given it (``ferrymq/codec/compression.py``)."""
    try:
        inflate(body, sys_flag, limit)
    except CompressedBodyError as error:
        raise InvalidRequest(pb.MESSAGE_CORRUPTED, str(error)) from None


def check_message_type(topic_name: str, expected: int, actual: int) -> None:
    """A message declares its topic's type (``MESSAGE_TYPES``): a client that thinks the
    topic is another kind would expect another delivery."""
    if actual != expected:
        raise InvalidRequest(
            pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"topic {topic_name} takes {type_name(expected)} messages, not {type_name(actual)}",
        )


def accepted_types(message_type: MessageType) -> tuple[int, ...]:
    """The wire types a topic of ``message_type`` takes."""
    if message_type is MessageType.UNSPECIFIED:
        return ANY_TYPE
    return (MESSAGE_TYPES[message_type],)


def message_kind(topic: TopicConfig, declared: int) -> MessageType:
    """How a message that declares ``declared`` is handled in ``topic``: as the topic's
    type, which it must declare; in an untyped topic as the type it declares, which must
    be one of the four (``MESSAGE_TYPE_UNSPECIFIED``, LITE and PRIORITY are refused)."""
    if topic.message_type is not MessageType.UNSPECIFIED:
        check_message_type(topic.name, MESSAGE_TYPES[topic.message_type], declared)
        return topic.message_type
    kind = TYPES_OF_WIRE.get(declared)
    if kind is None:
        raise InvalidRequest(
            pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"topic {topic.name} takes NORMAL, FIFO, DELAY or TRANSACTION messages, not "
            f"{type_name(declared)}",
        )
    return kind


def check_type_text(declared: str | None, expected_text: str) -> None:
    """``check_message_type`` for a record whose properties come encoded (Data.Produce):
    its ``__MSG_TYPE`` must be the topic's type's text exactly, as the C scan compares it."""
    if declared != expected_text:
        raise InvalidRequest(
            pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"message type {declared!r} is not the topic's {expected_text!r}",
        )


def priority_queue(priority: int | None, queue_count: int) -> int:
    """A priority message's queue: its priority, the topic's last queue for a higher one
    (RocketMQ 5.4: the queue id is the priority, and POP reads the highest queue first)."""
    if priority is None:
        raise InvalidRequest(pb.BAD_REQUEST, "a PRIORITY message needs a priority")
    if priority < 0:
        raise InvalidRequest(pb.BAD_REQUEST, f"priority {priority} is negative")
    return min(priority, queue_count - 1)


def hashed_queue(key: str, queue_count: int) -> int:
    """The queue of ``key`` (a message group, or a message id): the same key always gets
    the same queue. The hash is fixed for good: a changed one would move the groups that
    have messages in a queue already, and break their order."""
    return zlib.crc32(key.encode()) % queue_count


def fifo_queue(message_group: str | None, queue_count: int) -> int:
    """The queue of a FIFO message, which must name its group: one group, one queue, which
    keeps a group's messages in order."""
    if not message_group:
        raise InvalidRequest(pb.ILLEGAL_MESSAGE_GROUP, "FIFO messages need a message_group")
    return hashed_queue(message_group, queue_count)


def takes_writes(topic: TopicConfig) -> bool:
    """Whether ``topic``'s permission lets sends write to it."""
    return topic.permission is not Permission.READ


def queue_exists(topic: TopicConfig, queue_id: int) -> bool:
    return 0 <= queue_id < topic.queue_count


def check_queue(topic: TopicConfig, queue_id: int) -> None:
    if not queue_exists(topic, queue_id):
        raise InvalidRequest(pb.BAD_REQUEST, f"queue {queue_id} does not exist in {topic.name}")


def invalid_message_code(reason: str) -> int:
    """The code of a message the store refused for ``reason``."""
    return INVALID_MESSAGE_CODES.get(reason, pb.BAD_REQUEST)


def store_refusal(result: PutResult) -> pb.Status:
    """The status for a put that did not succeed."""
    if result.reason is not None:
        code = invalid_message_code(result.reason)
    else:
        code = STORE_STATUS_CODES.get(result.status, pb.INTERNAL_SERVER_ERROR)
    return status(code, result.error or result.status.value)

"""Sends of RocketMQ 4.x clients: SEND_MESSAGE (header fields by name), SEND_MESSAGE_V2
(the same fields under the short keys a, b, c, ...) and SEND_BATCH_MESSAGE (V2 header, a
batch body: ``ferrymq/codec/remoting_messages.py``).

Every rule goes through ``node/admission.py``, as for SendMessage and Data.Produce: the
master check, the topic (name, existence, write permission), the message type against
the topic's, body and batch limits, the queue; a store refusal maps to a code through
``admission.store_refusal``, and every code to RocketMQ's through one table
(``status_codes.py``). The put goes through the ``ReplicatedStore``, so SYNC replication
acknowledges a remoting send exactly as a gRPC one.

What this door adds, as RocketMQ's broker does: BORNHOST is the peer's address; the
stored properties drop ``WAIT`` and gain ``CLUSTER``; a batch's header properties follow
each message's own. The message type is read from the properties (``TRAN_MSG``,
``DELAY``): a delay level (1..n of ``[messages] delay_levels``) parks the message in the
timer service, as a gRPC delayed message, and a topic whose type refuses delays refuses
it with the same code; a send to ``%RETRY%<group>`` (a 4.x consumer handing a failed
message back itself) follows ``node/consumer_retry.py``. A transaction half (``TRAN_MSG``
or the prepared sysFlag) is parked as the gRPC door parks it
(``TransactionService.half_of``) and answered with its ``transactionId``; its connection
becomes one its producer group's checks may go to (``broker_transactions.py``). A batch
carries no halves (MESSAGE_ILLEGAL, as RocketMQ).

Thread-safety: handlers run on the node's event loop.
"""

from __future__ import annotations

import dataclasses

from ferrymq.codec.errors import InvalidMessageError
from ferrymq.codec.properties import (
    PROPERTY_DELIVERY_TIME_MS,
    PROPERTY_MESSAGE_TYPE,
    PROPERTY_TAGS,
)
from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.codec.remoting_messages import MalformedBatch, decode_batch, parse_sent_properties
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ha.replicated_store import ReplicatedStore
from node.admission import (
    Admission,
    check_batch_bytes,
    check_batch_count,
    check_body_size,
    check_compressed_body,
    invalid_message_code,
    message_kind,
    store_refusal,
    type_name,
)
from node.consumer_retry import PROPERTY_DELAY, ConsumerRetries, is_retry_topic
from node.convert import born_host_bytes, tag_is_valid
from node.remoting.broker_transactions import TransactionHandlers
from node.remoting.dispatch import Handler
from node.remoting.name_server import CLUSTER_NAME
from node.remoting.status_codes import refusal, response_code
from node.rpc_status import InvalidRequest
from node.topics import MessageType, TopicConfig, TopicError
from store.message import Message

# SEND_MESSAGE_V2's short keys and the field each stands for.
V2_FIELDS = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "brokerName",
}
PROPERTY_WAIT = "WAIT"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
# The node's own properties: a client may not set them.
RESERVED_PROPERTIES = frozenset({PROPERTY_MESSAGE_TYPE, PROPERTY_DELIVERY_TIME_MS})
# SYSFLAG bits kept as sent: compressed, multi-tags, the compression type. The host bits
# (IPv6 born or store host) would misdescribe the 8-byte hosts the store writes, and the
# transaction bits are the node's: a half is parked in its own topic, without them.
SYSFLAG_KEPT = 0x1 | 0x2 | 0x700
SYSFLAG_TRANSACTION_PREPARED = 0x4
SYSFLAG_TRANSACTION_MASK = 0xC
# Messages of one batch (the Java client sends up to 4 MiB of them; the gRPC doors allow
# 1,024 per request: each is checked in one turn of the event loop).
BATCH_MESSAGES_MAX = 1024
MSG_REGION = "DefaultRegion"


def v1_header(request: RemotingCommand) -> RemotingCommand:
    """A V2 request with its fields under their V1 names (unknown keys kept as sent)."""
    fields = {V2_FIELDS.get(name, name): value for name, value in request.ext_fields.items()}
    return dataclasses.replace(request, ext_fields=fields)


def message_type_of(properties: dict[str, str], sys_flag: int) -> int:
    """The ``apache.rocketmq.v2.MessageType`` a 4.x message is: a transaction half by its
    property or flag, delayed by a delay level above 0, normal otherwise."""
    prepared = properties.get(PROPERTY_TRANSACTION_PREPARED, "").lower() == "true"
    if prepared or sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_PREPARED:
        return pb.TRANSACTION
    return pb.DELAY if delay_level_of(properties) > 0 else pb.NORMAL


def delay_level_of(properties: dict[str, str]) -> int:
    """The message's 4.x delay level, 0 for none."""
    level = properties.get(PROPERTY_DELAY, "")
    return int(level) if level.isascii() and level.isdigit() else 0


SERVED_TYPES = (MessageType.NORMAL, MessageType.DELAY, MessageType.TRANSACTION)


class SendHandlers:
    def __init__(
        self,
        store: ReplicatedStore,
        admission: Admission,
        retries: ConsumerRetries,
        transactions: TransactionHandlers,
    ) -> None:
        self.store = store
        self.admission = admission
        self.retries = retries
        self.transactions = transactions

    def handlers(self) -> list[tuple[int, Handler]]:
        return [
            (RequestCode.SEND_MESSAGE, self.send),
            (RequestCode.SEND_MESSAGE_V2, self.send_v2),
            (RequestCode.SEND_BATCH_MESSAGE, self.send_batch),
        ]

    async def send(self, request: RemotingCommand, connection) -> RemotingCommand:
        return await self._send(request, request, connection, batch=False)

    async def send_v2(self, request: RemotingCommand, connection) -> RemotingCommand:
        return await self._send(v1_header(request), request, connection, batch=False)

    async def send_batch(self, request: RemotingCommand, connection) -> RemotingCommand:
        return await self._send(v1_header(request), request, connection, batch=True)

    async def _send(
        self, header: RemotingCommand, request: RemotingCommand, connection, batch: bool
    ) -> RemotingCommand:
        header.text("producerGroup")
        topic_name = header.text("topic")
        queue_id = header.int32("queueId")
        sys_flag = header.int32("sysFlag", 0)
        born_ms = header.integer("bornTimestamp", 0)
        flag = header.int32("flag", 0)
        reconsume_times = header.int32("reconsumeTimes", 0)
        properties_text = header.text("properties", "")
        max_reconsume_times = header.int32("maxReconsumeTimes", -1)
        admission = self.admission
        try:
            admission.check_master()
            topic = admission.writable_topic(topic_name)
            common = parse_sent_properties(properties_text)
            if batch:
                items = decode_batch(request.body, BATCH_MESSAGES_MAX)
                check_batch_count(len(items), BATCH_MESSAGES_MAX)
                check_batch_bytes(sum(len(item.body) for item in items), admission.batch_limit)
                sent = [
                    (item.flag, item.body, {**parse_sent_properties(item.properties), **common})
                    for item in items
                ]
            else:
                sent = [(flag, request.body, common)]
            queue = self._queue(topic, queue_id)
            born_host = born_host_bytes(connection.peer_address)
            messages = [
                self._stored_form(
                    Message(
                        topic.name,
                        body,
                        queue,
                        self._admitted(topic, body, properties, sys_flag),
                        message_flag,
                        sys_flag & SYSFLAG_KEPT,
                        born_ms,
                        born_host,
                        reconsume_times,
                    ),
                    max_reconsume_times if max_reconsume_times >= 0 else None,
                )
                for message_flag, body, properties in sent
            ]
            if any(message_type_of(m.properties, sys_flag) == pb.TRANSACTION for m in messages):
                messages = self.transactions.parked(messages, batch)
        except (InvalidRequest, TopicError) as error:
            code, remark = refusal(error)
            return request.reply(code, remark)
        except InvalidMessageError as error:
            return request.reply(response_code(invalid_message_code(error.reason)), str(error))
        except MalformedBatch as error:
            return request.reply(ResponseCode.MESSAGE_ILLEGAL, f"batch body: {error}")
        result = await self.store.put_messages_async(messages)
        if result.ok:
            receipt = self._receipt(queue, result)
            receipt |= self.transactions.sent(connection, messages[0], result.appended[0])
            return request.reply(ResponseCode.SUCCESS, ext_fields=receipt)
        status = store_refusal(result)
        code = response_code(status.code)
        if result.appended and code in (
            ResponseCode.FLUSH_DISK_TIMEOUT,
            ResponseCode.FLUSH_SLAVE_TIMEOUT,
        ):
            # Written, not confirmed in time: a result with its ids, as RocketMQ answers.
            return request.reply(code, status.message, self._receipt(queue, result))
        return request.reply(code, status.message)

    def _queue(self, topic: TopicConfig, queue_id: int) -> int:
        """The queue the client chose (it must exist), or one the node picks for a
        negative id, as RocketMQ's broker does."""
        pinned = queue_id if queue_id >= 0 else None
        return self.admission.send_queue(topic, MessageType.NORMAL, None, pinned)

    def _stored_form(self, message: Message, max_reconsume_times: int | None) -> Message:
        """What to append for an admitted message: a copy for a retry topic as the retry
        rule says, a delayed one parked until due."""
        if is_retry_topic(message.topic):
            message = self.retries.resent(message, max_reconsume_times)
        level = delay_level_of(message.properties)
        return self.retries.delayed(message, level) if level > 0 else message

    def _admitted(
        self, topic: TopicConfig, body: bytes, properties: dict[str, str], sys_flag: int
    ) -> dict[str, str]:
        """The properties to store for one message, once admission passed it."""
        admission = self.admission
        check_body_size(len(body), admission.body_limit)
        check_compressed_body(body, sys_flag, admission.body_limit)
        actual = message_type_of(properties, sys_flag)
        if message_kind(topic, actual) not in SERVED_TYPES:
            raise InvalidRequest(
                pb.UNSUPPORTED,
                f"{type_name(actual)} messages to topic {topic.name}: the remoting port "
                "serves NORMAL, DELAY and TRANSACTION messages",
            )
        reserved = RESERVED_PROPERTIES.intersection(properties)
        if reserved:
            raise InvalidRequest(
                pb.ILLEGAL_MESSAGE_PROPERTY_KEY,
                f"property {sorted(reserved)[0]} is the node's own",
            )
        tag = properties.get(PROPERTY_TAGS)
        if tag is not None and not tag_is_valid(tag):
            raise InvalidRequest(pb.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} is empty or contains '|'")
        properties.pop(PROPERTY_WAIT, None)
        properties[PROPERTY_CLUSTER] = CLUSTER_NAME
        return properties

    @staticmethod
    def _receipt(queue: int, result) -> dict[str, str]:
        return {
            "msgId": ",".join(appended.offset_message_id for appended in result.appended),
            "queueId": str(queue),
            "queueOffset": str(result.appended[0].queue_offset),
            "MSG_REGION": MSG_REGION,
            "TRACE_ON": "true",
        }

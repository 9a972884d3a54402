"""Sends of RocketMQ 4.x clients: SEND_MESSAGE (header fields by name), SEND_MESSAGE_V2
(the same fields under the short keys a, b, c, ...) and SEND_BATCH_MESSAGE (V2 header, a
batch body: ``ferrymq/codec/remoting_messages.py``), translated to the send service
(``node/services/send.py``), which decides every rule on the one request it is given.

What this door reads, once: a V2 header's fields from its short keys only (a long name
beside them is never read, so no two readings of one frame can differ); the message type
from the properties (``TRAN_MSG`` or the prepared sysFlag: a transaction half; ``DELAY``
1..n: a delayed message); the queue the client chose (a negative one: the node picks);
BORNHOST from the peer's address. What it adds, as RocketMQ's broker does: the stored
properties drop ``WAIT`` and gain ``CLUSTER``; a batch's header properties follow each
message's own; the SYSFLAG keeps only the bits that describe the body. A half's
connection may be asked about it afterwards (``broker_transactions.py``).

Thread-safety: handlers run on the node's event loop.
"""

from __future__ import annotations

import time

from ferrymq.codec.errors import InvalidMessageError
from ferrymq.codec.properties import (
    PROPERTY_DELIVERY_TIME_MS,
    PROPERTY_LITE_TOPIC,
    PROPERTY_PRIORITY,
)
from ferrymq.codec.remoting import HeaderFieldError, RemotingCommand
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.codec.remoting_messages import MalformedBatch, decode_batch, parse_sent_properties
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.admission import invalid_message_code, store_refusal
from node.consumer_retry import PROPERTY_DELAY
from node.message_rules import born_host_bytes
from node.remoting.authentication import DoorHandler
from node.remoting.broker_transactions import TransactionDoor
from node.remoting.name_server import CLUSTER_NAME
from node.remoting.status_codes import refusal, response_code
from node.rpc_status import InvalidRequest
from node.services.caller import Caller
from node.services.recall import RecallReason, RecallRefused
from node.services.registry import Services
from node.services.send import SEND_MESSAGES_MAX, OutgoingMessage, SendOutcome, SendRequest
from node.topics import TopicError

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
V2_LONG_NAMES = frozenset(V2_FIELDS.values())
PROPERTY_WAIT = "WAIT"
PROPERTY_CLUSTER = "CLUSTER"
# RocketMQ 5's timer properties a 4.x-protocol client sets (setDelayTimeSec, setDelayTimeMs;
# setDeliverTimeMs sets the node's own TIMER_DELIVER_MS).
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
TIMER_PROPERTIES = frozenset(
    {PROPERTY_DELIVERY_TIME_MS, PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS}
)
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
# SYSFLAG bits kept as sent: compressed, multi-tags, the compression type. The host bits
# (IPv6 born or store host) would misdescribe the 8-byte hosts the store writes, and the
# transaction bits are the node's: a half is parked in its own topic, without them.
SYSFLAG_KEPT = 0x1 | 0x2 | 0x700
SYSFLAG_TRANSACTION_PREPARED = 0x4
SYSFLAG_TRANSACTION_MASK = 0xC
# The properties ``message_type_of`` and the timer, priority and lite readings look at: a
# message with none of them is NORMAL (or a half, by its flag) with nothing to read.
TYPED_PROPERTIES = frozenset(
    {
        PROPERTY_TRANSACTION_PREPARED,
        PROPERTY_DELAY,
        PROPERTY_PRIORITY,
        PROPERTY_LITE_TOPIC,
        *TIMER_PROPERTIES,
    }
)
MSG_REGION = "DefaultRegion"


def v1_header(request: RemotingCommand) -> RemotingCommand:
    """A V2 request with its fields under their V1 names, read from the short keys only:
    a long name sent beside its short key is dropped, never read (other keys, such as the
    ACL fields, are kept as sent)."""
    fields = {}
    for name, value in request.ext_fields.items():
        long_name = V2_FIELDS.get(name)
        if long_name is not None:
            fields[long_name] = value
        elif name not in V2_LONG_NAMES:
            fields[name] = value
    return RemotingCommand(
        request.code,
        request.opaque,
        request.flag,
        request.remark,
        fields,
        request.body,
        request.language,
        request.version,
        request.serialize_type,
    )


def flagged_prepared(sys_flag: int) -> bool:
    """Whether a 4.x sysFlag marks a transaction half."""
    return sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_PREPARED


def message_type_of(properties: dict[str, str], sys_flag: int) -> int:
    """The ``apache.rocketmq.v2.MessageType`` a 4.x message is: a transaction half by its
    property or flag, delayed by a delay level above 0, normal otherwise."""
    prepared = properties.get(PROPERTY_TRANSACTION_PREPARED, "").lower() == "true"
    if prepared or flagged_prepared(sys_flag):
        return pb.TRANSACTION
    if delay_level_of(properties) > 0 or TIMER_PROPERTIES & properties.keys():
        return pb.DELAY
    if PROPERTY_PRIORITY in properties:
        return pb.PRIORITY
    return pb.LITE if PROPERTY_LITE_TOPIC in properties else pb.NORMAL


def typed_readings(
    properties: dict[str, str], sys_flag: int, now_ms: int
) -> tuple[int, int | None, int | None, str | None, int]:
    """What a sent message's properties (and flag) make of it: its type, delivery time,
    priority, lite topic and delay level; the timer's properties are taken out. A message
    with none of ``TYPED_PROPERTIES`` (most) is read without looking further."""
    if TYPED_PROPERTIES.isdisjoint(properties):
        kind = pb.TRANSACTION if flagged_prepared(sys_flag) else pb.NORMAL
        return kind, None, None, None, 0
    return (
        message_type_of(properties, sys_flag),
        timer_delivery_ms(properties, now_ms),
        priority_of(properties),
        properties.get(PROPERTY_LITE_TOPIC),
        delay_level_of(properties),
    )


def is_transaction_half(request: RemotingCommand) -> bool:
    """Whether a SEND_MESSAGE, SEND_MESSAGE_V2 or SEND_BATCH_MESSAGE request sends a
    transaction half (its header unreadable counts as one: it is answered where it is)."""
    header = request if request.code == RequestCode.SEND_MESSAGE else v1_header(request)
    try:
        sys_flag = header.int32("sysFlag", 0)
        properties = parse_sent_properties(header.text("properties", ""))
    except (HeaderFieldError, ValueError):
        return True
    return message_type_of(properties, sys_flag) == pb.TRANSACTION


def timer_delivery_ms(properties: dict[str, str], now_ms: int) -> int | None:
    """A 4.x message's delivery time from RocketMQ 5's timer properties, taken out of the
    properties (the node writes its own): ``TIMER_DELIVER_MS`` (a time),
    ``TIMER_DELAY_SEC`` or ``TIMER_DELAY_MS`` (from now); None for none."""
    due = properties.pop(PROPERTY_DELIVERY_TIME_MS, None)
    delay_s = properties.pop(PROPERTY_TIMER_DELAY_SEC, None)
    delay_ms = properties.pop(PROPERTY_TIMER_DELAY_MS, None)
    for text, scale, base in ((due, 1, 0), (delay_s, 1000, now_ms), (delay_ms, 1, now_ms)):
        if text is not None:
            if not (text.isascii() and text.lstrip("-").isdigit()):
                raise InvalidRequest(pb.ILLEGAL_DELIVERY_TIME, f"timer property {text!r}")
            return base + int(text) * scale
    return None


def priority_of(properties: dict[str, str]) -> int | None:
    """A 4.x-protocol message's priority (``Message.setPriority``, RocketMQ 5.4), or None."""
    text = properties.get(PROPERTY_PRIORITY)
    if text is None:
        return None
    if not (text.isascii() and text.lstrip("-").isdigit()):
        raise InvalidRequest(pb.BAD_REQUEST, f"priority {text!r} is not a number")
    return int(text)


def delay_level_of(properties: dict[str, str]) -> int:
    """The message's 4.x delay level, 0 for none."""
    level = properties.get(PROPERTY_DELAY, "")
    return int(level) if level.isascii() and level.isdigit() else 0


def as_stored(properties: dict[str, str]) -> dict[str, str]:
    """A sent message's properties as RocketMQ's broker stores them."""
    properties.pop(PROPERTY_WAIT, None)
    properties[PROPERTY_CLUSTER] = CLUSTER_NAME
    return properties


class SendHandlers:
    def __init__(self, services: Services, transactions: TransactionDoor) -> None:
        self.services = services
        self.transactions = transactions

    def handlers(self) -> list[tuple[int, DoorHandler]]:
        return [
            (RequestCode.SEND_MESSAGE, self.send),
            (RequestCode.SEND_MESSAGE_V2, self.send_v2),
            (RequestCode.SEND_BATCH_MESSAGE, self.send_batch),
            (RequestCode.RECALL_MESSAGE, self.recall),
        ]

    async def send(self, request: RemotingCommand, connection, caller: Caller):
        return await self._send(request, request, connection, caller, batch=False)

    async def send_v2(self, request: RemotingCommand, connection, caller: Caller):
        return await self._send(v1_header(request), request, connection, caller, batch=False)

    async def send_batch(self, request: RemotingCommand, connection, caller: Caller):
        return await self._send(v1_header(request), request, connection, caller, batch=True)

    async def _send(
        self,
        header: RemotingCommand,
        request: RemotingCommand,
        connection,
        caller: Caller,
        batch: bool,
    ) -> RemotingCommand:
        try:
            sent = self._request(header, request, caller, batch)
            outcome = await self.services.send.send(caller, sent)
        except (InvalidRequest, TopicError) as error:
            return request.reply(*refusal(error))
        except InvalidMessageError as error:  # properties that do not parse
            return request.reply(response_code(invalid_message_code(error.reason)), str(error))
        except MalformedBatch as error:
            return request.reply(ResponseCode.MESSAGE_ILLEGAL, f"batch body: {error}")
        status = outcome.status
        if status.code == pb.OK:
            receipt = self._receipt(outcome)
            if not batch and outcome.recall_handles and outcome.recall_handles[0]:
                receipt["recallHandle"] = outcome.recall_handles[0]
            transaction_id = outcome.transaction_ids[0] if outcome.transaction_ids else None
            if transaction_id is not None:
                receipt["transactionId"] = transaction_id
                self.transactions.producing(connection, caller, outcome.stored[0])
            return request.reply(ResponseCode.SUCCESS, ext_fields=receipt)
        code = response_code(status.code)
        if outcome.appended and code in (
            ResponseCode.FLUSH_DISK_TIMEOUT,
            ResponseCode.FLUSH_SLAVE_TIMEOUT,
        ):
            # Written, not confirmed in time: a result with its ids, as RocketMQ answers.
            return request.reply(code, status.message, self._receipt(outcome))
        return request.reply(code, status.message)

    async def recall(self, request: RemotingCommand, connection, caller: Caller):
        """RECALL_MESSAGE (RocketMQ 5.3.2): ``topic`` and ``recallHandle``; answers the
        recalled message's id in ``msgId``. Refusals as RocketMQ's broker answers them:
        ILLEGAL_OPERATION for the handle or the timing, TOPIC_NOT_EXIST, the store's."""
        try:
            topic = request.text("topic")
            handle = request.text("recallHandle")
            message_id = await self.services.recall.recall(caller, topic, handle)
        except (InvalidRequest, TopicError) as error:
            return request.reply(*refusal(error))
        except RecallRefused as error:
            if error.reason is RecallReason.NOT_STORED:
                status = store_refusal(error.put_result)
                return request.reply(response_code(status.code), status.message)
            return request.reply(ResponseCode.ILLEGAL_OPERATION, str(error))
        return request.reply(ResponseCode.SUCCESS, ext_fields={"msgId": message_id})

    @staticmethod
    def _request(
        header: RemotingCommand, request: RemotingCommand, caller: Caller, batch: bool
    ) -> SendRequest:
        """The one request the send service decides on."""
        header.text("producerGroup")
        topic = header.text("topic")
        queue_id = header.int32("queueId")
        sys_flag = header.int32("sysFlag", 0)
        born_ms = header.integer("bornTimestamp", 0)
        flag = header.int32("flag", 0)
        reconsume_times = header.int32("reconsumeTimes", 0)
        max_reconsume_times = header.int32("maxReconsumeTimes", -1)
        common = parse_sent_properties(header.text("properties", ""))
        if batch:
            items = decode_batch(request.body, SEND_MESSAGES_MAX)
            sent = [
                (item.flag, item.body, {**parse_sent_properties(item.properties), **common})
                for item in items
            ]
        else:
            sent = [(flag, request.body, common)]
        born_host = born_host_bytes(caller.address)  # the client's, also when forwarded
        now_ms = time.time_ns() // 1_000_000
        pinned_queue = queue_id if queue_id >= 0 else None
        messages = []
        for message_flag, body, properties in sent:
            stored = as_stored(properties)
            kind, delivery_ms, priority, lite_topic, delay_level = typed_readings(
                properties, sys_flag, now_ms
            )
            messages.append(
                OutgoingMessage(
                    body,
                    stored,
                    kind,
                    pinned_queue=pinned_queue,
                    delivery_ms=delivery_ms,
                    priority=priority,
                    lite_topic=lite_topic,
                    delay_level=delay_level,
                    flag=message_flag,
                    sys_flag=sys_flag & SYSFLAG_KEPT,
                    born_ms=born_ms,
                    born_host=born_host,
                    reconsume_times=reconsume_times,
                )
            )
        return SendRequest(
            topic,
            messages,
            max_reconsume_times=max_reconsume_times if max_reconsume_times >= 0 else None,
            batch=batch,
        )

    @staticmethod
    def _receipt(outcome: SendOutcome) -> dict[str, str]:
        return {
            "msgId": ",".join(appended.offset_message_id for appended in outcome.appended),
            "queueId": str(outcome.queues[0] if outcome.queues else 0),
            "queueOffset": str(outcome.appended[0].queue_offset),
            "MSG_REGION": MSG_REGION,
            "TRACE_ON": "true",
        }

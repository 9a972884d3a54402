"""POP on the remoting port: POP_MESSAGE, ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME,
the codes RocketMQ 5's remoting client uses in POP mode, translated to the POP service
(``node/services/pop.py``): the same ACL decisions, cursors, in-flight state, attempts, DLQ
and answers as the gRPC doors, so a message popped through one protocol is acked through
the other.

How a delivery is named. The 5.x client builds its ``extraInfo`` from the answer's header,
numbers only (``ckOffset popTime invisibleTime reviveQid retry brokerName queueId
offset``), and rebuilds it from the answer to a change of invisibility. So the node
answers ``popTime`` = the delivery's visible-at time minus ``invisibleTime`` and
``reviveQid`` = 31 bits of the delivery id (``pop_service.delivery_tag``): an ack names
its delivery by (queue, offset, visible-at, tag), and one that names none in flight is
stale, as a stale receipt handle is on gRPC. Each returned record also carries
``POP_CK`` = that ``extraInfo`` with the gRPC receipt handle as a ninth field (the 5.x
client overwrites it with its own eight): an ack whose ``extraInfo`` has the ninth field,
or is a receipt handle alone, is verified by the handle's MAC, exactly as on gRPC.

Answers: no message within ``pollTime`` is PULL_NOT_FOUND (the client's
POLLING_NOT_FOUND); refusals map through ``status_codes.py`` (a stale, forged or
malformed handle: MESSAGE_ILLEGAL with the gRPC port's remark). ``queueId`` and
``order`` of a pop are not read: a pop takes the whole topic, and a FIFO group is served
in order, as on gRPC.

BATCH_ACK_MESSAGE (the 5.x client's ``batchAckMessageAsync``): each offset the body's bit
sets name (``batch_ack.py``) is resolved as an ``extraInfo`` of the same numbers is, then
acked through the same ``PopService.ack_message``, one call per ack entry. Every offset
gets its own answer in the body, ``{"results": [{"topic", "queueId", "offset", "code",
"remark"}, ...]}`` (``offset`` -1 for an entry that names none); the response is SUCCESS
when every offset was acked, else the first refusal's code with a remark counting them.
The ``retry`` flag is not read: ferrymq redelivers from the topic itself. A body that is
not a BatchAckMessageRequestBody is refused whole (SYSTEM_ERROR), nothing acked.

NOTIFICATION (200054) and POLLING_INFO (200055) are the proxy's requests to a broker, not
sent by the client's consumers: not served (REQUEST_CODE_NOT_SUPPORTED), nor PEEK_MESSAGE.
POP codes (>= 200000) travel in JSON headers only (the binary header's code is 16 bits).
"""

from __future__ import annotations

import json
from dataclasses import replace

from ferrymq.codec.commitlog_record import StoredMessage, encode_stored
from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.long_polling import poll_budget_s
from node.remoting.authentication import DoorHandler
from node.remoting.batch_ack import BatchAck, MalformedBatchAck, parse_batch_ack
from node.remoting.status_codes import refusal, response_code
from node.rpc_status import InvalidRequest
from node.services.caller import Caller
from node.services.pop import Delivery, PopFailed, delivery_tag
from node.services.registry import Services
from node.topics import TopicError

PROPERTY_POP_CK = "POP_CK"
EXPRESSION_TYPES = {"TAG": pb.TAG, "SQL92": pb.SQL}
NUMERIC_FIELDS = 8  # RocketMQ's extraInfo


def extra_info(pop_time: int, invisible_ms: int, tag: int, broker: str, queue: int, offset: int):
    return f"{offset} {pop_time} {invisible_ms} {tag} 0 {broker} {queue} {offset}"


def with_pop_ck(stored: StoredMessage, pop_ck: str, attempt: int) -> bytes:
    """The stored record as a POP answer carries it: ``POP_CK`` added, the reconsume
    count set to the attempts before this one."""
    return encode_stored(
        replace(
            stored,
            properties={**stored.properties, PROPERTY_POP_CK: pop_ck},
            reconsume_times=max(attempt - 1, 0),
        )
    )


class PopHandlers:
    def __init__(self, services: Services, broker_name: str) -> None:
        self.pop = services.pop
        self.broker_name = broker_name

    def handlers(self) -> list[tuple[int, DoorHandler]]:
        return [
            (RequestCode.POP_MESSAGE, self.pop_message),
            (RequestCode.ACK_MESSAGE, self.ack_message),
            (RequestCode.CHANGE_MESSAGE_INVISIBLETIME, self.change_invisible_time),
            (RequestCode.BATCH_ACK_MESSAGE, self.batch_ack),
        ]

    # ---- POP_MESSAGE -----------------------------------------------------------------
    async def pop_message(self, request: RemotingCommand, connection, caller: Caller):
        group, topic = request.text("consumerGroup"), request.text("topic")
        batch = request.int32("maxMsgNums", 32)
        invisible_ms = request.integer("invisibleTime")
        poll_ms = request.integer("pollTime", 0)
        expression_type = request.text("expType", "TAG") or "TAG"
        try:
            kind = EXPRESSION_TYPES.get(expression_type.upper())
            if kind is None:
                raise InvalidRequest(
                    pb.ILLEGAL_FILTER_EXPRESSION,
                    f"expType {expression_type!r} is neither TAG nor SQL92",
                )
            expression = pb.FilterExpression(type=kind, expression=request.text("exp", "*"))
            deliveries = await self.pop.pop(
                caller,
                group,
                topic,
                expression,
                max(batch, 1),
                invisible_ms,
                poll_budget_s(poll_ms / 1000, None),
            )
        except (InvalidRequest, TopicError) as error:
            return request.reply(*refusal(error))
        except PopFailed as failed:
            return request.reply(response_code(failed.status.code), failed.status.message)
        if not deliveries:
            return request.reply(ResponseCode.PULL_NOT_FOUND, "no new message")
        if connection.closed:  # the client left while the pop was written: give them back
            await self.pop.hand_back(deliveries)
            return None
        return self._popped(request, group, topic, invisible_ms, deliveries)

    def _popped(
        self,
        request: RemotingCommand,
        group: str,
        topic: str,
        invisible_ms: int,
        deliveries: list[Delivery],
    ) -> RemotingCommand:
        _, entry = self.pop.in_flight(group, topic, deliveries[0].handle)
        pop_time = entry.visible_at_ms - invisible_ms
        tag = delivery_tag(deliveries[0].decision.delivery)
        records = []
        for delivery in deliveries:
            stored = delivery.stored
            numbers = extra_info(
                pop_time, invisible_ms, tag, self.broker_name, stored.queue_id, stored.queue_offset
            )
            records.append(with_pop_ck(stored, f"{numbers} {delivery.handle}", delivery.attempt))
        header = {
            "popTime": str(pop_time),
            "invisibleTime": str(invisible_ms),
            "reviveQid": str(tag),
            "restNum": "0",
        }
        return request.reply(ResponseCode.SUCCESS, ext_fields=header, body=b"".join(records))

    # ---- ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME -------------------------------------
    def _handle(self, request: RemotingCommand, caller: Caller, group: str, topic: str) -> str:
        """The receipt handle an ``extraInfo`` names; InvalidRequest or TopicError."""
        text = request.text("extraInfo")
        fields = text.split(" ")
        if len(fields) == 1:  # a gRPC receipt handle
            return text
        if len(fields) > NUMERIC_FIELDS:
            return fields[NUMERIC_FIELDS]
        if len(fields) < NUMERIC_FIELDS:
            raise InvalidRequest(
                pb.INVALID_RECEIPT_HANDLE,
                f"extraInfo has {len(fields)} fields: RocketMQ's has {NUMERIC_FIELDS} "
                "(ckOffset popTime invisibleTime reviveQid retry brokerName queueId offset)",
            )
        numbers = {}
        for name, index in (
            ("popTime", 1),
            ("invisibleTime", 2),
            ("reviveQid", 3),
            ("queueId", 6),
            ("offset", 7),
        ):
            value = fields[index]
            if not (value.lstrip("-").isascii() and value.lstrip("-").isdigit()):
                raise InvalidRequest(
                    pb.INVALID_RECEIPT_HANDLE, f"extraInfo's {name} {value!r} is not an integer"
                )
            numbers[name] = int(value)
        return self.pop.handle_of_current(
            caller,
            group,
            topic,
            numbers["queueId"],
            numbers["offset"],
            numbers["popTime"] + numbers["invisibleTime"],
            numbers["reviveQid"],
        )

    async def ack_message(self, request: RemotingCommand, connection, caller: Caller):
        group, topic = request.text("consumerGroup"), request.text("topic")
        try:
            handle = self._handle(request, caller, group, topic)
            (answer,) = await self.pop.ack(caller, group, topic, [handle])
        except (InvalidRequest, TopicError) as error:
            return request.reply(*refusal(error))
        if answer.code != pb.OK:
            return request.reply(response_code(answer.code), answer.message)
        return request.reply(ResponseCode.SUCCESS)

    async def change_invisible_time(self, request: RemotingCommand, connection, caller: Caller):
        group, topic = request.text("consumerGroup"), request.text("topic")
        invisible_ms = request.integer("invisibleTime")
        try:
            handle = self._handle(request, caller, group, topic)
            answer, new_handle = await self.pop.change_invisible(
                caller,
                group,
                topic,
                handle,
                max(min(invisible_ms, 2**62), -(2**62)),
                suspend=request.text("suspend", "false").lower() == "true",
            )
        except (InvalidRequest, TopicError) as error:
            return request.reply(*refusal(error))
        if answer.code != pb.OK:
            return request.reply(response_code(answer.code), answer.message)
        try:
            changed, entry = self.pop.in_flight(group, topic, new_handle)
        except (KeyError, ValueError):  # its last attempt: dead-lettered, nothing in flight
            return request.reply(ResponseCode.SUCCESS, "moved to the dead-letter queue")
        pop_time = entry.visible_at_ms - invisible_ms
        header = {
            "popTime": str(pop_time),
            "invisibleTime": str(invisible_ms),
            "reviveQid": str(delivery_tag(entry.delivery)),
        }
        numbers = extra_info(
            pop_time,
            invisible_ms,
            delivery_tag(entry.delivery),
            self.broker_name,
            changed.queue_id,
            changed.queue_offset,
        )
        header["extraInfo"] = f"{numbers} {new_handle}"  # for clients of ours
        return request.reply(ResponseCode.SUCCESS, ext_fields=header)

    # ---- BATCH_ACK_MESSAGE ----------------------------------------------------------
    async def batch_ack(self, request: RemotingCommand, connection, caller: Caller):
        try:
            acks = parse_batch_ack(request.body)
        except MalformedBatchAck as error:
            return request.reply(ResponseCode.SYSTEM_ERROR, f"BATCH_ACK_MESSAGE: {error}")
        self.pop.require_consuming(caller, [(ack.topic, ack.group) for ack in acks])
        results: list[dict] = []
        for ack in acks:
            results.extend(await self._ack_entry(caller, ack))
        refused = [r for r in results if r["code"] != ResponseCode.SUCCESS]
        body = json.dumps({"results": results}, separators=(",", ":")).encode()
        if not refused:
            return request.reply(ResponseCode.SUCCESS, body=body)
        first = refused[0]
        remark = (
            f"{len(refused)} of {len(results)} not acked; first: {first['topic']} queue "
            f"{first['queueId']} offset {first['offset']}: {first['remark']}"
        )
        return request.reply(first["code"], remark, body=body)

    async def _ack_entry(self, caller: Caller, ack: BatchAck) -> list[dict]:
        def result(offset: int, code: int, remark: str) -> dict:
            return {
                "topic": ack.topic,
                "queueId": ack.queue_id,
                "offset": offset,
                "code": int(code),
                "remark": remark,
            }

        results, handles = [], []
        for offset in ack.offsets:
            try:
                handle = self.pop.handle_of_current(
                    caller,
                    ack.group,
                    ack.topic,
                    ack.queue_id,
                    offset,
                    ack.pop_time_ms + ack.invisible_ms,
                    ack.revive_qid,
                )
            except (InvalidRequest, TopicError) as error:
                results.append(result(offset, *refusal(error)))
                continue
            handles.append((offset, handle))
        if handles or not ack.offsets:  # an entry naming no offset: the ack path says why
            try:
                answers = await self.pop.ack(caller, ack.group, ack.topic, [h for _, h in handles])
            except (InvalidRequest, TopicError) as error:  # the group, the topic, the bound
                code, remark = refusal(error)
                for offset in [o for o, _ in handles] or [-1]:
                    results.append(result(offset, code, remark))
                return results
            for (offset, _), answer in zip(handles, answers, strict=True):
                results.append(result(offset, response_code(answer.code), answer.message))
        return results

"""PULL_MESSAGE: a queue's stored records from an offset, as RocketMQ 4.x consumers read
them; LITE_PULL_MESSAGE (361), which RocketMQ 5's remoting client sends for its
DefaultLitePullConsumer, is the same request and is answered the same way.

The body is the records back to back, exactly as the CommitLog holds them: ferrymq's
record layout is RocketMQ's (docs/architecture.md, "The CommitLog record"), so nothing is
decoded or copied per message. BODYCRC holds CRC32C where RocketMQ writes CRC32; no 4.x
client checks it (docs/architecture.md, "Remoting").

The read is the read service's (``node/services/reads.py``: who may, the topic's read
permission, the queue, the group created on first use only once allowed, the filter, long
polling, the delivery metrics); this door reads the header, picks the subscription and
answers as RocketMQ's broker does. Codes and ``nextBeginOffset``: found (0); nothing new
at the end of the queue (19, after waiting up to ``suspendTimeoutMillis`` when the request
may be suspended: ``node/long_polling.py``, the one wait loop of every read); everything in the
window filtered out (20, the offset moves on); an offset outside the queue (21, with
where to go). The filter is the request's own subscription when it carries one (sysFlag
4), else the one its group registered by heartbeat (looked up once the pull is allowed,
``node/consumer_subscriptions.py``): TAG (the store
skips other tags by their hash) or SQL92 (``node/sql_filter.py``, the evaluator the gRPC
doors use, applied to each record read). An expression that does not parse is answered as
RocketMQ answers it: SUBSCRIPTION_PARSE_FAILED for the pull's own, FILTER_DATA_NOT_EXIST
for a registered one; the remark says what is wrong and where.

Thread-safety: handlers run on the node's event loop.
"""

from __future__ import annotations

import logging

from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.long_polling import poll_budget_s
from node.remoting.authentication import DoorHandler
from node.remoting.status_codes import refusal
from node.rpc_status import InvalidRequest
from node.services.caller import Caller
from node.services.reads import ReadRequest
from node.services.registry import Services
from node.topics import TopicError
from store.results import GetResult, GetStatus

log = logging.getLogger("ferrymq.remoting")

# RocketMQ caps a pull at 32 messages; a message may be 4 MiB, so the byte cap lets the
# first one through whatever its size (``get_records``) and stops the others at 1 MiB.
PULL_MAX_MESSAGES = 32
PULL_MAX_BYTES = 1 << 20
# PullSysFlag bits.
SYSFLAG_COMMIT_OFFSET = 0x1
SYSFLAG_SUSPEND = 0x2
SYSFLAG_SUBSCRIPTION = 0x4
# RocketMQ's remark for a registered expression it could not compile, kept word for word.
FILTER_DATA_MISSING = "The broker's consumer filter data is not exist!Your expression may be wrong!"
EXPRESSION_TYPES = {"TAG": pb.TAG, "": pb.TAG, "SQL92": pb.SQL}


def pull_outcome(result: GetResult, offset: int) -> tuple[ResponseCode, int]:
    """RocketMQ's pull status and nextBeginOffset for one read of a queue."""
    status = result.status
    if result.messages:
        return ResponseCode.SUCCESS, result.next_begin_offset
    if status is GetStatus.NO_MESSAGE_IN_QUEUE:
        # A queue that never had a message: only offset 0 is where it will start.
        if offset != 0:
            return ResponseCode.PULL_OFFSET_MOVED, 0
        return ResponseCode.PULL_NOT_FOUND, 0
    if status is GetStatus.OFFSET_TOO_SMALL:
        return ResponseCode.PULL_OFFSET_MOVED, result.min_offset
    if status is GetStatus.OFFSET_RESET:
        return ResponseCode.PULL_OFFSET_MOVED, result.next_begin_offset
    if status is GetStatus.OFFSET_OVERFLOW_BADLY:
        low, high = result.min_offset, result.max_offset
        return ResponseCode.PULL_OFFSET_MOVED, low if low == 0 else high
    if status is GetStatus.OFFSET_OVERFLOW_ONE or result.next_begin_offset <= offset:
        return ResponseCode.PULL_NOT_FOUND, offset
    return ResponseCode.PULL_RETRY_IMMEDIATELY, result.next_begin_offset  # all filtered


def filter_expression(expression: str, expression_type: str) -> pb.FilterExpression:
    """The 5.x filter a 4.x subscription is: TAG (also when absent) or SQL92."""
    kind = EXPRESSION_TYPES.get(expression_type.upper())
    if kind is None:
        raise InvalidRequest(
            pb.ILLEGAL_FILTER_EXPRESSION,
            f"expression type {expression_type!r}: TAG or SQL92",
        )
    return pb.FilterExpression(type=kind, expression=expression)


class PullHandlers:
    def __init__(self, services: Services) -> None:
        self.services = services

    def handlers(self) -> list[tuple[int, DoorHandler]]:
        return [(RequestCode.PULL_MESSAGE, self.pull), (RequestCode.LITE_PULL_MESSAGE, self.pull)]

    async def pull(self, request: RemotingCommand, connection, caller: Caller):
        group, topic = request.text("consumerGroup"), request.text("topic")
        queue_id = request.int32("queueId")
        sys_flag = request.int32("sysFlag", 0)
        suspend_ms = request.integer("suspendTimeoutMillis", 0)
        waiting = bool(sys_flag & SYSFLAG_SUSPEND) and suspend_ms > 0
        try:
            await self.services.reads.readable_queue(caller, topic, group, queue_id, True)
            expression = self._subscription(request, group, topic, sys_flag)
            read = ReadRequest(
                topic,
                group,
                queue_id,
                request.integer("queueOffset"),
                min(max(request.int32("maxMsgNums", PULL_MAX_MESSAGES), 1), PULL_MAX_MESSAGES),
                PULL_MAX_BYTES,
                expression=expression,
                wait_s=poll_budget_s(suspend_ms / 1000, None) if waiting else 0.0,
            )
            answer = self._answer(request, caller, read, sys_flag)
            reply, last = await self.services.reads.read(caller, read, answer(waiting))
        except _Answered as answered:
            return answered.reply
        except InvalidRequest as error:
            if error.code == pb.ILLEGAL_FILTER_EXPRESSION:
                return self._unparsable(request, sys_flag, str(error))
            return request.reply(*refusal(error))
        except TopicError as error:
            return request.reply(*refusal(error))
        return reply if reply is not None else answer(False)(last)  # waited: the last look

    def _answer(self, request: RemotingCommand, caller: Caller, read: ReadRequest, sys_flag: int):
        """``answer(waiting)``: RocketMQ's reply to one look at the queue (None while
        ``waiting`` and nothing is new). The first look also stores the commit offset the
        pull carries (the pull was allowed on that group and queue by then)."""
        commit_offset = request.integer("commitOffset", -1)
        committed = False

        def answer(waiting: bool):
            def reply(result: GetResult) -> RemotingCommand | None:
                nonlocal committed
                if not committed:
                    committed = True
                    # After a reset, the commit is the client's cached position: not kept.
                    reset = result.status is GetStatus.OFFSET_RESET
                    if sys_flag & SYSFLAG_COMMIT_OFFSET and commit_offset >= 0 and not reset:
                        self.services.offsets.commit_soon(
                            caller, read.group, read.topic, read.queue_id, commit_offset
                        )
                code, next_offset = pull_outcome(result, read.offset)
                if code is ResponseCode.PULL_NOT_FOUND and waiting:
                    return None
                return request.reply(
                    code,
                    ext_fields={
                        "nextBeginOffset": str(next_offset),
                        "minOffset": str(result.min_offset),
                        "maxOffset": str(result.max_offset),
                        "suggestWhichBrokerId": "0",
                    },
                    body=b"".join(result.messages),
                )

            return reply

        return answer

    @staticmethod
    def _unparsable(request: RemotingCommand, sys_flag: int, detail: str) -> RemotingCommand:
        if sys_flag & SYSFLAG_SUBSCRIPTION:
            return request.reply(
                ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                f"parse the consumer's subscription failed: {detail}",
            )
        return request.reply(
            ResponseCode.FILTER_DATA_NOT_EXIST,
            f"{FILTER_DATA_MISSING} {detail}",
        )

    def _subscription(
        self, request: RemotingCommand, group: str, topic: str, sys_flag: int
    ) -> pb.FilterExpression:
        """The pull's filter: its own, or its group's registered one; ``_Answered`` when
        the group registered none, or an older one than the client has."""
        if sys_flag & SYSFLAG_SUBSCRIPTION:
            return filter_expression(
                request.text("subscription", "*"), request.text("expressionType", "TAG")
            )
        registered = self.services.membership.subscription(group, topic)
        if registered is None:
            raise _Answered(
                request.reply(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    f"group {group} registered no subscription of {topic} (heartbeat first)",
                )
            )
        if registered.version < request.integer("subVersion", 0):
            raise _Answered(
                request.reply(
                    ResponseCode.SUBSCRIPTION_NOT_LATEST,
                    f"group {group}'s subscription of {topic} is older than the client's",
                )
            )
        return filter_expression(registered.expression, registered.expression_type)


class _Answered(Exception):
    """The pull is answered before any read (``reply``)."""

    def __init__(self, reply: RemotingCommand) -> None:
        super().__init__(reply.remark)
        self.reply = reply

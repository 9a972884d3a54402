"""ferrymq's ``Data`` service: bulk reads of stored records (``proto/ferrymq/data.proto``).

One Fetch answers with up to thousands of records of one queue as they lie in the
CommitLog, concatenated, so a reader pays one gRPC message per batch instead of one per
message (PullMessage's shape). Offsets stay the caller's; long polling as PullMessage.

Thread-safety: handlers run on the node's event loop.
"""

from __future__ import annotations

import asyncio

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.ferrymq import data_pb2 as api
from ferrymq.protocol.ferrymq import data_pb2_grpc
from node.long_polling import QueueWaiters
from node.rpc_status import topic_error_status
from node.topics import TopicError, TopicTable
from store.message_store import MessageStore
from store.results import GetStatus

MAX_MESSAGES = 4096
DEFAULT_MESSAGES = 1024
DEFAULT_BYTES = 4 << 20
MAX_WAIT_MS = 60_000


def answer(code: int, message: str = "", **fields) -> api.FetchResponse:
    return api.FetchResponse(code=code, message=message or pb.Code.Name(code), **fields)


class DataService(data_pb2_grpc.DataServicer):
    def __init__(self, store: MessageStore, topics: TopicTable, waiters: QueueWaiters) -> None:
        self.store = store
        self.topics = topics
        self.waiters = waiters

    async def Fetch(self, request, context):
        try:
            self.topics.group(request.group)
            topic = self.topics.topic(request.topic)
        except TopicError as error:
            refused = topic_error_status(error)
            return answer(refused.code, refused.message)
        if not 0 <= request.queue_id < topic.queue_count:
            return answer(
                pb.BAD_REQUEST, f"queue {request.queue_id} does not exist in {topic.name}"
            )
        if not 0 <= request.max_messages <= MAX_MESSAGES or request.max_bytes < 0:
            return answer(pb.BAD_REQUEST, f"max_messages must be 0..{MAX_MESSAGES}")
        count = request.max_messages or DEFAULT_MESSAGES
        max_bytes = request.max_bytes or DEFAULT_BYTES
        tags = list(request.tags) or None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(max(request.wait_ms, 0), MAX_WAIT_MS) / 1000
        remaining = context.time_remaining() if context is not None else None
        if remaining is not None:
            deadline = min(deadline, loop.time() + max(0.0, remaining - 0.5))
        while True:
            result = self.store.get_records(
                topic.name, request.queue_id, request.offset, count, max_bytes, tags
            )
            bounds = dict(min_offset=result.min_offset, max_offset=result.max_offset)
            if result.status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
                return answer(
                    pb.ILLEGAL_OFFSET,
                    f"offset {request.offset} outside [{result.min_offset}, {result.max_offset}]",
                    next_offset=result.next_begin_offset,
                    **bounds,
                )
            if result.messages or result.next_begin_offset > request.offset:
                return answer(
                    pb.OK if result.messages else pb.MESSAGE_NOT_FOUND,
                    records=b"".join(result.messages),
                    count=len(result.messages),
                    next_offset=result.next_begin_offset,
                    **bounds,
                )
            wait_s = deadline - loop.time()
            if wait_s <= 0:
                return answer(pb.MESSAGE_NOT_FOUND, next_offset=request.offset, **bounds)
            await self.waiters.wait(topic.name, request.queue_id, wait_s)

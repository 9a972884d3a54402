"""ferrymq's ``Data`` service: bulk reads and writes of records (``proto/ferrymq/data.proto``).

One Fetch answers with up to thousands of records of one queue as they lie in the
CommitLog, concatenated, so a reader pays one gRPC message per batch instead of one per
message (PullMessage's shape). Offsets stay the caller's; long polling as PullMessage.

One Produce carries up to thousands of produce records (``ferrymq/codec/produce_records.py``)
whose properties are already in the store's encoding: each record gets SendMessage's checks
(``node.admission``) and the store's (``MessageStore.prepare``) and its own status; the
valid ones are appended as one batch (or, for an ``atomic`` request, nothing when any
record is refused), and the answer is a packed list of queue offsets.

Thread-safety: handlers run on the node's event loop.
"""

from __future__ import annotations

from ferrymq.codec.commitlog_record import NO_HOST
from ferrymq.codec.errors import InvalidMessageError
from ferrymq.codec.produce_records import MAX_PRODUCE_RECORDS, MalformedRecords, produce_record_at
from ferrymq.codec.properties import PROPERTY_MESSAGE_GROUP
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.ferrymq import data_pb2 as api
from ferrymq.protocol.ferrymq import data_pb2_grpc
from ha.replicated_store import ReplicatedStore
from node.admission import (
    Admission,
    check_batch_count,
    check_queue,
    fifo_queue,
    invalid_message_code,
    store_refusal,
)
from node.convert import (
    MESSAGE_TYPE_TEXT,
    born_host_bytes,
    read_produce_record,
    scan_produce_records,
)
from node.long_polling import QueueWaiters, long_poll, poll_budget_s
from node.rpc_status import InvalidRequest, topic_error_status
from node.topics import MessageType, TopicError, TopicTable
from store.message import Message
from store.results import GetStatus

MAX_MESSAGES = 4096
DEFAULT_MESSAGES = 1024
DEFAULT_BYTES = 4 << 20
# Produce writes records as they are: the types whose messages need no rewriting.
# An untyped topic takes Produce records as NORMAL messages in the queue they name.
PRODUCE_TYPES = {
    MessageType.NORMAL: pb.NORMAL,
    MessageType.FIFO: pb.FIFO,
    MessageType.UNSPECIFIED: pb.NORMAL,
}


def answer(code: int, message: str = "", **fields) -> api.FetchResponse:
    return api.FetchResponse(code=code, message=message or pb.Code.Name(code), **fields)


def produce_refused(count: int, code: int, message: str) -> api.ProduceResponse:
    """Every record refused for the same reason (the request as a whole is wrong)."""
    message = message or pb.Code.Name(code)
    count = count if 0 <= count <= MAX_PRODUCE_RECORDS else 0
    return api.ProduceResponse(
        code=code,
        message=message,
        offsets=[-1] * count,
        failures=[api.ProduceFailure(index=i, code=code, message=message) for i in range(count)],
    )


def peer_host(context) -> bytes:
    """BORNHOST of a produce request: the peer's IPv4 address and port (else zeros)."""
    peer = context.peer() if context is not None else ""
    return born_host_bytes(peer[5:]) if peer.startswith("ipv4:") else NO_HOST


class DataService(data_pb2_grpc.DataServicer):
    def __init__(
        self,
        store: ReplicatedStore,
        topics: TopicTable,
        waiters: QueueWaiters,
        admission: Admission,
    ) -> None:
        self.store = store
        self.topics = topics
        self.waiters = waiters
        self.admission = admission

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
        queue_id, offset = request.queue_id, request.offset
        bounds: dict[str, int] = {}

        async def fetch() -> api.FetchResponse | None:
            result = self.store.get_records(topic.name, queue_id, offset, count, max_bytes, tags)
            bounds.update(min_offset=result.min_offset, max_offset=result.max_offset)
            if result.status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
                return answer(
                    pb.ILLEGAL_OFFSET,
                    f"offset {offset} outside [{result.min_offset}, {result.max_offset}]",
                    next_offset=result.next_begin_offset,
                    **bounds,
                )
            if result.messages or result.next_begin_offset > offset:
                return answer(
                    pb.OK if result.messages else pb.MESSAGE_NOT_FOUND,
                    records=b"".join(result.messages),
                    count=len(result.messages),
                    next_offset=result.next_begin_offset,
                    **bounds,
                )
            return None

        fetched = await long_poll(
            fetch,
            lambda wait_s: self.waiters.wait(topic.name, queue_id, wait_s),
            poll_budget_s(request.wait_ms / 1000, context),
        )
        if fetched is None:  # nothing came: the bounds of the last look
            return answer(pb.MESSAGE_NOT_FOUND, next_offset=offset, **bounds)
        return fetched

    async def Produce(self, request, context):
        return await self.produce(request, peer_host(context))

    async def produce(self, request: api.ProduceRequest, born_host: bytes) -> api.ProduceResponse:
        """Produce for either door: gRPC here, ferrymq's private remoting code
        (``node/remoting/ferry_data.py``); ``born_host`` is the peer's address record."""
        count = request.count
        admission = self.admission
        try:
            check_batch_count(count, MAX_PRODUCE_RECORDS)
            admission.check_master()
            topic = admission.writable_topic(request.topic)
            message_type = PRODUCE_TYPES.get(topic.message_type)
            if message_type is None:
                raise InvalidRequest(
                    pb.UNSUPPORTED,
                    f"topic {topic.name} is {topic.message_type.value}: send with SendMessage",
                )
            fifo = topic.message_type is MessageType.FIFO
            queue_id, queue_count = request.queue_id, topic.queue_count
            if not fifo:
                check_queue(topic, queue_id)
        except InvalidRequest as error:
            return produce_refused(count, error.code, str(error))
        except TopicError as error:
            refused = topic_error_status(error)
            return produce_refused(count, refused.code, refused.message)
        type_text = MESSAGE_TYPE_TEXT[message_type]
        body_limit = admission.body_limit
        prepare = self.store.prepare
        name = topic.name
        records = request.records
        prepared = []
        stored_indexes = []
        failures: list[api.ProduceFailure] = []
        position = 0
        # The C pass reads every record that passes; each one it leaves (an int: where it
        # starts) is read again in Python, which raises the precise error.
        scanned = scan_produce_records(records, count, body_limit, type_text)
        for index in range(count):
            try:
                item = scanned[index]
                if type(item) is int:
                    # Past this record even when it is refused: the next one starts there,
                    # and the last one's end is checked against the request's length.
                    position = produce_record_at(records, item)[0]
                    item = read_produce_record(records, item, body_limit, type_text)
                position, body, raw, born_ms, properties = item
                if fifo:
                    queue_id = fifo_queue(properties.get(PROPERTY_MESSAGE_GROUP), queue_count)
                message = Message(name, body, queue_id, properties, 0, 0, born_ms, born_host)
                prepared.append(prepare(message, raw))
                stored_indexes.append(index)
            except InvalidRequest as error:
                failures.append(
                    api.ProduceFailure(index=index, code=error.code, message=str(error))
                )
            except InvalidMessageError as error:
                code = invalid_message_code(error.reason)
                failures.append(api.ProduceFailure(index=index, code=code, message=str(error)))
            except MalformedRecords as error:
                failures.extend(
                    api.ProduceFailure(index=i, code=pb.BAD_REQUEST, message=str(error))
                    for i in range(index, count)
                )
                break
        else:
            if position != len(records):
                return produce_refused(
                    count,
                    pb.BAD_REQUEST,
                    f"{len(records) - position} bytes after the {count} records the count names",
                )
        if failures and request.atomic and prepared:
            first = failures[0]
            reason = f"not stored: record {first.index} of this atomic request was refused"
            failures.extend(
                api.ProduceFailure(index=i, code=first.code, message=reason) for i in stored_indexes
            )
            failures.sort(key=lambda failure: failure.index)
            prepared, stored_indexes = [], []
        if not prepared:
            return api.ProduceResponse(
                code=failures[0].code,
                message=failures[0].message,
                offsets=[-1] * count,
                failures=failures,
            )
        result = await self.store.put_prepared_async(prepared)
        if not result.ok:
            refused = store_refusal(result)
            failures.extend(
                api.ProduceFailure(index=i, code=refused.code, message=refused.message)
                for i in stored_indexes
            )
            failures.sort(key=lambda failure: failure.index)
            return api.ProduceResponse(
                code=failures[0].code,
                message=failures[0].message,
                offsets=[-1] * count,
                failures=failures,
            )
        if not failures:
            return api.ProduceResponse(
                code=pb.OK, message="OK", offsets=[a.queue_offset for a in result.appended]
            )
        offsets = [-1] * count
        for index, appended in zip(stored_indexes, result.appended, strict=True):
            offsets[index] = appended.queue_offset
        return api.ProduceResponse(
            code=failures[0].code, message=failures[0].message, offsets=offsets, failures=failures
        )

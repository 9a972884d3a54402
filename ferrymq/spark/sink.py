"""Writing DataFrames to ferrymq: batch writes, and a streaming sink that is idempotent per
micro-batch.

Columns: ``topic`` (or the ``topic`` option), ``body`` (binary or string), and optionally
``keys`` (array of strings or one string), ``tag``, ``properties`` (map of strings) and
``message_group`` (FIFO topics).

How a replayed micro-batch adds nothing. Spark runs a batch again, with the same id and
the same input, when it crashed before recording the batch as committed. Each task
therefore:

1. gives every row a message id derived from (sink id, batch id, partition, the row's
   content, how many identical rows came before it): the same row gets the same id in
   every run, whatever order the rows arrive in;
2. puts its rows in a deterministic order (by id; rows of one message group keep their
   order, which FIFO needs) and cuts that sequence into chunks;
3. for each chunk, asks the node whether the chunk's first message id is stored
   (``QueryMessageById``, the unique-key index) and sends the chunk only if it is not.

A chunk is one request, which the node appends as one atomic CommitLog batch: an atomic
FERRY_PRODUCE on the node's remoting port for NORMAL and FIFO topics (the queue named, as
the SDK's ``send_batch`` sends), else a SendMessage with ``x-ferrymq-queue: pinned``,
so "the first message is stored" means "the whole chunk is stored": a run that died
half-way through a partition resumes after its last stored chunk. The sink id is the
streaming query's id (kept in its checkpoint, so the same across restarts) unless the
``sinkId`` option names one. ``foreachBatch`` code gets the same guarantee from a batch
write with the ``sinkId`` and ``batchId`` options.
"""

from __future__ import annotations

import hashlib
import json
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from ferrymq.client.errors import TRANSPORT, FerryError, check, check_admin
from ferrymq.client.messages import Message, new_message_id
from ferrymq.client.produce_records import ProduceCall, RecordError, encode_records
from ferrymq.client.remoting_channel import produce_answer
from ferrymq.codec.remoting_codes import FerryRequestCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from ferrymq.spark import topology
from ferrymq.spark.options import WriteOptions

CHUNK_BYTES = 8 << 20
PRODUCE_TYPES = frozenset({pb.NORMAL, pb.FIFO})  # what FERRY_PRODUCE takes


@dataclass
class WriteReport(WriterCommitMessage):
    partition: int
    sent: int  # messages this run stored
    skipped: int  # messages found already stored (a replay)


@dataclass(frozen=True)
class TopicRoute:
    queues: dict[int, str]  # queue id -> address
    message_type: int


def _topic_route(options: WriteOptions, topic: str) -> TopicRoute:
    def ask(address: str) -> TopicRoute:
        conn = topology.connection(address)
        answer = conn.call(
            conn.messaging.QueryRoute, rpc.QueryRouteRequest(topic=pb.Resource(name=topic))
        )
        if answer.status.code == pb.TOPIC_NOT_FOUND:
            raise topology.TopicNotFound(f"topic {topic!r} does not exist (asked {address})")
        check(answer.status)
        queues = {}
        for queue in answer.message_queues:
            found = queue.broker.endpoints.addresses
            queues[queue.id] = f"{found[0].host}:{found[0].port}" if found else address
        kinds = answer.message_queues[0].accept_message_types if answer.message_queues else []
        return TopicRoute(queues, kinds[0] if kinds else pb.NORMAL)

    return topology.retrying(options.endpoints, options.retry_timeout_ms, f"route of {topic}", ask)


def _text(value) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes | bytearray) else str(value)


def row_message(row, fields: set[str], topic_option: str | None) -> Message:
    topic = topic_option or (row["topic"] if "topic" in fields else None)
    if not topic:
        raise ValueError("every row needs a topic: a 'topic' column or the 'topic' option")
    body = row["body"]
    if body is None:
        raise ValueError("column 'body' is null (ferrymq stores no empty messages)")
    if isinstance(body, str):
        body = body.encode()
    keys = row["keys"] if "keys" in fields else None
    if isinstance(keys, str):
        keys = [keys]
    properties = row["properties"] if "properties" in fields else None
    return Message(
        topic=topic,
        body=bytes(body),
        tag=_text(row["tag"]) if "tag" in fields else None,
        keys=[str(k) for k in keys or [] if k is not None],
        properties={str(k): str(v) for k, v in (properties or {}).items() if v is not None},
        message_group=_text(row["message_group"]) if "message_group" in fields else None,
    )


def _content_digest(message: Message) -> bytes:
    hashed = hashlib.blake2b(digest_size=16)
    hashed.update(message.body)
    hashed.update(
        json.dumps(
            [
                message.topic,
                message.tag,
                message.keys,
                sorted(message.properties.items()),
                message.message_group,
            ],
            separators=(",", ":"),
        ).encode()
    )
    return hashed.digest()


def assign_ids(messages: list[Message], scope: str) -> list[Message]:
    """Deterministic ids (see the module docstring) and the deterministic send order."""
    seen: dict[bytes, int] = {}
    group_position: dict[str, int] = {}
    ordered = []
    for message in messages:
        digest = _content_digest(message)
        occurrence = seen.get(digest, 0)
        seen[digest] = occurrence + 1
        message.message_id = (
            "F5"
            + hashlib.blake2b(b"%s|%s|%d" % (scope.encode(), digest, occurrence), digest_size=16)
            .hexdigest()
            .upper()
        )
        if message.message_group:
            position = group_position.get(message.message_group, 0)
            group_position[message.message_group] = position + 1
            ordered.append(((1, message.topic, message.message_group, position, ""), message))
        else:
            ordered.append(((0, message.topic, "", 0, message.message_id), message))
    ordered.sort(key=lambda pair: pair[0])
    return [message for _, message in ordered]


def chunks(messages: list[Message], max_messages: int) -> Iterator[list[Message]]:
    """Runs of one topic, at most ``max_messages`` and about ``CHUNK_BYTES`` each."""
    chunk: list[Message] = []
    size = 0
    for message in messages:
        if chunk and (
            message.topic != chunk[0].topic
            or len(chunk) >= max_messages
            or size + len(message.body) > CHUNK_BYTES
        ):
            yield chunk
            chunk, size = [], 0
        chunk.append(message)
        size += len(message.body)
    if chunk:
        yield chunk


class Sender:
    """Sends chunks for one task; ``idempotent`` chunks are skipped when already stored."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        self.routes: dict[str, TopicRoute] = {}
        self.sent = self.skipped = 0
        self._turn = 0

    def send(self, chunk: list[Message], idempotent: bool) -> None:
        topic = chunk[0].topic
        deadline = time.monotonic() + self.options.retry_timeout_ms / 1000
        attempt = 0
        while True:
            route = self.routes.get(topic)
            if route is None:
                route = self.routes[topic] = _topic_route(self.options, topic)
            queue_ids = sorted(route.queues)
            if idempotent:
                queue_id = queue_ids[zlib.crc32(chunk[0].message_id.encode()) % len(queue_ids)]
            else:
                queue_id = queue_ids[self._turn % len(queue_ids)]
            address = route.queues[queue_id]
            try:
                missing = chunk
                if idempotent and self._stored(address, topic, chunk[0].message_id):
                    missing = self._missing(address, topic, chunk)
                    self.skipped += len(chunk) - len(missing)
                if missing:
                    self._send_once(address, route, queue_id, missing)
                    self.sent += len(missing)
                self._turn += 1
                return
            except FerryError as error:
                if not error.retriable or time.monotonic() >= deadline:
                    raise
            time.sleep(topology.backoff(attempt))
            attempt += 1
            self.routes.pop(topic, None)  # ask routing again: the queue may have moved

    @staticmethod
    def _stored(address: str, topic: str, message_id: str) -> bool:
        conn = topology.connection(address)
        answer = conn.call(
            conn.admin.QueryMessageById,
            api.QueryMessageByIdRequest(topic=topic, message_id=message_id),
        )
        check_admin(answer.status)
        return any(m.message_id == message_id for m in answer.messages)

    def _missing(self, address: str, topic: str, chunk: list[Message]) -> list[Message]:
        """A chunk whose first message is stored was stored whole, unless the earlier run
        cut its chunks differently (another ``chunkMessages``): then every message is
        looked up."""
        if len(chunk) == 1 or self._stored(address, topic, chunk[-1].message_id):
            return []
        return [m for m in chunk[1:-1] if not self._stored(address, topic, m.message_id)] + [
            chunk[-1]
        ]

    @staticmethod
    def _send_once(address: str, route: TopicRoute, queue_id: int, chunk: list[Message]) -> None:
        channel = None
        if route.message_type in PRODUCE_TYPES:
            channel = topology.remoting_channel(address)
        if channel is not None:
            born_ms = time.time_ns() // 1_000_000
            try:
                records = encode_records(chunk, route.message_type, born_ms)
            except RecordError as error:
                raise FerryError(pb.BAD_REQUEST, "BAD_REQUEST", str(error)) from None
            request = ProduceCall(chunk[0].topic, queue_id, True, len(chunk), records)
            try:
                raw = channel.call(FerryRequestCode.FERRY_PRODUCE, request.body())
            except FerryError as error:
                if error.code == TRANSPORT:  # a restarted node may listen elsewhere now
                    topology.forget_remoting(address)
                raise
            answer = produce_answer(raw)
            check(pb.Status(code=answer.code, message=answer.message))
            return
        wire = []
        for message in chunk:
            sent = message.to_wire(route.message_type)
            sent.system_properties.queue_id = queue_id
            wire.append(sent)
        conn = topology.connection(address)
        answer = conn.call(conn.messaging.SendMessage, rpc.SendMessageRequest(messages=wire))
        check(answer.status)


def write_rows(
    options: WriteOptions, rows: Iterator, partition: int, scope: str | None
) -> WriteReport:
    """One task's rows; ``scope`` (sink id and batch id) makes the write idempotent."""
    messages: list[Message] = []
    fields: set[str] | None = None
    for row in rows:
        if fields is None:
            fields = set(row.__fields__)
            if "body" not in fields:
                raise ValueError("writing to ferrymq needs a 'body' column")
        messages.append(row_message(row, fields, options.topic))
    sender = Sender(options)
    if scope is not None:
        messages = assign_ids(messages, f"{scope}|{partition}")
    else:
        for message in messages:
            message.message_id = new_message_id()
    for chunk in chunks(messages, options.chunk_messages):
        sender.send(chunk, idempotent=scope is not None)
    return WriteReport(partition, sender.sent, sender.skipped)


def _task():
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("ferrymq's writer runs inside a Spark task")
    return context


class BatchWriter(DataSourceWriter):
    def __init__(self, options: WriteOptions, schema) -> None:
        self.options = options
        _check_columns(schema, options)

    def write(self, iterator) -> WriteReport:
        context = _task()
        scope = None
        if self.options.sink_id is not None and self.options.batch_id is not None:
            scope = f"{self.options.sink_id}|{self.options.batch_id}"
        return write_rows(self.options, iterator, context.partitionId(), scope)


class StreamWriter(DataSourceStreamWriter):
    def __init__(self, options: WriteOptions, schema) -> None:
        self.options = options
        _check_columns(schema, options)

    def write(self, iterator) -> WriteReport:
        context = _task()
        batch_id = context.getLocalProperty("streaming.sql.batchId")
        sink_id = self.options.sink_id or context.getLocalProperty("sql.streaming.queryId")
        if batch_id is None or not sink_id:
            raise RuntimeError("the streaming sink found no batch id or query id in its task")
        return write_rows(self.options, iterator, context.partitionId(), f"{sink_id}|{batch_id}")

    def commit(self, messages, batchId: int) -> None:
        """Every chunk is stored when the tasks return: nothing is left to publish."""

    def abort(self, messages, batchId: int) -> None:
        """Stored chunks stay; the batch's rerun skips them."""


def _check_columns(schema, options: WriteOptions) -> None:
    names = set(schema.names)
    if "body" not in names:
        raise ValueError(f"writing to ferrymq needs a 'body' column (columns: {sorted(names)})")
    if "topic" not in names and not options.topic:
        raise ValueError("writing to ferrymq needs a 'topic' column or the 'topic' option")
